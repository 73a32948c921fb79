//! A training run on a learner's own text, kept in a checkpoint folder: the pieces of
//! `llm-workbook gpt train | resume | sample` (whose flags, progress bar and printing live in the
//! binary, `src/cli/gpt.rs`), as functions a test or another program can call.
//!
//! A run's checkpoint holds the model ([`checkpoint`](crate::ch09_gpt::checkpoint): GPT-2's
//! `config.json` and `model.safetensors`, and the training state), the tokenizer
//! ([`CHARS_FILE`], or a byte-level BPE as GPT-2's `vocab.json` and `merges.txt`), the run's
//! settings ([`RUN_FILE`], so that a run can be continued exactly where it stopped, with the
//! tokenizer's fingerprint) and
//! the loss plot. Every save writes all of them as one generation of the folder
//! ([`folder`]): an interrupted save never mixes two. The last
//! [`VALIDATION_FRACTION`] of the text's tokens is held out: the run reports the mean loss
//! L = −(1/S) Σ ln p(u_s | u_<s) over held-out tokens once its steps are done, on a seeded
//! sample of at most [`VALIDATION_WINDOWS`] windows by default, or over all of them on request
//! ([`Evaluation`]).

use super::folder::{self, Resolved, Sink};
use crate::ch08_tokens::{Tokenizer, corpus};
use crate::ch09_gpt::checkpoint::trainer_files;
use crate::ch09_gpt::data::{Token, TokenSplit};
use crate::ch09_gpt::model::Gpt;
use crate::ch09_gpt::safetensors::SafeTensors;
use crate::ch09_gpt::sample::{Decoding, Generated};
use crate::ch09_gpt::train::{Data, Progress, RunningMean, Throughput, TrainConfig, Trainer};
use crate::error::{Error, Result, from_json_object, invalid};
use crate::rng::Rng;
use crate::simd::KERNEL_ENV;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The share of the text's tokens held out for validation (the last tenth).
pub const VALIDATION_FRACTION: f64 = 0.1;
/// The closing sample continues the first this many validation tokens (fewer if the context is
/// shorter)…
pub const SAMPLE_PROMPT_TOKENS: usize = 16;
/// … by this many tokens…
pub const SAMPLE_TOKENS: usize = 200;
/// … drawn at this temperature, with the generator seeded by 1.
pub const SAMPLE_TEMPERATURE: f64 = 0.8;

// The run's settings, the tokenizer's files and loading a folder for sampling, and the
// validation loss live in files of their own; their items are this module's too, and so is the
// loss plot's file stem.
pub use super::arch::{RunModel, holds_llama};
pub use super::folder::LOSS_PLOT;
pub use super::run_files::*;
pub use super::settings::*;
pub use super::validation::*;

// ───────────────────────────── the run's files ─────────────────────────────

/// `data` as an absolute path (through symbolic links where it exists), so a run can be resumed
/// from any folder; [`DEFAULT_CORPUS`] stays as it is.
pub fn absolute_data_path(data: &Path) -> PathBuf {
    if data.as_os_str() == DEFAULT_CORPUS {
        return data.to_path_buf();
    }
    std::fs::canonicalize(data)
        .or_else(|_| std::path::absolute(data))
        .unwrap_or_else(|_| data.to_path_buf())
}

/// The kernel and thread count products use now, in this process: what a run records.
pub fn machine() -> (String, usize) {
    (crate::simd::active_kernel().name().to_string(), crate::threads::default_threads())
}

