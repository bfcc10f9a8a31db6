//! Every `Admin` RPC through the daemon's handler over a real runtime.
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: troupe_fuzz::seeds::write_if_asked(troupe_fuzz::rpc::admin_seeds),
    |data: &[u8]| troupe_fuzz::rpc::run(troupe_fuzz::rpc::ADMIN, data)
);
