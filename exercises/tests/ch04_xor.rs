//! Judges your answers to ch04_xor's exercises (`exercises/src/ch04_xor.rs`):
//! `cargo test -p llm-workbook-exercises --test ch04_xor`.

use llm_workbook_exercises::{exercise, judge::ch04 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch04_xor.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(xor_sigmoid_net, xor_relu_net, least_squares_fit);
