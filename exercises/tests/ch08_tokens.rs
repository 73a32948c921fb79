//! Judges your answers to ch08_tokens's exercises (`exercises/src/ch08_tokens.rs`):
//! `cargo test -p llm-workbook-exercises --test ch08_tokens`.

use llm_workbook_exercises::{exercise, judge::ch08 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch08_tokens.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(apply_merges, bigram_counts, add_k_probability);