/// What every save of a new run writes besides the trainer's files: the tokenizer's files and
/// `train.json` (with the tokenizer's fingerprint, the text's absolute path and fingerprint, and
/// the kernel and threads of this process, see [`machine`]), and the `trainer`'s step path and
/// precision (see [`precision_fields`]).
#[allow(clippy::too_many_arguments)]
pub fn run_files<M: RunModel>(
    tokenizer_files: &[(&'static str, String)],
    data: &Path,
    text: &str,
    tc: &TrainConfig,
    context: usize,
    steps: usize,
    seed: u64,
    trainer: &Trainer<f32, M>,
) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> =
        tokenizer_files.iter().map(|(n, c)| (n.to_string(), c.as_bytes().to_vec())).collect();
    let (kernel, threads) = machine();
    let (precision, loss_scale) = precision_fields(trainer.precision());
    let run = RunFile {
        data_fnv1a64: Some(data_hash(text)),
        kernel: Some(kernel),
        threads: Some(threads),
        step_path: Some(trainer.path().name().to_string()),
        precision,
        loss_scale,
        ..run_file(&absolute_data_path(data), tc, context, steps, seed)
    };
    let run = run_json_with_tokenizer(run, &files);
    files.push((RUN_FILE.to_string(), run_text(&run).into_bytes()));
    files
}

/// The text at `data` ([`DEFAULT_CORPUS`]: chapter 8's default corpus): UTF-8 and not empty.
pub fn read_text(data: &Path) -> Result<String> {
    if data.as_os_str() == DEFAULT_CORPUS {
        Ok(corpus::default_corpus().to_string())
    } else {
        corpus::load(data)
    }
}

/// [`read_text`] within the memory `budget` in bytes: a text whose memory (see
/// [`super::budget::text_bytes`]; with `kind` a BPE, the BPE's training counted) exceeds it is
/// refused before it is read, naming `--data`; a file that is not a regular file (a pipe,
/// `/dev/zero`) is read with that cap.
pub fn read_text_within(data: &Path, kind: TokenizerKind, budget: u64) -> Result<String> {
    if data.as_os_str() == DEFAULT_CORPUS {
        return read_text(data);
    }
    let per_byte = match kind {
        TokenizerKind::Char => super::budget::TEXT_BYTES_PER_BYTE,
        TokenizerKind::Bpe => super::budget::BPE_TEXT_BYTES_PER_BYTE,
    };
    let bytes = super::budget::read_file(data, per_byte, budget, "--data")?;
    corpus::from_bytes(&data.display().to_string(), bytes)
}

// ───────────────────────────── train and resume ─────────────────────────────

/// A run read back from its folder, ready to continue: chapter 9's GPT unless another
/// [`RunModel`] is named.
pub struct OpenRun<M: RunModel = Gpt<f32>> {
    /// Where its files were found (the current generation, or a folder of the older layout).
    pub resolved: Resolved,
    /// Its settings.
    pub settings: RunSettings,
    /// Its text.
    pub text: String,
    /// Its tokenizer.
    pub tokenizer: Box<dyn Tokenizer>,
    /// The trainer at the step the folder was saved at: the same state, bit for bit.
    pub trainer: Trainer<f32, M>,
    /// What every later save writes again besides the trainer: the tokenizer's files and
    /// `train.json` (with what it lacked filled in: the fingerprints, the kernel and threads,
    /// and the text's new path when `--data` moved it).
    pub run_files: Vec<(String, Vec<u8>)>,
    /// A one-line note for the terminal when this process multiplies with another kernel than
    /// the one the run recorded (the continued run's bits then differ from an uninterrupted
    /// run's).
    pub kernel_note: Option<String>,
}

/// [`open_run_with`] reading the text from where `train.json` says it is.
pub fn open_run(dir: &Path, budget: u64) -> Result<OpenRun> {
    open_run_with(dir, budget, None)
}

/// [`open_run_with`] for a run of any [`RunModel`] (a Llama folder: `Decoder<f32>`).
pub fn open_run_of<M: RunModel>(
    dir: &Path,
    budget: u64,
    data: Option<&Path>,
) -> Result<OpenRun<M>> {
    open_run_impl(dir, budget, data)
}

/// Reads a run's folder back: settings, text, tokenizer (checked against the fingerprint
/// `train.json` records), model and training state, all from one generation. The text is read
/// from `data` when given (`gpt resume --data`), else from the path `train.json` records; either
/// way it must have the fingerprint the run recorded. The sizes of `config.json` and
/// `train.json` are checked against the memory `budget` in bytes (see [`super::budget`]) and the
/// tensors' shapes before anything is built.
pub fn open_run_with(dir: &Path, budget: u64, data: Option<&Path>) -> Result<OpenRun> {
    open_run_impl(dir, budget, data)
}

fn open_run_impl<M: RunModel>(dir: &Path, budget: u64, data: Option<&Path>) -> Result<OpenRun<M>> {
    let resolved = folder::resolve(dir)?;
    let here = resolved.path.as_path();
    refuse_finetuned(here, dir, "gpt resume")?;
    // Every file is read within the budget, its size checked before a byte is read.
    let read_bytes = |name: &str| super::budget::read_checkpoint_file(&here.join(name), budget);
    let run_path = here.join(RUN_FILE);
    let mut run = read_bytes(RUN_FILE)?;
    let settings = run_from_json(&run, &run_path.display().to_string())?;
    let file: RunFile = from_json_object(&run, &run_path.display().to_string())?;
    let config_name = here.join(crate::ch09_gpt::checkpoint::CONFIG_FILE).display().to_string();
    let config_bytes = read_bytes(crate::ch09_gpt::checkpoint::CONFIG_FILE)?;
    let text = read_run_text(&settings, data, budget)?;
    let mut run_files = read_tokenizer_files(here, budget)?;
    check_tokenizer_against(here, file.tokenizer_fnv1a64.clone(), &run_files)?;
    let tokenizer = tokenizer_from_files(here, &run_files)?;
    let (batch, context) = (settings.tc.batch, settings.context);
    // The two safetensors files are read once each, their sizes checked against the budget
    // first; the model's and the text's memory checked before anything is built.
    let read = |name: &str| -> Result<SafeTensors> {
        SafeTensors::parse(read_bytes(name)?, &here.join(name).display().to_string())
    };
    let model_file = read(crate::ch09_gpt::checkpoint::MODEL_FILE)?;
    let mut check = |config: &crate::ch09_gpt::config::Config| {
        if settings.context > config.context {
            let why = format!(
                "context {} is longer than the model's n_positions {}",
                settings.context, config.context
            );
            return Err(invalid("gpt resume", "train.json", why));
        }
        super::budget::check_with_text(config, batch, context, text.len(), false, budget)
    };
    let model = M::from_folder(&config_bytes, &config_name, &model_file, &mut check)?;
    let mut fresh = Trainer::new(model.clone(), &settings.tc, settings.seed)?;
    // The run's precision; the loss scale it had reached comes with the training state.
    fresh.set_precision(settings.precision).map_err(|_| {
        let why = "mixed precision needs the fused step, which does not cover this model";
        invalid(
            "gpt resume",
            "train.json",
            format!("precision {}: {why}", settings.precision.label()),
        )
    })?;
    let state = read(crate::ch09_gpt::checkpoint::STATE_FILE)?;
    let trainer =
        crate::ch09_gpt::checkpoint::trainer_from_state(model, &model_file, &state, &fresh)?;
    let (kernel, threads) = machine();
    let kernel_note = settings.kernel.as_ref().filter(|&k| *k != kernel).map(|k| {
        format!(
            "note: this run's steps so far used the {k} kernel and this process uses {kernel}; \
             the two round differently, so the resumed run's bits will differ from an \
             uninterrupted run's ({KERNEL_ENV}={k} forces the recorded one where the CPU has it)"
        )
    });
    // A run of an older layout, or a text that moved: from its next save on, train.json
    // records what it lacked (the first kernel recorded stays).
    let mut updated = run_json_with_tokenizer(file.clone(), &run_files);
    if file.tokenizer_fnv1a64.is_some() {
        updated.tokenizer_fnv1a64 = file.tokenizer_fnv1a64.clone();
    }
    updated.data_fnv1a64 = Some(data_hash(&text));
    if let Some(d) = data {
        updated.data = absolute_data_path(d).display().to_string();
    }
    updated.kernel = Some(file.kernel.clone().unwrap_or(kernel));
    updated.threads = Some(file.threads.unwrap_or(threads));
    if file.precision.is_none() {
        (updated.precision, updated.loss_scale) = precision_fields(settings.precision);
    }
    if updated != file {
        run = run_text(&updated).into_bytes();
    }
    run_files.push((RUN_FILE.to_string(), run));
    Ok(OpenRun { resolved, settings, text, tokenizer, trainer, run_files, kernel_note })
}

/// The text of a run being resumed: from `data` if given, else from the recorded path (relative
/// paths of older runs are read from the current folder), within the memory `budget` (see
/// [`read_text_within`]; the tokenizer only encodes it). Refused, naming `--data`, when it
/// cannot be read or its fingerprint is not the one the run recorded.
pub fn read_run_text(settings: &RunSettings, data: Option<&Path>, budget: u64) -> Result<String> {
    let path = data.unwrap_or(&settings.data);
    let text = read_text_within(path, TokenizerKind::Char, budget).map_err(|e| {
        if super::budget::is_over_budget(&e) {
            return e;
        }
        // The reason alone: the error names the file already.
        let reason = match e {
            Error::Io { source, .. } => source.to_string(),
            Error::Parse { reason, .. } => reason,
            other => other.to_string(),
        };
        let reason = reason.split(" (os error").next().unwrap_or_default().to_string();
        let file = path.display().to_string();
        let reason = format!("cannot be read ({reason}); give --data PATH to point at it");
        Error::Parse { file, line: None, reason }
    })?;
    if let Some(want) = &settings.data_hash {
        let found = data_hash(&text);
        if &found != want {
            let reason = format!(
                "{} is not the text this run was trained on (fingerprint {found})",
                path.display()
            );
            return Err(Error::Parse { file: "--data".into(), line: None, reason });
        }
    }
    Ok(text)
}

/// Saves a trainer with the run's other files (`run_files`: tokenizer, `train.json`) as the
/// next generation of `out` through `sink`; returns the generation's folder. A model holding a
/// NaN or ±∞ is refused and nothing is written.
pub fn save_run<M: RunModel>(
    sink: &mut dyn Sink,
    out: &Path,
    trainer: &Trainer<f32, M>,
    run_files: &[(String, Vec<u8>)],
) -> Result<PathBuf> {
    save_run_with(sink, out, trainer, run_files, &mut |_| Ok(()))
}

/// [`save_run`], with `finish` writing more files (the loss plot) into the generation before it
/// is committed (see [`folder::save_generation_with`]).
pub fn save_run_with<M: RunModel>(
    sink: &mut dyn Sink,
    out: &Path,
    trainer: &Trainer<f32, M>,
    run_files: &[(String, Vec<u8>)],
    finish: &mut dyn FnMut(&Path) -> Result<()>,
) -> Result<PathBuf> {
    if !trainer.model.all_finite() {
        return Err(diverged(trainer.step));
    }
    let mut files = trainer_files(trainer)?;
    files.extend(run_files.iter().cloned());
    folder::save_generation_with(sink, out, &files, finish)
}

/// The one-line error of a run that diverged at `step` (a loss, or weights, not finite: the
/// advice is the same).
fn diverged(step: usize) -> Error {
    let reason = format!(
        "diverged at step {step}, nothing saved: try a smaller learning rate (max_lr in {RUN_FILE})"
    );
    Error::Parse { file: "--lr".to_string(), line: None, reason }
}

/// The text as tokens, its last [`VALIDATION_FRACTION`] held out (see
/// [`TokenSplit::from_tokens`]): the ids are held once, the two parts are slices of them.
/// A text too short for one window is refused naming `--data` and the part that is short.
pub fn split_text(tok: &dyn Tokenizer, text: &str, context: usize) -> Result<TokenSplit> {
    TokenSplit::from_tokens(tok.encode(text)?, VALIDATION_FRACTION, context).map_err(|e| match e {
        Error::InvalidValue { arg, reason, .. } if arg.starts_with("corpus") => {
            let part = arg.trim_start_matches("corpus (its ").trim_end_matches(')');
            Error::Parse {
                file: "--data".into(),
                line: None,
                reason: format!("its {part} {reason}"),
            }
        }
        other => other,
    })
}

/// What the last save of [`continue_run`] calls with the trainer and the generation's
/// temporary folder (the loss plot).
pub type LastSave<'a, M> = dyn FnMut(&Trainer<f32, M>, &Path) -> Result<()> + 'a;

/// Where a run's steps ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Finished {
    /// The training loss's running mean ([`RunningMean`], over the steps of this call).
    pub running_loss: f64,
    /// The generation folder the last save wrote.
    pub generation: PathBuf,
    /// The steps' speed ([`Throughput`]).
    pub speed: Throughput,
}

