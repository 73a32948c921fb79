//! Judges your answers to ch03_mlp's exercises (`exercises/src/ch03_mlp.rs`):
//! `cargo test -p llm-workbook-exercises --test ch03_mlp`.

use llm_workbook_exercises::{ch03_mlp as yours, judge::ch03 as judge};

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

exercise!(dense_forward, dense_backward, relu_backward, gelu_backward, mse_backward, mlp_backward);
