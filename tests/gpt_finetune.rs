//! `llm-workbook gpt finetune`: a checkpoint `gpt train` made on prose, fine-tuned on a JSON
//! Lines file of prompts and answers whose characters the prose lacks, in full and through LoRA,
//! then sampled; every kind of bad line refused with its line number; the memory budget, the
//! lock and the folders refused. The binary runs in temporary folders with relative paths, as a
//! user types them. `cargo test --test gpt_finetune`.

mod common;

use llm_workbook::ch08_tokens::Tokenizer;
use llm_workbook::ch08_tokens::chars::CharTokenizer;
use llm_workbook::ch09_gpt::config::Config;
use llm_workbook::ch09_gpt::model::Gpt;
use llm_workbook::workshop::finetune::{
    self as ft, Record, encode_examples, extend_vocabulary, parse_examples,
};
use llm_workbook::workshop::folder::{self, Lock};
use std::path::Path;
use std::process::Output;

/// The widest line a message may take, in terminal columns.
const WIDTH: usize = 100;

/// The binary run in `dir` with `args` and a memory budget of 4 GB.
fn cli(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_llm-workbook"))
        .current_dir(dir)
        .args(args)
        .env("LLM_WORKBOOK_MEMORY_BUDGET", "4000000000")
        .output()
        .expect("the binary runs")
}

