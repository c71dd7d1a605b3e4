//! cargo-fuzz target `otlp_json`: see `overtime_parse::fuzz::check_otlp_json`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    overtime_parse::fuzz::check_otlp_json(data);
});
