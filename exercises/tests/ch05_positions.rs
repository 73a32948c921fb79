//! Judges your answers to ch05_positions's exercises (`exercises/src/ch05_positions.rs`):
//! `cargo test -p llm-workbook-exercises --test ch05_positions`.

use llm_workbook_exercises::{ch05_positions as yours, judge::ch05 as judge};

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

exercise!(frequency, sinusoidal, add_positions);
