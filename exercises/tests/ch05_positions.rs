//! Judges your answers to ch05_positions's exercises (`exercises/src/ch05_positions.rs`):
//! `cargo test -p llm-workbook-exercises --test ch05_positions`.

use llm_workbook_exercises::{exercise, judge::ch05 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch05_positions.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(frequency, sinusoidal, add_positions);
