//! Fuzz target `gpt2_files`: see `harness::gpt2_files`. Run from the repository root with
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run gpt2_files --fuzz-dir tests/fuzz`.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::gpt2_files(data));
