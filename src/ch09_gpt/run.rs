//! A training run on a learner's own text, kept in a checkpoint folder: the pieces of
//! `llm-workbook gpt train | resume | sample` (whose flags, progress bar and printing live in the
//! binary, `src/cli/gpt.rs`), as functions a test or another program can call.
//!
//! A run's folder holds the checkpoint ([`checkpoint`](super::checkpoint): GPT-2's `config.json`
//! and `model.safetensors`, and the training state), the tokenizer ([`CHARS_FILE`], or a
//! byte-level BPE as GPT-2's `vocab.json` and `merges.txt`), the run's settings ([`RUN_FILE`], so
//! that a run can be continued exactly where it stopped) and the loss plot. The last
//! [`VALIDATION_FRACTION`] of the text's tokens is held out: the run reports the mean loss
//! L = −(1/S) Σ ln p(u_s | u_<s) over every held-out token once its steps are done.

use super::checkpoint::{load_model, load_trainer, save_trainer};
use super::data::{Token, TokenSplit, covering_windows};
use super::model::Gpt;
use super::safetensors::write_atomic;
use super::sample::{Decoding, Generated, generate};
use super::schedule::Schedule;
use super::train::{Data, Progress, TrainConfig, Trainer, mean_loss};
use crate::ch08_tokens::bpe::{self, BpeConfig, PreTokenizer};
use crate::ch08_tokens::chars::CharTokenizer;
use crate::ch08_tokens::gpt2::{Gpt2Tokenizer, to_gpt2_files};
use crate::ch08_tokens::{Tokenizer, corpus};
use crate::error::{Error, Result, from_json_object, invalid};
use crate::rng::Rng;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The settings of a run, saved as `train.json` so `resume` can continue it.
pub const RUN_FILE: &str = "train.json";
/// The character tokenizer's vocabulary, saved as one line of text.
pub const CHARS_FILE: &str = "tokenizer_chars.txt";
/// The name a run records for its text when it learns chapter 8's default corpus.
pub const DEFAULT_CORPUS: &str = "<default corpus>";
/// The share of the text's tokens held out for validation (the last tenth).
pub const VALIDATION_FRACTION: f64 = 0.1;
/// The loss plot's file stem in the folder (`loss.png`, `loss.svg`).
pub const LOSS_PLOT: &str = "loss";
/// The closing sample continues the first this many validation tokens (fewer if the context is
/// shorter)…
pub const SAMPLE_PROMPT_TOKENS: usize = 16;
/// … by this many tokens…
pub const SAMPLE_TOKENS: usize = 200;
/// … drawn at this temperature, with the generator seeded by 1.
pub const SAMPLE_TEMPERATURE: f64 = 0.8;

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.display().to_string(), source }
}

// ───────────────────────────── tokenizers in a folder ─────────────────────────────

/// How text becomes tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// One token per character of the text.
    Char,
    /// Byte-level BPE trained on the text.
    Bpe,
}

/// Whichever tokenizer a checkpoint folder holds.
pub fn load_tokenizer(dir: &Path) -> Result<Box<dyn Tokenizer>> {
    let chars = dir.join(CHARS_FILE);
    if chars.exists() {
        let text = std::fs::read_to_string(&chars).map_err(io(&chars))?;
        return Ok(Box::new(CharTokenizer::from_text(&text)?));
    }
    let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
    if vocab.exists() && merges.exists() {
        return Ok(Box::new(Gpt2Tokenizer::from_files(&vocab, &merges)?));
    }
    Err(invalid(
        "load_tokenizer",
        "checkpoint",
        format!("{} holds neither {CHARS_FILE} nor vocab.json + merges.txt", dir.display()),
    ))
}