/// Trains on random windows of `split.train` until `steps` steps have been taken, saving the
/// checkpoint (with `run_files`, see [`save_run`]) into `out` every `save_every` steps (0: never)
/// and after the last step, whose save `last_save` may add files to (the loss plot: it is
/// called with the trainer and the generation's temporary folder before the save is committed).
/// Measure the validation loss with [`validation_loss`]. A step whose loss is not finite
/// stops the run with an error before anything of it is saved (a step that meets weights made
/// non-finite by the step before, too). `progress` sees every step with the running loss
/// ([`RunningMean`]) and the tokens per second so far ([`Throughput`]). The schedule's decay
/// stays where the run planned it; past it the floor rate holds.
#[allow(clippy::too_many_arguments)]
pub fn continue_run<M: RunModel>(
    trainer: &mut Trainer<f32, M>,
    tc: &TrainConfig,
    split: &TokenSplit,
    context: usize,
    steps: usize,
    save_every: usize,
    out: &Path,
    run_files: &[(String, Vec<u8>)],
    progress: &mut dyn Progress,
    last_save: &mut LastSave<'_, M>,
) -> Result<Finished> {
    let data = Data::Stream { tokens: split.train(), seq_len: context };
    let (mut speed, mut running) = (Throughput::default(), RunningMean::default());
    let mut disk = folder::Disk;
    while trainer.step < steps {
        let start = Instant::now();
        // A step whose weights went non-finite in the previous update fails inside the forward
        // pass: that is the run diverging too, and is said so.
        let r = trainer.step(&data, tc).map_err(|e| match e {
            Error::NonFinite { .. } => diverged(trainer.step + 1),
            other => other,
        })?;
        speed.add(r.tokens, start.elapsed().as_secs_f64());
        // A step skipped for an overflowing scaled gradient (chapter 11) is not a divergence.
        if !r.loss.is_finite() || (!r.grad_norm.is_finite() && !r.skipped) {
            return Err(diverged(r.step + 1));
        }
        let mean = running.add(r.loss);
        progress.step(trainer.step, mean, speed.per_second());
        if save_every > 0 && trainer.step.is_multiple_of(save_every) && trainer.step < steps {
            save_run(&mut disk, out, trainer, run_files)?;
        }
    }
    progress.finish();
    let trained: &Trainer<f32, M> = trainer;
    let mut finish = |tmp: &Path| last_save(trained, tmp);
    let generation = save_run_with(&mut disk, out, trained, run_files, &mut finish)?;
    Ok(Finished { running_loss: running.value(), generation, speed })
}

