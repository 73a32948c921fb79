//! What a reader meets first: the binary's `--help` and its argument errors (each one line of at
//! most 100 columns that names what is wrong), and pages, a README and test names that speak of
//! the mathematics and the measurements only.
mod common;

use std::path::Path;
use std::process::{Command, Output};

/// The widest line the binary prints, in terminal columns.
const WIDTH: usize = 100;

/// The binary with `args`, run in a fresh temporary folder (nothing a user left in the
/// repository is seen), with a terminal width of `columns` announced through `COLUMNS`.
fn run(args: &[&str], columns: usize) -> Output {
    let dir = common::temp_dir(&format!("reader_{}", args.join("_").replace('-', "")));
    Command::new(env!("CARGO_BIN_EXE_llm-workbook"))
        .args(args)
        .current_dir(&dir)
        .env("COLUMNS", columns.to_string())
        .env_remove("LLM_WORKBOOK_MEMORY_BUDGET")
        .output()
        .expect("the binary runs")
}

/// Every command and subcommand with a `--help` of its own.
const COMMANDS: [&[&str]; 9] = [
    &[],
    &["chapter"],
    &["errata"],
    &["list"],
    &["exercises"],
    &["gpt"],
    &["gpt", "train"],
    &["gpt", "resume"],
    &["gpt", "sample"],
];

/// The lines of `text` wider than [`WIDTH`] characters.
fn too_wide(text: &str) -> Vec<String> {
    text.lines().filter(|l| l.chars().count() > WIDTH).map(str::to_string).collect()
}

/// Every `--help` fits 100 columns, even when the terminal says it is 300 wide; and it still
/// says everything: no help shrank to a usage line.
#[test]
fn every_help_fits_100_columns_on_any_terminal() {
    for command in COMMANDS {
        let mut args = command.to_vec();
        args.push("--help");
        let o = run(&args, 300);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && out.contains("Usage:"), "{args:?}: {out}");
        let wide = too_wide(&out);
        assert!(wide.is_empty(), "{args:?} on a terminal 300 columns wide: {wide:#?}");
    }
    // The long description of the main job is all there, wrapped: its last words on their line.
    let out = String::from_utf8_lossy(&run(&["--help"], 300).stdout).into_owned();
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("the document is wrong: an erratum)"), "{out}");
}

/// The parser's errors as the reader sees them: exit status 2 and one line of at most 100
/// columns on stderr holding every needle.
fn assert_parser_error(args: &[&str], needles: &[&str]) {
    let o = run(args, 300);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(too_wide(&err).is_empty(), "{args:?}: {} columns: {err}", err.trim_end().len());
    for n in needles {
        assert!(err.contains(n), "{args:?}: {err:?} lacks {n:?}");
    }
    assert!(o.stdout.is_empty(), "{args:?} printed {}", String::from_utf8_lossy(&o.stdout));
}

/// A missing argument is named: `chapter` alone says `<CHAPTER>`, `gpt sample` alone says
/// `--checkpoint`, `gpt resume` alone says both of its required flags.
#[test]
fn a_missing_argument_is_named_in_one_line() {
    assert_parser_error(&["chapter"], &["missing <CHAPTER>", "--help"]);
    assert_parser_error(&["gpt", "sample"], &["missing --checkpoint <CHECKPOINT>"]);
    assert_parser_error(&["gpt", "resume"], &["--checkpoint <CHECKPOINT>", "--steps <STEPS>"]);
    assert_parser_error(&["gpt", "resume", "--checkpoint", "x"], &["--steps <STEPS>"]);
}

/// A chapter that does not exist, by number or by name, is one short line that says what to
/// give instead; so is a flag that does not exist.
#[test]
fn a_chapter_that_does_not_exist_is_one_short_line() {
    for bad in ["99", "0", "attn", "encoder-decoder"] {
        let last = llm_workbook::book::chapters().last().map_or(0, |c| c.number);
        let range = format!("1 to {last}");
        let needles = [&format!("invalid <CHAPTER> '{bad}'") as &str, &range, "`list`"];
        assert_parser_error(&["chapter", bad], &needles);
    }
    let long = "a-chapter-name-far-longer-than-any-line-of-the-terminal-".repeat(3);
    assert_parser_error(&["chapter", &long], &["invalid <CHAPTER> 'a-chapter-name-far-long…'"]);
    assert_parser_error(&["chapter", "6", "--bogus"], &["'--bogus'"]);
}

