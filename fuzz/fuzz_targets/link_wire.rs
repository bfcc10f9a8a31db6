//! The link framing: outbox and chunk reassembly, delivered whole and once.
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: troupe_fuzz::seeds::write_if_asked(troupe_fuzz::link::wire_seeds),
    |data: &[u8]| troupe_fuzz::link::run_wire(data)
);