/// The run's closing sample: the first validation tokens as the prompt (see
/// [`SAMPLE_PROMPT_TOKENS`]) and what the model writes after them. Returns (prompt, generation).
pub fn closing_sample<M: RunModel>(
    model: &M,
    validation: &[Token],
    context: usize,
) -> Result<(Vec<Token>, Generated)> {
    let prompt: Vec<Token> = validation[..context.min(SAMPLE_PROMPT_TOKENS)].to_vec();
    let decoding = Decoding::temperature(SAMPLE_TEMPERATURE);
    let g = model.continue_prompt(&prompt, SAMPLE_TOKENS, &decoding, &mut Rng::new(1))?;
    Ok((prompt, g))
}

/// The file a fine-tuned checkpoint holds in place of `train.json`: how it was made.
pub const FINETUNE_FILE: &str = "finetune.json";

/// Refuses, naming `--checkpoint`, a folder's files in `here` that `gpt finetune` wrote
/// (`op` is the command refusing): they hold no training state to resume.
pub fn refuse_finetuned(here: &Path, dir: &Path, op: &'static str) -> Result<()> {
    if here.join(FINETUNE_FILE).exists() {
        let why = format!("{}: gpt finetune made it; it holds no state to resume", dir.display());
        return Err(invalid(op, "--checkpoint", why));
    }
    Ok(())
}
