//! Development certificates: a CA and certificates it issues, made with
//! rcgen, so tests and a first try need no openssl. Not for production:
//! keys are written to plain files and the CA never rotates.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

use crate::TlsError;

/// The identity development certificates give cluster members (daemons
/// and placement replicas); the default of `--tls-peer-identity` follows
/// the certificate, so members issued with it accept each other.
pub const MEMBER_IDENTITY: &str = "spiffe://troupe.local/node";

/// The identity prefix of client certificates (`.../client/NAME`).
pub const CLIENT_IDENTITY_PREFIX: &str = "spiffe://troupe.local/client/";

/// A certificate and its key, PEM.
#[derive(Clone)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pem").finish_non_exhaustive()
    }
}

/// What a certificate is for.
#[derive(Debug, Clone, Default)]
pub struct Subject {
    /// Common name, for people reading the certificate.
    pub name: String,
    /// DNS names and IP addresses clients may dial it by.
    pub hosts: Vec<String>,
    /// URI identities (SPIFFE-style), checked between cluster members.
    pub uris: Vec<String>,
}

impl Subject {
    /// A cluster member reachable on this machine's loopback and as `name`.
    pub fn member(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            hosts: vec![
                name.to_owned(),
                "localhost".to_owned(),
                IpAddr::V4(Ipv4Addr::LOCALHOST).to_string(),
                IpAddr::V6(Ipv6Addr::LOCALHOST).to_string(),
            ],
            uris: vec![MEMBER_IDENTITY.to_owned()],
        }
    }

    /// A client or app identified as `name`.
    pub fn client(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            hosts: Vec::new(),
            uris: vec![format!("{CLIENT_IDENTITY_PREFIX}{name}")],
        }
    }
}

fn validity(params: &mut CertificateParams, days: i64) {
    let now = OffsetDateTime::now_utc();
    // An hour back, for clocks a little behind.
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(days);
}

/// A new CA valid for `days`.
pub fn new_ca(name: &str, days: i64) -> Result<Pem, TlsError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, days);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A certificate for `subject` signed by `ca`, valid for `days`, good for
/// both ends of a connection (members dial each other).
pub fn issue(ca: &Pem, subject: &Subject, days: i64) -> Result<Pem, TlsError> {
    let ca_key = KeyPair::from_pem(&ca.key)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, ca_key)?;
    let mut params = CertificateParams::new(subject.hosts.clone())?;
    for uri in &subject.uris {
        params
            .subject_alt_names
            .push(SanType::URI(uri.as_str().try_into()?));
    }
    params
        .distinguished_name
        .push(DnType::CommonName, subject.name.as_str());
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, days);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Writes `STEM.pem` and `STEM.key` (owner-only) into `dir`, replacing
/// them atomically so a process re-reading them never sees half a file.
pub fn write(dir: &Path, stem: &str, pem: &Pem) -> Result<(PathBuf, PathBuf), TlsError> {
    let cert = dir.join(format!("{stem}.pem"));
    let key = dir.join(format!("{stem}.key"));
    write_atomically(&key, &pem.key, true)?;
    write_atomically(&cert, &pem.cert, false)?;
    Ok((cert, key))
}

/// Reads `STEM.pem` and `STEM.key` from `dir`.
pub fn read(dir: &Path, stem: &str) -> Result<Pem, TlsError> {
    let read = |path: PathBuf, what: &'static str| {
        std::fs::read_to_string(&path).map_err(|source| TlsError::Read {
            what,
            flag: "--dir",
            path,
            source,
        })
    };
    Ok(Pem {
        cert: read(dir.join(format!("{stem}.pem")), "certificate")?,
        key: read(dir.join(format!("{stem}.key")), "key")?,
    })
}

fn write_atomically(path: &Path, contents: &str, secret: bool) -> Result<(), TlsError> {
    let failed = |source| TlsError::Write {
        path: path.to_owned(),
        source,
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let _ = secret;
    {
        use std::io::Write;
        let mut file = options.open(&tmp).map_err(failed)?;
        file.write_all(contents.as_bytes()).map_err(failed)?;
        file.sync_all().map_err(failed)?;
    }
    std::fs::rename(&tmp, path).map_err(failed)
}
