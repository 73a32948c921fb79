//! Judges your answers to ch07_encoder_decoder's exercises (`exercises/src/ch07_encoder_decoder.rs`):
//! `cargo test -p llm-workbook-exercises --test ch07_encoder_decoder`.

use llm_workbook_exercises::{ch07_encoder_decoder as yours, judge::ch07 as judge};

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

exercise!(padding_mask, cross_attention_forward, cross_attention_backward, decoder_block_backward);
