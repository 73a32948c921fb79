//! Helpers shared by the chapter tests: snapshots in the top-level folder, prose checks.
#![allow(dead_code, unused_macros, unused_imports)]

/// Asserts a matrix snapshot `snapshots/<test file>__<name>.snap`, written with a shape header
/// and `decimals` fixed decimals. Keep snapshot tests at the top level of the test file so the
/// file name is `<chapter stem>__<name>.snap`.
macro_rules! snap_matrix {
    ($name:expr, $m:expr, $decimals:expr) => {{
        let text = llm_workbook::snapshot::matrix_text(&$m, $decimals);
        insta::with_settings!({
            snapshot_path => llm_workbook::snapshot::SNAPSHOT_DIR,
            omit_expression => true,
        }, {
            insta::assert_snapshot!($name, text);
        });
    }};
}

/// Asserts any text as a snapshot in the top-level folder.
macro_rules! snap_text {
    ($name:expr, $text:expr) => {{
        let text: String = $text;
        insta::with_settings!({
            snapshot_path => llm_workbook::snapshot::SNAPSHOT_DIR,
            omit_expression => true,
        }, {
            insta::assert_snapshot!($name, text);
        });
    }};
}

pub(crate) use snap_matrix;
pub(crate) use snap_text;

/// The prose of a chapter, read from `chapters/<stem>.md`.
pub fn prose(stem: &str) -> String {
    let path = format!("{}/chapters/{stem}.md", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Asserts that the chapter's prose carries exactly the errata table and worked-number table the
/// code produces (between `<!-- errata:begin/end -->` and `<!-- worked:begin/end -->`), and that
/// no worked row is an unexplained mismatch.
pub fn check_chapter_prose(chapter: &llm_workbook::report::Chapter) {
    use llm_workbook::report::{Status, prose_block, worked_markdown};
    let md = prose(chapter.stem);
    let errata = llm_workbook::errata::markdown_table(chapter.errata);
    let in_prose = prose_block(&md, "errata").unwrap_or_else(|| panic!("{}.md has no errata block", chapter.stem));
    assert_eq!(
        in_prose,
        errata.trim(),
        "the errata table in chapters/{}.md differs from the register; paste this between the markers:\n{errata}",
        chapter.stem
    );
    let rows = (chapter.worked)().expect("worked examples compute");
    for r in &rows {
        assert_ne!(r.status, Status::Mismatch, "unexplained mismatch: {r:?}");
        if r.status == Status::Erratum {
            assert!(
                chapter.errata.iter().any(|e| e.test.ends_with(r.test)),
                "worked row {} is an erratum but no register row names its test",
                r.test
            );
        }
    }
    let table = worked_markdown(&rows);
    let in_prose = prose_block(&md, "worked").unwrap_or_else(|| panic!("{}.md has no worked block", chapter.stem));
    assert_eq!(
        in_prose,
        table.trim(),
        "the worked-number table in chapters/{}.md is stale; paste this between the markers:\n{table}",
        chapter.stem
    );
}

/// A fresh temporary folder under the target directory (tests never write into the source tree).
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("llm-workbook-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Everything a chapter's walk prints, as text.
pub fn walk_text(chapter: &llm_workbook::report::Chapter) -> String {
    let mut buf = Vec::new();
    let mut walk = llm_workbook::report::Walk::new(&mut buf);
    (chapter.walk)(&mut walk).expect("the walk runs");
    String::from_utf8(buf).expect("the walk prints UTF-8")
}

/// Draws a chapter's plots into a fresh temporary folder and asserts that it wrote `expected`
/// files, none of them nearly empty (a PNG or SVG under 1 kB has lost its content). Returns them.
pub fn render_plots(chapter: &llm_workbook::report::Chapter, expected: usize) -> Vec<std::path::PathBuf> {
    let dir = temp_dir(&format!("{}-plots", chapter.stem));
    let files = (chapter.plots)(&dir).expect("the plots render");
    assert_eq!(files.len(), expected, "{} wrote {files:?}", chapter.stem);
    for f in &files {
        let len = std::fs::metadata(f).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "{} is only {len} bytes", f.display());
    }
    files
}