// ───────────── development residue ─────────────

/// Phrases that speak of how the workbook was made rather than of its mathematics (whole
/// words, any case). BPE's *merges* are mathematics: only "last merge" is residue. A page names
/// the machine a measurement was taken on (the benchmarks appendix keeps each with its
/// machine), never "this machine", and says what a measurement shows, not whether a goal of
/// the work "is met".
const RESIDUE: [&str; 17] = [
    "issue",
    "issues",
    "issue's",
    "session",
    "sessions",
    "closing note",
    "last merge",
    "former threshold",
    "this machine",
    "this machine's",
    "this version",
    "machine of these pages",
    "is met",
    "are met",
    "not met",
    "goals were",
    "was available",
];

/// Each residue phrase in `text` (words split at anything but letters and `'`), with the words
/// around it.
fn residue(text: &str) -> Vec<String> {
    let words: Vec<String> = text
        .split(|c: char| !(c.is_alphabetic() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
        .collect();
    let mut found = Vec::new();
    for phrase in RESIDUE {
        let p: Vec<&str> = phrase.split(' ').collect();
        for (i, window) in words.windows(p.len()).enumerate() {
            if window.iter().zip(&p).all(|(w, p)| w == p) {
                let context =
                    words[i.saturating_sub(3)..(i + p.len() + 3).min(words.len())].join(" ");
                found.push(format!("{phrase:?} in \"… {context} …\""));
            }
        }
    }
    found
}

/// The names of the functions in a Rust file (`fn name`), underscores read as spaces.
fn function_names(source: &str) -> Vec<String> {
    source
        .split("fn ")
        .skip(1)
        .map(|rest| rest.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or(""))
        .filter(|name| !name.is_empty())
        .map(|name| name.replace('_', " "))
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path, into: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a folder entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() && !matches!(name, "target" | "corpus" | "artifacts") {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The README, every page of the book and every function name in the tests and the library (a
/// test's name is shown on the pages and in `cargo test`'s output) speak of the maths and the
/// measurements, not of how the project was built.
#[test]
fn no_page_or_test_name_speaks_of_how_the_workbook_was_made() {
    let root = common::repo_root();
    let mut faults = Vec::new();
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("chapters")).expect("chapters/") {
        let path = entry.expect("a page").path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    for page in &pages {
        for r in residue(&read(page)) {
            faults.push(format!("{}: {r}", page.strip_prefix(root).unwrap_or(page).display()));
        }
    }
    let mut sources = Vec::new();
    for dir in ["tests", "src", "benches", "examples"] {
        if root.join(dir).is_dir() {
            rust_files(&root.join(dir), &mut sources);
        }
    }
    assert!(sources.len() > 40, "only {} Rust files found", sources.len());
    for file in &sources {
        for name in function_names(&read(file)) {
            for r in residue(&name) {
                faults.push(format!("{}: fn {}: {r}", file.display(), name.replace(' ', "_")));
            }
        }
    }
    assert!(pages.len() > 12, "only {} pages found", pages.len());
    assert!(faults.is_empty(), "development residue:\n{}", faults.join("\n"));
}

/// The scan catches each phrase, as a phrase: planted residue is found, BPE's merges are not.
#[test]
fn the_residue_scan_finds_planted_phrases_and_spares_the_maths() {
    let planted = "Measured at the Last Merge; the closing note of that session says so. \
        Against the issue's goals (issue 9), with the former threshold. Other issues.";
    let found = residue(planted);
    assert_eq!(found.len(), 7, "{found:#?}");
    let making = "The machine of these pages (AMD EPYC Zen 3): no CPU with AVX512-BF16 was \
        available for this version. More than this machine's 32 MB L3; timed on this machine. \
        The goals were 2× and 3×: both are met, its goal is not met, the third is met.";
    let found = residue(making);
    assert_eq!(found.len(), 9, "{found:#?}");
    let names =
        function_names(concat!("fn ", "every_size_of_the_issue_is_refused() {}\nfn ok() {}"));
    assert_eq!(names, ["every size of the issue is refused", "ok"]);
    assert_eq!(residue(&names[0]).len(), 1);
    let maths = "BPE merges the most frequent pair; the last merges learned are rare; \
        a merge table, the merge rule, sessile, tissue.";
    assert!(residue(maths).is_empty(), "{:?}", residue(maths));
}
