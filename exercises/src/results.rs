//! What the progress table (`cargo run --release -- exercises`) reads from the judges: the list
//! of exercises, and each exercise's verdict.
//!
//! **The list.** The crate's table of exercises ([`EXERCISES`](crate::EXERCISES), one
//! [`Chapter`] each) reaches the progress table through the `listing` target
//! (`tests/listing.rs`), which prints it with [`print_table`] as one line per exercise,
//!
//! ```text
//! stem<TAB>name
//! ```
//!
//! in the table's order. That target compiles without your answers, so a chapter whose answers
//! do not compile still has its rows. Each judge target's [`exercise!`](crate::exercise) list is
//! checked against the table when the target compiles ([`lists`]): the two cannot differ.
//!
//! **The verdicts.** When the environment variable [`RESULTS_FILE`] names a file, each judged
//! exercise appends one line to it,
//!
//! ```text
//! name<TAB>state<TAB>message
//! ```
//!
//! where the state is `passed`, `failed` or `not started` and the message (empty when passed) has
//! its backslashes, tabs and line breaks written as `\\`, `\t` and `\n`. Without the variable
//! nothing is written, so `cargo test` alone behaves as usual. The judge targets' tests come from
//! [`exercise!`](crate::exercise), which records each verdict.

use crate::judge::{NOT_STARTED, Verdict};
use std::io::Write;

/// One chapter of the table of exercises: its stem and its exercises in the order of its answer
/// file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chapter {
    /// `ch06_attention`: the answers are in `src/ch06_attention.rs`, the judge target is
    /// `tests/ch06_attention.rs`.
    pub stem: &'static str,
    /// The exercises' names (their functions' and their judges'), in the answer file's order.
    pub exercises: &'static [&'static str],
}

/// The table as the progress table reads it: one line `stem<TAB>name` per exercise, chapter by
/// chapter, in the table's order.
pub fn table_lines(table: &[Chapter]) -> String {
    let mut out = String::new();
    for chapter in table {
        for name in chapter.exercises {
            out.push_str(&format!("{}\t{name}\n", chapter.stem));
        }
    }
    out
}

/// The `listing` target's whole program: prints [`table_lines`] on stdout; a write that fails
/// (a closed pipe) is said in one line on stderr, with exit status 1.
pub fn print_table(table: &[Chapter]) -> std::process::ExitCode {
    match std::io::stdout().lock().write_all(table_lines(table).as_bytes()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cannot print the table of exercises: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Whether `table` has a chapter `stem` whose exercises are `names`, in that order. Every judge
/// target's [`exercise!`](crate::exercise) list is held to it when the target compiles (`stem`
/// is the target's name), so the table can never go stale against a judge target.
pub const fn lists(table: &[Chapter], stem: &str, names: &[&str]) -> bool {
    let mut c = 0;
    while c < table.len() {
        if same(table[c].stem, stem) {
            let listed = table[c].exercises;
            if listed.len() != names.len() {
                return false;
            }
            let mut i = 0;
            while i < names.len() {
                if !same(listed[i], names[i]) {
                    return false;
                }
                i += 1;
            }
            return true;
        }
        c += 1;
    }
    false
}

/// `a == b`, in a `const fn`.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The environment variable naming the file the verdicts are appended to.
pub const RESULTS_FILE: &str = "LLM_WORKBOOK_EXERCISE_RESULTS";

/// The state word of a verdict: `passed`, `failed` or `not started`.
pub fn state(verdict: &Verdict) -> &'static str {
    match verdict {
        Ok(()) => "passed",
        Err(m) if m.starts_with(NOT_STARTED) => NOT_STARTED,
        Err(_) => "failed",
    }
}

/// `text` with backslashes, tabs and line breaks escaped, so that it fits one field of a line.
pub fn escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n")
}

/// The line recorded for exercise `name`: its name, [`state`] and escaped message.
pub fn line(name: &str, verdict: &Verdict) -> String {
    let message = verdict.as_ref().err().map(|m| escape(m)).unwrap_or_default();
    format!("{name}\t{}\t{message}\n", state(verdict))
}

/// Appends [`line()`] to the file named by [`RESULTS_FILE`], if it is set. One `write` call per
/// line, so exercises judged at the same time do not interleave their lines.
pub fn record(name: &str, verdict: &Verdict) {
    let Some(path) = std::env::var_os(RESULTS_FILE) else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line(name, verdict).as_bytes()));
    if let Err(e) = written {
        // The test's own pass/fail still stands; the table will say the verdict never arrived.
        eprintln!("cannot record the verdict in {}: {e}", path.to_string_lossy());
    }
}

/// One `#[test]` per exercise, for a judge target that has the chapter's answers as `mod yours`
/// and its judges as `judge`: each test records its verdict for the progress table
/// ([`record`]) and fails with the judge's message, its lines within 100 columns
/// ([`printed`](crate::judge::printed)). The names must be the table's for the chapter the
/// target is named after, in the table's order ([`lists`]): otherwise the target does not
/// compile.
#[macro_export]
macro_rules! exercise {
    ($($name:ident),* $(,)?) => {
        const _: () = assert!(
            $crate::results::lists(
                $crate::EXERCISES,
                env!("CARGO_CRATE_NAME"),
                &[$(stringify!($name)),*],
            ),
            "this judge target's exercise! list is not its chapter's in the crate's EXERCISES table"
        );
        $(
            #[test]
            fn $name() {
                let verdict = judge::$name(yours::$name);
                $crate::results::record(stringify!($name), &verdict);
                if let Err(message) = verdict {
                    panic!("{}", $crate::judge::printed(&message));
                }
            }
        )*
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_with_tabs_and_line_breaks_stays_on_one_line() {
        let verdict: Verdict = Err("yours\t1.5\nhint: read \\ this".to_string());
        assert_eq!(
            line("softmax", &verdict),
            "softmax\tfailed\tyours\\t1.5\\nhint: read \\\\ this\n"
        );
        let blank: Verdict = Err(format!("{NOT_STARTED}: `softmax` still has `todo!()`"));
        assert!(line("softmax", &blank).starts_with("softmax\tnot started\t"));
        assert_eq!(line("softmax", &Ok(())), "softmax\tpassed\t\n");
    }
}
