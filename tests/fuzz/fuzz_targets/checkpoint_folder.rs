//! Fuzz target `checkpoint_folder`: see `harness::checkpoint_folder`. Run from the repository root
//! with `RUSTC_BOOTSTRAP=1 cargo fuzz run checkpoint_folder --fuzz-dir tests/fuzz`.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::checkpoint_folder(data));
