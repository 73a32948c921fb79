//! Judges your answers to ch10_matmul's exercises (`exercises/src/ch10_matmul.rs`):
//! `cargo test -p llm-workbook-exercises --test ch10_matmul`.

use llm_workbook_exercises::{ch10_matmul as yours, judge::ch10 as judge};

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

exercise!(pack_a_block, pack_b_panel, micro_kernel);
