//! `exercises`: the reader's progress through the workbook's exercises (`exercises/`), judged by
//! running that crate's tests (the binary cannot depend on the exercises crate: a reader's
//! half-written answer must never break the main build). `--watch` re-judges whenever a file
//! under `exercises/src` is saved, polling modification times once a second.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// One exercise's state.
#[derive(Clone, Debug, PartialEq)]
enum State {
    Passed,
    Failed(String),
    NotStarted(String),
}

/// One exercise: its chapter's stem (`ch06_attention`), its name and its state.
struct Row {
    chapter: String,
    name: String,
    state: State,
}

/// The exercises folder of this checkout.
fn exercises_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("exercises")
}

/// The chapters' judge targets (`exercises/tests/chNN_*.rs`) in order, each with its exercises in
/// the order its `exercise!(…)` line lists them.
fn chapters(dir: &Path) -> Result<Vec<(String, Vec<String>)>, String> {
    let tests = dir.join("tests");
    let entries = std::fs::read_dir(&tests).map_err(|e| format!("{}: {e}", tests.display()))?;
    let mut stems: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("ch") && n.ends_with(".rs"))
        .map(|n| n.trim_end_matches(".rs").to_string())
        .collect();
    stems.sort();
    let mut out = Vec::new();
    for stem in stems {
        let path = tests.join(format!("{stem}.rs"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let names = text
            .split_once("\nexercise!(")
            .and_then(|(_, rest)| rest.split_once(");"))
            .map(|(list, _)| {
                list.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect()
            })
            .unwrap_or_default();
        out.push((stem, names));
    }
    Ok(out)
}

/// Runs the chapters' judge targets, stdout and stderr through one pipe so cargo's
/// "Running tests/chNN_….rs" lines stay in order with the tests' results.
fn run_judges(stems: &[String]) -> Result<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["test", "-p", "llm-workbook-exercises", "--no-fail-fast"])
        .env("RUST_BACKTRACE", "0")
        .env("CARGO_TERM_COLOR", "never");
    for stem in stems {
        cmd.args(["--test", stem]);
    }
    let (mut reader, writer) = std::io::pipe().map_err(|e| format!("cannot make a pipe: {e}"))?;
    let writer2 = writer.try_clone().map_err(|e| format!("cannot make a pipe: {e}"))?;
    cmd.stdout(writer).stderr(writer2);
    let mut child = cmd.spawn().map_err(|e| format!("cannot run cargo: {e}"))?;
    drop(cmd); // closes our copies of the pipe's write end
    let mut text = String::new();
    reader.read_to_string(&mut text).map_err(|e| format!("reading cargo's output: {e}"))?;
    child.wait().map_err(|e| format!("waiting for cargo: {e}"))?;
    Ok(text)
}

/// The state of every exercise from cargo's output, or the compiler's errors when the exercises
/// do not compile.
fn parse(text: &str, chapters: &[(String, Vec<String>)]) -> Result<Vec<Row>, String> {
    let mut results: HashMap<(String, String), bool> = HashMap::new();
    let mut messages: HashMap<(String, String), String> = HashMap::new();
    let mut current = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Running tests/") {
            current = rest.split(".rs").next().unwrap_or_default().to_string();
        } else if let Some(rest) = t.strip_prefix("test ") {
            if let Some((name, verdict)) = rest.split_once(" ... ") {
                results.insert((current.clone(), name.to_string()), verdict.starts_with("ok"));
            }
        } else if let Some(name) =
            t.strip_prefix("---- ").and_then(|r| r.strip_suffix(" stdout ----"))
        {
            // The judge's message is the last panic of the test: an answer that panics inside
            // the judge prints its own panic first.
            let mut message = Vec::new();
            let mut collecting = false;
            while let Some(next) = lines.peek() {
                if next.starts_with("---- ") || next.starts_with("failures:") {
                    break;
                }
                let next = lines.next().unwrap_or_default();
                if next.starts_with("thread ") {
                    message.clear();
                    collecting = true;
                } else if next.is_empty()
                    || next.starts_with("note: ")
                    || next.starts_with("stack backtrace")
                {
                    collecting = false;
                } else if collecting {
                    message.push(next);
                }
            }
            messages.insert((current.clone(), name.to_string()), message.join("\n"));
        }
    }
    if results.is_empty() {
        let errors: Vec<&str> =
            text.lines().skip_while(|l| !l.starts_with("error")).take(40).collect();
        let shown = if errors.is_empty() { text.to_string() } else { errors.join("\n") };
        return Err(format!(
            "the exercises do not compile; fix this first:\n\n{}",
            shown.trim_end()
        ));
    }
    let mut rows = Vec::new();
    for (stem, names) in chapters {
        for name in names {
            let key = (stem.clone(), name.clone());
            let message = messages.get(&key).cloned().unwrap_or_default();
            let state = match results.get(&key) {
                Some(true) => State::Passed,
                _ if message.starts_with("not started") => State::NotStarted(message),
                Some(false) => State::Failed(message),
                None => State::Failed(
                    "the judge did not run (see `cargo test -p \
                                       llm-workbook-exercises`)"
                        .to_string(),
                ),
            };
            rows.push(Row { chapter: stem.clone(), name: name.clone(), state });
        }
    }
    Ok(rows)
}

