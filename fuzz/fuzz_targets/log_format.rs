//! cargo-fuzz target `log_format`: see `overtime_parse::fuzz::check_log_format`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    overtime_parse::fuzz::check_log_format(data);
});