/// Asserts that `o` succeeded; returns its standard output.
fn ok(o: &Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{what}: {err}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts that `o` failed with status 1 and one line on stderr of at most [`WIDTH`] columns
/// holding every needle; returns the line.
fn refused(o: &Output, needles: &[&str], what: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    for n in needles {
        assert!(err.contains(n), "{what}: {err:?} lacks {n:?}");
    }
    let columns = err.trim_end().chars().count();
    assert!(columns <= WIDTH, "{what}: {columns} columns: {err}");
    err.trim_end().to_string()
}

/// Prose without a digit, `+` or `=`: what the base model learns.
const PROSE: &str = "the cat sat on the mat. the dog sat on the log. ";

/// A folder holding `t.txt` and `base`, a tiny checkpoint `gpt train` trained on it (with the
/// tokenizer `tokenizer`): one per test, the binary's runs take a moment.
fn base(name: &str, tokenizer: &str) -> common::TempDir {
    let dir = common::temp_dir(name);
    std::fs::write(dir.join("t.txt"), PROSE.repeat(20)).unwrap();
    let mut args = vec!["gpt", "train", "--data", "t.txt", "--out", "base", "--tokenizer"];
    args.extend([tokenizer, "--bpe-vocab", "270"]);
    args.extend(["--layers", "1", "--heads", "2", "--width", "16", "--context", "16"]);
    args.extend(["--batch", "4", "--steps", "2", "--save-every", "0"]);
    ok(&cli(&dir, &args), "gpt train");
    dir
}

/// Additions of one digit, every answer "42": a constant even the tiny model learns in a few
/// dozen steps.
fn constant_answers() -> String {
    (0..10).map(|a| format!("{{\"prompt\": \"{a}+{}=\", \"answer\": \"42\"}}\n", 9 - a)).collect()
}

/// The arguments of a fine-tuning run of `base` on `data.jsonl` into `out`.
fn finetune_args<'a>(out: &'a str, rank: &'a str) -> Vec<&'a str> {
    let mut args = vec!["gpt", "finetune", "--checkpoint", "base", "--data", "data.jsonl"];
    args.extend(["--out", out, "--lora-rank", rank, "--steps", "60", "--batch", "8"]);
    args.extend(["--lr", "1e-2"]);
    args
}

/// What `gpt sample` writes greedily after `prompt` from `ck`, cut at the newline.
fn reply(dir: &Path, ck: &str, prompt: &str) -> String {
    let args = ["gpt", "sample", "--checkpoint", ck, "--greedy", "--tokens", "6"];
    let out = ok(&cli(dir, &[&args[..], &["--stop", "\\n", "--prompt", prompt]].concat()), ck);
    out.trim_end_matches('\n').to_string()
}

#[test]
fn full_fine_tuning_learns_answers_in_characters_the_prose_lacks() {
    let dir = base("finetune_full", "char");
    std::fs::write(dir.join("data.jsonl"), constant_answers()).unwrap();
    // The prose model cannot read the prompt.
    let args = ["gpt", "sample", "--checkpoint", "base", "--prompt", "3+6="];
    refused(&cli(&dir, &args), &["--prompt", "'3'"], "the base lacks digits");
    let out = ok(&cli(&dir, &finetune_args("full", "0")), "gpt finetune");
    assert!(out.contains("gained 13 characters"), "{out}");
    assert!(out.contains("\"\\n+0123456789=\""), "the added characters, in order: {out}");
    // Every reply is the answer, its end marker cut by --stop.
    for prompt in ["3+6=", "0+9="] {
        assert_eq!(reply(&dir, "full", prompt), format!("{prompt}42"), "{out}");
    }
    let here = folder::resolve(&dir.join("full")).unwrap().path;
    let chars = std::fs::read_to_string(here.join("tokenizer_chars.txt")).unwrap();
    assert!(chars.contains('+') && chars.contains('=') && chars.contains('\n'), "{chars:?}");
    let record = std::fs::read_to_string(here.join("finetune.json")).unwrap();
    assert!(record.contains("\"lora_rank\": 0") && record.contains("\"SFT\""), "{record}");
    assert!(!here.join("train.json").exists(), "no training state to resume");
    // Not resumable: refused in one line; fine-tuning it again is the way on.
    let args = ["gpt", "resume", "--checkpoint", "full", "--steps", "9"];
    refused(&cli(&dir, &args), &["--checkpoint", "gpt finetune made it"], "resume");
    // The start is untouched and the new folder is locked by no one.
    assert!(!dir.join("full").join(folder::LOCK_FILE).exists());
}

#[test]
fn lora_fine_tuning_learns_them_too_and_saves_merged_weights() {
    let dir = base("finetune_lora", "char");
    std::fs::write(dir.join("data.jsonl"), constant_answers()).unwrap();
    let out = ok(&cli(&dir, &finetune_args("lora", "4")), "gpt finetune --lora-rank 4");
    assert!(out.contains("LoRA r = 4, α = 4"), "{out}");
    assert_eq!(reply(&dir, "lora", "5+4="), "5+4=42", "{out}");
    let here = folder::resolve(&dir.join("lora")).unwrap().path;
    // Merged: the folder is a plain GPT-2 checkpoint, with no adapter tensors.
    let config = std::fs::read_to_string(here.join("config.json")).unwrap();
    assert!(!config.contains("lora"), "{config}");
    // A rank above the width is refused before any step.
    let mut args = finetune_args("wide", "17");
    args.push("--force");
    refused(&cli(&dir, &args), &["--lora-rank", "width 16"], "rank 17");
}

#[test]
fn a_bpe_checkpoint_spells_the_new_characters_in_bytes() {
    let dir = base("finetune_bpe", "bpe");
    std::fs::write(dir.join("data.jsonl"), constant_answers()).unwrap();
    let before = folder::resolve(&dir.join("base")).unwrap().path;
    let out = ok(&cli(&dir, &finetune_args("tuned", "0")), "gpt finetune on BPE");
    assert!(!out.contains("gained"), "a byte-level BPE needs no new token: {out}");
    let after = folder::resolve(&dir.join("tuned")).unwrap().path;
    for f in ["vocab.json", "merges.txt"] {
        assert_eq!(std::fs::read(before.join(f)).unwrap(), std::fs::read(after.join(f)).unwrap());
    }
    let r = reply(&dir, "tuned", "3+6=");
    assert!(r.starts_with("3+6="), "{r}");
}

/// Bad files, each with the line and the words its refusal must name.
fn bad_files() -> Vec<(&'static str, String, usize, &'static str)> {
    let good = "{\"prompt\": \"1+1=\", \"answer\": \"2\"}\n";
    let dpo = "{\"prompt\": \"1+1=\", \"chosen\": \"2\", \"rejected\": \"3\"}\n";
    let long = format!("{{\"prompt\": \"{}\", \"answer\": \"2\"}}\n", "1".repeat(20));
    let g = |bad: &str| format!("{good}{bad}\n");
    vec![
        ("not JSON", g("{\"prompt\": "), 2, "not JSON"),
        ("not an object", g("[1, 2]"), 2, "not a JSON object"),
        ("no prompt", g("{\"answer\": \"2\"}"), 2, "missing key \"prompt\""),
        ("no answer", g("{\"prompt\": \"1+1=\"}"), 2, "missing key \"answer\""),
        ("unknown key", g("{\"prompt\": \"a\", \"answers\": \"2\"}"), 2, "unknown key \"answers\""),
        ("empty answer", g("{\"prompt\": \"1+1=\", \"answer\": \"\"}"), 2, "empty \"answer\""),
        ("empty prompt", g("{\"prompt\": \"\", \"answer\": \"2\"}"), 2, "empty \"prompt\""),
        ("a number", g("{\"prompt\": \"1+1=\", \"answer\": 2}"), 2, "\"answer\" is not a string"),
        ("mixed kinds", format!("{good}\n{dpo}"), 3, "DPO keys in a file of SFT lines"),
        ("both kinds", g("{\"prompt\": \"a\", \"answer\": \"b\", \"chosen\": \"c\"}"), 2, "mixes"),
        ("end marker", g("{\"prompt\": \"1+1=\", \"answer\": \"2\\n3\"}"), 2, "end marker"),
        (
            "same pair",
            "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"b\"}\n".into(),
            1,
            "same",
        ),
        ("too long", format!("{good}{good}{long}"), 3, "the model's context of 16 takes 17"),
    ]
}

#[test]
fn every_kind_of_bad_line_is_refused_with_its_line_number() {
    let dir = base("finetune_bad_lines", "char");
    for (what, text, line, needle) in bad_files() {
        std::fs::write(dir.join("data.jsonl"), &text).unwrap();
        let at = format!("data.jsonl:{line}:");
        refused(&cli(&dir, &finetune_args("out", "0")), &[&at, needle], what);
        assert!(!folder::holds_checkpoint(&dir.join("out")), "{what}: nothing saved");
    }
    // Bytes that are not UTF-8, on line 2; a file of blank lines holds no example.
    std::fs::write(dir.join("data.jsonl"), b"{\"prompt\": \"a\", \"answer\": \"b\"}\n\xff\n")
        .unwrap();
    refused(&cli(&dir, &finetune_args("out", "0")), &["data.jsonl:2:", "UTF-8"], "bytes");
    std::fs::write(dir.join("data.jsonl"), "\n  \n").unwrap();
    refused(&cli(&dir, &finetune_args("out", "0")), &["data.jsonl:", "no example"], "blank");
}

#[test]
fn the_file_is_measured_against_the_budget_before_it_is_read() {
    let dir = base("finetune_budget", "char");
    // 16 GiB, sparse: reading it would take minutes and the memory; refusing takes nothing.
    let f = std::fs::File::create(dir.join("data.jsonl")).unwrap();
    f.set_len(1 << 34).unwrap();
    let o = cli(&dir, &finetune_args("out", "0"));
    refused(&o, &["data.jsonl", "17179869184 bytes", "--memory-budget", "--data"], "16 GiB");
    // A budget the file fits but the model's step does not.
    std::fs::write(dir.join("data.jsonl"), constant_answers()).unwrap();
    let args = [&finetune_args("out", "0")[..], &["--memory-budget", "60000"]].concat();
    refused(&cli(&dir, &args), &["--memory-budget"], "the model over the budget");
    assert!(!folder::holds_checkpoint(&dir.join("out")), "nothing saved");
}

#[test]
fn the_folders_are_refused_as_gpt_train_refuses_them() {
    let dir = base("finetune_folders", "char");
    std::fs::write(dir.join("data.jsonl"), constant_answers()).unwrap();
    let mut same = finetune_args("base", "0");
    same[3] = "./base";
    refused(&cli(&dir, &same), &["--out", "is the --checkpoint"], "out = checkpoint");
    // Another run's folder, without --force.
    std::fs::create_dir_all(dir.join("other")).unwrap();
    let args = ["gpt", "train", "--data", "t.txt", "--out", "other", "--layers", "1", "--heads"];
    let rest = ["2", "--width", "16", "--context", "16", "--batch", "4", "--steps", "1"];
    ok(&cli(&dir, &[&args[..], &rest[..]].concat()), "another run");
    refused(&cli(&dir, &finetune_args("other", "0")), &["--out", "already holds"], "a run");
    // A folder a writer holds.
    let lock = Lock::take(&dir.join("h"), "test").unwrap();
    refused(&cli(&dir, &finetune_args("h", "0")), &["h/LOCK", "being written"], "locked");
    drop(lock);
    // A checkpoint of stored weights, and a Llama's, are refused naming --checkpoint.
    let q = ["gpt", "quantize", "--checkpoint", "base", "--to", "int8", "--out", "q"];
    ok(&cli(&dir, &q), "quantize");
    let mut args = finetune_args("out", "0");
    args[3] = "q";
    refused(&cli(&dir, &args), &["--checkpoint", "int8"], "stored weights");
    std::fs::create_dir_all(dir.join("llama")).unwrap();
    std::fs::write(dir.join("llama").join("config.json"), "{\"model_type\": \"llama\"}").unwrap();
    args[3] = "llama";
    refused(&cli(&dir, &args), &["--checkpoint", "Llama"], "a Llama");
    assert!(!dir.join("out").exists(), "nothing written, not even the lock's folder");
}

// ───── the library's pieces, each with a planted mistake it catches ─────

fn records(lines: &[(&str, &str)]) -> Vec<Record> {
    let text: String =
        lines.iter().map(|(p, a)| format!("{{\"prompt\": {p:?}, \"answer\": {a:?}}}\n")).collect();
    parse_examples(text.as_bytes(), "f.jsonl", "\n").unwrap().1
}

#[test]
fn extending_the_vocabulary_keeps_every_old_tokens_logits() {
    let tok = CharTokenizer::from_text("abc .").unwrap();
    let config = Config::new(tok.vocab_size(), 8, 1, 2, 8);
    let model = Gpt::<f32>::new(config, 3).unwrap();
    let recs = records(&[("a+b=", "c1")]);
    let added = ft::missing_characters(&tok, &recs);
    assert_eq!(added, vec!['\n', '+', '1', '=']);
    let mut grown = model.clone();
    let (ext, new_ids) = extend_vocabulary(&mut grown, &tok, &added, 1).unwrap();
    assert_eq!(ext.vocab_size(), 9);
    assert_eq!(new_ids.len(), 4);
    // The same text through both: every old token's logit at every position is unchanged, at
    // its new id (the new tokens only add columns).
    let logits = |m: &Gpt<f32>, t: &CharTokenizer| {
        let ids = t.encode("ab c.").unwrap();
        m.logits(&ids, ids.len()).unwrap()
    };
    let (old, new) = (logits(&model, &tok), logits(&grown, &ext));
    let same = |new: &nalgebra::DMatrix<f32>| {
        tok.chars().iter().enumerate().all(|(i, &c)| {
            let j = ext.id(c).unwrap() as usize;
            (0..old.nrows()).all(|r| (old[(r, i)] - new[(r, j)]).abs() < 1e-5)
        })
    };
    assert!(same(&new));
    // Planted: the old rows copied in their old order (not moved to their new ids).
    let mut wrong = grown.clone();
    let old_wte = model.wte().clone();
    if let Some(w) = wrong.params.get_mut(llm_workbook::ch09_gpt::model::Param::Wte, None) {
        for i in 0..old_wte.nrows() {
            w.row_mut(i).copy_from(&old_wte.row(i));
        }
    }
    assert!(!same(&logits(&wrong, &ext)), "the check catches rows left at their old ids");
}

#[test]
fn a_row_scores_the_answer_and_masks_the_prompt() {
    let (inputs, targets) = ft::row(&[1, 2, 3], &[7, 8], 6, 0);
    assert_eq!(inputs, vec![1, 2, 3, 7, 0, 0]);
    assert_eq!(targets, vec![None, None, Some(7), Some(8), None, None]);
    // Planted: every position after the first scored, as an unmasked row would be.
    let unmasked = [None, Some(2), Some(3), Some(7), Some(8), None];
    assert_ne!(targets, unmasked);
    // Too long for the context, by one token: refused naming the file and line.
    let tok = CharTokenizer::from_text("ab=\n").unwrap();
    let recs = records(&[("ab", "ab"), ("abab=abab", "abab=abb")]);
    let e = encode_examples(&tok, &recs, 16, "f.jsonl").unwrap_err().to_string();
    let why = "18 tokens; the model's context of 16 takes 17 (the last a target)";
    assert_eq!(e, format!("f.jsonl:2: {why}"));
    assert!(encode_examples(&tok, &recs[..1], 16, "f.jsonl").is_ok());
    let ok17 = records(&[("abab=abab", "abab=ab")]);
    assert!(encode_examples(&tok, &ok17, 16, "f.jsonl").is_ok(), "16 + 1 tokens fit");
}

#[test]
fn the_end_marker_ends_an_answer_and_shell_escapes_are_read() {
    assert_eq!(ft::unescape("\\n"), "\n");
    assert_eq!(ft::unescape("a\\tb\\\\"), "a\tb\\");
    assert_eq!(ft::unescape("\\q"), "\\q");
    assert!(ft::is_exact("42\n", "42\n17", "\n"));
    assert!(!ft::is_exact("42\n", "421\n", "\n"));
    assert!(!ft::is_exact("42\n", "42", "\n"), "no marker, no answer");
    assert_eq!(ft::cut_at("42\nmore", "\n"), "42");
    let (_, r) = parse_examples(b"{\"prompt\": \"q\", \"answer\": \"a\"}", "f", "<e>").unwrap();
    assert_eq!(r[0].answer, "a<e>");
}

// ───── preference pairs (DPO) ─────

/// Pairs of one-digit additions: chosen the constant "42", rejected "41" (off by one).
fn constant_pairs() -> String {
    (0..10)
        .map(|a| {
            let p = format!("{a}+{}=", 9 - a);
            format!("{{\"prompt\": \"{p}\", \"chosen\": \"42\", \"rejected\": \"41\"}}\n")
        })
        .collect()
}

/// `finetune.json` of the checkpoint folder `ck` in `dir`.
fn record_of(dir: &Path, ck: &str) -> serde_json::Value {
    let here = folder::resolve(&dir.join(ck)).unwrap().path;
    serde_json::from_str(&std::fs::read_to_string(here.join("finetune.json")).unwrap()).unwrap()
}

#[test]
fn dpo_pairs_raise_the_margin_in_full_and_through_lora_and_bad_betas_are_refused() {
    let dir = base("finetune_dpo", "char");
    std::fs::write(dir.join("data.jsonl"), constant_pairs()).unwrap();
    for (out, rank) in [("full", "0"), ("lora", "4")] {
        let text = ok(&cli(&dir, &finetune_args(out, rank)), out);
        assert!(text.contains("DPO, β = 0.1") && text.contains("gained 13"), "{text}");
        let r = record_of(&dir, out);
        assert_eq!(r["mode"], "DPO", "{r}");
        assert_eq!(r["beta"], 0.1, "{r}");
        let p = &r["preferences"];
        let f = |k: &str, i: usize| p[k][i].as_f64().unwrap();
        assert_eq!(p["pairs"], 10, "{r}");
        assert_eq!((f("margin", 0), f("ranked", 0)), (0.0, 0.0), "π = π_ref before: {r}");
        // After: every pair ranked right, the chosen answer's log-ratio raised.
        assert!(f("margin", 1) > 0.1 && f("ranked", 1) == 1.0, "{out}: {r}");
        assert!(f("log_ratio", 1) > f("log_ratio", 0) + 1.0, "{out}: {r}");
        assert!(r["final_loss"].as_f64().unwrap() < std::f64::consts::LN_2, "{out}: {r}");
        // `gpt sample` loads the folder and reads the prompt's new characters.
        assert!(reply(&dir, out, "3+6=").starts_with("3+6="), "{out}");
    }
    // β: not finite or ≤ 0 refused before anything is read; given for an SFT file, refused.
    for bad in ["--beta=0", "--beta=-1", "--beta=nan", "--beta=inf"] {
        let args = [&finetune_args("out", "0")[..], &[bad, "--force"]].concat();
        refused(&cli(&dir, &args), &["--beta", "finite and > 0"], bad);
    }
    // A negative β after a space reaches the same check (not clap's "unexpected argument").
    let args = [&finetune_args("out", "0")[..], &["--beta", "-1", "--force"]].concat();
    refused(&cli(&dir, &args), &["--beta", "finite and > 0"], "--beta -1");
    std::fs::write(dir.join("data.jsonl"), constant_answers()).unwrap();
    let args = [&finetune_args("out", "0")[..], &["--beta", "0.5"]].concat();
    refused(&cli(&dir, &args), &["--beta", "preference pairs"], "--beta for SFT");
    assert!(!folder::holds_checkpoint(&dir.join("out")), "nothing saved");
}

/// Pairs as `gpt finetune` encodes them, from (prompt, chosen, rejected).
fn pair_examples(tok: &CharTokenizer, lines: &[(&str, &str, &str)]) -> Vec<ft::Example> {
    let text: String = lines
        .iter()
        .map(|(p, w, l)| format!("{{\"prompt\": {p:?}, \"chosen\": {w:?}, \"rejected\": {l:?}}}\n"))
        .collect();
    let (mode, recs) = parse_examples(text.as_bytes(), "f.jsonl", "\n").unwrap();
    assert_eq!(mode, ft::Mode::Dpo);
    encode_examples(tok, &recs, 16, "f.jsonl").unwrap()
}

/// The mean DPO loss written out from ℓ at every position of a pair batch (rows chosen,
/// rejected, chosen, …), apart from the crate's code: per pair
/// ln(1 + e^{−m}), m = β[(Σ ℓ_w − ref_w) − (Σ ℓ_l − ref_l)].
fn dpo_loss_by_hand(
    batch: &llm_workbook::ch09_gpt::data::Batch,
    ell: &[f64],
    refs: &[(f64, f64)],
    beta: f64,
) -> f64 {
    let t = batch.seq_len;
    let sum = |row: usize| -> f64 {
        (0..t).filter(|&k| batch.targets[row * t + k].is_some()).map(|k| ell[row * t + k]).sum()
    };
    let losses = refs.iter().enumerate().map(|(i, r)| {
        let m = beta * ((sum(2 * i) - r.0) - (sum(2 * i + 1) - r.1));
        (1.0 + (-m).exp()).ln()
    });
    losses.sum::<f64>() / refs.len() as f64
}

#[test]
fn the_dpo_weights_are_minus_the_losss_derivative_and_need_the_reference() {
    use llm_workbook::ch13_finetune::feedback::dpo_weights;
    let tok = CharTokenizer::from_text("0123456789+=\n").unwrap();
    let ex = pair_examples(&tok, &[("1+2=", "3", "4"), ("5+5=", "10", "11"), ("9+0=", "9", "8")]);
    let t = ft::seq_len(&ex);
    let batch = ft::batch_of(&ex, &[0, 1, 2, 1], t, true);
    // Row 2i is pair i's chosen answer, row 2i + 1 its rejected one.
    let answer_at = |row: usize| batch.targets[row * t..(row + 1) * t].iter().flatten().count();
    assert_eq!((0..8).map(answer_at).collect::<Vec<_>>(), [2, 2, 3, 3, 2, 2, 3, 3]);
    let mut rng = llm_workbook::rng::Rng::new(4);
    let ell: Vec<f64> = batch
        .targets
        .iter()
        .map(|x| if x.is_some() { rng.uniform(-2.2, -0.2) } else { 0.0 })
        .collect();
    let refs = [(-3.0, -2.5), (-4.0, -6.0), (-1.5, -1.0), (-4.0, -6.0)];
    let beta = 0.7;
    // −∂L/∂ℓ_r by central differences of the loss written out by hand, at every position.
    let numeric = |refs: &[(f64, f64)]| -> Vec<f64> {
        let h = 1e-5;
        (0..ell.len())
            .map(|r| {
                let at = |d: f64| {
                    let mut e = ell.clone();
                    e[r] += d;
                    dpo_loss_by_hand(&batch, &e, refs, beta)
                };
                -(at(h) - at(-h)) / (2.0 * h)
            })
            .collect()
    };
    let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-8);
    let (loss, weights) = dpo_weights(&batch, &ell, &refs, beta).unwrap();
    assert!((loss - dpo_loss_by_hand(&batch, &ell, &refs, beta)).abs() < 1e-12);
    let want = numeric(&refs);
    assert!(close(&weights, &want), "{weights:?}\n{want:?}");
    assert!(weights.iter().filter(|w| w.abs() > 1e-3).count() >= 16, "most weights matter");
    // Planted: π_ref left out (its log-probabilities taken as 0): the weights change and fail.
    let (_, no_ref) = dpo_weights(&batch, &ell, &[(0.0, 0.0); 4], beta).unwrap();
    assert!(!close(&no_ref, &want), "the check catches π_ref left out");
    // Planted: chosen and rejected swapped in the layout.
    let swapped = [(-2.5, -3.0), (-6.0, -4.0), (-1.0, -1.5), (-6.0, -4.0)];
    assert!(!close(&dpo_weights(&batch, &ell, &swapped, beta).unwrap().1, &want));
    // One line naming the argument: pairs that do not match the batch.
    let e = dpo_weights(&batch, &ell, &refs[..3], beta).unwrap_err().to_string();
    assert!(e.contains("refs") && !e.contains('\n') && e.chars().count() <= WIDTH, "{e}");
}

