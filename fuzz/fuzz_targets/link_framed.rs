//! A peer's framed link as the daemon's listener takes it.
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: troupe_fuzz::seeds::write_if_asked(troupe_fuzz::link_framed::framed_seeds),
    |data: &[u8]| troupe_fuzz::link_framed::run_framed(data)
);
