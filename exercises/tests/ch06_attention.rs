//! Judges your answers to ch06_attention's exercises (`exercises/src/ch06_attention.rs`):
//! `cargo test -p llm-workbook-exercises --test ch06_attention`.

use llm_workbook_exercises::{exercise, judge::ch06 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch06_attention.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(
    causal_mask,
    attention_forward,
    attention_backward,
    layer_norm_forward,
    layer_norm_backward,
    split_heads,
    concat_heads,
    mha_backward,
    ffn_backward,
    block_backward
);
