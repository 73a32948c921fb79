//! Judges your answers to ch02_softmax's exercises (`exercises/src/ch02_softmax.rs`):
//! `cargo test -p llm-workbook-exercises --test ch02_softmax`.

use llm_workbook_exercises::{exercise, judge::ch02 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch02_softmax.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(
    softmax_rows_forward,
    cross_entropy_from_logits,
    cross_entropy_from_logits_backward,
    softmax_rows_backward,
    log_softmax_rows_backward,
    regression_logits_backward
);
