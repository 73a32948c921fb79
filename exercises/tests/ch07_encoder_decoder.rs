//! Judges your answers to ch07_encoder_decoder's exercises
//! (`exercises/src/ch07_encoder_decoder.rs`):
//! `cargo test -p llm-workbook-exercises --test ch07_encoder_decoder`.

use llm_workbook_exercises::{exercise, judge::ch07 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch07_encoder_decoder.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(
    padding_mask,
    cross_attention_forward,
    cross_attention_backward,
    decoder_block_backward,
    loss_and_gradients
);