/// A tiny model over `tok`'s vocabulary, then grown by the characters of `lines`, with LoRA
/// adapters whose B is random (so the merged matrices differ from the base): the model, the
/// extended tokenizer, the added ids and the adapters.
fn grown_lora(
    tied: bool,
    lines: &[(&str, &str, &str)],
) -> (Gpt<f32>, CharTokenizer, Vec<usize>, llm_workbook::ch13_finetune::stages::LoraGpt) {
    use llm_workbook::ch13_finetune::stages::LoraGpt;
    let tok = CharTokenizer::from_text("abc .").unwrap();
    let config = Config { tied, ..Config::new(tok.vocab_size(), 16, 1, 2, 8) };
    let mut model = Gpt::<f32>::new(config, 3).unwrap();
    let recs: Vec<Record> = {
        let text: String = lines
            .iter()
            .map(|(p, w, l)| {
                format!("{{\"prompt\": {p:?}, \"chosen\": {w:?}, \"rejected\": {l:?}}}\n")
            })
            .collect();
        parse_examples(text.as_bytes(), "f.jsonl", "\n").unwrap().1
    };
    let added = ft::missing_characters(&tok, &recs);
    let (ext, ids) = extend_vocabulary(&mut model, &tok, &added, 1).unwrap();
    let mut lora = LoraGpt::new(model, 2, 4.0, 5).unwrap();
    let mut rng = llm_workbook::rng::Rng::new(6);
    for (_, _, l) in lora.adapters.iter_mut() {
        l.b = rng.normal_matrix(l.b.nrows(), l.b.ncols(), 0.3);
    }
    let merged = lora.merged().unwrap();
    (merged, ext, ids, lora)
}

