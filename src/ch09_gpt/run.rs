//! A training run on a learner's own text, kept in a checkpoint folder: the pieces of
//! `llm-workbook gpt train | resume | sample` (whose flags, progress bar and printing live in the
//! binary, `src/cli/gpt.rs`), as functions a test or another program can call.
//!
//! A run's checkpoint holds the model ([`checkpoint`](super::checkpoint): GPT-2's `config.json`
//! and `model.safetensors`, and the training state), the tokenizer ([`CHARS_FILE`], or a
//! byte-level BPE as GPT-2's `vocab.json` and `merges.txt`), the run's settings ([`RUN_FILE`], so
//! that a run can be continued exactly where it stopped, with the tokenizer's fingerprint) and
//! the loss plot. Every save writes all of them as one generation of the folder
//! ([`folder`]): an interrupted save never mixes two. The last
//! [`VALIDATION_FRACTION`] of the text's tokens is held out: the run reports the mean loss
//! L = −(1/S) Σ ln p(u_s | u_<s) over every held-out token once its steps are done.

use super::checkpoint::{load_trainer, trainer_files};
use super::data::{Token, TokenSplit, covering_windows};
use super::folder::{self, Resolved, Sink};
use super::model::Gpt;
use super::sample::{Decoding, Generated, generate};
use super::schedule::Schedule;
use super::train::{Data, Progress, StepPath, TrainConfig, Trainer, mean_loss};
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

/// The tokenizer's files in a checkpoint's folder (name, contents): [`CHARS_FILE`], or
/// `vocab.json` and `merges.txt`. A folder with both is refused: one of them is stale.
pub fn read_tokenizer_files(dir: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let read = |name: &str| -> Result<(String, Vec<u8>)> {
        let path = dir.join(name);
        Ok((name.to_string(), std::fs::read(&path).map_err(io(&path))?))
    };
    let chars = dir.join(CHARS_FILE).exists();
    let bpe = dir.join("vocab.json").exists() && dir.join("merges.txt").exists();
    match (chars, bpe) {
        (true, true) => Err(invalid(
            "load_tokenizer",
            "checkpoint",
            format!(
                "{} holds two tokenizers ({CHARS_FILE} and vocab.json + merges.txt); one is \
                 stale, and the model belongs to only one",
                dir.display()
            ),
        )),
        (true, false) => Ok(vec![read(CHARS_FILE)?]),
        (false, true) => Ok(vec![read("vocab.json")?, read("merges.txt")?]),
        (false, false) => Err(invalid(
            "load_tokenizer",
            "checkpoint",
            format!("{} holds neither {CHARS_FILE} nor vocab.json + merges.txt", dir.display()),
        )),
    }
}

