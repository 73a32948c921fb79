//! Helpers shared by the chapter tests: snapshots in the top-level folder, prose checks, the
//! replay of the committed fuzz corpora.
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

/// The repository's root folder (the main crate's manifest folder). It lives here and not in
/// `tests/fuzz/harness.rs` because the fuzz crate compiles that file too, and there
/// `CARGO_MANIFEST_DIR` is `tests/fuzz`.
pub fn repo_root() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The value of `row` in `table` of a runs file the main job writes (`table,row,…,value` lines,
/// the value last): the measured runs a chapter's page tables are held to.
pub fn runs_value(csv: &str, table: &str, row: &str) -> f64 {
    csv.lines()
        .filter_map(|l| l.split_once(',').and_then(|(t, rest)| Some((t, rest.rsplit_once(',')?))))
        .find(|(t, (r, _))| *t == table && *r == row)
        .unwrap_or_else(|| panic!("no {table} {row} in the runs file"))
        .1
        .1
        .parse()
        .expect("a number")
}

/// The rows of the Markdown table of `page` whose header line starts with `header`, split into
/// trimmed cells.
pub fn page_table(page: &str, header: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = page.lines().collect();
    let at = lines.iter().position(|l| l.starts_with(header)).expect("the table's header");
    lines[at + 2..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim().trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

/// The prose of a chapter, read from `chapters/<stem>.md`.
pub fn prose(stem: &str) -> String {
    let path = repo_root().join("chapters").join(format!("{stem}.md"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Replays every file of `tests/fuzz/corpus/<target>/` through `run` (one of the targets in
/// `tests/fuzz/harness.rs`) and fails naming each file that panics. Fails too when the folder is
/// missing or holds fewer than `at_least` files, so a lost corpus cannot pass unnoticed. Returns
/// the number of files replayed.
pub fn replay_fuzz_corpus(target: &str, at_least: usize, run: fn(&[u8])) -> usize {
    let dir = repo_root().join("tests").join("fuzz").join("corpus").join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!("{}: {e} (the committed fuzz corpus is missing)", dir.display())
    });
    let mut files: Vec<std::path::PathBuf> =
        entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
    files.sort();
    assert!(
        files.len() >= at_least,
        "{} holds {} files, fewer than the {at_least} committed",
        dir.display(),
        files.len()
    );
    let mut panics = Vec::new();
    for f in &files {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        if std::panic::catch_unwind(|| run(&data)).is_err() {
            panics.push(f.display().to_string());
        }
    }
    assert!(
        panics.is_empty(),
        "{} of {} corpus files panic: {panics:?}",
        panics.len(),
        files.len()
    );
    files.len()
}

/// What the hand-run `write_fuzz_seeds` tests write with: a function taking (target, file name,
/// bytes) that writes into `$FUZZ_SEEDS_OUT/<target>/<file name>`, never into the source tree by
/// itself. Panics when `FUZZ_SEEDS_OUT` is not set.
pub fn fuzz_seed_writer() -> impl Fn(&str, &str, &[u8]) {
    let out =
        std::path::PathBuf::from(std::env::var("FUZZ_SEEDS_OUT").expect("set FUZZ_SEEDS_OUT"));
    move |target, name, bytes| {
        std::fs::create_dir_all(out.join(target))
            .unwrap_or_else(|e| panic!("{}: {e}", out.join(target).display()));
        std::fs::write(out.join(target).join(name), bytes)
            .unwrap_or_else(|e| panic!("{}/{target}/{name}: {e}", out.display()));
    }
}

/// Asserts that the chapter's prose carries exactly the errata table and worked-number table the
/// code produces (between `<!-- errata:begin/end -->` and `<!-- worked:begin/end -->`), and that
/// no worked row is an unexplained mismatch.
pub fn check_chapter_prose(chapter: &llm_workbook::report::Chapter) {
    use llm_workbook::report::{Status, prose_block, worked_block};
    let md = prose(chapter.stem);
    let errata = llm_workbook::errata::markdown_table(chapter.errata);
    let in_prose = prose_block(&md, "errata")
        .unwrap_or_else(|| panic!("{}.md has no errata block", chapter.stem));
    assert_eq!(
        in_prose,
        errata.trim(),
        "the errata table in chapters/{}.md differs from the register; \
         paste this between the markers:\n{errata}",
        chapter.stem
    );
    let rows = (chapter.worked)().expect("worked examples compute");
    for r in &rows {
        assert_ne!(r.status, Status::Mismatch, "unexplained mismatch: {r:?}");
        if matches!(r.status, Status::Erratum | Status::Notation | Status::Simplification) {
            // The register row may be another chapter's (one mistake, printed once, that two
            // chapters compute).
            let test = format!("tests/{}.rs::{}", chapter.stem, r.test);
            assert!(
                llm_workbook::book::errata_register()
                    .iter()
                    .any(|(_, e)| e.tests.contains(&test.as_str())),
                "worked row {} is an erratum but no register row names its test",
                r.test
            );
        }
    }
    let table = worked_block(&rows);
    let in_prose = prose_block(&md, "worked")
        .unwrap_or_else(|| panic!("{}.md has no worked block", chapter.stem));
    assert_eq!(
        in_prose,
        table.trim(),
        "the worked-number table in chapters/{}.md is stale; \
         paste this between the markers:\n{table}",
        chapter.stem
    );
}

/// A fresh temporary folder `llm-workbook-PID-NAME` under the system's temporary folder (tests
/// never write into the source tree), removed with everything in it when the guard is dropped:
/// at the end of the test that made it, whether it passed or panicked (a panic unwinds through
/// the guard). It reads as a `Path` (`dir.join(…)`, `&dir`).
#[derive(Debug)]
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// The folder.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The prefix of every temporary folder this test process makes ([`temp_dir`]).
pub fn temp_prefix() -> String {
    format!("llm-workbook-{}-", std::process::id())
}

/// A fresh temporary folder (see [`TempDir`]), removed when the guard is dropped. The first call
/// of a process also removes the folders of test processes that ended without dropping theirs
/// (killed, or a folder held by a static): `llm-workbook-PID-…` whose PID no longer runs.
pub fn temp_dir(name: &str) -> TempDir {
    static SWEPT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    SWEPT.get_or_init(sweep_ended_processes);
    let dir = std::env::temp_dir().join(format!("{}{name}", temp_prefix()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    TempDir(dir)
}

/// Everything a chapter's walk prints, as text.
pub fn walk_text(chapter: &llm_workbook::report::Chapter) -> String {
    let mut buf = Vec::new();
    let mut walk = llm_workbook::report::Walk::new(&mut buf);
    (chapter.walk)(&mut walk).expect("the walk runs");
    String::from_utf8(buf).expect("the walk prints UTF-8")
}

/// Draws a chapter's plots into a fresh temporary folder and asserts that it wrote `expected`
/// files, none of them nearly empty (a PNG or SVG under 1 kB has lost its content). The folder
/// goes when the check is done.
pub fn render_plots(chapter: &llm_workbook::report::Chapter, expected: usize) {
    let dir = temp_dir(&format!("{}-plots", chapter.stem));
    let files = (chapter.plots)(&dir).expect("the plots render");
    assert_eq!(files.len(), expected, "{} wrote {files:?}", chapter.stem);
    for f in &files {
        let len = std::fs::metadata(f).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "{} is only {len} bytes", f.display());
    }
}

/// Removes `llm-workbook-PID-…` folders of the temporary folder whose process has ended (Linux,
/// where `/proc` says which run; elsewhere nothing is removed).
fn sweep_ended_processes() {
    let proc = std::path::Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix("llm-workbook-").and_then(|rest| rest.split_once('-'));
        let Some(pid) = pid.and_then(|(pid, _)| pid.parse::<u32>().ok()) else { continue };
        if pid != std::process::id() && !proc.join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The widest line the program may print, in terminal columns.
pub const TERMINAL_COLUMNS: usize = 100;

/// Asserts that every line of `text` (a message of the binary run on files in [`temp_dir`]s)
/// fits in [`TERMINAL_COLUMNS`] as a user sees it: the temporary folder's absolute prefix
/// (`/tmp/llm-workbook-PID-NAME/`) stands for the folder a user works in, and is left out, as
/// the relative paths a user types would be. `what` names the case in the failure.
pub fn assert_fits_as_a_user_sees_it(text: &str, what: &str) {
    let prefix = format!("{}/llm-workbook-", std::env::temp_dir().display());
    for line in text.lines() {
        let mut shown = line.to_string();
        while let Some(at) = shown.find(&prefix) {
            let rest = &shown[at + prefix.len()..];
            let end = rest.find('/').map_or(shown.len(), |e| at + prefix.len() + e + 1);
            shown.replace_range(at..end, "");
        }
        let columns = shown.chars().count();
        assert!(
            columns <= TERMINAL_COLUMNS,
            "{what}: {columns} columns as a user sees it: {shown}"
        );
    }
}

/// Set in a child process started by [`in_child_process`]: the test it runs then does its part
/// and prints what it found on a line starting with [`CHILD_LINE`].
pub const CHILD_ENV: &str = "LLM_WORKBOOK_TEST_CHILD";

/// What a child process prints before its findings, on one line.
pub const CHILD_LINE: &str = "child found: ";

/// Whether this process is a child started by [`in_child_process`].
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Runs the test `name` (its full path, `module::test`) of this test binary again, alone, in a
/// child process whose environment adds `env` and [`CHILD_ENV`], and returns what it printed
/// after [`CHILD_LINE`]. What a process reads once from its environment (`LLM_WORKBOOK_KERNEL`,
/// `LLM_WORKBOOK_THREADS`, `LLM_WORKBOOK_BACKEND`) or sets for all its threads
/// ([`llm_workbook::book::compute_on_the_portable_kernel`]) is tested this way, as a user sets
/// it, without touching the tests running beside it. Panics, with the child's output, when the
/// child fails or prints no such line.
pub fn in_child_process(name: &str, env: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .envs(env.iter().copied())
        .output()
        .expect("the test binary starts again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The harness writes the test's name first on the same line.
    let found = stdout.lines().find_map(|l| l.split_once(CHILD_LINE).map(|(_, found)| found));
    match found {
        Some(line) if out.status.success() => line.to_string(),
        _ => panic!(
            "{name} in a child process with {env:?}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Set in the children of [`same_bits_under_every_kernel`] that make the main job's choice.
const PORTABLE_ENV: &str = "LLM_WORKBOOK_TEST_PORTABLE";

/// In a child process of [`same_bits_under_every_kernel`]: makes the main job's choice of the
/// portable kernel ([`llm_workbook::book::compute_on_the_portable_kernel`]) when the parent asks.
pub fn child_chooses_as_the_main_job() {
    if std::env::var_os(PORTABLE_ENV).is_some() {
        llm_workbook::book::compute_on_the_portable_kernel().unwrap();
    }
}

/// Runs the test `name` in a child process under every kernel the CPU runs
/// (`LLM_WORKBOOK_KERNEL`, as a user sets it), each making the main job's choice
/// ([`child_chooses_as_the_main_job`]), and asserts that they all find what the portable kernel
/// finds; and that a SIMD kernel left alone finds something else (what would change a figure
/// from one CPU to the next). `what` names the computation in the messages.
pub fn same_bits_under_every_kernel(name: &str, what: &str) {
    use llm_workbook::simd::{KERNEL_ENV, Kernel, available_kernels};
    let run = |kernel: Kernel, portable: bool| {
        let mut env = vec![(KERNEL_ENV, kernel.name())];
        if portable {
            env.push((PORTABLE_ENV, "1"));
        }
        in_child_process(name, &env)
    };
    let portable = run(Kernel::Scalar, false);
    assert!(portable.matches(',').count() >= 6, "{what}: only {portable}");
    for kernel in available_kernels() {
        assert_eq!(run(kernel, true), portable, "{what} under {kernel}");
    }
    if let Some(simd) = available_kernels().into_iter().find(|k| *k != Kernel::Scalar) {
        assert_ne!(run(simd, false), portable, "{what}: {simd} rounds as the portable kernel does");
    }
}
