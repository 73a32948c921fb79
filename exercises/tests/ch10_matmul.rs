//! Judges your answers to ch10_matmul's exercises (`exercises/src/ch10_matmul.rs`):
//! `cargo test -p llm-workbook-exercises --test ch10_matmul`.

use llm_workbook_exercises::{exercise, judge::ch10 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch10_matmul.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(pack_a_block, pack_b_panel, micro_kernel);
