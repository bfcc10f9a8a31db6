//! An app's `AppHost.Attach` stream as the daemon reads it.
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: troupe_fuzz::seeds::write_if_asked(troupe_fuzz::app::seeds),
    |data: &[u8]| troupe_fuzz::app::run(data)
);
