//! The errata register's row type and its Markdown table.
//!
//! Some numbers printed in the source documents are wrong, or follow from a formula other than the
//! one printed beside them. Each such case is one [`Erratum`]: where it is, what is printed, what
//! is correct, exactly why, and the tests that pin the correct value. Its [`Kind`] says whether
//! the document is wrong ([`Kind::Erratum`], the only kind the register counts as errata) or only
//! reads wrongly taken literally: a shorthand notation ([`Kind::Notation`]) or a simplification
//! it states ([`Kind::Simplification`]). Each chapter owns a list of
//! them; [`crate::book::errata_register`] gathers all of them, the main job prints them
//! (`cargo run --release -- errata`), and each chapter's prose carries its own rows as the table
//! [`markdown_table`] makes (a test compares the two). The terminal gets [`terminal_text`].

use crate::sources::Source;

/// What a register row is: an error of the document, or a place where it is right but reads
/// wrongly when taken literally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The document is wrong: a number, a formula or a claim that does not hold.
    Erratum,
    /// A shorthand or overloaded notation: the intended meaning is right, the letters are not.
    Notation,
    /// A step left out that the document says it leaves out.
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

/// The rows as text for a terminal no wider than `width` characters: one block per erratum, its
/// document and section on the first line (and its kind, unless it is an erratum), then what is
/// printed, what is correct, why, and the tests that pin it, each wrapped under its label; a
/// blank line between blocks.
pub fn terminal_text(rows: &[Erratum], width: usize) -> String {
    const LABEL: usize = 9; // "pinned by"
    const INDENT: usize = 2;
    let mut out = String::new();
    for (k, e) in rows.iter().enumerate() {
        if k > 0 {
            out.push('\n');
        }
        let kind = match e.kind {
            Kind::Erratum => String::new(),
            other => format!(" ({})", other.word()),
        };
        let heading = format!("{}, {}{kind}", e.document.id, e.section);
        for line in crate::report::wrap(&heading, width) {
            out.push_str(&line);
            out.push('\n');
        }
        let room = width.saturating_sub(INDENT + LABEL + 2);
        let tests = e.tests.join(", ");
        for (label, text) in
            [("printed", e.printed), ("correct", e.correct), ("why", e.why), ("pinned by", &tests)]
        {
            for (i, line) in crate::report::wrap(text, room).into_iter().enumerate() {
                let label = if i == 0 { label } else { "" };
                let row = format!("{:INDENT$}{label:<LABEL$}  {line}", "");
                out.push_str(row.trim_end());
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Erratum = Erratum {
        document: crate::sources::D3,
        section: "§ 4, the feed-forward network",
        printed: "W₁ = [[0.1 0.2 0.3 0.4 0.5 0.6], [0.1 0.2 0.3 0.4 0.5 0.6], \
            [0.1 0.2 0.3 0.4 0.5 0.6], [0.1 0.2 0.3 0.4 0.5 0.6]] with an inner width of six",
        correct: "an inner width of 4 × d = 16 for d = 4",
        why: "the text states the usual rule, four times the model width, and then its example \
            uses six columns, which no rule it gives produces; the products that follow are \
            right for six columns, so only the stated width is wrong, and a reader who follows \
            the rule gets matrices of the wrong shape",
        kind: Kind::Erratum,
        tests: &[
            "tests/ch07_encoder_decoder.rs::a_planted_test_name_that_is_long_enough_to_matter",
        ],
    };

    /// The whole register as `-- errata` prints it fits the width, and says every field.
    #[test]
    fn the_whole_register_fits_the_terminal() {
        let register: Vec<Erratum> =
            crate::book::errata_register().into_iter().map(|(_, e)| *e).collect();
        assert!(!register.is_empty());
        let text = terminal_text(&register, crate::report::TERMINAL_WIDTH);
        for line in text.lines() {
            let n = crate::report::columns(line);
            assert!(n <= crate::report::TERMINAL_WIDTH, "{n} characters: {line}");
        }
        assert_eq!(text.matches("\n  pinned by  ").count(), register.len());
    }

    /// A planted erratum far longer than a line: every line within the width, every word kept,
    /// each field under its label.
    #[test]
    fn an_erratum_is_a_block_wrapped_within_the_width() {
        let text = terminal_text(&[LONG, LONG], crate::report::TERMINAL_WIDTH);
        let widest = text.lines().map(crate::report::columns).max().unwrap_or(0);
        assert!(widest <= crate::report::TERMINAL_WIDTH, "{widest} characters:\n{text}");
        assert!(LONG.why.chars().count() > 2 * crate::report::TERMINAL_WIDTH);
        assert!(text.starts_with("D3, § 4, the feed-forward network\n  printed    W₁ = "));
        assert!(text.contains("\n  why        the text states"), "{text}");
        assert!(text.contains("\n  pinned by  tests/ch07_encoder_decoder.rs::"), "{text}");
        assert_eq!(text.matches("\n\nD3, ").count(), 1, "blocks are not separated:\n{text}");
        let words: Vec<&str> = text.split_whitespace().collect();
        for w in LONG.why.split_whitespace() {
            assert!(words.contains(&w), "{w} was lost");
        }
        // A tag-like `<start>` is escaped in the table, a comparison is not (it becomes math).
        let tagged = Erratum { why: "so <start> attends, and a < b, 1<2", ..LONG };
        let table = markdown_table(&[tagged]);
        assert!(table.contains("so &lt;start> attends, and $a < b$, 1<2 |"), "{table}");
        // The Markdown table, the old terminal output, has a line per erratum far over the width.
        let md = markdown_table(&[LONG]);
        assert!(md.lines().any(|l| l.chars().count() > crate::report::TERMINAL_WIDTH));
    }
}
