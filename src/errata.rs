//! The errata register's row type and its Markdown table.
//!
//! Some numbers printed in the source documents are wrong, or follow from a formula other than the
//! one printed beside them. Each such case is one [`Erratum`]: where it is, what is printed, what
//! is correct, exactly why, and the tests that pin the correct value. Its [`Kind`] says whether
//! the document is wrong ([`Kind::Erratum`], the only kind the register counts as errata) or only
//! reads wrongly taken literally: a shorthand notation ([`Kind::Notation`]) or a worked example
//! that leaves out a step of its model ([`Kind::Simplification`]). A mistake the document makes
//! in two places is one row that names both (and the tests of both chapters). Each chapter owns
//! a list of them; [`crate::book::errata_register`] gathers all of them, the main job prints them
//! (`cargo run --release -- errata`), and each chapter's prose carries its own rows as the table
//! [`markdown_table`] makes (a test compares the two). The terminal gets
//! [`crate::report::errata_terminal`].

use crate::sources::Source;

/// What a register row is: an error of the document, or a place where it is right but reads
/// wrongly when taken literally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The document is wrong: a number, a formula or a claim that does not hold.
    Erratum,
    /// A shorthand or overloaded notation: the intended meaning is right, the letters are not.
    Notation,
    /// A worked example that leaves out a step of the model it describes (said or not): its
    /// numbers are right for what it computes, not for the model.
    Simplification,
}

impl Kind {
    /// The word printed in the tables.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Erratum => "erratum",
            Kind::Notation => "notation",
            Kind::Simplification => "simplification",
        }
    }
}

/// One place where a source document is wrong, or reads wrongly taken literally ([`Kind`]).
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
    /// An error of the document, or a notation or simplification.
    pub kind: Kind,
    /// The tests that pin the correct value, `tests/<chapter>.rs::<name>`, the first the main one.
    pub tests: &'static [&'static str],
}

/// How many rows of `rows` are errors of the documents ([`Kind::Erratum`]).
pub fn error_count<'a>(rows: impl IntoIterator<Item = &'a Erratum>) -> usize {
    rows.into_iter().filter(|e| e.kind == Kind::Erratum).count()
}

/// `s` as one Markdown table cell: `|` escaped, on one line, and a `<` that would open an HTML
/// tag (`<start>`: GitHub drops it, mdBook warns) written as `&lt;`.
fn cell(s: &str) -> String {
    let s = s.replace('|', "\\|").replace('\n', " ");
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let tag = chars.peek().is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, '/' | '!'));
        if c == '<' && tag {
            out.push_str("&lt;");
        } else {
            out.push(c);
        }
    }
    out
}

/// The rows as a GitHub Markdown table, formulas as `$…$` ([`crate::tex::markdown_cell`]; the
/// terminal keeps the Unicode).
pub fn markdown_table(rows: &[Erratum]) -> String {
    let mut out = String::from(
        "| document | kind | section | printed | correct | why | pinned by |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for e in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            e.document.id,
            e.kind.word(),
            cell(&crate::tex::markdown_cell(e.section)),
            cell(&crate::tex::markdown_cell(e.printed)),
            cell(&crate::tex::markdown_cell(e.correct)),
            cell(&crate::tex::markdown_cell(e.why)),
            e.tests.iter().map(|t| format!("`{}`", cell(t))).collect::<Vec<_>>().join(", ")
        ));
    }
    out
}
