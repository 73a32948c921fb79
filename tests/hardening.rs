//! The workshop and the command line against careful and hostile use: every file of a
//! checkpoint read within the memory budget, the lock file (a symbolic link, a hard link, a
//! lock file of many lines, a folder removed under a starting writer), an output among another
//! checkpoint's generations, damaged stored models, folders that are no checkpoint, and every
//! message these provoke within 100 columns. The binary runs in a temporary folder with
//! relative paths, as a user types them, so its lines are measured as a user sees them.
//! `cargo test --test hardening`.

mod common;

use llm_workbook::workshop::folder::{self, LOCK_FILE, Lock};
use std::path::Path;
use std::process::Output;

/// The widest line a message may take, in terminal columns.
const WIDTH: usize = 100;

/// The tiny model every test trains: it saves in a moment.
const TINY: [&str; 12] = [
    "--layers",
    "1",
    "--heads",
    "2",
    "--width",
    "16",
    "--batch",
    "4",
    "--context",
    "16",
    "--steps",
    "2",
];

/// The binary run in `dir` with `args` (and a memory budget of 4 GB unless one is given).
fn cli(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_llm-workbook"))
        .current_dir(dir)
        .args(args)
        .env("LLM_WORKBOOK_MEMORY_BUDGET", "4000000000")
        .output()
        .expect("the binary runs")
}

/// Asserts that `o` failed with status 1 and one line on stderr that holds every needle and
/// fits in [`WIDTH`] columns; returns the line. Every refusal below goes through it, so every
/// message these tests provoke is measured.
fn refused(o: &Output, needles: &[&str], what: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    for n in needles {
        assert!(err.contains(n), "{what}: {err:?} lacks {n:?}");
    }
    fits(&err, what);
    err.trim_end().to_string()
}

/// Asserts that every line of `text` fits in [`WIDTH`] terminal columns.
fn fits(text: &str, what: &str) {
    for line in text.lines() {
        let columns = line.chars().count();
        assert!(columns <= WIDTH, "{what}: {columns} columns: {line}");
    }
}

