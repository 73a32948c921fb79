//! Judges your answers to ch09_gpt's exercises (`exercises/src/ch09_gpt.rs`):
//! `cargo test -p llm-workbook-exercises --test ch09_gpt`.

use llm_workbook_exercises::{exercise, judge::ch09 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch09_gpt.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(
    lm_head_backward,
    adamw_step,
    temperature_distribution,
    top_k_distribution,
    kv_cache_step
);
