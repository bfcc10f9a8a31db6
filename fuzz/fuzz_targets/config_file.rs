//! The `troupe serve --config` file, resolved.
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: troupe_fuzz::seeds::write_if_asked(troupe_fuzz::values::config_seeds),
    |data: &[u8]| troupe_fuzz::values::run_config(data)
);
