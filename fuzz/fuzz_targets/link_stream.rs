//! A peer's `PeerLink.Open` stream as the daemon answers it.
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: troupe_fuzz::seeds::write_if_asked(troupe_fuzz::link::stream_seeds),
    |data: &[u8]| troupe_fuzz::link::run_stream(data)
);
