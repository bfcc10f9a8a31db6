//! Who may reach the daemon: listening beyond loopback needs tokens, TLS
//! or `--insecure`; what stands in for a token; and the settings only a
//! lone loopback daemon may have.

use super::*;

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