/// The tokenizer its files (from [`read_tokenizer_files`] or [`build_tokenizer`]) describe;
/// `dir` names them in errors.
pub fn tokenizer_from_files(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<Box<dyn Tokenizer>> {
    let text = |name: &str| -> Result<String> {
        let bytes = files.iter().find(|f| f.0 == name).map(|f| f.1.clone()).unwrap_or_default();
        String::from_utf8(bytes).map_err(|_| Error::Parse {
            file: dir.join(name).display().to_string(),
            line: None,
            reason: "is not UTF-8".into(),
        })
    };
    if files.iter().any(|f| f.0 == CHARS_FILE) {
        return Ok(Box::new(CharTokenizer::from_text(&text(CHARS_FILE)?)?));
    }
    let (v, m) = (dir.join("vocab.json"), dir.join("merges.txt"));
    Ok(Box::new(Gpt2Tokenizer::from_texts(
        &v.display().to_string(),
        &text("vocab.json")?,
        &m.display().to_string(),
        &text("merges.txt")?,
    )?))
}

/// Whichever tokenizer a checkpoint folder holds (see [`read_tokenizer_files`]).
pub fn load_tokenizer(dir: &Path) -> Result<Box<dyn Tokenizer>> {
    tokenizer_from_files(dir, &read_tokenizer_files(dir)?)
}

/// Refuses a tokenizer whose fingerprint ([`folder::files_hash`]) is not the one `train.json`
/// recorded for the model (a checkpoint written before fingerprints were recorded passes).
pub fn check_tokenizer(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<()> {
    let Some(recorded) = read_tokenizer_hash(dir)? else { return Ok(()) };
    let found = folder::files_hash(files);
    if found != recorded {
        let names = files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>().join(" + ");
        return Err(invalid(
            "load_tokenizer",
            "checkpoint",
            format!(
                "the tokenizer in {} ({names}, fingerprint {found}) is not the one this model was \
                 trained with ({RUN_FILE} records {recorded})",
                dir.display()
            ),
        ));
    }
    Ok(())
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
    /// The FNV-1a 64 fingerprint of the tokenizer's files ([`folder::files_hash`]); absent in
    /// runs saved before fingerprints were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_fnv1a64: Option<String>,
    /// Which training step computed the gradients ([`StepPath::name`]: `fused` or
    /// `reference`); absent in runs saved before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_path: Option<String>,
}

/// A run's settings as `train.json` holds them (no tokenizer fingerprint yet).
pub fn run_file(data: &Path, tc: &TrainConfig, context: usize, steps: usize, seed: u64) -> RunFile {
    let s = &tc.schedule;
    RunFile {
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
        tokenizer_fnv1a64: None,
        step_path: None,
    }
}

/// The text of a `train.json` (indented JSON, a final newline).
pub fn run_text(file: &RunFile) -> String {
    // Plain fields of plain types: serialising them cannot fail.
    let mut text = serde_json::to_string_pretty(file).unwrap_or_default();
    text.push('\n');
    text
}

/// A run's settings as the text of `train.json` (indented JSON), without a tokenizer fingerprint.
pub fn run_json(data: &Path, tc: &TrainConfig, context: usize, steps: usize, seed: u64) -> String {
    run_text(&run_file(data, tc, context, steps, seed))
}

/// The run with the fingerprint of the tokenizer's files recorded: the one place where the
/// field this layout added to `train.json` is written.
pub fn run_json_with_tokenizer(run: RunFile, tokenizer_files: &[(String, Vec<u8>)]) -> RunFile {
    RunFile { tokenizer_fnv1a64: Some(folder::files_hash(tokenizer_files)), ..run }
}

/// The fingerprint `train.json` in `dir` records for the tokenizer, if it records one (and if
/// there is a `train.json`: Hugging Face's folders have none).
pub fn read_tokenizer_hash(dir: &Path) -> Result<Option<String>> {
    let path = dir.join(RUN_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    let file: RunFile = from_json_object(&bytes, &path.display().to_string())?;
    Ok(file.tokenizer_fnv1a64)
}

/// What every save of a new run writes besides the trainer's files: the tokenizer's files and
/// `train.json` (with the tokenizer's fingerprint and the training step's path).
#[allow(clippy::too_many_arguments)]
pub fn run_files(
    tokenizer_files: &[(&'static str, String)],
    data: &Path,
    tc: &TrainConfig,
    context: usize,
    steps: usize,
    seed: u64,
    path: StepPath,
) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> =
        tokenizer_files.iter().map(|(n, c)| (n.to_string(), c.as_bytes().to_vec())).collect();
    let run = run_json_with_tokenizer(run_file(data, tc, context, steps, seed), &files);
    let run = RunFile { step_path: Some(path.name().to_string()), ..run };
    files.push((RUN_FILE.to_string(), run_text(&run).into_bytes()));
    files
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
    /// Where its files were found (the current generation, or a folder of the older layout).
    pub resolved: Resolved,
    /// Its settings.
    pub settings: RunSettings,
    /// Its text.
    pub text: String,
    /// Its tokenizer.
    pub tokenizer: Box<dyn Tokenizer>,
    /// The trainer at the step the folder was saved at: the same state, bit for bit.
    pub trainer: Trainer<f32>,
    /// What every later save writes again besides the trainer: the tokenizer's files and
    /// `train.json`, as they were read.
    pub run_files: Vec<(String, Vec<u8>)>,
}

/// Reads a run's folder back: settings, text, tokenizer (checked against the fingerprint
/// `train.json` records), model and training state, all from one generation. The sizes of
/// `config.json` and `train.json` are checked against the memory `budget` in bytes (see
/// [`super::budget`]) and the tensors' shapes before anything is built.
pub fn open_run(dir: &Path, budget: u64) -> Result<OpenRun> {
    let resolved = folder::resolve(dir)?;
    let here = resolved.path.as_path();
    let settings = read_run(here)?;
    let config = super::checkpoint::read_config(here)?;
    if settings.context > config.context {
        return Err(invalid(
            "gpt resume",
            "train.json",
            format!(
                "its context {} is longer than the model's n_positions {}",
                settings.context, config.context
            ),
        ));
    }

    let text = read_text(&settings.data)?;
    let mut run_files = read_tokenizer_files(here)?;
    check_tokenizer(here, &run_files)?;
    let tokenizer = tokenizer_from_files(here, &run_files)?;
    let (batch, context) = (settings.tc.batch, settings.context);
    let model = super::checkpoint::load_model_checked::<f32>(here, |c| {
        super::budget::check(c, batch, context, budget, "--memory-budget")
    })?;
    let fresh = Trainer::new(model, &settings.tc, settings.seed)?;
    let trainer = load_trainer(here, &fresh)?;
    let run_path = here.join(RUN_FILE);
    let mut run = std::fs::read(&run_path).map_err(io(&run_path))?;
    if read_tokenizer_hash(here)?.is_none() {
        // A run of the older layout: from its next save on, the fingerprint is recorded.
        let file: RunFile = from_json_object(&run, &run_path.display().to_string())?;
        run = run_text(&run_json_with_tokenizer(file, &run_files)).into_bytes();
    }
    run_files.push((RUN_FILE.to_string(), run));
    Ok(OpenRun { resolved, settings, text, tokenizer, trainer, run_files })
}

/// Saves a trainer with the run's other files (`run_files`: tokenizer, `train.json`) as the
/// next generation of `out` through `sink`; returns the generation's folder. A model holding a
/// NaN or ±∞ is refused and nothing is written.
pub fn save_run(
    sink: &mut dyn Sink,
    out: &Path,
    trainer: &Trainer<f32>,
    run_files: &[(String, Vec<u8>)],
) -> Result<PathBuf> {
    for (name, m) in trainer.model.tensors() {
        if m.iter().any(|x| !x.is_finite()) {
            return Err(diverged(trainer.step, &format!("tensor {name} holds NaN or ±∞")));
        }
    }
    let mut files = trainer_files(trainer)?;
    files.extend(run_files.iter().cloned());
    folder::save_generation(sink, out, &files)
}

fn diverged(step: usize, what: &str) -> Error {
    invalid(
        "gpt train",
        "--lr",
        format!(
            "training diverged at step {step} ({what}); nothing was saved from it: try a smaller \
                 learning rate"
        ),
    )
}

/// The text as tokens, its last [`VALIDATION_FRACTION`] held out (see [`TokenSplit::new`]).
pub fn split_text(tok: &dyn Tokenizer, text: &str, context: usize) -> Result<TokenSplit> {
    let tokens = tok.encode(text)?;
    TokenSplit::new(&tokens, VALIDATION_FRACTION, context)
}

/// Where a run's steps ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Finished {
    /// The training loss's running mean (0.95·m + 0.05·loss per step, from the first step of
    /// this call).
    pub running_loss: f64,
    /// The mean loss over every validation token, in nats per token.
    pub validation_loss: f64,
    /// The generation folder the last save wrote.
    pub generation: PathBuf,
}

/// Trains on random windows of `split.train` until `steps` steps have been taken, saving the
/// checkpoint (with `run_files`, see [`save_run`]) into `out` every `save_every` steps (0: never)
/// and after the last step, then measures the validation loss. A step whose loss is not finite
/// stops the run with an error before anything of it is saved. `progress` sees every step with
/// the running loss and the tokens per second so far. The schedule's decay stays where the run
/// planned it; past it the floor rate holds.
#[allow(clippy::too_many_arguments)]
pub fn continue_run(
    trainer: &mut Trainer<f32>,
    tc: &TrainConfig,
    split: &TokenSplit,
    context: usize,
    steps: usize,
    save_every: usize,
    out: &Path,
    run_files: &[(String, Vec<u8>)],
    progress: &mut dyn Progress,
) -> Result<Finished> {
    let data = Data::Stream { tokens: &split.train, seq_len: context };
    let start = Instant::now();
    let (mut seen, mut running) = (0usize, f64::NAN);
    let mut disk = folder::Disk;
    while trainer.step < steps {
        let r = trainer.step(&data, tc)?;
        if !r.loss.is_finite() || !r.grad_norm.is_finite() {
            return Err(diverged(r.step + 1, &format!("loss {}", r.loss)));
        }
        seen += r.tokens;
        running = if running.is_nan() { r.loss } else { 0.95 * running + 0.05 * r.loss };
        let tokens_per_s = seen as f64 / start.elapsed().as_secs_f64().max(1e-9);
        progress.step(trainer.step, running, Some(tokens_per_s));
        if save_every > 0 && trainer.step.is_multiple_of(save_every) && trainer.step < steps {
            save_run(&mut disk, out, trainer, run_files)?;
        }
    }
    progress.finish();
    let generation = save_run(&mut disk, out, trainer, run_files)?;
    let val = mean_loss(&trainer.model, &covering_windows(&split.validation, context, 32))?;
    Ok(Finished { running_loss: running, validation_loss: val, generation })
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
/// `merges.txt`), refused if the tokenizer is not the one the run recorded or has ids the model
/// has no row for, or if the model would not fit the memory `budget` in bytes. Also returns where
/// the files were found.
pub fn load_for_sampling(
    dir: &Path,
    budget: u64,
) -> Result<(Box<dyn Tokenizer>, Gpt<f32>, Resolved)> {
    let resolved = folder::resolve(dir)?;
    let here = resolved.path.as_path();

    let files = read_tokenizer_files(here)?;
    check_tokenizer(here, &files)?;
    let tok = tokenizer_from_files(here, &files)?;
    let model = super::checkpoint::load_model_checked::<f32>(here, |c| {
        super::budget::check(c, 1, c.context, budget, "--memory-budget")
    })?;
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
    Ok((tok, model, resolved))
}
