//! What users type and the daemon parses: durations and times of
//! reminders, alarms and timers, the `grpc-timeout` header, page tokens,
//! and the config file.

use std::time::Duration;

use tonic::metadata::{MetadataMap, MetadataValue};
use troupe_runtime::input::range;

use crate::config::ServeArgs;
use crate::call_deadline;
use crate::convert::{self, paging, time};
use crate::input::prefixed;

/// Durations, periods, instants and `grpc-timeout`, by the first byte;
/// the rest is the text. Besides "no panic": what the daemon writes when it
/// forwards a request (`format_duration`, `format_instant`) reads back as
/// the same value, as `convert::time` promises.
pub fn run_durations(data: &[u8]) {
    let Some((&which, text)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(text);
    let text = text.as_ref();
    match which % 5 {
        0 => {
            if let Ok(d) = time::duration("due", text, &range::ANY) {
                round_trip_duration(d.get(), &range::ANY);
            }
        }
        1 => {
            if let Ok((Some(every), _repeat)) = time::period(text) {
                round_trip_duration(every.get(), &range::POSITIVE);
            }
        }
        2 => {
            // A fixed "now" (2027-01-15): the same input reads the same.
            const NOW_MS: u64 = 1_800_000_000_000;
            if let Ok(at) = time::instant("at", text, NOW_MS) {
                let ms = at.unix_ms();
                let written = time::format_instant(ms);
                match time::instant("at", &written, NOW_MS) {
                    Ok(back) => assert_eq!(back.unix_ms(), ms, "{text:?} -> {written:?}"),
                    Err(e) => panic!("{text:?} -> {written:?}, which does not read back: {e}"),
                }
            }
        }
        3 => {
            let mut headers = MetadataMap::new();
            if let Ok(value) = MetadataValue::try_from(text) {
                headers.insert("grpc-timeout", value);
                let unstamped = tonic::Extensions::new();
                if let Some(within) = call_deadline::answer_within(&headers, &unstamped) {
                    let timeout = call_deadline::grpc_timeout(&headers);
                    assert!(timeout.is_some_and(|t| within <= t), "{text:?}");
                }
            }
        }
        _ => {
            let _ = time::shown(text);
        }
    }
}

fn round_trip_duration(d: Duration, allowed: &std::ops::RangeInclusive<Duration>) {
    let written = time::format_duration(d);
    match time::duration("due", &written, allowed) {
        Ok(back) => assert_eq!(back.get(), d, "{d:?} -> {written:?}"),
        Err(e) => panic!("{d:?} -> {written:?}, which does not read back: {e}"),
    }
}

pub fn duration_seeds() -> Vec<Vec<u8>> {
    vec![
        prefixed(0, "90s"),
        prefixed(0, "1h30m"),
        prefixed(0, "PT1M30S"),
        prefixed(0, "P1DT1H"),
        prefixed(0, "2days 3h 250ms 17us 9ns"),
        prefixed(1, "R5/PT10S"),
        prefixed(1, "R/1s"),
        prefixed(2, "2026-01-01T00:00:00Z"),
        prefixed(2, "2026-01-01T02:00:00.123+02:00"),
        prefixed(2, "10m"),
        prefixed(3, "100m"),
        prefixed(3, "5S"),
        prefixed(4, "ünïcödé"),
    ]
}

/// Page tokens: the first byte picks how many parts (1 to 3, as the three
/// listings use), the rest is the token. A token that is accepted is one
/// the daemon could have written: its parts join back into it.
pub fn run_page_tokens(data: &[u8]) {
    let Some((&parts, token)) = data.split_first() else {
        return;
    };
    // Tokens are protobuf strings: tonic delivers valid UTF-8 only.
    let Ok(token) = std::str::from_utf8(token) else {
        return;
    };
    let joined = match parts % 3 {
        0 => paging::parse_page_token::<1>(token).map(|p| p.map(|p| paging::page_token(&p))),
        1 => paging::parse_page_token::<2>(token).map(|p| p.map(|p| paging::page_token(&p))),
        _ => paging::parse_page_token::<3>(token).map(|p| p.map(|p| paging::page_token(&p))),
    };
    if let Ok(Some(joined)) = joined {
        assert_eq!(joined, token, "a page token read as other parts");
    }
    let _ = paging::page_size(u32::from_le_bytes(
        data.iter()
            .copied()
            .chain(std::iter::repeat(0))
            .take(4)
            .collect::<Vec<_>>()
            .try_into()
            .unwrap_or_default(),
    ));
}

pub fn page_token_seeds() -> Vec<Vec<u8>> {
    vec![
        prefixed(0, "c1"),
        prefixed(1, "counter\nc/1"),
        prefixed(2, "counter\nc/1\ntick"),
        prefixed(2, "counter\nc1"),
    ]
}

/// The config file: the input is written to a file and resolved as
/// `troupe serve --config FILE` would (flags absent), so TOML parsing,
/// every setting's own parser and the checks between them all run.
pub fn run_config(data: &[u8]) {
    let path = config_path();
    if std::fs::write(&path, data).is_err() {
        panic!("cannot write {}", path.display());
    }
    let args = ServeArgs {
        config: Some(path.clone()),
        ..ServeArgs::default()
    };
    let _ = args.resolve();
    // Token files (--api-token-file, --app-token-file) are user files too.
    let _ = crate::auth::parse_tokens(&String::from_utf8_lossy(data));
}

/// One file per process, in memory when /dev/shm is there.
fn config_path() -> std::path::PathBuf {
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("troupe-fuzz-config-{}.toml", std::process::id()))
    })
    .clone()
}

pub fn config_seeds() -> Vec<Vec<u8>> {
    let files = [
        "listen = \"127.0.0.1:9000\"\nflush_interval = \"250ms\"\nmax_mailbox = 7\n",
        "store = \"memory\"\nidle_timeout = \"10m\"\nturn_timeout = \"1m 30s\"\nhost_wait = \"0s\"\n\
         call_timeout = \"60s\"\nshutdown_grace = \"30s\"\nshutdown_flush_timeout = \"10s\"\n\
         max_payload_bytes = 4194304\nmax_pending_calls = 100000\nmax_pending_per_type = 100\n\
         workers = 2\nwrite_through = true\nflush_max_dirty_bytes = 1024\n",
        "store = \"postgres://troupe:secret@db:5432/state\"\nplacement = [\"10.0.0.1:7500\", \
         \"http://10.0.0.2:7500\"]\nnode = \"node-a\"\nadvertise = \"10.0.0.5:7420\"\n\
         peer_channels = \"call=2,bulk=4\"\npeer_window = \"auto\"\npeer_queue_bytes = 268435456\n",
        "otlp_endpoint = \"http://127.0.0.1:4317\"\nmetrics_listen = \"127.0.0.1:9464\"\n\
         api_token_file = \"/run/api\"\napp_token_file = \"/run/app\"\ninsecure = true\n\
         listen = \"0.0.0.0:7420\"\n[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nca = \"ca.pem\"\n\
         peer_identities = [\"spiffe://troupe/daemon\"]\nclient_certs = \"required\"\n",
        "peer_channels = \"single=1\"\npeer_window = \"default\"\n",
    ];
    files.iter().map(|f| f.as_bytes().to_vec()).collect()
}
