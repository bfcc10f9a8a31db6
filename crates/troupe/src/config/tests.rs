//! How flags, the config file and defaults combine, and what is refused.

use super::*;

mod exposure;
mod memory_bounds;

#[test]
fn flags_override_the_file_which_overrides_defaults() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("troupe.toml");
    std::fs::write(
        &path,
        "listen = \"127.0.0.1:9000\"\nflush_interval = \"250ms\"\nmax_mailbox = 7\n",
    )?;
    let args = ServeArgs {
        config: Some(path),
        max_mailbox: Some(9),
        ..ServeArgs::default()
    };
    let cfg = args.resolve()?;
    assert_eq!(cfg.listen.port(), 9000);
    assert_eq!(cfg.runtime.flush_interval, Duration::from_millis(250));
    assert_eq!(cfg.runtime.default_max_mailbox, 9);
    assert_eq!(cfg.store, StoreKind::Sled(PathBuf::from("troupe-data")));
    Ok(())
}

#[test]
fn a_postgres_url_selects_postgres_and_never_shows_its_password() -> anyhow::Result<()> {
    let args = ServeArgs {
        store: Some("postgres://troupe:s3cret@db.internal:5433/state".into()),
        ..ServeArgs::default()
    };
    let cfg = args.resolve()?;
    let StoreKind::Postgres(url) = &cfg.store else {
        anyhow::bail!("expected a PostgreSQL store, got {:?}", cfg.store);
    };
    assert_eq!(
        url.expose(),
        "postgres://troupe:s3cret@db.internal:5433/state"
    );
    let shown = format!("{cfg:?}");
    assert!(
        shown.contains("postgres://troupe@db.internal:5433/state"),
        "{shown}"
    );
    assert!(!shown.contains("s3cret"), "{shown}");

    let args = ServeArgs {
        store: Some("mysql://u:s3cret@h/db".into()),
        ..ServeArgs::default()
    };
    let Err(e) = args.resolve() else {
        anyhow::bail!("an unknown store was accepted");
    };
    assert!(!e.to_string().contains("s3cret"), "{e}");
    Ok(())
}

#[test]
fn export_and_metrics_are_off_unless_asked_for() -> anyhow::Result<()> {
    let cfg = ServeArgs::default().resolve()?;
    assert_eq!(cfg.trace_export, None);
    assert_eq!(cfg.metrics_listen, None);
    assert!(!cfg.runtime.metrics);

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("troupe.toml");
    std::fs::write(
        &path,
        "otlp_endpoint = \"http://127.0.0.1:4317\"\nmetrics_listen = \"127.0.0.1:9464\"\n",
    )?;
    let cfg = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    }
    .resolve()?;
    assert_eq!(
        cfg.trace_export.map(|t| t.endpoint).as_deref(),
        Some("http://127.0.0.1:4317")
    );
    assert_eq!(cfg.metrics_listen, Some("127.0.0.1:9464".parse()?));
    assert!(cfg.runtime.metrics);
    Ok(())
}

#[test]
fn a_bad_otlp_endpoint_says_what_to_give() -> anyhow::Result<()> {
    let bad = [
        "127.0.0.1:4317",
        "grpc://collector:4317",
        "http://",
        "https://collector:4317",
        "ht tp://x",
    ];
    for url in bad {
        let args = ServeArgs {
            otlp_endpoint: Some(url.into()),
            ..ServeArgs::default()
        };
        let Err(e) = args.resolve() else {
            anyhow::bail!("{url:?} was accepted as an OTLP endpoint");
        };
        let text = e.to_string();
        assert!(text.contains("--otlp-endpoint"), "{text}");
        assert!(text.contains("http://"), "{text}");
    }
    Ok(())
}