/// A loss of a whole model, for the gradient checks.
type LossOf<'a> = &'a dyn Fn(&Gpt<f64>) -> f64;

/// Under LoRA the rows W_E gained for the file's new characters train in full beside the
/// adapters: their gradient (and W_U's, untied), for the SFT loss and the DPO loss, against
/// central differences of the loss in f64 at every entry; a planted mistake (the rows read one
/// id off) fails it.
#[test]
fn the_added_rows_gradients_under_lora_pass_finite_differences() {
    use llm_workbook::ch09_gpt::fast::FusedStep;
    use llm_workbook::ch09_gpt::model::Param;
    use llm_workbook::ch13_finetune::feedback::dpo_weights;
    use llm_workbook::workshop::finetune_run::{Loss, lora_gradients};
    let lines = [("a+b=", "c1", "c2"), ("b+b=", "ab", "a"), ("c+a=", "1", "b2")];
    for tied in [true, false] {
        let (model32, tok, added, lora) = grown_lora(tied, &lines);
        assert_eq!(added.len(), 5, "⏎ + 1 2 = and no other");
        let model = model32.cast::<f64>();
        let ex = pair_examples(&tok, &lines);
        let t = ft::seq_len(&ex);
        let sft = ft::batch_of(&ex, &[0, 1, 2], t, false);
        let pairs = ft::batch_of(&ex, &[0, 1, 2], t, true);
        let refs = [(-5.0, -6.5), (-4.0, -3.0), (-6.0, -5.5)];
        let beta = 0.5;
        let sft_loss = |m: &Gpt<f64>| FusedStep::new().loss_and_grads(m, &sft).unwrap().0;
        let dpo_loss = |m: &Gpt<f64>| {
            let ell = FusedStep::new().target_log_probs(m, &pairs).unwrap();
            dpo_weights(&pairs, &ell, &refs, beta).unwrap().0
        };
        let ell = FusedStep::new().target_log_probs(&model, &pairs).unwrap();
        let weights = dpo_weights(&pairs, &ell, &refs, beta).unwrap().1;
        let tensors: Vec<Param> =
            if tied { vec![Param::Wte] } else { vec![Param::Wte, Param::LmHead] };
        let cases: [(LossOf, Loss, _); 2] =
            [(&sft_loss, Loss::Mean, &sft), (&dpo_loss, Loss::Weighted(&weights), &pairs)];
        for (loss, on, batch) in cases {
            let mut fused = FusedStep::<f64>::new();
            let (_, grads) = lora_gradients(&mut fused, &model, batch, on, &lora, &added).unwrap();
            assert_eq!(grads.len(), 2 * lora.adapters.len() + tensors.len());
            let rows = &grads[2 * lora.adapters.len()..];
            // ∂L/∂(row `id`, column j) of tensor p by central differences.
            let numeric = |p: Param, id: usize, j: usize| {
                let h = 1e-5;
                let at = |d: f64| {
                    let mut m = model.clone();
                    m.params.get_mut(p, None).unwrap()[(id, j)] += d;
                    loss(&m)
                };
                (at(h) - at(-h)) / (2.0 * h)
            };
            let passes = |ids: &[usize]| {
                tensors.iter().zip(rows).all(|(&p, g)| {
                    (0..ids.len()).all(|i| {
                        (0..g.ncols()).all(|j| {
                            let n = numeric(p, ids[i], j);
                            (n - g[(i, j)]).abs() <= 1e-7 + 1e-5 * n.abs()
                        })
                    })
                })
            };
            assert!(passes(&added), "tied {tied}: the added rows' gradient");
            assert!(rows.iter().all(|g| g.iter().any(|x| x.abs() > 1e-4)), "not all zero");
            // Planted: the rows' gradient compared at the ids one off (the old rows').
            let off: Vec<usize> =
                added.iter().map(|&i| (i + 1) % model.config.vocab_size).collect();
            assert!(!passes(&off), "tied {tied}: the check catches rows one id off");
        }
    }
}

