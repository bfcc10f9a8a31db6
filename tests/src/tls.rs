//! TLS for the harness: a development CA per cluster (made with the same
//! code as `troupe certs`), member certificates for daemons and replicas,
//! and the connectors clients, apps and the harness's placement clients
//! dial with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use troupe_tls::dev::{self, Pem, Subject};
use troupe_tls::{client_config_for_server, ClientCerts, Connector, Tls, TlsFiles, TlsSettings};

/// A CA in a temp dir and the certificates it issued there.
#[derive(Debug)]
pub struct TestCa {
    dir: tempfile::TempDir,
    ca: Pem,
    ca_path: PathBuf,
}

impl TestCa {
    pub fn new() -> anyhow::Result<Arc<TestCa>> {
        let dir = tempfile::tempdir()?;
        let ca = dev::new_ca("troupe test CA", 2)?;
        let (ca_path, _) = dev::write(dir.path(), "ca", &ca)?;
        Ok(Arc::new(TestCa { dir, ca, ca_path }))
    }

    pub fn ca_path(&self) -> &Path {
        &self.ca_path
    }

    /// Issues (or re-issues, replacing the files) `name`'s certificate.
    pub fn issue(&self, name: &str, subject: &Subject) -> anyhow::Result<(PathBuf, PathBuf)> {
        Ok(dev::write(
            self.dir.path(),
            name,
            &dev::issue(&self.ca, subject, 2)?,
        )?)
    }

    /// `--tls-cert`, `--tls-key`, `--tls-ca` for member `name`, issuing
    /// its certificate if it has none yet.
    pub fn member_args(&self, name: &str) -> anyhow::Result<Vec<String>> {
        let cert = self.dir.path().join(format!("{name}.pem"));
        let key = self.dir.path().join(format!("{name}.key"));
        if !cert.exists() {
            self.issue(name, &Subject::member(name))?;
        }
        Ok(vec![
            "--tls-cert".into(),
            cert.display().to_string(),
            "--tls-key".into(),
            key.display().to_string(),
            "--tls-ca".into(),
            self.ca_path.display().to_string(),
        ])
    }

    /// Environment for the CLI as member `name` (placement needs one).
    pub fn member_env(&self, name: &str) -> anyhow::Result<Vec<(String, String)>> {
        let args = self.member_args(name)?;
        Ok(vec![
            ("TROUPE_TLS_CERT".into(), args[1].clone()),
            ("TROUPE_TLS_KEY".into(), args[3].clone()),
            ("TROUPE_TLS_CA".into(), args[5].clone()),
        ])
    }

    /// How clients and apps dial a daemon: its name checked, no
    /// certificate of their own.
    pub fn client_connector(&self) -> anyhow::Result<Connector> {
        Ok(Connector::with_config(client_config_for_server(
            &self.ca_path,
            None,
        )?))
    }

    /// How member `name` dials other members (e.g. the harness asking
    /// placement).
    pub fn member_connector(&self, name: &str) -> anyhow::Result<Connector> {
        let args = self.member_args(name)?;
        let tls = Tls::load(TlsSettings {
            files: TlsFiles {
                cert: args[1].clone().into(),
                key: args[3].clone().into(),
                ca: self.ca_path.clone(),
            },
            peer_identities: Vec::new(),
            client_certs: ClientCerts::Optional,
        })?;
        Ok(Connector::to_members(tls))
    }
}

/// Connects `endpoint`, over TLS when a connector is given.
pub async fn connect(
    endpoint: tonic::transport::Endpoint,
    tls: Option<&Connector>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    match tls {
        Some(tls) => endpoint.connect_with_connector(tls.clone()).await,
        None => endpoint.connect().await,
    }
}
