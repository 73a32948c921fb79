//! `exercises`: the reader's progress through the workbook's exercises (`exercises/`), judged by
//! that crate's judge targets (the binary cannot depend on the exercises crate: a reader's
//! half-written answer must never break the main build).
//!
//! How one round of judging goes:
//!
//! 1. The exercises crate's table of exercises (`EXERCISES`: each chapter's stem and its
//!    exercises in the order of its answer file) comes from its `listing` target
//!    (`exercises/tests/listing.rs`), compiled with `cargo test --no-run --test listing` and run:
//!    it prints one line `stem<TAB>name` per exercise (the exercises crate's `results` module
//!    documents the line). That target includes no answers, so it compiles whatever state they
//!    are in; the runner never reads the crate's source.
//! 2. `cargo test --no-run --message-format=json` compiles every chapter's judge target
//!    (`exercises/tests/chNN_stem.rs`, which includes that chapter's answers) and goes on past a
//!    chapter that does not compile: that chapter's rows (from the table) say "does not compile"
//!    and the table quotes the compiler's first error; every other chapter is judged.
//! 3. Each exercise runs as its own process (`binary --exact name`), as many at once as there are
//!    cores, each with a time limit ([`TIME_LIMIT_SECONDS`]), so an answer that never returns,
//!    aborts, overflows its stack or ends the program marks that exercise only.
//! 4. Each judge appends its verdict to a file the runner names (the exercises crate's
//!    `results` module documents the line: `name<TAB>state<TAB>message`, escaped); the runner
//!    reads those lines, never the test harness's human output.
//!
//! Rows come in the table's order, which the exercises crate's tests hold to the order the
//! functions appear in `exercises/src/chNN_stem.rs`, and every line printed fits in [`WIDTH`]
//! columns. `--watch` re-judges whenever a file under `exercises/src` is saved, polling
//! modification times once a second.
//!
//! Two environment variables serve the runner's own tests and slow machines:
//! `LLM_WORKBOOK_EXERCISES_DIR` judges another copy of the exercises crate, and
//! `LLM_WORKBOOK_EXERCISE_SECONDS` changes the time limit.

use serde_json::Value;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// The widest line the runner prints, in terminal columns.
pub const WIDTH: usize = 100;

/// Seconds one exercise's judge may run before it is stopped and shown as timed out. The slowest
/// judge (the gradient checks of chapter 9, unoptimised) takes a few seconds.
pub const TIME_LIMIT_SECONDS: u64 = 30;

/// The environment variable naming another exercises crate to judge (default: `exercises/` of
/// this checkout).
const DIR_VAR: &str = "LLM_WORKBOOK_EXERCISES_DIR";

/// The environment variable that overrides [`TIME_LIMIT_SECONDS`].
const SECONDS_VAR: &str = "LLM_WORKBOOK_EXERCISE_SECONDS";

/// The exercises crate's target that prints its table of exercises, one `stem<TAB>name` line
/// per exercise.
const LISTING: &str = "listing";

/// The environment variable through which the judges learn where to append their verdicts (the
/// exercises crate's `results::RESULTS_FILE`).
const RESULTS_VAR: &str = "LLM_WORKBOOK_EXERCISE_RESULTS";

/// How often a running judge is checked for having finished.
const POLL: Duration = Duration::from_millis(20);

/// One exercise's state.
#[derive(Clone, Debug, PartialEq)]
enum State {
    Passed,
    /// The judge's message.
    Failed(String),
    /// The judge's message (the body is still `todo!()`).
    NotStarted(String),
    /// The chapter's first compiler error, `file:line:column: message`.
    DoesNotCompile(String),
    /// Stopped after this many seconds without a verdict.
    TimedOut(u64),
    /// The process ended without a verdict: a short label for the table and what happened.
    Ended {
        label: String,
        what: String,
    },
}

impl State {
    /// The status column of the table.
    fn label(&self) -> String {
        match self {
            State::Passed => "✓".to_string(),
            State::Failed(_) => "✗".to_string(),
            State::NotStarted(_) => "not started".to_string(),
            State::DoesNotCompile(_) => "does not compile".to_string(),
            State::TimedOut(s) => format!("timed out after {s} s"),
            State::Ended { label, .. } => label.clone(),
        }
    }

