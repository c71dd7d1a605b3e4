//! cargo-fuzz target `jsonl`: see `overtime_parse::fuzz::check_jsonl`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    overtime_parse::fuzz::check_jsonl(data);
});
