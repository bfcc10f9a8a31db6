//! Generated code for the `troupe.v1` gRPC API.
//!
//! `proto/troupe/v1/*.proto` is the one source of truth for every language;
//! this crate compiles it. Clients, servers and the reflection descriptor
//! set all come from here, with the two pieces of wire format both ends of
//! the app stream share: the codec and `MessagePart`'s splitting and
//! reassembly (`parts`).

#![allow(missing_debug_implementations)]

pub mod codec;
pub mod parts;

/// The `troupe.v1` package: messages, clients and servers.
pub mod v1 {
    tonic::include_proto!("troupe.v1");

    /// The app API version this build speaks: `Register.api_version` and
    /// `Registered.api_version` (see `app.proto`). Raise it only for an
    /// incompatible change of the app or client protocol; the SDKs define the
    /// same number (`API_VERSION` in `troupe._address` and in the TypeScript
    /// SDK's `address.ts`) and refuse a daemon that answers another.
    pub const API_VERSION: u32 = 1;

    /// Encoded `FileDescriptorSet` of the whole API, for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("troupe_v1_descriptor");
}
