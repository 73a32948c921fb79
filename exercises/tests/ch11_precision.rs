//! Judges your answers to ch11_precision's exercises (`exercises/src/ch11_precision.rs`):
//! `cargo test -p llm-workbook-exercises --test ch11_precision`.

use llm_workbook_exercises::{exercise, judge::ch11 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch11_precision.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(
    f32_to_bf16,
    f16_to_f32,
    balanced_step,
    kahan_sum,
    quantize_block,
    dequantize_block,
    int8_block_dot
);
