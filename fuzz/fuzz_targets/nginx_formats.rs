//! cargo-fuzz target `nginx_formats`: see `overtime_parse::fuzz::check_nginx_formats`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    overtime_parse::fuzz::check_nginx_formats(data);
});
