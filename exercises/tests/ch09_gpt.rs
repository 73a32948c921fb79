//! Judges your answers to ch09_gpt's exercises (`exercises/src/ch09_gpt.rs`):
//! `cargo test -p llm-workbook-exercises --test ch09_gpt`.

use llm_workbook_exercises::{ch09_gpt as yours, judge::ch09 as judge};

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
    lm_head_backward,
    adamw_step,
    temperature_distribution,
    top_k_distribution,
    kv_cache_step
);