#[test]
fn cluster_settings_from_flags_and_file() -> anyhow::Result<()> {
    let cfg = ServeArgs::default().resolve()?;
    assert_eq!(cfg.cluster, None);
    // One name per process run, and the runtime names itself by it.
    let again = ServeArgs::default().resolve()?;
    assert_eq!(cfg.runtime.node, again.runtime.node);
    assert!(cfg.runtime.node.contains(&std::process::id().to_string()));
    assert_ne!(new_node_name(), new_node_name());

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("troupe.toml");
    std::fs::write(
        &path,
        "placement = [\"10.0.0.1:7500\", \"10.0.0.2:7500\"]\nnode = \"a\"\n\
         store = \"memory\"\npeer_channels = \"single=16\"\npeer_window = \"auto\"\npeer_protocol = \"grpc\"\n",
    )?;
    let cfg = ServeArgs {
        config: Some(path),
        advertise: Some("10.0.0.9:7420".into()),
        ..ServeArgs::default()
    }
    .resolve()?;
    assert_eq!(cfg.runtime.node, "a");
    assert_eq!(
        cfg.cluster,
        Some(ClusterConfig {
            placement: vec!["10.0.0.1:7500".into(), "10.0.0.2:7500".into()],
            advertise: Some("10.0.0.9:7420".into()),
            links: LinkSettings {
                protocol: LinkProtocol::Grpc,
                channels: ChannelPlan::Single(16),
                window: Window::Auto,
                queue_bytes: LinksConfig::default().queue_bytes,
            },
        })
    );

    // A cluster on sled would lose state whenever an actor moves.
    let on_sled = ServeArgs {
        placement: Some(vec!["10.0.0.1:7500".into()]),
        ..ServeArgs::default()
    };
    let Err(e) = on_sled.resolve() else {
        anyhow::bail!("a cluster on sled was accepted");
    };
    assert!(e.to_string().contains("--store postgres://"), "{e}");

    for (placement, advertise, node) in [
        (vec!["10.0.0.1"], None, None),
        (vec![""], None, None),
        (vec!["h:1"], Some("nohost"), None),
        (vec!["h:1"], None, Some("two words")),
    ] {
        let args = ServeArgs {
            placement: Some(placement.iter().map(|s| s.to_string()).collect()),
            advertise: advertise.map(Into::into),
            node: node.map(Into::into),
            ..ServeArgs::default()
        };
        let Err(e) = args.resolve() else {
            anyhow::bail!("{placement:?} {advertise:?} {node:?} was accepted");
        };
        assert!(e.to_string().contains("--"), "{e}");
    }
    Ok(())
}

#[test]
fn unknown_settings_are_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("troupe.toml");
    std::fs::write(&path, "flush_intervall = \"1s\"\n")?;
    let args = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    };
    let Err(e) = args.resolve() else {
        anyhow::bail!("an unknown setting was accepted");
    };
    assert!(
        format!("{e:#}").contains("did you mean `flush_interval`?"),
        "{e:#}"
    );
    Ok(())
}

#[test]
fn a_typo_gets_the_setting_it_is_closest_to_and_nonsense_gets_none() {
    use super::values::closest_setting;
    let error = |unknown: &str| {
        format!(
            "unknown field `{unknown}`, expected one of `listen`, `flush_interval`, \
             `idle_timeout`"
        )
    };
    assert_eq!(closest_setting(&error("idle_timout")), Some("idle_timeout"));
    assert_eq!(closest_setting(&error("lisen")), Some("listen"));
    assert_eq!(closest_setting(&error("zzz")), None);
    assert_eq!(
        closest_setting("unknown field `cert`, expected `cert_file`"),
        Some("cert_file")
    );
    assert_eq!(closest_setting("invalid type: string"), None);
}

/// `troupe serve`'s flags alone, parsed as the binary parses them.
#[derive(Debug, clap::Parser)]
struct Serve {
    #[command(flatten)]
    args: ServeArgs,
}

/// A read-only token on an open API would look like protection and be
/// none: everyone may already change everything.
fn serve_flags(flags: &[&str]) -> Result<ServeArgs, clap::Error> {
    use clap::Parser;
    Serve::try_parse_from(std::iter::once("serve").chain(flags.iter().copied())).map(|s| s.args)
}

