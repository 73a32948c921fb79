//! The `exercises` progress table, tried on a small exercises crate written into a temporary
//! folder (never the reader's `exercises/`): one chapter with a syntax error, and in another
//! chapter an answer that loops forever, one that aborts, one that calls `std::process::exit`, one
//! that overflows its stack, a wrong one, a right one and a blank. Its judges record their
//! verdicts, and its `listing` target prints its table of exercises, with the exercises crate's
//! own `results` module and `exercise!` harness, so the table is read exactly as a reader's
//! would be. The binary runs once; every test reads its output.
//! `cargo test --test exercises_runner`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The time limit the table is judged with, in seconds (the looping answer waits this long).
const LIMIT_SECONDS: u64 = 2;

/// The widest line the runner may print.
const WIDTH: usize = 100;

/// The probe crate's judges: each exercise must return 42.
const JUDGES: &str = r#"
pub type Verdict = Result<(), String>;
pub const NOT_STARTED: &str = "not started";

/// A message as the judge target prints it (the exercises crate wraps it; the runner reads the
/// recorded verdict, not this).
pub fn printed(message: &str) -> String {
    message.to_string()
}

/// Every exercise's judge: the answer must return 42.
pub fn forty_two(name: &str, answer: fn() -> u32) -> Verdict {
    std::panic::set_hook(Box::new(|_| {}));
    match std::panic::catch_unwind(answer) {
        Ok(42) => Ok(()),
        Ok(v) => Err(format!(
            "`{name}` returned {v} but should return 42: {}\n  hint: read chapters/ch01.md#1",
            "the answer is off by one, which a long explanation spells out word after word \
             until the line is far wider than a terminal"
        )),
        Err(_) => Err(format!("{NOT_STARTED}: `{name}` still has `todo!()` as its body")),
    }
}

macro_rules! judges {
    ($chapter:ident: $($name:ident),*) => {
        pub mod $chapter {
            $(pub fn $name(answer: fn() -> u32) -> super::Verdict {
                super::forty_two(stringify!($name), answer)
            })*
        }
    };
}
judges!(ch01: right, wrong, looping, aborting, exiting, overflowing, garbled, spawning, blank);
judges!(ch02: one, two);
judges!(ch03: solo);
"#;

/// Chapter 1's answers, in the order the table must show them.
const CH01: &str = r#"
pub fn right() -> u32 { 42 }
pub fn wrong() -> u32 { 41 }
pub fn looping() -> u32 { loop { std::hint::black_box(0); } }
pub fn aborting() -> u32 { std::process::abort() }
pub fn exiting() -> u32 { std::process::exit(3) }
pub fn overflowing() -> u32 { deeper(std::hint::black_box(1)) }
fn deeper(n: u64) -> u32 { let pad = std::hint::black_box([n; 64]); deeper(pad[3] + 1) + 1 }
pub fn garbled() -> u32 {
    use std::io::Write;
    let _ = std::io::stderr().write_all(&[0xff, 0xfe, b'\n']);
    deeper(std::hint::black_box(1))
}
pub fn spawning() -> u32 {
    let child = std::process::Command::new("sleep").arg("600").spawn().unwrap();
    let file = std::env::var("PROBE_CHILD_FILE").unwrap();
    std::fs::write(file, child.id().to_string()).unwrap();
    loop { std::hint::black_box(0); }
}
pub fn blank() -> u32 { todo!() }
"#;

/// Chapter 2's answers, with a syntax error on line 3.
const CH02: &str = "pub fn one() -> u32 { 42 }\n\npub fn two() -> u32 { 42 +* }\n";

/// Chapter 3's answer, right: a chapter after the broken one is judged.
const CH03: &str = "pub fn solo() -> u32 { 42 }\n";

/// The probe crate's table of exercises, in the order of the answer files (the exercises crate's
/// `EXERCISES`).
const TABLE: &str = r#"
pub const EXERCISES: &[results::Chapter] = &[
    results::Chapter {
        stem: "ch01_alpha",
        exercises: &[
            "right", "wrong", "looping", "aborting", "exiting", "overflowing", "garbled",
            "spawning", "blank",
        ],
    },
    results::Chapter { stem: "ch02_beta", exercises: &["one", "two"] },
    results::Chapter { stem: "ch03_gamma", exercises: &["solo"] },
];
"#;

/// The `listing` target, as the exercises crate writes it.
const LISTING: &str = r#"
fn main() -> std::process::ExitCode {
    runner_probe::results::print_table(runner_probe::EXERCISES)
}
"#;

