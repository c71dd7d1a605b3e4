//! cargo-fuzz target `nginx_roundtrip`: see `overtime_parse::fuzz::check_nginx_roundtrip`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    overtime_parse::fuzz::check_nginx_roundtrip(data);
});
