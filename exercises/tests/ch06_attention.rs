//! Judges your answers to ch06_attention's exercises (`exercises/src/ch06_attention.rs`):
//! `cargo test -p llm-workbook-exercises --test ch06_attention`.

use llm_workbook_exercises::{ch06_attention as yours, judge::ch06 as judge};

/// One test per exercise: the judge grades your function and its message is the failure.
macro_rules! exercise {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            if let Err(message) = judge::$name(yours::$name) {
                panic!("{message}");
            }
        }
    )*};
}

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