    /// What to tell the reader about it, below the "Next:" line.
    fn message(&self) -> String {
        match self {
            State::Passed => String::new(),
            State::Failed(m) | State::NotStarted(m) => m.clone(),
            State::DoesNotCompile(e) => format!("the chapter does not compile: {e}"),
            State::TimedOut(s) => format!(
                "your answer did not return within {s} s and was stopped: a loop that never ends? \
                 (set {SECONDS_VAR} to allow more time)"
            ),
            State::Ended { what, .. } => what.clone(),
        }
    }
}

/// One exercise: its chapter's stem (`ch06_attention`), its name and its state.
#[derive(Clone, Debug)]
struct Row {
    chapter: String,
    name: String,
    state: State,
}

/// One chapter of the exercises crate's table: its stem and its exercises in the table's order.
#[derive(Clone, Debug, PartialEq)]
struct Chapter {
    stem: String,
    exercises: Vec<String>,
}

/// The exercises crate to judge.
fn exercises_dir() -> PathBuf {
    match std::env::var_os(DIR_VAR) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("exercises"),
    }
}

/// The time limit of one exercise, from [`SECONDS_VAR`] or [`TIME_LIMIT_SECONDS`].
fn time_limit() -> Result<u64, String> {
    match std::env::var(SECONDS_VAR) {
        Err(_) => Ok(TIME_LIMIT_SECONDS),
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(s) if s > 0 => Ok(s),
            _ => Err(format!("{SECONDS_VAR} must be a whole number of seconds ≥ 1, not {text:?}")),
        },
    }
}

/// Whether `s` may name a chapter or an exercise: a Rust identifier in lower case (it names a
/// cargo target, a test and a scratch file).
fn is_name(s: &str) -> bool {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    s.starts_with(|c: char| c.is_ascii_lowercase()) && s.chars().all(allowed)
}

/// `message` cut to fit one line of [`WIDTH`] columns after `error: `, ending in `…` if cut.
fn within_a_line(message: String) -> String {
    let room = WIDTH - "error: ".len();
    if message.chars().count() <= room {
        return message;
    }
    let mut cut: String = message.chars().take(room - 1).collect();
    cut.push('…');
    cut
}

/// Where the table comes from, as its errors name it.
const TABLE_FILE: &str = "exercises/tests/listing.rs";

/// The chapters of the `listing` target's output (`stem<TAB>name` lines), in its order.
fn read_table(text: &str) -> Result<Vec<Chapter>, String> {
    let mut out: Vec<Chapter> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = i + 1;
        let fields = line.split_once('\t').filter(|(s, n)| is_name(s) && is_name(n));
        let Some((stem, name)) = fields else {
            let quoted = format!("{line:?}");
            let shown: String = quoted.chars().take(24).collect();
            let cut = if shown.len() < quoted.len() { "…" } else { "" };
            return Err(format!("{TABLE_FILE} line {at}: {shown}{cut} is not `stem<TAB>name`"));
        };
        let twice = |what: &str| format!("{TABLE_FILE} line {at}: {what} listed twice");
        match out.last_mut() {
            Some(last) if last.stem == stem => {
                if last.exercises.iter().any(|n| n == name) {
                    return Err(twice(&format!("{stem}'s {name}")));
                }
                last.exercises.push(name.to_string());
            }
            _ => {
                if out.iter().any(|c| c.stem == stem) {
                    return Err(twice(&format!("chapter {stem}")));
                }
                out.push(Chapter { stem: stem.to_string(), exercises: vec![name.to_string()] });
            }
        }
    }
    if out.is_empty() {
        return Err(format!("{TABLE_FILE} printed no exercise"));
    }
    Ok(out)
}

/// The exercises crate's table of exercises: its `listing` target compiled and run.
fn chapters(dir: &Path) -> Result<Vec<Chapter>, String> {
    let build = compile_round(dir, &[LISTING.to_string()])?;
    let Some(binary) = build.binaries.get(LISTING) else {
        let error = build.errors.get(LISTING).map_or("cargo built no binary for it", |e| e);
        return Err(format!("the exercises crate's `{LISTING}` does not compile: {error}"));
    };
    let out = Command::new(binary)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {TABLE_FILE}'s program: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let said = stderr.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("no message");
        return Err(within_a_line(format!("{TABLE_FILE} failed ({}): {said}", out.status)));
    }
    read_table(&String::from_utf8_lossy(&out.stdout))
}

/// What compiling the judge targets gave: each chapter's test binary, or its first error.
#[derive(Debug, Default)]
struct Build {
    binaries: HashMap<String, PathBuf>,
    errors: HashMap<String, String>,
}

