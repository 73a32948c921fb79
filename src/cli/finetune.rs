//! `llm-workbook gpt finetune`: a checkpoint fine-tuned on the reader's own JSON Lines file of
//! prompts and answers, in full or through LoRA adapters (chapter 13), saved as a new
//! checkpoint folder that `gpt sample` reads.
//!
//! This module holds the flags and what is printed; the work is the library's
//! `workshop::finetune` (the file, the vocabulary, the batches) and `workshop::finetune_run`
//! (loading, the steps, the save).

#![deny(clippy::unwrap_used, clippy::expect_used)]

use super::{Bar, say};
use clap::Args;
use llm_workbook::ch08_tokens::Tokenizer;
use llm_workbook::ch08_tokens::chars::CharTokenizer;
use llm_workbook::error::{Error, Result, invalid};
use llm_workbook::report::{TERMINAL_WIDTH, wrap};
use llm_workbook::workshop::budget;
use llm_workbook::workshop::finetune::{
    self as ft, DEFAULT_END, Mode, encode_examples, extend_vocabulary, is_exact,
    missing_characters, parse_examples, unescape,
};
use llm_workbook::workshop::finetune_run::{self as tune, FinetuneFile, Settings};
use llm_workbook::workshop::folder;
use llm_workbook::workshop::run::{CHARS_FILE, data_hash, tokenizer_from_files};
use std::path::{Path, PathBuf};

/// The command's name in messages.
const OP: &str = "gpt finetune";

/// Examples whose greedy reply is checked against their answer, before and after.
pub const CHECKED_EXAMPLES: usize = 32;

/// Examples whose prompt and reply are printed at the end.
pub const SHOWN_REPLIES: usize = 3;

/// `gpt finetune`.
#[derive(Args, Debug)]
pub struct FinetuneArgs {
    /// The checkpoint folder to start from (f32, as `gpt train` writes it, or GPT-2's files).
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// The examples: JSON Lines, one {"prompt": …, "answer": …} a line (or {"prompt": …,
    /// "chosen": …, "rejected": …} for preferences; the first line chooses the kind).
    #[arg(long)]
    pub data: PathBuf,
    /// Training steps.
    #[arg(long, default_value_t = 200)]
    pub steps: usize,
    /// LoRA's rank r (0: every parameter trains, full fine-tuning).
    #[arg(long, default_value_t = 0)]
    pub lora_rank: usize,
    /// LoRA's α, the update scaled by α/r (default: r, a scale of 1).
    #[arg(long, allow_negative_numbers = true)]
    pub lora_alpha: Option<f64>,
    /// The new checkpoint folder (not the --checkpoint; it must not hold a checkpoint yet).
    #[arg(long)]
    pub out: PathBuf,
    /// Examples per batch.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// The peak learning rate (warm-up over the first 5 % of the steps, cosine to a tenth).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1e-3)]
    pub lr: f64,
    /// The seed of the batches, of LoRA's A and of new characters' rows.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The text appended to every answer to end it (our tokenizers have no end-of-text token);
    /// `\n` is read as a newline. `gpt sample --stop` cuts the reply there.
    #[arg(long, default_value = DEFAULT_END, hide_default_value = true)]
    pub end: String,
    /// DPO's β, for a file of preference pairs: how far the policy may move from the
    /// checkpoint's (default 0.1).
    #[arg(long, allow_negative_numbers = true)]
    pub beta: Option<f64>,
    /// Write into a folder that already holds a checkpoint (it is replaced at the save).
    #[arg(long)]
    pub force: bool,
    /// The memory this run may use, in bytes (default: the variable
    /// LLM_WORKBOOK_MEMORY_BUDGET, else the available memory); a larger model is refused.
    #[arg(long)]
    pub memory_budget: Option<u64>,
}

/// Prints `text` wrapped at spaces to the terminal's 100 columns.
fn say_wrapped(text: &str) {
    for line in wrap(text, TERMINAL_WIDTH) {
        say!("{line}");
    }
}

/// The settings the flags ask for, checked: at least one step and one example a batch, a
/// learning rate and an α finite and > 0.
fn settings(a: &FinetuneArgs) -> Result<Settings> {
    if a.steps == 0 || a.batch == 0 {
        let arg = if a.steps == 0 { "--steps" } else { "--batch" };
        return Err(invalid(OP, arg, "must be at least 1, got 0"));
    }
    if !(a.lr.is_finite() && a.lr > 0.0) {
        return Err(invalid(OP, "--lr", format!("must be finite and > 0, got {}", a.lr)));
    }
    let alpha = a.lora_alpha.unwrap_or(a.lora_rank as f64);
    if a.lora_rank > 0 && !(alpha.is_finite() && alpha > 0.0) {
        return Err(invalid(OP, "--lora-alpha", format!("must be finite and > 0, got {alpha}")));
    }
    let beta = a.beta.unwrap_or(tune::DEFAULT_BETA);
    if !(beta.is_finite() && beta > 0.0) {
        return Err(invalid(OP, "--beta", format!("must be finite and > 0, got {beta}")));
    }
    if a.lora_rank == 0 && a.lora_alpha.is_some() {
        return Err(invalid(OP, "--lora-alpha", "is for LoRA; give --lora-rank R too"));
    }
    Ok(Settings {
        steps: a.steps,
        batch: a.batch,
        lr: a.lr,
        seed: a.seed,
        lora_rank: a.lora_rank,
        lora_alpha: alpha,
        beta,
    })
}

