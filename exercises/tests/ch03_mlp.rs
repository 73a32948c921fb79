//! Judges your answers to ch03_mlp's exercises (`exercises/src/ch03_mlp.rs`):
//! `cargo test -p llm-workbook-exercises --test ch03_mlp`.

use llm_workbook_exercises::{exercise, judge::ch03 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch03_mlp.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(dense_forward, dense_backward, relu_backward, gelu_backward, mse_backward, mlp_backward);
