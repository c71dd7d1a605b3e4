//! cargo-fuzz target `nginx_line`: see `overtime_parse::fuzz::check_nginx_line`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    overtime_parse::fuzz::check_nginx_line(data);
});
