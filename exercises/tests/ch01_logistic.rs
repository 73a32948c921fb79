//! Judges your answers to ch01_logistic's exercises (`exercises/src/ch01_logistic.rs`):
//! `cargo test -p llm-workbook-exercises --test ch01_logistic`.

use llm_workbook_exercises::{ch01_logistic as yours, judge::ch01 as judge};

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

exercise!(sigmoid, logits_forward, bce_from_logit, sample_gradient, logits_backward);
