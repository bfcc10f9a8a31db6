//! How flags, the config file and defaults combine, and what is refused.

use super::*;

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

#[test]
fn beyond_loopback_needs_both_tokens_or_insecure() -> anyhow::Result<()> {
    let open = ServeArgs {
        listen: Some("0.0.0.0:7420".parse()?),
        ..ServeArgs::default()
    };
    // The variables may be set where the tests run; this test is about
    // flags, so it only runs when they are not.
    if std::env::var_os("TROUPE_API_TOKEN").is_some()
        || std::env::var_os("TROUPE_APP_TOKEN").is_some()
    {
        return Ok(());
    }
    let Err(e) = open.resolve() else {
        anyhow::bail!("an unprotected non-loopback listener was accepted");
    };
    let text = e.to_string();
    assert!(
        text.contains("TROUPE_API_TOKEN and TROUPE_APP_TOKEN"),
        "{text}"
    );
    assert!(text.contains("--insecure"), "{text}");

    let dir = tempfile::tempdir()?;
    let (api, app) = (dir.path().join("api"), dir.path().join("app"));
    let only_api = ServeArgs {
        api_token_file: Some(api.clone()),
        ..open.clone()
    };
    let Err(e) = only_api.resolve() else {
        anyhow::bail!("a listener without the app token was accepted");
    };
    assert!(e.to_string().contains("without TROUPE_APP_TOKEN"), "{e}");

    let both = ServeArgs {
        api_token_file: Some(api),
        app_token_file: Some(app),
        ..open.clone()
    };
    assert!(both.resolve().is_ok());
    let insecure = ServeArgs {
        insecure: true,
        ..open
    };
    assert!(insecure.resolve().is_ok());
    // Loopback needs neither.
    assert!(ServeArgs::default().resolve().is_ok());
    Ok(())
}

