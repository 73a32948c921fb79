//! The verdicts in a form the progress table reads (`cargo run --release -- exercises`): when
//! the environment variable [`RESULTS_FILE`] names a file, each judged exercise appends one line
//! to it,
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
/// ([`printed`](crate::judge::printed)).
#[macro_export]
macro_rules! exercise {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let verdict = judge::$name(yours::$name);
            $crate::results::record(stringify!($name), &verdict);
            if let Err(message) = verdict {
                panic!("{}", $crate::judge::printed(&message));
            }
        }
    )*};
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
