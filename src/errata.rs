//! The errata register's row type and its Markdown table.
//!
//! Some numbers printed in the source documents are wrong, or follow from a formula other than the
//! one printed beside them. Each such case is one [`Erratum`]: where it is, what is printed, what
//! is correct, exactly why, and the test that pins the correct value. Each chapter owns a list of
//! them; [`crate::book::errata_register`] gathers all of them, the main job prints them
//! (`cargo run --release -- errata`), and each chapter's prose carries its own rows as the table
//! [`markdown_table`] makes (a test compares the two).

use crate::sources::Source;

/// One mistake in a source document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Erratum {
    /// The source document, by its short id in [`crate::sources`].
    pub document: &'static Source,
    /// The section (or slide) where it is printed.
    pub section: &'static str,
    /// What the document prints.
    pub printed: &'static str,
    /// The correct value or formula.
    pub correct: &'static str,
    /// Exactly what went wrong.
    pub why: &'static str,
    /// The test that pins the correct value: `tests/<chapter>.rs::<name>`.
    pub test: &'static str,
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The rows as a GitHub Markdown table.
pub fn markdown_table(rows: &[Erratum]) -> String {
    let mut out = String::from(
        "| document | section | printed | correct | why | pinned by |\n|---|---|---|---|---|---|\n",
    );
    for e in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | `{}` |\n",
            e.document.id,
            cell(e.section),
            cell(e.printed),
            cell(e.correct),
            cell(e.why),
            cell(e.test)
        ));
    }
    out
}