/// Refuses an `--out` that is a file, the `--checkpoint` itself, or a folder among another
/// checkpoint's generations (its next save would remove it).
fn check_out(out: &Path, checkpoint: &Path) -> Result<()> {
    if out.exists() && !out.is_dir() {
        let why = format!("{} is a file, not a folder; give a folder to write into", out.display());
        return Err(invalid(OP, "--out", why));
    }
    let same = match (std::fs::canonicalize(out), std::fs::canonicalize(checkpoint)) {
        (Ok(o), Ok(c)) => o == c,
        _ => false,
    };
    if same {
        let why = "is the --checkpoint; give a new folder for the fine-tuned model";
        return Err(invalid(OP, "--out", why));
    }
    if folder::owning_checkpoint(out).is_some() {
        let why = format!("{}: a checkpoint's next save removes it", out.display());
        return Err(invalid(OP, "--out", why));
    }
    Ok(())
}

/// Runs `gpt finetune`; the error is one line for the terminal.
pub fn run(a: FinetuneArgs) -> Result<()> {
    let s = settings(&a)?;
    let end = unescape(&a.end);
    if end.is_empty() {
        return Err(invalid(OP, "--end", "must not be empty: it ends every answer"));
    }
    let budget = budget::budget(a.memory_budget)?;
    if !a.checkpoint.is_dir() {
        let found = if a.checkpoint.exists() {
            "is a file; give a checkpoint folder"
        } else {
            "does not exist"
        };
        return Err(invalid(OP, "--checkpoint", format!("{} {found}", a.checkpoint.display())));
    }
    check_out(&a.out, &a.checkpoint)?;
    // One writer a folder, from before the first look at it until the process ends.
    let _lock = folder::Lock::take(&a.out, OP)?;
    if !a.force && folder::holds_checkpoint(&a.out) {
        let why = format!("{} already holds a checkpoint (--force replaces it)", a.out.display());
        return Err(invalid(OP, "--out", why));
    }
    let foreign = folder::foreign_entries(&a.out);
    if !a.force && !foreign.is_empty() {
        let reason =
            format!("files this program did not write ({}); --force keeps them", foreign.len());
        return Err(Error::Parse { file: a.out.display().to_string(), line: None, reason });
    }
    // The examples first: a bad line is said before the model is read.
    let data_name = a.data.display().to_string();
    let bytes = budget::read_file(&a.data, budget::TEXT_BYTES_PER_BYTE, budget, "--data")?;
    let (mode, records) = parse_examples(&bytes, &data_name, &end)?;
    if mode == Mode::Sft && a.beta.is_some() {
        let why = "is for preference pairs (DPO); this file holds answers";
        return Err(invalid(OP, "--beta", why));
    }
    let loaded = tune::load(&a.checkpoint, budget)?;
    let mut model = loaded.model;
    let mut tokenizer_files = loaded.tokenizer_files;
    let (tok, added_ids, added): (Box<dyn Tokenizer>, Vec<usize>, String) =
        match tokenizer_files.iter().position(|f| f.0 == CHARS_FILE) {
            Some(i) => {
                let text = String::from_utf8_lossy(&tokenizer_files[i].1).into_owned();
                let tok = CharTokenizer::from_text(&text)?;
                let missing = missing_characters(&tok, &records);
                if missing.is_empty() {
                    (Box::new(tok) as Box<dyn Tokenizer>, Vec::new(), String::new())
                } else {
                    let (tok, ids) = extend_vocabulary(&mut model, &tok, &missing, s.seed)?;
                    let line: String = tok.chars().iter().collect();
                    tokenizer_files[i].1 = line.into_bytes();
                    (Box::new(tok) as Box<dyn Tokenizer>, ids, missing.iter().collect())
                }
            }
            None => (
                tokenizer_from_files(&loaded.resolved.path, &tokenizer_files)?,
                Vec::new(),
                String::new(),
            ),
        };
    let context = model.config.context;
    let examples = encode_examples(tok.as_ref(), &records, context, &data_name)?;
    let t = ft::seq_len(&examples);
    let rows = if mode == Mode::Dpo { 2 * s.batch } else { s.batch };
    let rest = budget.saturating_sub(bytes.len() as u64 * budget::TEXT_BYTES_PER_BYTE);
    budget::check(&model.config, rows, t, rest, "--memory-budget")?;
    if s.lora_rank > model.config.width {
        let why = format!(
            "must be at most the model's width {}, got {}",
            model.config.width, s.lora_rank
        );
        return Err(invalid(OP, "--lora-rank", why));
    }
    if loaded.resolved.flat || loaded.resolved.recovered {
        eprintln!(
            "note: {} read without its {} pointer",
            a.checkpoint.display(),
            folder::POINTER_FILE
        );
    }
    let c = &model.config;
    say!(
        "{}: {} {} examples; model: {} layers, width {}, context {}, vocabulary {}",
        data_name,
        examples.len(),
        mode.name(),
        c.layers,
        c.width,
        c.context,
        c.vocab_size
    );
    if !added.is_empty() {
        say_wrapped(&format!(
            "the vocabulary gained {} characters the checkpoint lacked: {:?} (new rows: the old \
             rows' mean plus noise)",
            added.chars().count(),
            added
        ));
    }
    let how = if s.lora_rank == 0 {
        "full fine-tuning (every parameter)".to_string()
    } else {
        format!(
            "LoRA r = {}, α = {} on W_QKV, W_O, W_1, W_2 (merged into the saved weights)",
            s.lora_rank, s.lora_alpha
        )
    };
    say_wrapped(&format!("{how}; answers end with {end:?}, the prompt is masked"));
    if mode == Mode::Dpo {
        say_wrapped(&format!(
            "DPO, β = {}: π_ref is the checkpoint (frozen), its log-probabilities of each pair \
             computed once",
            s.beta
        ));
    }
    let checked = &examples[..examples.len().min(CHECKED_EXAMPLES)];
    let answers: Vec<&str> =
        records.iter().take(checked.len()).map(|r| r.answer.as_str()).collect();
    let exact = |replies: &[String]| {
        answers.iter().zip(replies).filter(|(a, r)| is_exact(a, r, &end)).count()
    };
    let before = exact(&ft::replies(&model, tok.as_ref(), checked)?);
    let mut bar =
        Bar::run(0, s.steps).map_err(|e| invalid("progress", "template", e.to_string()))?;
    let tuned = tune::finetune(model, &examples, mode, &added_ids, &s, &mut bar)?;
    let replies = ft::replies(&tuned.trainer.model, tok.as_ref(), checked)?;
    let after = exact(&replies);
    say_wrapped(&format!(
        "step {}: loss {:.4} {} (running mean); {} values trained, {:.1} s",
        tuned.trainer.step,
        tuned.running_loss,
        if mode == Mode::Dpo {
            "(DPO's −ln σ(m), mean over the pairs)"
        } else {
            "nats per answer token"
        },
        tuned.trainable,
        tuned.seconds
    ));
    say_wrapped(&format!(
        "exact answers on the first {} examples (trained on; keep some out to measure): {} \
         before, {} after",
        checked.len(),
        before,
        after
    ));
    if let Some(p) = &tuned.preferences {
        let n = p.pairs as f64;
        say_wrapped(&format!(
            "the {} pairs: chosen above rejected by the model (ln π(y_w) > ln π(y_l)) {:.0} \
             before, {:.0} after; mean ln π(y_w) − ln π(y_l) {:.3} before, {:.3} after",
            p.pairs,
            p.before.preferred * n,
            p.after.preferred * n,
            p.before.log_ratio,
            p.after.log_ratio
        ));
        say_wrapped(&format!(
            "implicit reward margin β·[Δ ln π − Δ ln π_ref]: mean 0 before, {:.4} after; pairs \
             ranked right (margin > 0) 0 before, {:.0} after",
            p.after.margin,
            p.after.ranked * n
        ));
    }
    for (r, reply) in records.iter().zip(&replies).take(SHOWN_REPLIES) {
        say_wrapped(&format!("{:?} → {:?}", r.prompt, ft::cut_at(reply, &end)));
    }
    let record = FinetuneFile {
        mode: mode.name().to_string(),
        checkpoint: absolute(&a.checkpoint),
        data: absolute(&a.data),
        data_fnv1a64: data_hash(&String::from_utf8_lossy(&bytes)),
        examples: examples.len(),
        end: end.clone(),
        added,
        steps: s.steps,
        batch: s.batch,
        lr: s.lr,
        seed: s.seed,
        lora_rank: s.lora_rank,
        lora_alpha: (s.lora_rank > 0).then_some(s.lora_alpha),
        trainable: tuned.trainable,
        final_loss: tuned.running_loss,
        beta: (mode == Mode::Dpo).then_some(s.beta),
        preferences: tuned.preferences.map(|p| tune::PreferenceRecord::of(&p)),
    };
    let generation = tune::save(&a.out, &tuned, &tokenizer_files, &record)?;
    say!("checkpoint and loss plot in {}", generation.display());
    let stop = end.escape_default().to_string();
    say_wrapped(&format!(
        "try: llm-workbook gpt sample --checkpoint {} --greedy --stop '{stop}' --prompt TEXT",
        a.out.display()
    ));
    Ok(())
}

/// `path` made absolute (through symbolic links where it exists), for `finetune.json`.
fn absolute(path: &Path) -> String {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}
