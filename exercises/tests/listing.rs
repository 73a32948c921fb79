//! The crate's table of exercises ([`EXERCISES`]) printed for the progress table
//! (`cargo run --release -- exercises`): one line `stem<TAB>name` per exercise, in the table's
//! order ([`results::print_table`]). This target includes no answers, so it compiles whatever
//! state they are in: a chapter that does not compile still has its rows in the table.

use llm_workbook_exercises::{EXERCISES, results};

fn main() -> std::process::ExitCode {
    results::print_table(EXERCISES)
}
