//! `troupe certs`: a development CA and the certificates it issues, so a
//! first try of TLS (and the tests) need no openssl. Production clusters
//! use their own CA (cert-manager, SPIFFE, a corporate PKI); the files are
//! the same PEM either way.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use troupe_tls::dev::{self, Subject};

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Create a development CA: DIR/ca.pem (give it as --tls-ca) and
    /// DIR/ca.key (keep it private).
    Ca(CaArgs),
    /// Issue a certificate from the CA in DIR: DIR/NAME.pem and DIR/NAME.key
    /// (--tls-cert, --tls-key). A member's (daemon or placement replica)
    /// by default, a client's with --client.
    Issue(IssueArgs),
}

#[derive(Debug, Args)]
pub struct CaArgs {
    /// Directory for the CA's files (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// Days the CA is valid.
    #[arg(long, default_value_t = 365)]
    days: u32,
    /// Replace a CA already in DIR (certificates it issued stop being trusted).
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
pub struct IssueArgs {
    /// The certificate's name: its file names and common name; a member's
    /// certificate also carries it as a DNS name.
    name: String,
    /// Directory holding the CA (from `troupe certs ca`).
    #[arg(long)]
    dir: PathBuf,
    /// A client's or app's certificate (identity
    /// spiffe://troupe.local/client/NAME) instead of a member's
    /// (spiffe://troupe.local/node, plus localhost and 127.0.0.1).
    #[arg(long)]
    client: bool,
    /// Another DNS name or IP address clients may dial it by; repeatable.
    #[arg(long = "host")]
    hosts: Vec<String>,
    /// Another URI identity to carry; repeatable.
    #[arg(long = "identity")]
    identities: Vec<String>,
    /// Days the certificate is valid.
    #[arg(long, default_value_t = 90)]
    days: u32,
}

pub fn run(command: CertsCommand) -> anyhow::Result<()> {
    match command {
        CertsCommand::Ca(args) => ca(args),
        CertsCommand::Issue(args) => issue(args),
    }
}

fn ca(args: CaArgs) -> anyhow::Result<()> {
    if args.dir.join("ca.pem").exists() && !args.force {
        bail!(
            "{} already holds a CA; certificates it issued would stop being trusted if it were \
             replaced. Pass --force to replace it, or use another --dir",
            args.dir.display()
        );
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let ca = dev::new_ca("Troupe development CA", i64::from(args.days))?;
    let (cert, key) = dev::write(&args.dir, "ca", &ca)?;
    println!("wrote {} (--tls-ca) and {}", cert.display(), key.display());
    Ok(())
}

fn issue(args: IssueArgs) -> anyhow::Result<()> {
    if args.name.is_empty()
        || !args
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        bail!(
            "certificate name {:?} must be letters, digits, '-', '.' or '_' (it names the files \
             and, for members, a DNS name)",
            args.name
        );
    }
    let ca = dev::read(&args.dir, "ca").context("run `troupe certs ca --dir DIR` first")?;
    let mut subject = if args.client {
        Subject::client(&args.name)
    } else {
        Subject::member(&args.name)
    };
    subject.hosts.extend(args.hosts);
    subject.uris.extend(args.identities);
    let issued = dev::issue(&ca, &subject, i64::from(args.days))?;
    let (cert, key) = dev::write(&args.dir, &args.name, &issued)?;
    println!(
        "wrote {} (--tls-cert) and {} (--tls-key), identities {}",
        cert.display(),
        key.display(),
        subject.uris.join(", ")
    );
    Ok(())
}
