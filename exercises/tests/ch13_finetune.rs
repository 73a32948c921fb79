//! Judges your answers to ch13_finetune's exercises (`exercises/src/ch13_finetune.rs`):
//! `cargo test -p llm-workbook-exercises --test ch13_finetune`.

use llm_workbook_exercises::{exercise, judge::ch13 as judge};

// Your answers, compiled here and nowhere else: an error in another chapter's file cannot stop
// this judge. With `solutions`, each body returns before its `todo!()`; without, the arguments
// are unused.
#[cfg_attr(feature = "solutions", allow(unreachable_code))]
#[cfg_attr(not(feature = "solutions"), allow(unused_variables))]
#[path = "../src/ch13_finetune.rs"]
mod yours;

// One test per exercise: the judge grades your function, and its message is the failure.
exercise!(
    masked_cross_entropy,
    lora_new,
    lora_backward,
    dpo_loss_and_gradient,
    group_advantages,
    grpo_loss_and_gradient,
    k3
);