/// What LoRA trains in `gpt finetune`: after a few steps the adapted matrices and the added
/// rows moved, and nothing else did: every other row of W_E, the positions, the biases, the
/// LayerNorms keep their bits.
#[test]
fn lora_trains_the_adapted_matrices_and_the_added_rows_only() {
    use llm_workbook::ch09_gpt::model::Param;
    use llm_workbook::ch13_finetune::stages::ADAPTED;
    use llm_workbook::workshop::finetune_run::{Settings, finetune};
    let lines = [("a+b=", "c1", "c2"), ("b+b=", "ab", "a")];
    let (_, tok, added, lora) = grown_lora(false, &lines);
    let start = lora.base.clone();
    let ex = pair_examples(&tok, &lines);
    let s = Settings {
        steps: 3,
        batch: 2,
        lr: 1e-2,
        seed: 1,
        lora_rank: 2,
        lora_alpha: 4.0,
        beta: 0.1,
    };
    for mode in [ft::Mode::Sft, ft::Mode::Dpo] {
        let tuned = finetune(start.clone(), &ex, mode, &added, &s, &mut ()).unwrap();
        let after = &tuned.trainer.model;
        let p = &start.params;
        let adapted: Vec<usize> =
            (0..start.config.layers).flat_map(|l| ADAPTED.map(|q| p.at(q, l))).collect();
        let rows_of = [p.at(Param::Wte, 0), p.at(Param::LmHead, 0)];
        for (k, (a, b)) in p.iter().zip(after.params.iter()).enumerate() {
            let moved: Vec<usize> = (0..a.nrows()).filter(|&i| a.row(i) != b.row(i)).collect();
            if adapted.contains(&k) {
                assert!(!moved.is_empty(), "{mode:?} tensor {k}: the adapter moved it");
            } else if rows_of.contains(&k) {
                // W_E's row of a character never read (⏎ is only a target) has no gradient.
                assert!(!moved.is_empty(), "{mode:?} tensor {k}: {moved:?}");
                assert!(moved.iter().all(|i| added.contains(i)), "{mode:?} {k}: {moved:?}");
            } else {
                assert!(moved.is_empty(), "{mode:?} tensor {k}: frozen");
            }
        }
        assert_eq!(tuned.preferences.is_some(), mode == ft::Mode::Dpo);
    }
}
