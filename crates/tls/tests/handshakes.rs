//! Handshakes between members, strangers and clients over loopback, and a
//! certificate renewed on disk taking effect for the next connection.

use std::net::SocketAddr;
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_stream::StreamExt;
use tonic::codegen::http::Uri;
use tower_service::Service;
use troupe_tls::dev::{self, Pem, Subject};
use troupe_tls::{
    client_config_for_server, ClientCerts, Connector, Tls, TlsError, TlsFiles, TlsSettings,
};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Writes the CA and a certificate for `subject` under `dir/stem.*`.
fn files(dir: &Path, stem: &str, ca: &Pem, subject: &Subject) -> Result<TlsFiles> {
    let ca_path = dir.join(format!("{stem}-ca.pem"));
    std::fs::write(&ca_path, &ca.cert)?;
    let (cert, key) = dev::write(dir, stem, &dev::issue(ca, subject, 1)?)?;
    Ok(TlsFiles {
        cert,
        key,
        ca: ca_path,
    })
}

fn settings(files: TlsFiles, client_certs: ClientCerts) -> TlsSettings {
    TlsSettings {
        files,
        peer_identities: Vec::new(),
        client_certs,
    }
}

/// A listener that answers "ok" on every connection whose handshake passed.
async fn serve(tls: &Tls) -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut incoming = tls.incoming(listener);
    tokio::spawn(async move {
        while let Some(Ok(mut stream)) = incoming.next().await {
            let _ = stream.write_all(b"ok").await;
            let _ = stream.flush().await;
        }
    });
    Ok(addr)
}

/// Dials and reads the greeting; the server's certificate names on success.
async fn dial(connector: &mut Connector, addr: SocketAddr) -> Result<Vec<String>> {
    let uri: Uri = format!("http://{addr}").parse()?;
    let mut io = connector.call(uri).await?.into_inner();
    let mut greeting = [0u8; 2];
    io.read_exact(&mut greeting).await?;
    let (_, session) = io.get_ref();
    let leaf = session
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or("no server certificate")?;
    Ok(troupe_tls::identities_of(leaf))
}

#[tokio::test]
async fn members_of_one_ca_connect_and_strangers_do_not() -> Result {
    let dir = tempfile::tempdir()?;
    let ca = dev::new_ca("test CA", 1)?;
    let other_ca = dev::new_ca("another CA", 1)?;
    let server = Tls::load(settings(
        files(dir.path(), "a", &ca, &Subject::member("a"))?,
        ClientCerts::MembersOnly,
    ))?;
    let addr = serve(&server).await?;

    let member = Tls::load(settings(
        files(dir.path(), "b", &ca, &Subject::member("b"))?,
        ClientCerts::MembersOnly,
    ))?;
    let names = dial(&mut Connector::to_members(member), addr).await?;
    assert!(names.contains(&dev::MEMBER_IDENTITY.to_owned()));

    // Same identity, another CA: refused both ways.
    let stranger = Tls::load(settings(
        files(dir.path(), "c", &other_ca, &Subject::member("c"))?,
        ClientCerts::MembersOnly,
    ))?;
    assert!(dial(&mut Connector::to_members(stranger.clone()), addr)
        .await
        .is_err());
    let stranger_addr = serve(&stranger).await?;
    let member = Tls::load(settings(
        files(dir.path(), "d", &ca, &Subject::member("d"))?,
        ClientCerts::MembersOnly,
    ))?;
    assert!(dial(&mut Connector::to_members(member), stranger_addr)
        .await
        .is_err());

    // The right CA, but a client's identity: not a member.
    let client = Tls::load(TlsSettings {
        peer_identities: vec![dev::MEMBER_IDENTITY.to_owned()],
        ..settings(
            files(dir.path(), "e", &ca, &Subject::client("e"))?,
            ClientCerts::MembersOnly,
        )
    })?;
    assert!(dial(&mut Connector::to_members(client), addr)
        .await
        .is_err());

    // Plaintext: the listener drops it, and the next member still gets in.
    let mut plain = tokio::net::TcpStream::connect(addr).await?;
    plain.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
    let mut buf = Vec::new();
    let _ = plain.read_to_end(&mut buf).await;
    assert!(!buf.starts_with(b"ok"));
    Ok(())
}

