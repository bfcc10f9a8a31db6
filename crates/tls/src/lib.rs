//! TLS for every Troupe connection: the client and app listener, daemon to
//! daemon links, daemons to placement replicas and replicas among
//! themselves.
//!
//! This crate owns the certificate, key and CA files and their reloading
//! ([`Tls`]: every new connection uses what the files hold now, so a renewed
//! certificate needs no restart), the identity check of cluster members
//! (a DNS name or SPIFFE-style URI in the peer's certificate, against
//! configuration: [`PeerIdentities`]), when the certificates in use expire
//! ([`Expiry`], warned of when near), the server side (a listener's
//! handshakes, [`Tls::incoming`]; [`ServerTls`] for an HTTPS listener,
//! which asks clients for no certificate, as the admission webhook's, or
//! requires one from the CA, as a daemon's `/metrics` when the daemon
//! requires client certificates) and the client side (a connector for
//! tonic endpoints, [`Connector`]), and
//! development certificates made with rcgen ([`dev`]) so tests and a first
//! try need no openssl.

mod connect;
pub mod dev;
mod error;
mod expiry;
mod files;
mod identity;
mod incoming;
mod server_only;
mod tls;
mod verify;

pub use connect::Connector;
pub use error::TlsError;
pub use expiry::Expiry;
pub use files::TlsFiles;
pub use identity::{identities_of, NotAPeer, PeerIdentities};
pub use incoming::Incoming;
pub use server_only::ServerTls;
pub use tls::{client_config_for_server, ClientCerts, Tls, TlsSettings};

/// Certificates as tonic hands them to services (`Request::peer_certs`).
pub use rustls_pki_types::CertificateDer;