/// A tokenizer and the files that hold it (file name, contents), not yet written.
pub type BuiltTokenizer = (Box<dyn Tokenizer>, Vec<(&'static str, String)>);

/// The tokenizer `kind` builds from `text` (a BPE of `bpe_vocab` tokens: 256 bytes plus merges),
/// and its files: `gpt train` writes them only once every setting has been checked.
pub fn build_tokenizer(
    kind: TokenizerKind,
    text: &str,
    bpe_vocab: usize,
) -> Result<BuiltTokenizer> {
    match kind {
        TokenizerKind::Char => {
            let t = CharTokenizer::from_text(text)?;
            let line = t.chars().iter().collect::<String>();
            Ok((Box::new(t), vec![(CHARS_FILE, line)]))
        }
        TokenizerKind::Bpe => {
            let trained = bpe::train(
                text,
                BpeConfig { vocab_size: bpe_vocab, pre_tokenizer: PreTokenizer::Gpt2 },
            )?;
            let (v, m) = to_gpt2_files(&trained.bpe)?;
            let tok = Gpt2Tokenizer::from_texts("vocab.json", &v, "merges.txt", &m)?;
            Ok((Box::new(tok), vec![("vocab.json", v), ("merges.txt", m)]))
        }
    }
}

/// Creates the folder `out` (and its parents) and writes the tokenizer's files into it.
pub fn save_tokenizer_files(out: &Path, files: &[(&'static str, String)]) -> Result<()> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    for (name, contents) in files {
        write_atomic(&out.join(name), contents.as_bytes())?;
    }
    Ok(())
}

// ───────────────────────────── the run's settings ─────────────────────────────

/// How `gpt train` trains: nanoGPT's AdamW settings ([`TrainConfig::new`]) on a schedule that
/// warms up over the first 5 % of the steps (at least one) and decays by a cosine to `lr`/10 at
/// the last step.
pub fn train_config(batch: usize, lr: f64, steps: usize) -> Result<TrainConfig> {
    let schedule = Schedule::new(lr, lr / 10.0, (steps / 20).max(1).min(steps), steps)?;
    Ok(TrainConfig::new(batch, schedule))
}

/// `train.json`, field by field: the text's path, the context, the optimiser's settings and
/// schedule, the planned steps and the seed. Read back strictly: a missing, mistyped or unknown
/// field is an error naming it (only `clip` may be absent or `null`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunFile {
    /// The text's path ([`DEFAULT_CORPUS`] for chapter 8's default corpus).
    pub data: String,
    /// The context length in tokens.
    pub context: usize,
    /// Sequences per batch.
    pub batch: usize,
    /// The planned number of steps.
    pub steps: usize,
    /// The run's seed.
    pub seed: u64,
    /// The schedule's peak learning rate.
    pub max_lr: f64,
    /// The schedule's final learning rate.
    pub min_lr: f64,
    /// Warm-up steps.
    pub warmup: usize,
    /// The step at which the cosine decay ends.
    pub decay_steps: usize,
    /// AdamW's weight decay.
    pub weight_decay: f64,
    /// AdamW's β₁.
    pub beta1: f64,
    /// AdamW's β₂.
    pub beta2: f64,
    /// AdamW's ε.
    pub epsilon: f64,
    /// The gradient-norm clip, if any.
    #[serde(default)]
    pub clip: Option<f64>,
}

/// A run's settings as the text of `train.json` (indented JSON).
pub fn run_json(data: &Path, tc: &TrainConfig, context: usize, steps: usize, seed: u64) -> String {
    let s = &tc.schedule;
    let file = RunFile {
        data: data.display().to_string(),
        context,
        batch: tc.batch,
        steps,
        seed,
        max_lr: s.max_lr,
        min_lr: s.min_lr,
        warmup: s.warmup,
        decay_steps: s.decay_steps,
        weight_decay: tc.weight_decay,
        beta1: tc.beta1,
        beta2: tc.beta2,
        epsilon: tc.epsilon,
        clip: tc.clip,
    };
    // Plain fields of plain types: serialising them cannot fail.
    let mut text = serde_json::to_string_pretty(&file).unwrap_or_default();
    text.push('\n');
    text
}

/// Writes [`run_json`] into the folder as [`RUN_FILE`].
pub fn save_run_settings(
    out: &Path,
    data: &Path,
    tc: &TrainConfig,
    context: usize,
    steps: usize,
    seed: u64,
) -> Result<()> {
    write_atomic(&out.join(RUN_FILE), run_json(data, tc, context, steps, seed).as_bytes())
}

/// What [`read_run`] reads back from `train.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSettings {
    /// The text's path ([`DEFAULT_CORPUS`] for chapter 8's default corpus).
    pub data: PathBuf,
    /// Batch, schedule, AdamW.
    pub tc: TrainConfig,
    /// The context length in tokens.
    pub context: usize,
    /// The seed of the run (the batches were seeded by it).
    pub seed: u64,
}

/// Reads the text of a `train.json` (`file` names it in errors): an error names the file, the
/// missing, mistyped or unknown field, and the line.
pub fn run_from_json(bytes: &[u8], file: &str) -> Result<RunSettings> {
    let j: RunFile = from_json_object(bytes, file)?;
    let schedule = Schedule::new(j.max_lr, j.min_lr, j.warmup, j.decay_steps)?;
    let tc = TrainConfig {
        batch: j.batch,
        schedule,
        weight_decay: j.weight_decay,
        beta1: j.beta1,
        beta2: j.beta2,
        epsilon: j.epsilon,
        clip: j.clip,
    };
    Ok(RunSettings { data: PathBuf::from(j.data), tc, context: j.context, seed: j.seed })
}

/// A folder's `train.json`, read back with [`run_from_json`].
pub fn read_run(dir: &Path) -> Result<RunSettings> {
    let path = dir.join(RUN_FILE);
    run_from_json(&std::fs::read(&path).map_err(io(&path))?, &path.display().to_string())
}

/// The text at `data` ([`DEFAULT_CORPUS`]: chapter 8's default corpus): UTF-8 and not empty.
pub fn read_text(data: &Path) -> Result<String> {
    if data.as_os_str() == DEFAULT_CORPUS {
        Ok(corpus::default_corpus().to_string())
    } else {
        corpus::load(data)
    }
}

// ───────────────────────────── train and resume ─────────────────────────────

/// A run read back from its folder, ready to continue.
pub struct OpenRun {
    /// Its settings.
    pub settings: RunSettings,
    /// Its text.
    pub text: String,
    /// Its tokenizer.
    pub tokenizer: Box<dyn Tokenizer>,
    /// The trainer at the step the folder was saved at: the same state, bit for bit.
    pub trainer: Trainer<f32>,
}

/// Reads a run's folder back: settings, text, tokenizer, model and training state.
pub fn open_run(dir: &Path) -> Result<OpenRun> {
    let settings = read_run(dir)?;
    let text = read_text(&settings.data)?;
    let tokenizer = load_tokenizer(dir)?;
    let fresh = Trainer::new(load_model::<f32>(dir)?, &settings.tc, settings.seed)?;
    let trainer = load_trainer(dir, &fresh)?;
    Ok(OpenRun { settings, text, tokenizer, trainer })
}

/// The text as tokens, its last [`VALIDATION_FRACTION`] held out (see [`TokenSplit::new`]).
pub fn split_text(tok: &dyn Tokenizer, text: &str, context: usize) -> Result<TokenSplit> {
    let tokens = tok.encode(text)?;
    TokenSplit::new(&tokens, VALIDATION_FRACTION, context)
}

/// Where a run's steps ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Finished {
    /// The training loss's running mean (0.95·m + 0.05·loss per step, from the first step of
    /// this call).
    pub running_loss: f64,
    /// The mean loss over every validation token, in nats per token.
    pub validation_loss: f64,
}

