//! Judges your answers to ch04_xor's exercises (`exercises/src/ch04_xor.rs`):
//! `cargo test -p llm-workbook-exercises --test ch04_xor`.

use llm_workbook_exercises::{ch04_xor as yours, judge::ch04 as judge};

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

exercise!(xor_sigmoid_net, xor_relu_net, least_squares_fit);