/// `body` as a config file, resolved.
fn from_file(body: &str) -> anyhow::Result<ServeConfig> {
    with_file(body, ServeArgs::resolve)
}

/// `body` as a config file, resolved by `resolve`.
fn with_file(
    body: &str,
    resolve: impl FnOnce(&ServeArgs) -> anyhow::Result<ServeConfig>,
) -> anyhow::Result<ServeConfig> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("troupe.toml");
    std::fs::write(&path, body)?;
    resolve(&ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    })
}

#[test]
fn durations_in_every_spelling_from_flags_and_the_file() -> anyhow::Result<()> {
    let minutes = |m: u64| Duration::from_secs(60 * m);
    for (text, want) in [
        ("90m", minutes(90)),
        ("1h30m", minutes(90)),
        ("PT1H30M", minutes(90)),
        ("5400", minutes(90)),
    ] {
        let flags = serve_flags(&["--idle-timeout", text])?.resolve()?;
        assert_eq!(flags.runtime.default_idle_timeout, want, "flag {text}");
        let file = from_file(&format!("idle_timeout = \"{text}\"\n"))?;
        assert_eq!(file.runtime.default_idle_timeout, want, "file {text}");
    }
    // TOML numbers are seconds too.
    let file = from_file("idle_timeout = 5400\nflush_interval = 0.25\n")?;
    assert_eq!(file.runtime.default_idle_timeout, minutes(90));
    assert_eq!(file.runtime.flush_interval, Duration::from_millis(250));
    Ok(())
}

#[test]
fn a_bad_duration_names_its_flag_or_key() -> anyhow::Result<()> {
    let Err(e) = serve_flags(&["--flush-interval", "soon"]) else {
        anyhow::bail!("--flush-interval soon was accepted");
    };
    let said = e.to_string();
    assert!(said.contains("--flush-interval"), "{said}");
    assert!(
        said.contains("not a duration") && said.contains("PT1M30S"),
        "{said}"
    );
    for body in ["flush_interval = \"soon\"\n", "flush_interval = -1\n"] {
        let Err(e) = from_file(body) else {
            anyhow::bail!("{body} was accepted");
        };
        let said = format!("{e:#}");
        assert!(said.contains("flush_interval"), "{said}");
        assert!(said.contains("not a duration"), "{said}");
    }
    Ok(())
}

#[test]
fn the_log_format_comes_from_the_flag_or_the_file() -> anyhow::Result<()> {
    use crate::telemetry::LogFormat;
    assert_eq!(ServeArgs::default().resolve()?.log_format, LogFormat::Text);
    assert_eq!(
        from_file("log_format = \"json\"\n")?.log_format,
        LogFormat::Json
    );
    let flags = serve_flags(&["--log-format", "json"])?;
    assert_eq!(flags.logging().0, LogFormat::Json);
    assert!(from_file("log_format = \"yaml\"\n").is_err());
    Ok(())
}

/// Health checks carry nothing secret: `--health-listen` beyond loopback
/// needs no token, and comes from the flag or the file.
#[test]
fn threads_default_to_the_cpus_size_the_workers_and_zero_is_refused() -> anyhow::Result<()> {
    let cpus = RuntimeConfig::default().workers;
    let cfg = ServeArgs::default().resolve()?;
    assert_eq!((cfg.threads, cfg.runtime.workers), (cpus, cpus));
    let cfg = serve_flags(&["--threads", "4"])?.resolve()?;
    assert_eq!((cfg.threads, cfg.runtime.workers), (4, 4));
    let cfg = serve_flags(&["--threads", "4", "--workers", "2"])?.resolve()?;
    assert_eq!((cfg.threads, cfg.runtime.workers), (4, 2));
    assert_eq!(from_file("threads = 3\n")?.threads, 3);
    let refused = serve_flags(&["--threads", "0"])?
        .resolve()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(refused.contains("--threads"), "{refused}");
    Ok(())
}
