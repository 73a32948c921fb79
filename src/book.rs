//! The table of contents: every chapter, in order, as the main job walks them.
//!
//! Adding a chapter means adding its `CHAPTER` constant to [`chapters`]; nothing else in the main
//! job changes.

use crate::errata::{Erratum, Kind};
use crate::report::Chapter;
use crate::sources::Source;

/// All chapters in reading order (one line each).
#[rustfmt::skip]
pub fn chapters() -> Vec<Chapter> {
    vec![
        crate::ch01_logistic::book::CHAPTER,
        crate::ch02_softmax::book::CHAPTER,
        crate::ch03_mlp::book::CHAPTER,
        crate::ch04_xor::book::CHAPTER,
        crate::ch05_positions::book::CHAPTER,
        crate::ch06_attention::book::CHAPTER,
        crate::ch07_encoder_decoder::book::CHAPTER,
        crate::ch08_tokens::book::CHAPTER,
        crate::ch09_gpt::book::CHAPTER,
        crate::ch10_matmul::book::CHAPTER,
        crate::ch11_precision::book::CHAPTER,
        crate::ch12_modern::book::CHAPTER,
        crate::ch13_finetune::book::CHAPTER,
    ]
}

/// Makes the portable micro-kernel ([`Kernel::Scalar`]) the process's kernel, as the main job
/// does before it computes the book: every figure, table and page number the chapters compute is
/// then the same bits on every CPU. The SIMD kernels add a product's terms in other groupings
/// (fused multiply-adds, 4 or 8 lanes), so a model trained on them ends a few units of the last
/// place away on each CPU, and after hundreds of steps its curves and maps differ visibly: the
/// main job would change tracked figures on every machine but the one that drew them. What the
/// book measures in seconds names its kernel in its own settings. Fails only on a CPU without
/// the portable kernel, which no CPU is.
///
/// [`Kernel::Scalar`]: crate::simd::Kernel::Scalar
pub fn compute_on_the_portable_kernel() -> crate::Result<()> {
    crate::simd::set_kernel(Some(crate::simd::Kernel::Scalar))
}

/// The chapter with this number, if it exists.
pub fn chapter(number: u32) -> Option<Chapter> {
    chapters().into_iter().find(|c| c.number == number)
}

/// The errata register: every erratum of every chapter, with the chapter's stem.
pub fn errata_register() -> Vec<(&'static str, &'static Erratum)> {
    chapters().into_iter().flat_map(|c| c.errata.iter().map(move |e| (c.stem, e))).collect()
}

/// Rows counted by kind, as the pages write them: "3 errata", "1 erratum, 1 notation",
/// "9 errata, 1 simplification" (kinds in the order of [`Kind`], none left out but those with no
/// row; "no rows" for none).
pub fn counted<'a>(rows: impl IntoIterator<Item = &'a Erratum>) -> String {
    let rows: Vec<&Erratum> = rows.into_iter().collect();
    let parts: Vec<String> = [Kind::Erratum, Kind::Notation, Kind::Simplification]
        .into_iter()
        .filter_map(|kind| match rows.iter().filter(|e| e.kind == kind).count() {
            0 => None,
            1 => Some(format!("1 {}", kind.word())),
            n if kind == Kind::Erratum => Some(format!("{n} errata")),
            n => Some(format!("{n} {}s", kind.word())),
        })
        .collect();
    if parts.is_empty() { "no rows".to_string() } else { parts.join(", ") }
}

/// The tag of the block of the sources page that counts document `id`'s rows of the register
/// (`<!-- D0-errata:begin -->` … `<!-- D0-errata:end -->`).
pub fn document_errata_tag(id: &str) -> String {
    format!("{id}-errata")
}

/// The sentence of the sources page that counts `document`'s rows of the register, chapter by
/// chapter: "In the [errata register](errata.md): chapter 1, 3 errata; chapter 2, 1 erratum,
/// 1 notation." Each row is counted once, in the chapter that holds it.
pub fn document_errata_line(document: &Source) -> String {
    let per_chapter: Vec<String> = chapters()
        .iter()
        .filter_map(|c| {
            let rows: Vec<&Erratum> =
                c.errata.iter().filter(|e| e.document.id == document.id).collect();
            (!rows.is_empty()).then(|| format!("chapter {}, {}", c.number, counted(rows)))
        })
        .collect();
    if per_chapter.is_empty() {
        "The [errata register](errata.md) holds no row of this document.".to_string()
    } else {
        format!("In the [errata register](errata.md): {}.", per_chapter.join("; "))
    }
}

