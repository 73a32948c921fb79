//! Fuzz target `json`: see `harness::json`. Run from the repository root with
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run json --fuzz-dir tests/fuzz`.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::json(data));