/// Prints the progress table, the counts and the next exercise with its judge's message.
fn print_table(rows: &[Row]) {
    let width = rows.iter().map(|r| r.name.chars().count()).max().unwrap_or(8).max(8);
    println!("  {:<20}  {:<width$}  status", "chapter", "exercise");
    for r in rows {
        let status = match r.state {
            State::Passed => "✓",
            State::Failed(_) => "✗",
            State::NotStarted(_) => "not started",
        };
        println!("  {:<20}  {:<width$}  {status}", r.chapter, r.name);
    }
    let count = |f: fn(&State) -> bool| rows.iter().filter(|r| f(&r.state)).count();
    let done = count(|s| *s == State::Passed);
    let failing = count(|s| matches!(s, State::Failed(_)));
    println!(
        "\n{done} of {} done, {failing} failing, {} not started.",
        rows.len(),
        rows.len() - done - failing
    );
    // A failing answer first (you were working on it), else the first not started.
    let failing = rows.iter().find(|r| matches!(r.state, State::Failed(_)));
    match failing.or_else(|| rows.iter().find(|r| r.state != State::Passed)) {
        None => println!("Every exercise passes its judge. Well done."),
        Some(r) => {
            let command = format!("cargo test -p llm-workbook-exercises --test {}", r.chapter);
            println!("\nNext: {} in exercises/src/{}.rs ({command})", r.name, r.chapter);
            if let State::Failed(m) | State::NotStarted(m) = &r.state {
                for line in m.lines() {
                    println!("  {line}");
                }
            }
        }
    }
}

/// Judges every exercise once and prints the table.
fn judge_once(dir: &Path) -> Result<(), String> {
    let chapters = chapters(dir)?;
    let stems: Vec<String> = chapters.iter().map(|(s, _)| s.clone()).collect();
    let text = run_judges(&stems)?;
    match parse(&text, &chapters) {
        Ok(rows) => print_table(&rows),
        Err(e) => println!("{e}"),
    }
    Ok(())
}

/// The latest modification time of any file under `dir`.
fn latest_change(dir: &Path) -> Option<SystemTime> {
    let mut latest = None;
    for entry in std::fs::read_dir(dir).ok()?.filter_map(|e| e.ok()) {
        let path = entry.path();
        let t = if path.is_dir() {
            latest_change(&path)
        } else {
            entry.metadata().ok().and_then(|m| m.modified().ok())
        };
        latest = latest.max(t);
    }
    latest
}

/// `exercises [--watch]`.
pub fn run(watch: bool) -> Result<(), String> {
    let dir = exercises_dir();
    if !dir.join("Cargo.toml").is_file() {
        return Err(format!("no exercises crate at {}", dir.display()));
    }
    judge_once(&dir)?;
    if !watch {
        return Ok(());
    }
    let src = dir.join("src");
    let mut seen = latest_change(&src);
    println!("\nWatching {} (save a file to re-judge; Ctrl-C to stop).", src.display());
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = latest_change(&src);
        if now != seen {
            seen = now;
            println!("\n──────── a file changed: judging again ────────\n");
            judge_once(&dir)?;
            println!("\nWatching {} (Ctrl-C to stop).", src.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_shown_is_the_judges_not_an_earlier_panic_inside_the_answer() {
        let text = "     Running tests/ch09_gpt.rs (target/debug/deps/ch09_gpt-0)\n\
                    test kv_cache_step ... FAILED\n\
                    failures:\n\n\
                    ---- kv_cache_step stdout ----\n\n\
                    thread 'kv_cache_step' (1) panicked at nalgebra/src/base/view.rs:310:9:\n\
                    Matrix slicing out of bounds.\n\n\
                    thread 'kv_cache_step' (1) panicked at exercises/tests/ch09_gpt.rs:18:1:\n\
                    your `kv_cache_step` panicked: Matrix slicing out of bounds.\n  \
                    hint: read chapters/ch09_gpt.md#5-sampling\n\
                    note: run with `RUST_BACKTRACE=1`\n\n\
                    failures:\n    kv_cache_step\n";
        let chapters = vec![("ch09_gpt".to_string(), vec!["kv_cache_step".to_string()])];
        let rows = parse(text, &chapters).expect("parses");
        match &rows[0].state {
            State::Failed(m) => assert_eq!(
                m,
                "your `kv_cache_step` panicked: Matrix slicing out of bounds.\n  hint: read \
                 chapters/ch09_gpt.md#5-sampling"
            ),
            other => panic!("expected a failure, got {other:?}"),
        }
    }
}