/// The sources page `page` (`chapters/sources.md`) with each document's count of register rows
/// ([`document_errata_line`]) written between its markers; `None` when a document's markers are
/// missing. The main job writes it; a test holds the committed page to it.
pub fn sources_page(page: &str) -> Option<String> {
    let mut out = page.to_string();
    for s in crate::sources::SOURCES {
        let tag = document_errata_tag(s.id);
        out = crate::report::replace_block(&out, &tag, &document_errata_line(s))?;
    }
    Some(out)
}

/// The book's errata page, `chapters/errata.md`, as the main job writes it: the whole register,
/// chapter by chapter, each chapter's rows as the table its own page carries
/// ([`crate::errata::markdown_table`]), and the chapters with none named. A test holds the
/// committed page to this text.
pub fn errata_page() -> String {
    let chapters = chapters();
    let register = errata_register();
    let count = crate::errata::error_count(register.iter().map(|(_, e)| *e));
    let notations = register.iter().filter(|(_, e)| e.kind == Kind::Notation).count();
    let simplifications = register.iter().filter(|(_, e)| e.kind == Kind::Simplification).count();
    let mut out = String::from(
        "# Errata\n\n\
         <!-- Generated by `cargo run --release` from the errata register (each chapter's \
         `ERRATA` in src/chNN_*/book.rs, gathered by src/book.rs). Edit the register, not this \
         page. -->\n\n",
    );
    out.push_str(&format!(
        "Where a source document prints a number or formula that is wrong, the test pins the \
         correct value and the register records it: the document (by its id on the \
         [sources page](sources.md)), the section, what is printed, what is correct, why, and the \
         tests that pin it. The register holds {count} errata, places where the document is \
         wrong; {notations} rows of kind \"notation\", where a shorthand or overloaded notation \
         reads wrongly when taken literally; and {simplifications} of kind \
         \"simplification\", where a worked example leaves out a step of the model it describes \
         and its numbers are right for what it computes. Each chapter page ends with its own \
         rows, and `cargo run --release -- errata` prints them all in the terminal.\n"
    ));
    let none: Vec<String> = chapters
        .iter()
        .filter(|c| c.errata.is_empty())
        .map(|c| format!("[chapter {}]({}.md)", c.number, c.stem))
        .collect();
    for ch in chapters.iter().filter(|c| !c.errata.is_empty()) {
        out.push_str(&format!(
            "\n## Chapter {}: {}\n\n[The chapter]({}.md) · {}\n\n",
            ch.number,
            ch.title,
            ch.stem,
            counted(ch.errata.iter())
        ));
        out.push_str(&crate::errata::markdown_table(ch.errata));
    }
    if !none.is_empty() {
        out.push_str(&format!(
            "\nNo errata were found in the parts of the documents that {} follow.\n",
            match none.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
                _ => none.concat(),
            }
        ));
    }
    out
}

#[cfg(test)]
mod walks {
    use crate::report::{TERMINAL_WIDTH, Walk};

    /// Columns a line takes on a terminal: combining marks (the tilde of B̃) take none.
    fn columns(line: &str) -> usize {
        line.chars().filter(|c| !('\u{0300}'..='\u{036f}').contains(c)).count()
    }

    /// Chapter 6's walk-through prints the widest matrix of the book (the 3×8 concatenation of
    /// the heads at 8 decimals, 101 columns in one row); every line of it fits the terminal.
    #[test]
    fn chapter_6_s_walk_fits_the_terminal() {
        let mut buf = Vec::new();
        (crate::ch06_attention::book::CHAPTER.walk)(&mut Walk::new(&mut buf)).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let wide: Vec<&str> = text.lines().filter(|l| columns(l) > TERMINAL_WIDTH).collect();
        assert!(wide.is_empty(), "lines over {TERMINAL_WIDTH} columns:\n{}", wide.join("\n"));
        assert!(text.contains("columns 1–"), "the concatenation no longer needs wrapping");
        assert_eq!(columns("B̃ sliver"), 8);
    }
}

#[cfg(test)]
mod counts {
    use super::*;

    /// One row is "1 erratum", never "1 errata"; each kind is named by its word.
    #[test]
    fn counted_names_each_kind_and_says_one_erratum() {
        let ch9 = crate::ch09_gpt::book::ERRATA;
        assert_eq!(counted(&ch9[..1]), "1 erratum");
        assert_eq!(counted(&ch9[..2]), "2 errata");
        let kinds: Vec<Erratum> =
            [Kind::Erratum, Kind::Notation, Kind::Simplification, Kind::Notation]
                .into_iter()
                .map(|kind| Erratum { kind, ..ch9[0] })
                .collect();
        assert_eq!(counted(&kinds), "1 erratum, 2 notations, 1 simplification");
        assert_eq!(counted(&[]), "no rows");
        // The page that said "1 errata" now says what the register holds, in the same words.
        let page = errata_page();
        assert!(!page.contains(" 1 errata"), "{page}");
        assert!(page.contains("· 1 erratum\n"), "chapter 8's single row");
    }
}