/// `path` with `.` and `..` removed without touching the file system.
fn normalized(path: &Path) -> PathBuf {
    let mut clean = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                clean.pop();
            }
            other => clean.push(other),
        }
    }
    clean
}

/// A compiler's file name (relative to the folder cargo ran it in: the exercises crate, or the
/// workspace above it) shown from the exercises crate's parent: `exercises/src/ch06_attention.rs`.
fn shown_path(path: &str, dir: &Path) -> String {
    let found = dir.ancestors().map(|a| normalized(&a.join(path))).find(|p| p.is_file());
    let full = found.unwrap_or_else(|| normalized(&dir.join(path)));
    let base = dir.parent().unwrap_or(dir);
    full.strip_prefix(base).unwrap_or(&full).display().to_string()
}

/// The first error of one `compiler-message` line of cargo's JSON output, as
/// `file:line:column: message`, with the target it belongs to.
fn first_error(msg: &Value, dir: &Path) -> Option<(String, String)> {
    let target = msg["target"]["name"].as_str()?.to_string();
    let message = &msg["message"];
    if message["level"].as_str()? != "error" {
        return None;
    }
    let text = message["message"].as_str()?;
    let spans = message["spans"].as_array();
    let primary = spans.and_then(|s| s.iter().find(|s| s["is_primary"].as_bool() == Some(true)));
    let place = primary.map(|s| {
        format!(
            "{}:{}:{}: ",
            shown_path(s["file_name"].as_str().unwrap_or("?"), dir),
            s["line_start"],
            s["column_start"]
        )
    });
    Some((target, format!("{}{text}", place.unwrap_or_default())))
}

/// Reads cargo's JSON messages: test executables and each target's first error.
fn read_build(json: &str, dir: &Path) -> Build {
    let mut build = Build::default();
    for line in json.lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else { continue };
        match msg["reason"].as_str() {
            Some("compiler-artifact") => {
                let kinds = msg["target"]["kind"].as_array();
                let is_test = kinds.is_some_and(|k| k.iter().any(|k| k == "test"));
                if let (true, Some(name), Some(exe)) =
                    (is_test, msg["target"]["name"].as_str(), msg["executable"].as_str())
                {
                    build.binaries.insert(name.to_string(), PathBuf::from(exe));
                }
            }
            Some("compiler-message") => {
                if let Some((target, error)) = first_error(&msg, dir) {
                    build.errors.entry(target).or_insert(error);
                }
            }
            _ => {}
        }
    }
    build
}

/// Compiles the judge targets of `stems`; a target that fails does not stop the others: cargo
/// stops starting new targets after an error, so the targets it left unbuilt are compiled again
/// (one more round per chapter that does not compile, at most).
fn compile(dir: &Path, stems: &[String]) -> Result<Build, String> {
    let mut build = Build::default();
    let mut left: Vec<String> = stems.to_vec();
    while !left.is_empty() {
        let round = compile_round(dir, &left)?;
        let before = left.len();
        build.binaries.extend(round.binaries);
        build.errors.extend(round.errors);
        left.retain(|s| !build.binaries.contains_key(s) && !build.errors.contains_key(s));
        if left.len() == before {
            break;
        }
    }
    Ok(build)
}

/// One `cargo test --no-run` over the judge targets of `stems`.
fn compile_round(dir: &Path, stems: &[String]) -> Result<Build, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = dir.join("Cargo.toml");
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(dir)
        .args(["test", "--no-run", "--no-fail-fast", "--message-format=json", "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TERM_COLOR", "never")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for stem in stems {
        cmd.args(["--test", stem]);
    }
    let mut child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("cannot judge: {cargo} is not on the PATH; put it there, or set CARGO to it")
        } else {
            format!("cannot judge: running {cargo} failed ({e}); set CARGO to a cargo that runs")
        }
    })?;
    // Read stderr on its own thread so that neither pipe can fill up and stall cargo.
    let mut stderr = child.stderr.take().ok_or("cannot read cargo's messages")?;
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut json = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut json).map_err(|e| format!("reading cargo's output: {e}"))?;
    }
    child.wait().map_err(|e| format!("waiting for cargo: {e}"))?;
    let stderr = errors.join().unwrap_or_default();
    let build = read_build(&json, dir);
    // The judges themselves (the library) not compiling stops every chapter: say so once.
    let lib = build.errors.iter().find(|(target, _)| !stems.contains(target));
    if let Some((target, error)) = lib {
        return Err(format!("the exercises crate's `{target}` does not compile: {error}"));
    }
    if build.binaries.is_empty() && build.errors.is_empty() {
        // Cargo's own first error line says what to fix (one line: the rest is its detail),
        // or, where it gives causes ("failed to parse manifest", then "Caused by:"), the last.
        let mut lines = stderr.lines().map(str::trim);
        let first = lines.clone().find(|l| l.starts_with("error")).or(lines.next_back());
        let cause = stderr
            .rsplit_once("Caused by:")
            .and_then(|(_, c)| c.lines().map(str::trim).find(|l| !l.is_empty()));
        let said = cause.or(first).unwrap_or("no message").trim_start_matches("error: ");
        return Err(within_a_line(format!("cargo could not build the judges: {said}")));
    }
    Ok(build)
}

