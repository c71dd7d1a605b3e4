//! cargo-fuzz target `nginx_lists`: see `overtime_parse::fuzz::check_nginx_lists`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    overtime_parse::fuzz::check_nginx_lists(data);
});
