//! Fuzz target `safetensors`: see `harness::safetensors`. Run from the repository root with
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run safetensors --fuzz-dir tests/fuzz`.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::safetensors(data));