/// Undoes the escaping of a message field (`\\`, `\t`, `\n`).
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// The state recorded for exercise `name` in a results file's text, if its line is there.
fn recorded(text: &str, name: &str) -> Option<State> {
    for line in text.lines() {
        let mut fields = line.splitn(3, '\t');
        if fields.next() != Some(name) {
            continue;
        }
        let state = fields.next().unwrap_or_default();
        let message = unescape(fields.next().unwrap_or_default());
        return Some(match state {
            "passed" => State::Passed,
            "not started" => State::NotStarted(message),
            _ => State::Failed(message),
        });
    }
    None
}

/// A signal's name and what it means for an answer, in words a student understands.
fn signal_words(signal: i32) -> (String, String) {
    let (label, what) = match signal {
        6 => ("aborted", "aborted the program (std::process::abort, or a panic inside a panic)"),
        9 => ("killed", "was killed (SIGKILL: did it use up the memory?)"),
        11 => ("crashed", "crashed with a segmentation fault (SIGSEGV)"),
        4 => ("crashed", "crashed on an illegal instruction (SIGILL)"),
        7 => ("crashed", "crashed with a bus error (SIGBUS)"),
        8 => ("crashed", "crashed with an arithmetic fault (SIGFPE)"),
        _ => return (format!("signal {signal}"), format!("was stopped by signal {signal}")),
    };
    (label.to_string(), what.to_string())
}

/// What an exercise's process ending without a verdict means: its exit status and the end of
/// what it wrote to stderr.
fn ended(status: ExitStatus, stderr: &str) -> State {
    let (label, what) = if stderr.contains("has overflowed its stack") {
        (
            "stack overflow".to_string(),
            "overflowed its stack (a recursion that never reaches its base case?)".to_string(),
        )
    } else if let Some(code) = status.code() {
        (
            format!("exited (code {code})"),
            format!(
                "ended the whole program with exit code {code} before the judge could finish \
                 (std::process::exit inside the answer?)"
            ),
        )
    } else {
        signal_words(signal_of(status))
    };
    State::Ended { label, what: format!("your answer {what}; the judge gave no verdict") }
}

#[cfg(unix)]
fn signal_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.signal().unwrap_or(0)
}

#[cfg(not(unix))]
fn signal_of(_: ExitStatus) -> i32 {
    0
}

/// Judges one exercise in its own process: `binary --exact name`, stopped after `limit`.
/// `scratch` is a fresh folder for its results and stderr files.
fn judge_one(binary: &Path, name: &str, dir: &Path, scratch: &Path, limit: u64) -> State {
    let results = scratch.join(format!("{name}.results"));
    let stderr_path = scratch.join(format!("{name}.stderr"));
    let stderr = match std::fs::File::create(&stderr_path) {
        Ok(f) => f,
        Err(e) => return State::Failed(format!("cannot create {}: {e}", stderr_path.display())),
    };
    let spawned = Command::new(binary)
        .args(["--exact", name, "--test-threads=1"])
        .current_dir(dir)
        .env(RESULTS_VAR, &results)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return State::Failed(format!("cannot run {}: {e}", binary.display())),
    };
    let deadline = Instant::now() + Duration::from_secs(limit);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            _ => {
                stop_with_descendants(&mut child);
                break None;
            }
        }
    };
    let text = std::fs::read_to_string(&results).unwrap_or_default();
    if let Some(state) = recorded(&text, name) {
        return state;
    }
    match status {
        None => State::TimedOut(limit),
        Some(status) => ended(status, &stderr_tail(&stderr_path)),
    }
}