#[tokio::test]
async fn a_listener_with_optional_client_certs_lets_clients_in_by_name() -> Result {
    let dir = tempfile::tempdir()?;
    let ca = dev::new_ca("test CA", 1)?;
    let files = files(dir.path(), "a", &ca, &Subject::member("a"))?;
    let server = Tls::load(settings(files.clone(), ClientCerts::Optional))?;
    let addr = serve(&server).await?;
    // No client certificate; the server checked by the name it was dialled at.
    let mut connector = Connector::with_config(client_config_for_server(&files.ca, None)?);
    dial(&mut connector, addr).await?;
    // A member checks the member's identity, and presents its own.
    assert!(server.check_member(None).is_err());

    let required = Tls::load(settings(files.clone(), ClientCerts::Required))?;
    let addr = serve(&required).await?;
    assert!(dial(&mut connector, addr).await.is_err());
    Ok(())
}

#[tokio::test]
async fn a_certificate_renewed_on_disk_is_used_by_the_next_connection() -> Result {
    let dir = tempfile::tempdir()?;
    let ca = dev::new_ca("test CA", 1)?;
    let files = files(dir.path(), "a", &ca, &Subject::member("a"))?;
    let server = Tls::load(settings(files.clone(), ClientCerts::MembersOnly))?;
    let addr = serve(&server).await?;
    let client = Tls::load(settings(
        self::files(dir.path(), "b", &ca, &Subject::member("b"))?,
        ClientCerts::MembersOnly,
    ))?;
    let mut connector = Connector::to_members(client);
    assert!(dial(&mut connector, addr).await?.contains(&"a".to_owned()));

    let renewed = Subject {
        hosts: vec!["a-renewed".to_owned()],
        ..Subject::member("a")
    };
    dev::write(dir.path(), "a", &dev::issue(&ca, &renewed, 1)?)?;
    let names = dial(&mut connector, addr).await?;
    assert!(names.contains(&"a-renewed".to_owned()), "{names:?}");

    // A broken renewal (a key of another certificate) keeps the last good one.
    let other = dev::issue(&ca, &Subject::member("x"), 1)?;
    std::fs::write(&files.key, &other.key)?;
    let names = dial(&mut connector, addr).await?;
    assert!(names.contains(&"a-renewed".to_owned()), "{names:?}");
    Ok(())
}

/// The expiry reported is that of the certificate on disk now, so a
/// metric built on it shows whether a renewal was picked up.
#[test]
fn the_expiry_follows_a_renewed_certificate() -> Result {
    let dir = tempfile::tempdir()?;
    let ca = dev::new_ca("test CA", 90)?;
    let files = files(dir.path(), "a", &ca, &Subject::member("a"))?;
    let tls = Tls::load(settings(files, ClientCerts::MembersOnly))?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let days_left = |at: Option<i64>| at.map(|at| (at - now + 3600) / 86_400);
    assert_eq!(days_left(tls.expiry().own), Some(1));
    assert_eq!(days_left(tls.expiry().ca), Some(90));

    dev::write(
        dir.path(),
        "a",
        &dev::issue(&ca, &Subject::member("a"), 30)?,
    )?;
    assert_eq!(days_left(tls.expiry().own), Some(30));
    Ok(())
}

#[test]
fn broken_files_say_which_and_why() -> Result {
    let dir = tempfile::tempdir()?;
    let ca = dev::new_ca("test CA", 1)?;
    let good = files(dir.path(), "a", &ca, &Subject::member("a"))?;
    let missing = TlsFiles {
        cert: dir.path().join("absent.pem"),
        ..good.clone()
    };
    assert!(matches!(
        Tls::load(settings(missing, ClientCerts::Optional)),
        Err(TlsError::Read {
            what: "certificate",
            ..
        })
    ));
    let other = dev::issue(&ca, &Subject::member("x"), 1)?;
    let wrong_key = dir.path().join("wrong.key");
    std::fs::write(&wrong_key, &other.key)?;
    let mismatched = TlsFiles {
        key: wrong_key,
        ..good.clone()
    };
    assert!(matches!(
        Tls::load(settings(mismatched, ClientCerts::Optional)),
        Err(TlsError::KeyMismatch { .. })
    ));
    let client_only = files(
        dir.path(),
        "c",
        &ca,
        &Subject {
            uris: Vec::new(),
            ..Subject::client("c")
        },
    )?;
    assert!(matches!(
        Tls::load(settings(client_only, ClientCerts::Optional)),
        Err(TlsError::NoPeerIdentity { .. })
    ));
    Ok(())
}
