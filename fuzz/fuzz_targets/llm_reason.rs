//! cargo-fuzz target `llm_reason`: see `overtime_parse::fuzz::check_llm_reason`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    overtime_parse::fuzz::check_llm_reason(data);
});
