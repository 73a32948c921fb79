//! Fuzz target `bpe_roundtrip`: see `harness::bpe_roundtrip`. Run from the repository root with
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run bpe_roundtrip --fuzz-dir tests/fuzz`.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::bpe_roundtrip(data));
