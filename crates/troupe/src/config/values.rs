//! Single settings from flags or the config file, checked and normalised:
//! node names, addresses, the OTLP endpoint, and the file itself.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::FileConfig;
use crate::auth::{Credential, TokenSource};

/// A credential's tokens from its environment variable and its file;
/// `None` when neither gives any (the API it guards stays open).
pub(crate) fn token_source(
    credential: Credential,
    file: Option<PathBuf>,
    refuse_short: bool,
) -> Option<TokenSource> {
    let inline = credential.env_tokens();
    if inline.is_empty() && file.is_none() {
        return None;
    }
    Some(TokenSource {
        credential,
        inline,
        file,
        refuse_short,
    })
}

/// sled's page cache from --sled-cache-bytes, or `default`. sled cannot
/// hold even the index pages of a busy store in less than a few MiB.
pub(super) fn sled_cache_bytes(bytes: Option<u64>, default: u64) -> anyhow::Result<u64> {
    const MIN: u64 = 4 * 1024 * 1024;
    match bytes {
        None => Ok(default),
        Some(bytes) if bytes < MIN => anyhow::bail!(
            "--sled-cache-bytes {bytes} is too small: give at least {MIN} (4 MiB), or leave it \
             out for the default ({default} here; an eighth of the daemon's memory limit, at most \
             {}, which keeps a daemon with a million reminders within 600 MB)",
            troupe_storage_sled::DEFAULT_CACHE_BYTES
        ),
        Some(bytes) => Ok(bytes),
    }
}

/// A node name from --node: printable, no spaces, so it reads well in logs
/// and tables and stays one token in the activation log.
pub(super) fn node_name(node: &str) -> anyhow::Result<String> {
    let node = node.trim();
    if node.is_empty()
        || node.len() > 200
        || node.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        anyhow::bail!(
            "--node {node:?} is not a usable node name; give 1-200 characters without spaces, \
             unique per daemon process (or leave it out for HOSTNAME-PID-RANDOM)"
        );
    }
    Ok(node.to_owned())
}

/// Unique per process run: a restarted daemon must join as a new member, so
/// the pid alone (reused across container restarts) is not enough.
pub(super) fn default_node_name() -> String {
    // Once per process: `resolve` runs more than once (logging is set up
    // before `serve`) and every caller must see the same name.
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(new_node_name).clone()
}

pub(super) fn new_node_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "troupe".to_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() ^ (d.as_secs() as u32));
    let random = std::collections::hash_map::RandomState::new();
    let mixed = std::hash::BuildHasher::hash_one(&random, nanos) as u32;
    format!("{host}-{}-{mixed:08x}", std::process::id())
}

/// The replicas of --placement, each checked to be `host:port`.
pub(super) fn placement_addresses(replicas: &[String]) -> anyhow::Result<Vec<String>> {
    let replicas: Vec<String> = replicas
        .iter()
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
        .map(|r| host_port("--placement", r))
        .collect::<anyhow::Result<_>>()?;
    if replicas.is_empty() {
        anyhow::bail!(
            "--placement names no replica; give the placement service's addresses as \
             HOST:PORT[,HOST:PORT...], or leave it out to run a single node"
        );
    }
    Ok(replicas)
}

/// `HOST:PORT` (an `http://` prefix is allowed and dropped).
pub(super) fn host_port(flag: &str, value: &str) -> anyhow::Result<String> {
    let bare = value.trim().trim_start_matches("http://");
    let ok = bare
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
    if !ok || bare.contains('/') {
        anyhow::bail!("{flag} {value:?} is not HOST:PORT (e.g. 10.0.0.5:7420)");
    }
    Ok(bare.to_owned())
}

/// Checks an OTLP/gRPC collector URL, so that a typo fails at start rather
/// than as export errors later.
pub(super) fn otlp_endpoint(url: &str) -> anyhow::Result<String> {
    const HOW: &str = "give the collector's OTLP/gRPC address as http://HOST:PORT \
                       (usually port 4317), e.g. --otlp-endpoint http://127.0.0.1:4317";
    let url = url.trim();
    let uri: tonic::codegen::http::Uri = url
        .parse()
        .map_err(|e| anyhow::anyhow!("--otlp-endpoint {url:?} is not a URL ({e}); {HOW}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        // TLS would add a second crypto stack to the binary; a sidecar
        // normally reaches a collector on the same host or pod.
        Some("https") => anyhow::bail!(
            "--otlp-endpoint {url:?}: this build exports without TLS; point it at a \
             collector reachable over plain http (e.g. a local OpenTelemetry Collector \
             that forwards over TLS), as http://HOST:PORT"
        ),
        _ => anyhow::bail!("--otlp-endpoint {url:?} has no http:// scheme; {HOW}"),
    }
    if uri.authority().is_none_or(|a| a.host().is_empty()) {
        anyhow::bail!("--otlp-endpoint {url:?} names no host; {HOW}");
    }
    Ok(url.to_owned())
}

pub(super) fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).map_err(|e| {
        let hint = closest_setting(e.message())
            .map(|s| format!(" (did you mean `{s}`?)"))
            .unwrap_or_default();
        anyhow::Error::new(e).context(format!(
            "config file {} is not valid{hint}: settings are the `serve` flag names with `_` \
             (e.g. listen = \"127.0.0.1:7420\", flush_interval = \"500ms\")",
            path.display()
        ))
    })
}

/// The known setting closest to the unknown one a parse error names, if
/// one is close enough to be a typo. serde words the error "unknown field
/// `x`, expected one of `a`, `b`" (or "expected `a`" for one).
pub(super) fn closest_setting(message: &str) -> Option<&str> {
    let rest = message.split_once("unknown field `")?.1;
    let (unknown, expected) = rest.split_once('`')?;
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|known| (strsim::jaro_winkler(unknown, known), known))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, known)| known)
}
