//! Judges your answers to ch12_modern's exercises (`exercises/src/ch12_modern.rs`):
//! `cargo test -p llm-workbook-exercises --test ch12_modern`.

use llm_workbook_exercises::{exercise, judge::ch12 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch12_modern.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(
    rms_norm_backward,
    rope_forward,
    rope_backward,
    swiglu_backward,
    gqa_backward,
    kv_cache_bytes_per_token
);