/// A judge target as the exercises crate writes them, listing `names` in the harness.
fn target(stem: &str, chapter: &str, names: &str) -> String {
    format!(
        "use runner_probe::{{exercise, judge::{chapter} as judge}};\n\n\
         #[path = \"../src/{stem}.rs\"]\nmod yours;\n\nexercise!({names});\n"
    )
}

/// Chapter 3's judge target, its harness under another name and in braces: no text of the
/// source says `exercise!(solo`, so only the crate's table can list `solo`.
const CH03_TARGET: &str = "use runner_probe::{exercise as harness, judge::ch03 as judge};\n\n\
     #[path = \"../src/ch03_gamma.rs\"]\nmod yours;\n\nharness! { solo }\n";

/// Writes the probe crate under `root/exercises` and returns its folder.
fn write_probe(root: &Path) -> PathBuf {
    let dir = root.join("exercises");
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("exercises/src/results.rs");
    let files = [
        (
            "Cargo.toml",
            "[package]\nname = \"runner-probe\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
             [lib]\ndoctest = false\n\n[[test]]\nname = \"listing\"\nharness = false\n\
             test = false\n\n[workspace]\n"
                .to_string(),
        ),
        (
            "src/lib.rs",
            format!(
                "pub mod judge {{\n{JUDGES}\n}}\n#[path = {:?}]\npub mod results;\n{TABLE}",
                results.display().to_string()
            ),
        ),
        ("src/ch01_alpha.rs", CH01.to_string()),
        ("src/ch02_beta.rs", CH02.to_string()),
        ("src/ch03_gamma.rs", CH03.to_string()),
        (
            "tests/ch01_alpha.rs",
            target(
                "ch01_alpha",
                "ch01",
                "right, wrong, looping, aborting, exiting, overflowing, garbled, spawning, blank",
            ),
        ),
        ("tests/ch02_beta.rs", target("ch02_beta", "ch02", "one, two")),
        ("tests/ch03_gamma.rs", CH03_TARGET.to_string()),
        ("tests/listing.rs", LISTING.to_string()),
    ];
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("creates the folder");
        std::fs::write(&path, text).expect("writes the probe crate");
    }
    dir
}

/// What the judged probe left: the table, and the state of the process the `spawning` answer
/// started (read once the table is printed).
struct Judged {
    table: String,
    child: Option<String>,
}

/// The binary's output for the probe crate (judged once for all the tests).
fn judged() -> &'static Judged {
    static OUTPUT: OnceLock<Judged> = OnceLock::new();
    OUTPUT.get_or_init(|| {
        let root = common::temp_dir("runner");
        let dir = write_probe(&root);
        let child_file = root.join("spawned.pid");
        let out = Command::new(env!("CARGO_BIN_EXE_llm-workbook"))
            .arg("exercises")
            .current_dir(&root)
            .env("LLM_WORKBOOK_EXERCISES_DIR", &dir)
            .env("LLM_WORKBOOK_EXERCISE_SECONDS", LIMIT_SECONDS.to_string())
            .env("CARGO_TARGET_DIR", root.join("target"))
            .env("PROBE_CHILD_FILE", &child_file)
            .output()
            .expect("runs the binary");
        let child = std::fs::read_to_string(&child_file).ok().and_then(|pid| {
            // A process killed while it waits on the disk shows `D` (or `R`) until the kernel
            // lets it go; on a loaded machine that can outlast the runner by a moment. Wait for
            // it (up to 5 s): a child left alive sleeps (`S`) all along and is still caught.
            let mut state = process_state(pid.trim())?;
            for _ in 0..50 {
                if state != "D" && state != "R" {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
                state = process_state(pid.trim())?;
            }
            // Never left running, whatever the runner did.
            let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
            Some(state)
        });
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "exercises failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Judged { table: text, child }
    })
}

/// The state letter of process `pid` (`R`, `S`, `Z` …), if it exists and is still the answer's
/// `sleep` (once the runner has stopped it, the number may already name another process, which
/// must be neither read as the answer's child nor killed).
fn process_state(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let command = &stat[stat.find('(')? + 1..stat.rfind(')')?];
    if command != "sleep" {
        return None;
    }
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().next().map(str::to_string)
}

fn table() -> &'static str {
    &judged().table
}

/// The status column of `exercise`'s row.
fn status(exercise: &str) -> String {
    let row = table()
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == exercise) && !l.contains("Next:"))
        .unwrap_or_else(|| panic!("no row for {exercise}:\n{}", table()));
    let at = row.find(&format!(" {exercise} ")).expect("the name") + exercise.len() + 2;
    row[at..].trim().to_string()
}

