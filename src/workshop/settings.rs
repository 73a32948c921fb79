//! A run's settings as `train.json` holds them ([`RunFile`]), written and read back strictly,
//! with the fingerprints of the run's text and tokenizer. Part of [`super::run`], which
//! re-exports every item.

use super::folder;
use crate::ch09_gpt::schedule::Schedule;
use crate::ch09_gpt::train::TrainConfig;
use crate::error::{Error, Result, from_json_object};
use crate::matmul::inputs::{Precision, ProductInputs};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The settings of a run, saved as `train.json` so `resume` can continue it.
pub const RUN_FILE: &str = "train.json";
/// The name a run records for its text when it learns chapter 8's default corpus.
pub const DEFAULT_CORPUS: &str = "<default corpus>";

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
    /// The FNV-1a 64 fingerprint of the text's bytes ([`data_hash`]), which `gpt resume`
    /// checks the text against (absent in runs saved before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_fnv1a64: Option<String>,
    /// The matrix-product kernel the run's steps used (`scalar`, `avx2`, `avx512`): another
    /// kernel rounds differently, so a run resumed on it continues with other bits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// The threads a large product could use (the bits do not depend on it; recorded to say
    /// how the run was made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// Which training step computed the gradients
    /// ([`StepPath::name`](crate::ch09_gpt::train::StepPath::name): `fused`, `reference` or `own`);
    /// absent in runs saved before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_path: Option<String>,
    /// The format of the training step's product inputs (chapter 11's mixed precision: `f32`,
    /// `bf16` or `f16`); absent in runs saved before it was recorded, which trained in f32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    /// The loss scale S the run started with (f16 only; the current S, halved by every
    /// overflow, is in the training state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
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
        data_fnv1a64: None,
        kernel: None,
        threads: None,
        step_path: None,
        precision: None,
        loss_scale: None,
    }
}

/// The training step's precision as `train.json` records it: the inputs' format, and S where
/// the run scales its loss (f16).
pub fn precision_fields(precision: Precision) -> (Option<String>, Option<f64>) {
    let scale = (precision.inputs == ProductInputs::F16).then_some(precision.loss_scale);
    (Some(precision.inputs.name().to_string()), scale)
}

/// The precision `train.json`'s fields `precision` and `loss_scale` describe (`file` names it
/// in errors): f32 when both are absent (a run saved before they were recorded). A name other
/// than `f32`, `bf16`, `f16`, a loss scale beside another format than f16, or one that is not a
/// power of two from 1 to 2^24 is refused.
pub fn precision_from_fields(
    precision: Option<&str>,
    loss_scale: Option<f64>,
    file: &str,
) -> Result<Precision> {
    let fail = |reason: String| Error::Parse { file: file.to_string(), line: None, reason };
    let name = precision.unwrap_or("f32");
    let inputs = ProductInputs::ALL
        .into_iter()
        .find(|p| p.name() == name)
        .ok_or_else(|| fail(format!("precision {name:?} is not f32, bf16 or f16")))?;
    if loss_scale.is_some() && inputs != ProductInputs::F16 {
        return Err(fail(format!("loss_scale is for f16 only, not {name}")));
    }
    let scale = loss_scale.unwrap_or(1.0);
    Precision::new(inputs, scale)
        .map_err(|_| fail(format!("loss_scale {scale} is not a power of two from 1 to 2^24")))
}

/// The fingerprint of a run's text: FNV-1a 64 of its UTF-8 bytes, as 16 hex digits.
pub fn data_hash(text: &str) -> String {
    format!("{:016x}", folder::fnv1a64(text.as_bytes()))
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
/// there is a `train.json`: Hugging Face's folders have none); read within the memory `budget`.
pub fn read_tokenizer_hash(dir: &Path, budget: u64) -> Result<Option<String>> {
    let path = dir.join(RUN_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let bytes = super::budget::read_checkpoint_file(&path, budget)?;
    let file: RunFile = from_json_object(&bytes, &path.display().to_string())?;
    Ok(file.tokenizer_fnv1a64)
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
    /// The text's fingerprint ([`data_hash`]), where the run recorded it.
    pub data_hash: Option<String>,
    /// The kernel the run's steps used, where the run recorded it.
    pub kernel: Option<String>,
    /// The training step's precision with the loss scale the run started with (f32 for a run
    /// saved before precision was recorded).
    pub precision: Precision,
}

/// Reads the text of a `train.json` (`file` names it in errors): an error names the file, the
/// missing, mistyped or unknown field, and the line.
pub fn run_from_json(bytes: &[u8], file: &str) -> Result<RunSettings> {
    let j: RunFile = from_json_object(bytes, file)?;
    let precision = precision_from_fields(j.precision.as_deref(), j.loss_scale, file)?;
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
    Ok(RunSettings {
        data: PathBuf::from(j.data),
        tc,
        context: j.context,
        seed: j.seed,
        data_hash: j.data_fnv1a64,
        kernel: j.kernel,
        precision,
    })
}

/// A folder's `train.json`, read within the memory `budget` (its size checked first) and back
/// with [`run_from_json`].
pub fn read_run(dir: &Path, budget: u64) -> Result<RunSettings> {
    let path = dir.join(RUN_FILE);
    let bytes = super::budget::read_checkpoint_file(&path, budget)?;
    run_from_json(&bytes, &path.display().to_string())
}
