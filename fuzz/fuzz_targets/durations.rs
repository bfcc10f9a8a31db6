//! Durations, periods, instants and `grpc-timeout` as requests spell them.
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: troupe_fuzz::seeds::write_if_asked(troupe_fuzz::values::duration_seeds),
    |data: &[u8]| troupe_fuzz::values::run_durations(data)
);
