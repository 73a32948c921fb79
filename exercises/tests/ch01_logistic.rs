//! Judges your answers to ch01_logistic's exercises (`exercises/src/ch01_logistic.rs`):
//! `cargo test -p llm-workbook-exercises --test ch01_logistic`.

use llm_workbook_exercises::{exercise, judge::ch01 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch01_logistic.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(sigmoid, logits_forward, bce_from_logit, sample_gradient, logits_backward);
