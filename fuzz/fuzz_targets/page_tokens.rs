//! Page tokens of the listing RPCs.
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: troupe_fuzz::seeds::write_if_asked(troupe_fuzz::values::page_token_seeds),
    |data: &[u8]| troupe_fuzz::values::run_page_tokens(data)
);