/// The last bytes of an answer's stderr the runner reads: the runtime's last words (a stack
/// overflow's message) are at its end, and an answer may have printed without end before them.
const STDERR_TAIL_BYTES: u64 = 64 * 1024;

/// The end of the file at `path` (at most [`STDERR_TAIL_BYTES`]) as text, bytes that are not
/// UTF-8 replaced: an answer may write any bytes to stderr before its stack overflows.
fn stderr_tail(path: &Path) -> String {
    use std::io::{Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else { return String::new() };
    let len = file.metadata().map_or(0, |m| m.len());
    let mut bytes = Vec::new();
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(STDERR_TAIL_BYTES)));
    let _ = file.take(STDERR_TAIL_BYTES).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Stops an exercise's process `child` and every process it started (an answer may spawn
/// children, which would outlive the time limit): on Linux the descendants are found in `/proc`
/// while `child` still runs, then all are killed. Elsewhere only `child` is.
fn stop_with_descendants(child: &mut std::process::Child) {
    let family = descendants(child.id());
    let _ = child.kill();
    let _ = child.wait();
    #[cfg(unix)]
    for pid in family {
        if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    #[cfg(not(unix))]
    let _ = family;
}

/// The process ids of `root`'s descendants, read from `/proc/PID/stat` (its children, theirs, …);
/// none where there is no `/proc`.
fn descendants(root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (name) state ppid …`: the name may hold spaces and parentheses.
        let after = &stat[stat.rfind(')')? + 1..];
        after.split_whitespace().nth(1)?.parse().ok()
    };
    let links: Vec<(u32, u32)> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut family = vec![root];
    let mut at = 0;
    while at < family.len() {
        let parent = family[at];
        family.extend(links.iter().filter(|l| l.1 == parent).map(|l| l.0));
        at += 1;
    }
    family.remove(0);
    family
}

/// A fresh scratch folder under the system's temporary folder; an error naming `TMPDIR` when it
/// cannot be made there.
fn scratch_dir() -> Result<PathBuf, String> {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let temp = std::env::temp_dir();
    let dir =
        temp.join(format!("llm-workbook-exercises-{}-{}", std::process::id(), nanos.as_nanos()));
    std::fs::create_dir_all(&dir).map_err(|e| {
        let e = e.to_string();
        let e = e.split(" (os error").next().unwrap_or(&e);
        format!(
            "cannot judge: no scratch folder in {} ({e}); set TMPDIR to a folder",
            temp.display()
        )
    })?;
    Ok(dir)
}

/// Judges every exercise of the exercises crate's table and returns the rows in its order.
fn judge_all(dir: &Path, limit: u64) -> Result<Vec<Row>, String> {
    // The scratch folder first: a TMPDIR that cannot hold one is said before the long compile.
    let scratch = scratch_dir()?;
    let compiled = chapters(dir).and_then(|chapters| {
        let stems: Vec<String> = chapters.iter().map(|c| c.stem.clone()).collect();
        Ok((compile(dir, &stems)?, chapters))
    });
    let (build, chapters) = compiled.inspect_err(|_| {
        let _ = std::fs::remove_dir_all(&scratch);
    })?;
    let mut rows = Vec::new();
    let mut jobs = Vec::new(); // (row index, binary, chapter's scratch folder)
    for ch in &chapters {
        let folder = scratch.join(&ch.stem);
        std::fs::create_dir_all(&folder)
            .map_err(|e| format!("cannot create {}: {e}", folder.display()))?;
        for name in &ch.exercises {
            let state = match (build.binaries.get(&ch.stem), build.errors.get(&ch.stem)) {
                (Some(binary), _) => {
                    jobs.push((rows.len(), binary.clone(), folder.clone()));
                    State::Passed // replaced below
                }
                (None, Some(error)) => State::DoesNotCompile(error.clone()),
                (None, None) => State::DoesNotCompile("cargo built no judge for it".to_string()),
            };
            rows.push(Row { chapter: ch.stem.clone(), name: name.clone(), state });
        }
    }
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len());
    let queue = Mutex::new(jobs.into_iter());
    let done = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let job = queue.lock().map(|mut q| q.next()).unwrap_or(None);
                    let Some((index, binary, folder)) = job else { break };
                    let name = &rows[index].name;
                    let state = judge_one(&binary, name, dir, &folder, limit);
                    if let Ok(mut d) = done.lock() {
                        d.push((index, state));
                    }
                }
            });
        }
    });
    for (index, state) in done.into_inner().unwrap_or_default() {
        rows[index].state = state;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(rows)
}

/// `text` broken into lines of at most `width` terminal columns by the main crate's
/// [`llm_workbook::report::wrap`], the first line keeping `text`'s leading spaces and every line
/// after it starting with `indent` (narrower than `width`).
fn wrap(text: &str, indent: &str, width: usize) -> Vec<String> {
    let body = text.trim_start_matches(' ');
    let lead = &text[..text.len() - body.len()];
    let room = width.saturating_sub(lead.len().max(indent.chars().count()));
    let lines = llm_workbook::report::wrap(body, room);
    let starts = std::iter::once(lead).chain(std::iter::repeat(indent));
    lines.into_iter().zip(starts).map(|(line, start)| format!("{start}{line}")).collect()
}

/// The progress table, the counts and the next exercise with its judge's message, every line at
/// most [`WIDTH`] columns.
fn table(rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    let chapter_w = rows.iter().map(|r| r.chapter.chars().count()).max().unwrap_or(7).max(7);
    let name_w = rows.iter().map(|r| r.name.chars().count()).max().unwrap_or(8).max(8);
    out.push(format!("  {:<chapter_w$}  {:<name_w$}  status", "chapter", "exercise"));
    let mut previous = "";
    for r in rows {
        let chapter = if r.chapter == previous { "" } else { &r.chapter };
        previous = &r.chapter;
        out.push(format!("  {chapter:<chapter_w$}  {:<name_w$}  {}", r.name, r.state.label()));
    }
    let count = |f: fn(&State) -> bool| rows.iter().filter(|r| f(&r.state)).count();
    let done = count(|s| *s == State::Passed);
    let blank = count(|s| matches!(s, State::NotStarted(_)));
    let broken = count(|s| matches!(s, State::DoesNotCompile(_)));
    let failing = rows.len() - done - blank - broken;
    let mut summary =
        format!("{done} of {} done, {failing} failing, {blank} not started", rows.len());
    if broken > 0 {
        summary.push_str(&format!(", {broken} in a chapter that does not compile"));
    }
    out.push(String::new());
    out.push(format!("{summary}."));
    // Every chapter that does not compile, with its first error.
    let mut seen = Vec::new();
    for r in rows {
        if let State::DoesNotCompile(e) = &r.state
            && !seen.contains(&&r.chapter)
        {
            seen.push(&r.chapter);
            out.extend(wrap(&format!("{} does not compile: {e}", r.chapter), "    ", WIDTH));
        }
    }
    // Something you were working on first (in the files' order), else the first not started.
    let working = rows.iter().find(|r| !matches!(r.state, State::Passed | State::NotStarted(_)));
    match working.or_else(|| rows.iter().find(|r| r.state != State::Passed)) {
        None => out.push("Every exercise passes its judge. Well done.".to_string()),
        Some(r) => {
            out.push(String::new());
            out.push(format!("Next: {} in exercises/src/{}.rs", r.name, r.chapter));
            out.push(format!(
                "  (judge its chapter alone: cargo test -p llm-workbook-exercises --test {})",
                r.chapter
            ));
            for line in r.state.message().lines() {
                let indent = " ".repeat(2 + line.chars().take_while(|c| *c == ' ').count());
                out.extend(wrap(&format!("  {line}"), &indent, WIDTH));
            }
        }
    }
    out
}

/// Judges every exercise once and prints the table; an error (one line: what to fix) when the
/// exercises cannot be judged at all (no cargo, no scratch folder, judges that do not compile).
fn judge_once(dir: &Path, limit: u64) -> Result<(), String> {
    println!("Compiling the judges (the first time takes a few minutes), then judging …");
    let rows = judge_all(dir, limit)?;
    for line in table(&rows) {
        println!("{line}");
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
    let limit = time_limit()?;
    if !watch {
        return judge_once(&dir, limit);
    }
    // Watching, a round that cannot judge is said on stderr and the next save judges again.
    let judge = || {
        if let Err(e) = judge_once(&dir, limit) {
            eprintln!("error: {e}");
        }
    };
    judge();
    let src = dir.join("src");
    let mut seen = latest_change(&src);
    println!("\nWatching exercises/src (save a file to judge again; Ctrl-C to stop).");
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = latest_change(&src);
        if now != seen {
            seen = now;
            println!("\n──────── a file changed: judging again ────────\n");
            judge();
            println!("\nWatching exercises/src (Ctrl-C to stop).");
        }
    }
}