#[test]
fn every_line_fits_in_100_columns() {
    for line in table().lines() {
        assert!(line.chars().count() <= WIDTH, "{} columns:\n{line}", line.chars().count());
    }
}

/// How many of [`PROBE_ROWS`] are the probe's chapter 1 (the rest are chapters 2 and 3).
const PROBE_CHAPTER_1: usize = 9;

/// The probe crate's exercises in the order of its table of exercises.
const PROBE_ROWS: [&str; 12] = [
    "right",
    "wrong",
    "looping",
    "aborting",
    "exiting",
    "overflowing",
    "garbled",
    "spawning",
    "blank",
    "one",
    "two",
    "solo",
];

#[test]
fn rows_come_in_the_order_of_the_answer_files() {
    let order = PROBE_ROWS;
    let at = |name: &str| {
        table()
            .lines()
            .position(|l| l.split_whitespace().any(|w| w == name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{}", table()))
    };
    for pair in order.windows(2) {
        assert!(at(pair[0]) < at(pair[1]), "{} after {}:\n{}", pair[0], pair[1], table());
    }
}

/// The rows come from the crate's table (its `listing` target), never from the judge targets'
/// or the answers' source: chapter 3's target names its exercise in no form a reading of its text
/// could find, and chapter 2's answers do not compile, yet both chapters have their rows, and
/// the rows are the table's, in its order.
#[test]
fn the_rows_are_the_crates_table_not_read_from_source() {
    assert!(!CH03_TARGET.contains("exercise!"), "the probe's chapter 3 names its harness");
    let mut lines = table().lines().skip_while(|l| !l.trim_start().starts_with("chapter"));
    let header = lines.next().unwrap_or_else(|| panic!("no table header:\n{}", table()));
    let at = header.find("exercise").expect("the exercise column");
    let names: Vec<&str> = lines
        .take_while(|l| !l.is_empty())
        .map(|l| l.get(at..).and_then(|r| r.split_whitespace().next()).unwrap_or_default())
        .collect();
    let listed = PROBE_ROWS;
    assert_eq!(names, listed, "{}", table());
    assert_eq!(status("solo"), "✓", "{}", table());
}

#[test]
fn the_judges_verdicts_are_shown() {
    assert_eq!(status("right"), "✓", "{}", table());
    assert_eq!(status("wrong"), "✗", "{}", table());
    assert_eq!(status("blank"), "not started", "{}", table());
    assert_eq!(status("solo"), "✓", "{}", table());
}

#[test]
fn an_answer_that_never_returns_times_out_alone() {
    assert_eq!(status("looping"), format!("timed out after {LIMIT_SECONDS} s"), "{}", table());
}

/// An answer that starts a process and never returns: stopped at the time limit with every
/// process it started (on Linux, where `/proc` shows them).
#[test]
fn an_answers_own_processes_are_stopped_with_it() {
    assert_eq!(status("spawning"), format!("timed out after {LIMIT_SECONDS} s"), "{}", table());
    if cfg!(target_os = "linux") {
        let state = judged().child.as_deref();
        assert!(matches!(state, None | Some("Z")), "the answer's child lives on: {state:?}");
    }
}

#[test]
fn an_abort_an_exit_and_a_stack_overflow_mark_their_exercise_only() {
    assert_eq!(status("aborting"), "aborted", "{}", table());
    assert_eq!(status("exiting"), "exited (code 3)", "{}", table());
    assert_eq!(status("overflowing"), "stack overflow", "{}", table());
    // An answer that wrote bytes that are not UTF-8 before its stack overflowed.
    assert_eq!(status("garbled"), "stack overflow", "{}", table());
    // The same chapter's other exercises keep their own verdicts, whichever runs first.
    let chapter_1 = &PROBE_ROWS[..PROBE_CHAPTER_1];
    assert_eq!(chapter_1.last(), Some(&"blank"), "chapter 1's rows end with its blank answer");
    for (stop, count) in [("aborted", 1), ("exited (code 3)", 1), ("stack overflow", 2)] {
        let marked: Vec<&str> = chapter_1.iter().copied().filter(|e| status(e) == stop).collect();
        assert_eq!(marked.len(), count, "{stop:?} marks {marked:?}:\n{}", table());
    }
    for (exercise, verdict) in [("right", "✓"), ("wrong", "✗"), ("blank", "not started")] {
        assert_eq!(status(exercise), verdict, "{}", table());
    }
}

#[test]
fn a_chapter_that_does_not_compile_is_named_with_its_first_error() {
    assert_eq!(status("one"), "does not compile", "{}", table());
    assert_eq!(status("two"), "does not compile", "{}", table());
    let said = table().lines().any(|l| {
        l.starts_with("ch02_beta does not compile: exercises/src/ch02_beta.rs:3:")
            && l.contains("expected")
    });
    assert!(said, "no first error for ch02_beta:\n{}", table());
}

#[test]
fn the_counts_and_the_next_exercise_are_the_first_problem_in_order() {
    let text = table();
    assert!(
        text.contains(
            "2 of 12 done, 7 failing, 1 not started, 2 in a chapter that does not compile."
        ),
        "{text}"
    );
    assert!(text.contains("Next: wrong in exercises/src/ch01_alpha.rs"), "{text}");
    assert!(text.contains("  `wrong` returned 41 but should return 42"), "{text}");
}

/// The runner run on a probe crate in a folder of its own, with `setup` changing its command.
fn cannot_judge(name: &str, setup: impl Fn(&mut Command, &Path)) -> std::process::Output {
    let root = common::temp_dir(name);
    let dir = write_probe(&root);
    let mut c = Command::new(env!("CARGO_BIN_EXE_llm-workbook"));
    c.arg("exercises")
        .current_dir(&*root)
        .env("LLM_WORKBOOK_EXERCISES_DIR", &dir)
        .env("CARGO_TARGET_DIR", root.join("target"));
    setup(&mut c, &root);
    c.output().expect("runs the binary")
}

/// Asserts a non-zero status and one line on stderr, within 100 columns, holding every needle.
fn assert_one_line_on_stderr(o: &std::process::Output, needles: &[&str], what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
    assert!(err.lines().all(|l| l.chars().count() <= WIDTH), "{what}: {err}");
    for n in needles {
        assert!(err.contains(n), "{what}: {err:?} lacks {n:?}");
    }
    assert!(!String::from_utf8_lossy(&o.stdout).contains("cannot"), "{what}: said on stdout");
}

#[test]
fn without_cargo_the_runner_fails_in_one_line_naming_the_path() {
    let o = cannot_judge("runner_no_cargo", |c, root| {
        let empty = root.join("empty-bin");
        std::fs::create_dir_all(&empty).unwrap();
        c.env_remove("CARGO").env("PATH", empty);
    });
    assert_one_line_on_stderr(&o, &["cargo", "PATH", "CARGO"], "no cargo");
}

#[test]
fn a_temporary_folder_below_a_file_fails_in_one_line_naming_tmpdir() {
    let o = cannot_judge("runner_tmpdir", |c, root| {
        let file = root.join("a-file");
        std::fs::write(&file, "not a folder").unwrap();
        // Relative to the folder the runner runs in, as a user would type it.
        c.env("TMPDIR", "a-file/tmp");
    });
    assert_one_line_on_stderr(&o, &["TMPDIR", "a-file"], "TMPDIR below a file");
}

/// A table whose `listing` target prints something else than `stem<TAB>name` lines (a name that
/// is not a Rust identifier could name a file outside the runner's scratch folder), or lists a
/// chapter in two places, or nothing: one line naming the table's file and the line.
#[test]
fn a_table_that_is_not_stem_and_name_lines_fails_in_one_line_naming_it() {
    let cases = [
        ("runner_table_path", "ch01_alpha\\tright\\nch01_alpha\\t../escape\\n", "line 2"),
        (
            "runner_table_twice",
            "ch01_alpha\\tright\\nch03_gamma\\tsolo\\nch01_alpha\\twrong\\n",
            "twice",
        ),
        ("runner_table_empty", "", "printed no exercise"),
    ];
    for (name, printed, needle) in cases {
        let o = cannot_judge(name, |_, root| {
            let listing = format!("fn main() {{\n    print!(\"{printed}\");\n}}\n");
            std::fs::write(root.join("exercises/tests/listing.rs"), listing).unwrap();
        });
        assert_one_line_on_stderr(&o, &["exercises/tests/listing.rs", needle], name);
    }
}

/// An exercises crate without its table's program: one line naming the `listing` target.
#[test]
fn an_exercises_crate_without_its_listing_target_fails_in_one_line_naming_it() {
    let o = cannot_judge("runner_no_listing", |_, root| {
        std::fs::remove_file(root.join("exercises/tests/listing.rs")).unwrap();
    });
    assert_one_line_on_stderr(&o, &["cargo could not build the judges", "listing"], "no listing");
}