/// A read-only token on an open API would look like protection and be
/// none: everyone may already change everything.
#[test]
fn a_read_only_token_needs_an_api_token() -> anyhow::Result<()> {
    if std::env::var_os("TROUPE_API_TOKEN").is_some() {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let read_only = ServeArgs {
        read_token_file: Some(dir.path().join("read")),
        ..ServeArgs::default()
    };
    let Err(e) = read_only.resolve() else {
        anyhow::bail!("a read-only token without an API token was accepted");
    };
    assert!(e.to_string().contains("restricts nothing"), "{e}");
    let with_api = ServeArgs {
        api_token_file: Some(dir.path().join("api")),
        ..read_only
    };
    let resolved = with_api.resolve()?;
    assert_eq!(
        resolved.read_tokens.map(|t| t.credential),
        Some(crate::auth::Credential::Read)
    );
    Ok(())
}

#[test]
fn tls_needs_all_three_files_and_required_client_certs_stand_in_for_tokens() -> anyhow::Result<()> {
    use super::TlsArgs;
    let dir = tempfile::tempdir()?;
    let file = |name: &str| Some(dir.path().join(name));
    let partial = ServeArgs {
        tls: TlsArgs {
            cert: file("d.pem"),
            ..TlsArgs::default()
        },
        ..ServeArgs::default()
    };
    let Err(e) = partial.resolve() else {
        anyhow::bail!("a certificate without key and CA was accepted");
    };
    let text = e.to_string();
    assert!(text.contains("--tls-key and --tls-ca missing"), "{text}");

    let full = TlsArgs {
        cert: file("d.pem"),
        key: file("d.key"),
        ca: file("ca.pem"),
        ..TlsArgs::default()
    };
    let on = ServeArgs {
        tls: full.clone(),
        ..ServeArgs::default()
    }
    .resolve()?;
    let settings = on.tls.context("TLS should be on")?;
    assert_eq!(settings.client_certs, troupe_tls::ClientCerts::Optional);

    if std::env::var_os("TROUPE_API_TOKEN").is_some()
        || std::env::var_os("TROUPE_APP_TOKEN").is_some()
    {
        return Ok(());
    }
    // Beyond loopback, TLS alone lets anyone connect: tokens still needed...
    let wide = ServeArgs {
        listen: Some("0.0.0.0:7420".parse()?),
        tls: full.clone(),
        ..ServeArgs::default()
    };
    assert!(wide.resolve().is_err());
    // ...unless every caller must prove itself with a certificate.
    let proven = ServeArgs {
        tls: TlsArgs {
            client_certs: Some(super::tls::ClientCertsArg::Required),
            ..full
        },
        ..wide
    };
    let resolved = proven.resolve()?;
    assert_eq!(
        resolved.tls.map(|t| t.client_certs),
        Some(troupe_tls::ClientCerts::Required)
    );
    Ok(())
}

#[test]
fn required_client_certs_stand_in_for_the_token_on_metrics_over_https_only() -> anyhow::Result<()> {
    use super::TlsArgs;
    if std::env::var_os("TROUPE_API_TOKEN").is_some() {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let file = |name: &str| Some(dir.path().join(name));
    let required = TlsArgs {
        cert: file("d.pem"),
        key: file("d.key"),
        ca: file("ca.pem"),
        client_certs: Some(super::tls::ClientCertsArg::Required),
        ..TlsArgs::default()
    };
    let wide = ServeArgs {
        metrics_listen: Some("0.0.0.0:9464".parse()?),
        tls: required.clone(),
        ..ServeArgs::default()
    };
    let resolved = wide.resolve()?;
    assert_eq!(resolved.metrics_tls.map(|t| t.clients_required), Some(true));

    // Optional certificates prove nobody: the token is still needed.
    let optional = ServeArgs {
        tls: TlsArgs {
            client_certs: None,
            ..required
        },
        ..wide.clone()
    };
    assert!(optional.resolve().is_err());
    // Plain HTTP checks no certificate, and says so.
    let plain = ServeArgs {
        metrics_plain_http: true,
        ..wide
    };
    let Err(e) = plain.resolve() else {
        anyhow::bail!("plain-HTTP metrics beyond loopback started without the token");
    };
    assert!(e.to_string().contains("--metrics-plain-http"), "{e}");
    Ok(())
}

#[test]
fn the_test_clock_is_only_for_a_lone_loopback_daemon() -> anyhow::Result<()> {
    let loopback = ServeArgs {
        test_clock: true,
        ..ServeArgs::default()
    };
    assert!(loopback.resolve()?.runtime.test_clock);
    assert!(!ServeArgs::default().resolve()?.runtime.test_clock);
    // Even with --insecure, which lets a plain daemon listen beyond loopback.
    let open = ServeArgs {
        listen: Some("0.0.0.0:7420".parse()?),
        insecure: true,
        ..loopback.clone()
    };
    let Err(e) = open.resolve() else {
        anyhow::bail!("a test clock beyond loopback was accepted");
    };
    let message = e.to_string();
    assert!(
        message.contains("for tests") && !message.contains("  "),
        "{e}"
    );
    let clustered = ServeArgs {
        placement: Some(vec!["127.0.0.1:7500".into()]),
        store: Some("memory".into()),
        ..loopback
    };
    let Err(e) = clustered.resolve() else {
        anyhow::bail!("a test clock in a cluster was accepted");
    };
    let message = e.to_string();
    assert!(
        message.contains("--placement") && !message.contains("  "),
        "{e}"
    );
    Ok(())
}

/// `troupe serve`'s flags alone, parsed as the binary parses them.
#[derive(Debug, clap::Parser)]
struct Serve {
    #[command(flatten)]
    args: ServeArgs,
}

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
fn health_listen_beyond_loopback_needs_no_token() -> anyhow::Result<()> {
    let args = ServeArgs {
        health_listen: Some("0.0.0.0:7421".parse()?),
        ..ServeArgs::default()
    };
    let cfg = args.resolve()?;
    assert_eq!(cfg.health_listen, Some("0.0.0.0:7421".parse()?));
    assert!(cfg.api_tokens.is_none() || std::env::var_os("TROUPE_API_TOKEN").is_some());
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("troupe.toml");
    std::fs::write(&path, "health_listen = \"0.0.0.0:7431\"\n")?;
    let from_file = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    };
    assert_eq!(
        from_file.resolve()?.health_listen,
        Some("0.0.0.0:7431".parse()?)
    );
    Ok(())
}

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

#[test]
fn a_unix_socket_comes_from_the_flag_or_the_file_and_never_beside_tls() -> anyhow::Result<()> {
    let flag = serve_flags(&["--listen-unix", "/run/troupe/troupe.sock"])?.resolve()?;
    assert_eq!(
        flag.listen_unix,
        Some(PathBuf::from("/run/troupe/troupe.sock"))
    );
    let file = from_file("listen_unix = \"/tmp/t.sock\"\n")?;
    assert_eq!(file.listen_unix, Some(PathBuf::from("/tmp/t.sock")));
    assert_eq!(ServeArgs::default().resolve()?.listen_unix, None);

    // The socket serves without TLS: with it on, local callers would bypass it.
    let dir = tempfile::tempdir()?;
    let file = |name: &str| Some(dir.path().join(name));
    let both = ServeArgs {
        listen_unix: Some(PathBuf::from("/tmp/t.sock")),
        tls: super::TlsArgs {
            cert: file("d.pem"),
            key: file("d.key"),
            ca: file("ca.pem"),
            ..super::TlsArgs::default()
        },
        ..ServeArgs::default()
    };
    let Err(e) = both.resolve() else {
        anyhow::bail!("--listen-unix beside TLS was accepted");
    };
    assert!(e.to_string().contains("--listen-unix"), "{e}");
    Ok(())
}