/// A text and a checkpoint `ck` trained on it, in `dir`.
fn trained(dir: &Path) {
    std::fs::write(
        dir.join("t.txt"),
        "the cat sat on the mat. the dog sat on the log. ".repeat(20),
    )
    .unwrap();
    let mut args = vec!["gpt", "train", "--data", "t.txt", "--out", "ck"];
    args.extend(TINY);
    let o = cli(dir, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The generation folder of `ck` in `dir`.
fn current(dir: &Path) -> std::path::PathBuf {
    folder::resolve(&dir.join("ck")).unwrap().path
}

// ───── 1. every file of a checkpoint read within the budget ─────

#[test]
fn every_file_of_a_checkpoint_is_measured_against_the_budget_before_it_is_read() {
    let dir = common::temp_dir("hardening_budget");
    trained(&dir);
    let here = current(&dir);
    let budget = ["--memory-budget", "100000000"];
    let quantize = [&["gpt", "quantize", "--checkpoint", "ck", "--to", "int8", "--out", "q"][..]];
    let resume = [&["gpt", "resume", "--checkpoint", "ck", "--steps", "5"][..]];
    let sample = [&["gpt", "sample", "--checkpoint", "ck", "--prompt", "the"][..]];
    // 300 MB each (sparse: no disk is used), 600 MB to hold: more than the budget of 100 MB.
    for (file, commands) in [
        ("config.json", [quantize, resume, sample].concat()),
        ("train.json", [resume, sample].concat()),
        ("tokenizer_chars.txt", [quantize, resume, sample].concat()),
    ] {
        let path = here.join(file);
        let kept = std::fs::read(&path).unwrap();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(300_000_000).unwrap();
        for command in commands {
            let args = [command, &budget[..]].concat();
            let what = format!("{file}: {args:?}");
            refused(&cli(&dir, &args), &[file, "300000000 bytes", "--memory-budget"], &what);
        }
        std::fs::write(&path, kept).unwrap();
    }
    assert!(!dir.join("q").exists(), "nothing was written");
    // The chapter's own reader bounds config.json too.
    let path = here.join("config.json");
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(300_000_000).unwrap();
    let e = llm_workbook::ch09_gpt::checkpoint::read_config(&here).unwrap_err().to_string();
    assert!(e.contains("config.json") && e.contains("1048576 bytes"), "{e}");
}

// ───── 3. a folder removed under a starting writer ─────

#[test]
fn a_folder_removed_between_its_making_and_its_lock_is_made_again() {
    let dir = common::temp_dir("hardening_vanishing");
    let ck = dir.join("new").join("ck");
    // Another writer made the folder and, its run failing, removed it again: between our making
    // the folder and opening the lock in it.
    let mut removed = 0;
    let lock = Lock::take_with(&ck, "gpt train", &mut |made| {
        if removed == 0 {
            std::fs::remove_dir_all(made.parent().unwrap()).unwrap();
        }
        removed += 1;
    })
    .unwrap_or_else(|e| panic!("the folder was made again: {e}"));
    assert_eq!(removed, 2, "one more attempt");
    assert!(ck.join(LOCK_FILE).is_file());
    drop(lock);
    assert!(!dir.join("new").exists(), "the folders it made go with it, empty");
    // A folder that keeps going away: one line naming the lock file.
    let e = Lock::take_with(&ck, "gpt train", &mut |made| {
        std::fs::remove_dir_all(made).unwrap();
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains(&format!("ck/{LOCK_FILE}")) && !e.contains('\n'), "{e}");
}

// ───── 4. an output among another checkpoint's generations ─────

#[test]
fn an_output_among_another_checkpoints_generations_is_refused() {
    let dir = common::temp_dir("hardening_inside");
    trained(&dir);
    let before = current(&dir);
    for out in ["ck/gen-000099", "ck/gen-000099/q", "ck/.gen-000005.tmp-1", "./ck/../ck/gen-000100"]
    {
        let args = ["gpt", "quantize", "--checkpoint", "ck", "--to", "q4", "--out", out];
        refused(&cli(&dir, &args), &["--out", out, "ck", "next save"], out);
        let mut args = vec!["gpt", "train", "--data", "t.txt", "--out", out];
        args.extend(TINY);
        refused(&cli(&dir, &args), &["--out", out, "next save"], out);
    }
    assert_eq!(folder::foreign_entries(&dir.join("ck")), Vec::<String>::new());
    assert_eq!(current(&dir), before, "the checkpoint is as it was");
    // Beside it, not inside: written.
    let args = ["gpt", "quantize", "--checkpoint", "ck", "--to", "q4", "--out", "ck-q4"];
    let o = cli(&dir, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

// ───── 5. a lock file that is not a plain file of its own ─────

#[test]
fn a_lock_file_that_is_a_link_is_refused_and_what_it_names_is_kept() {
    let dir = common::temp_dir("hardening_link");
    trained(&dir);
    let victim = dir.join("victim.txt");
    let notes = "my own notes, never to be overwritten\n";
    let lock = dir.join("ck").join(LOCK_FILE);
    let resume = ["gpt", "resume", "--checkpoint", "ck", "--steps", "5"];
    #[cfg(unix)]
    {
        std::fs::write(&victim, notes).unwrap();
        std::os::unix::fs::symlink("../victim.txt", &lock).unwrap();
        refused(&cli(&dir, &resume), &["ck/LOCK", "symbolic link", "remove it"], "symlink");
        let e = Lock::take(&dir.join("ck"), "gpt train").unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), notes, "the target is kept");
        // A link to nothing: the lock would be created at its target.
        std::fs::remove_file(&victim).unwrap();
        refused(&cli(&dir, &resume), &["ck/LOCK", "symbolic link"], "dangling symlink");
        assert!(!victim.exists(), "nothing created through the link");
        std::fs::remove_file(&lock).unwrap();
    }
    // A hard link to the user's file, a folder: not a plain file of its own.
    std::fs::write(&victim, notes).unwrap();
    std::fs::hard_link(&victim, &lock).unwrap();
    refused(&cli(&dir, &resume), &["ck/LOCK", "not a plain file of its own"], "hard link");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), notes, "the linked file is kept");
    std::fs::remove_file(&lock).unwrap();
    std::fs::create_dir(&lock).unwrap();
    refused(&cli(&dir, &resume), &["ck/LOCK", "not a plain file"], "a folder");
    std::fs::remove_dir(&lock).unwrap();
    let o = cli(&dir, &resume);
    assert!(o.status.success(), "a plain lock again: {}", String::from_utf8_lossy(&o.stderr));
}

// ───── 6. a refused writer quotes a process id or nothing ─────

#[test]
fn a_refused_writer_quotes_a_process_id_or_nothing_of_the_lock_file() {
    let dir = common::temp_dir("hardening_holder");
    let ck = dir.join("ck");
    let held = Lock::take(&ck, "gpt train").unwrap();
    let lock = ck.join(LOCK_FILE);
    let digits = "7".repeat(1 << 20);
    for (inside, said) in [
        ("4242\n", "process 4242"),
        ("4242\n5353\n", "another process"),
        (digits.as_str(), "another process"),
        ("not a number", "another process"),
    ] {
        std::fs::write(&lock, inside).unwrap();
        let e = Lock::take(&ck, "gpt resume").unwrap_err().to_string();
        assert!(e.contains(said) && !e.contains('\n'), "{inside:.20}: {e}");
        assert!(e.len() < 300, "{inside:.20}: {} bytes quoted", e.len());
        // The binary says it in one line of at most 100 columns.
        let o = cli(&dir, &["gpt", "resume", "--checkpoint", "ck", "--steps", "5"]);
        refused(&o, &[said, "is being written by"], &format!("{inside:.20}"));
    }
    drop(held);
}

// ───── small items: damaged stored models, folders that are no checkpoint, help ─────

/// `tensor`'s bytes in a safetensors file's `bytes`: (begin, end) from the start of the file.
fn span(bytes: &[u8], tensor: &str) -> (usize, usize) {
    use llm_workbook::ch09_gpt::safetensors::SafeTensors;
    let f = SafeTensors::parse(bytes.to_vec(), "model.safetensors").unwrap();
    let header = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let t = f.info(tensor).unwrap();
    (header + t.begin, header + t.end)
}

#[test]
fn damaged_stored_models_are_refused_naming_the_file_and_the_tensor() {
    let dir = common::temp_dir("hardening_stored");
    trained(&dir);
    let quantize = ["gpt", "quantize", "--checkpoint", "ck", "--to", "int8", "--out", "q"];
    let o = cli(&dir, &quantize);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = folder::resolve(&dir.join("q")).unwrap().path.join("model.safetensors");
    let good = std::fs::read(&file).unwrap();
    let sample = ["gpt", "sample", "--checkpoint", "q", "--prompt", "the", "--tokens", "3"];
    let tensor = "h.0.attn.c_attn.weight";
    // The int8 code −128 (byte 0x80): the storage is symmetric, −127 … 127, as 4-bit's −7 … 7.
    let mut bad = good.clone();
    bad[span(&good, tensor).0] = 0x80;
    std::fs::write(&file, &bad).unwrap();
    refused(&cli(&dir, &sample), &[tensor, "−128", "−127 … 127", "model.safetensors"], "−128");
    // Finite scales of 10³⁰: the weights are finite, what they compute is not.
    let (begin, end) = span(&good, &format!("{tensor}.scales"));
    let mut bad = good.clone();
    for at in (begin..end).step_by(4) {
        bad[at..at + 4].copy_from_slice(&1e30f32.to_le_bytes());
    }
    std::fs::write(&file, &bad).unwrap();
    let e = refused(&cli(&dir, &sample), &["model.safetensors", tensor, "NaN or ±∞"], "1e30");
    assert!(!e.contains("FusedStep"), "{e}");
    std::fs::write(&file, &good).unwrap();
    let o = cli(&dir, &sample);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A quantized model is not resumed, in one line of at most 100 columns.
    let resume = ["gpt", "resume", "--checkpoint", "q", "--steps", "5"];
    refused(&cli(&dir, &resume), &["int8", "gpt quantize", "sampling only"], "resume q");
}

#[test]
fn a_folder_that_is_no_checkpoint_is_told_from_one_whose_first_save_stopped() {
    let dir = common::temp_dir("hardening_no_checkpoint");
    std::fs::create_dir_all(dir.join("notes")).unwrap();
    std::fs::write(dir.join("notes").join("todo.txt"), "buy milk").unwrap();
    // A gpt quantize killed inside its first save leaves its temporary generation.
    let partial = dir.join("q").join(".gen-000001.tmp-12345");
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::write(partial.join("model.safetensors"), "cut sh").unwrap();
    for (folder, said) in [
        ("notes", "not a checkpoint folder"),
        ("q", "no complete checkpoint (a run stopped before its first save); run it again"),
    ] {
        for args in [
            vec!["gpt", "sample", "--checkpoint", folder],
            vec!["gpt", "resume", "--checkpoint", folder, "--steps", "5"],
            vec!["gpt", "quantize", "--checkpoint", folder, "--to", "q4", "--out", "x"],
        ] {
            let e = refused(&cli(&dir, &args), &[folder, said], &format!("{args:?}"));
            assert!(!e.contains("train into it again"), "{e}");
        }
    }
    assert_eq!(std::fs::read_to_string(dir.join("notes").join("todo.txt")).unwrap(), "buy milk");
}

#[test]
fn the_help_names_every_gpt_command_once() {
    let dir = common::temp_dir("hardening_help");
    let o = cli(&dir, &["--help"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("`quantize`"), "{text}");
    fits(&text, "--help");
    let o = cli(&dir, &["gpt", "quantize", "--help"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("bf16:") && !text.contains("bf16: bf16"), "{text}");
    fits(&text, "gpt quantize --help");
}

#[test]
fn a_prompt_outside_the_vocabulary_is_named_in_one_line() {
    let dir = common::temp_dir("hardening_prompt");
    trained(&dir);
    let o = cli(&dir, &["gpt", "sample", "--checkpoint", "ck", "--prompt", "the Zebra"]);
    refused(&o, &["--prompt", "'Z'"], "a character the text never had");
}

// ───── tests leave no folder behind ─────

/// Set in the child that [`every_temporary_folder_goes_with_its_test`] runs: its one test makes
/// a folder and fails.
const FAIL_VARIABLE: &str = "LLM_WORKBOOK_TEST_FAILS_ON_PURPOSE";

#[test]
fn a_test_that_fails_on_purpose_when_asked() {
    let dir = common::temp_dir("hardening_failing");
    std::fs::write(dir.join("left.txt"), "a file in the folder").unwrap();
    assert!(std::env::var_os(FAIL_VARIABLE).is_none(), "failing on purpose");
}

/// Runs tests of this file in a child process with a temporary folder of its own, two that pass
/// (one runs the binary) and one that fails on purpose, and compares that folder before and
/// after: empty both times.
#[test]
fn every_temporary_folder_goes_with_its_test() {
    let dir = common::temp_dir("hardening_tmp");
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let listing = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert!(listing(&tmp).is_empty());
    for (test, passes) in [
        ("a_test_that_fails_on_purpose_when_asked", false),
        ("a_folder_that_is_no_checkpoint_is_told_from_one_whose_first_save_stopped", true),
        ("a_folder_removed_between_its_making_and_its_lock_is_made_again", true),
    ] {
        let o = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--test-threads=1"])
            .env("TMPDIR", &tmp)
            .env(FAIL_VARIABLE, "1")
            .output()
            .unwrap();
        assert_eq!(o.status.success(), passes, "{test}: {}", String::from_utf8_lossy(&o.stdout));
        assert!(String::from_utf8_lossy(&o.stdout).contains("1 passed") == passes);
        assert_eq!(listing(&tmp), Vec::<String>::new(), "{test} left these behind");
    }
}
