//! Judges your answers to ch02_softmax's exercises (`exercises/src/ch02_softmax.rs`):
//! `cargo test -p llm-workbook-exercises --test ch02_softmax`.

use llm_workbook_exercises::{ch02_softmax as yours, judge::ch02 as judge};

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
    softmax_rows_forward,
    cross_entropy_from_logits,
    cross_entropy_from_logits_backward,
    softmax_rows_backward,
    log_softmax_rows_backward,
    regression_logits_backward
);