/// Trains on random windows of `split.train` until `steps` steps have been taken, saving the
/// checkpoint into `out` every `save_every` steps (0: never) and after the last step, then
/// measures the validation loss. `progress` sees every step with the running loss and the tokens
/// per second so far. The schedule's decay stays where the run planned it; past it the floor
/// rate holds.
#[allow(clippy::too_many_arguments)]
pub fn continue_run(
    trainer: &mut Trainer<f32>,
    tc: &TrainConfig,
    split: &TokenSplit,
    context: usize,
    steps: usize,
    save_every: usize,
    out: &Path,
    progress: &mut dyn Progress,
) -> Result<Finished> {
    let data = Data::Stream { tokens: &split.train, seq_len: context };
    let start = Instant::now();
    let (mut seen, mut running) = (0usize, f64::NAN);
    while trainer.step < steps {
        let r = trainer.step(&data, tc)?;
        seen += r.tokens;
        running = if running.is_nan() { r.loss } else { 0.95 * running + 0.05 * r.loss };
        let tokens_per_s = seen as f64 / start.elapsed().as_secs_f64().max(1e-9);
        progress.step(trainer.step, running, Some(tokens_per_s));
        if save_every > 0 && trainer.step.is_multiple_of(save_every) && trainer.step < steps {
            save_trainer(trainer, out)?;
        }
    }
    progress.finish();
    save_trainer(trainer, out)?;
    let val = mean_loss(&trainer.model, &covering_windows(&split.validation, context, 32))?;
    Ok(Finished { running_loss: running, validation_loss: val })
}

/// The run's closing sample: the first validation tokens as the prompt (see
/// [`SAMPLE_PROMPT_TOKENS`]) and what the model writes after them. Returns (prompt, generation).
pub fn closing_sample(
    model: &Gpt<f32>,
    validation: &[Token],
    context: usize,
) -> Result<(Vec<Token>, Generated)> {
    let prompt: Vec<Token> = validation[..context.min(SAMPLE_PROMPT_TOKENS)].to_vec();
    let g = generate(
        model,
        &prompt,
        SAMPLE_TOKENS,
        &Decoding::temperature(SAMPLE_TEMPERATURE),
        &mut Rng::new(1),
        true,
    )?;
    Ok((prompt, g))
}

// ───────────────────────────── sample ─────────────────────────────

/// The tokenizer and model of a checkpoint folder (ours, or GPT-2's with its `vocab.json` and
/// `merges.txt`), refused if the tokenizer has ids the model has no row for.
pub fn load_for_sampling(dir: &Path) -> Result<(Box<dyn Tokenizer>, Gpt<f32>)> {
    let tok = load_tokenizer(dir)?;
    let model = load_model::<f32>(dir)?;
    if tok.vocab_size() > model.config.vocab_size {
        return Err(invalid(
            "gpt sample",
            "checkpoint",
            format!(
                "the tokenizer has {} tokens but the model only {}",
                tok.vocab_size(),
                model.config.vocab_size
            ),
        ));
    }
    Ok((tok, model))
}
