//! Generates Rust code for `proto/troupe/v1` with a vendored protoc, so a
//! fresh machine needs no system protoc.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files = [
        "common.proto",
        "client.proto",
        "app.proto",
        "admin.proto",
        "placement.proto",
        "link.proto",
    ]
    .map(|f| root.join("troupe/v1").join(f));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // Payloads and state values are passed through the daemon untouched;
    // `Bytes` lets them move without copies.
    config.bytes(["."]);

    tonic_prost_build::configure()
        .codec_path("crate::codec::ReservingCodec")
        .file_descriptor_set_path(out_dir.join("troupe_v1_descriptor.bin"))
        .compile_with_config(config, &files, std::slice::from_ref(&root))?;
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    Ok(())
}
