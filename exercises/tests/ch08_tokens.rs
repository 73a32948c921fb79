//! Judges your answers to ch08_tokens's exercises (`exercises/src/ch08_tokens.rs`):
//! `cargo test -p llm-workbook-exercises --test ch08_tokens`.

use llm_workbook_exercises::{ch08_tokens as yours, judge::ch08 as judge};

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

exercise!(apply_merges, bigram_counts, add_k_probability);
