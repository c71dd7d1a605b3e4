//! cargo-fuzz target `otlp_proto`: see `overtime_parse::fuzz::check_otlp_proto`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    overtime_parse::fuzz::check_otlp_proto(data);
});
