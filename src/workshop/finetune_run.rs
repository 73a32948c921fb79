//! `gpt finetune`'s run: a loaded model fine-tuned on the reader's examples
//! ([`super::finetune`]), in full or through LoRA adapters, by supervised fine-tuning or by DPO,
//! and saved as a checkpoint folder that `gpt sample` reads.
//!
//! Both ways reuse chapter 9's step: its fused loss and gradients (or the reference pass, for a
//! model the fused step does not cover), gradient-norm clipping at 1, AdamW on a warm-up and
//! cosine schedule ([`super::run::train_config`]).
//!
//! - **Full** (`--lora-rank 0`): chapter 9's [`Trainer::step_on`] on each batch (DPO:
//!   [`Trainer::step_weighted`]); every parameter trains, AdamW's decay on the matrices as in
//!   pretraining.
//! - **LoRA** (`--lora-rank r`): chapter 13's adapters W + (α/r)AᵀBᵀ on every block's W_QKV,
//!   W_O, W₁ and W₂ ([`LoraGpt`]), A random and B zero, so the first step starts from the loaded
//!   model exactly. The step's ∂L/∂W of each merged matrix goes to A and B by
//!   [`lora_weight_backward`]; the rows of characters the file added to the vocabulary train in
//!   full beside them (they start as guesses, and a frozen guess cannot be learned around);
//!   everything else stays frozen ([`lora_gradients`]). AdamW without decay on what trains. The
//!   checkpoint holds the merged weights: `gpt sample` needs nothing new, and the adapters are
//!   not kept.
//! - **DPO** (a file of preference pairs), either way: π_ref is the loaded model, its sequence
//!   log-probabilities of every pair computed once before the first step; each step's weights
//!   w_r = −∂L/∂ℓ_r come from chapter 13's [`dpo_weights`] (see [`finetune`]).
//!
//! A run saves once, at its end, through the folder's writer ([`folder::save_generation_with`]:
//! a generation and its pointer), with the model, the tokenizer, the loss plot and
//! [`FINETUNE_FILE`]. It has no training state: running `gpt finetune` again on its folder
//! continues from its weights with a fresh optimizer and schedule (not the bits one longer run
//! would give); `gpt resume` refuses it.

use super::finetune::{Example, Mode, batch_of, draw, seq_len};
use super::folder::{self, Disk};
use super::run::{FINETUNE_FILE, RUN_FILE, train_config};
use crate::ch09_gpt::checkpoint::model_files;
use crate::ch09_gpt::data::Batch;
use crate::ch09_gpt::fast::FusedStep;
use crate::ch09_gpt::model::{Gpt, Param};
use crate::ch09_gpt::schedule::clip_global_norm;
use crate::ch09_gpt::train::{
    Progress, RunningMean, StepPath, StepRecord, Throughput, TrainConfig, Trainer,
};
use crate::ch13_finetune::feedback::{
    PreferenceSummary, dpo_weights, pair_sums, preference_summary,
};
use crate::ch13_finetune::lora::lora_weight_backward;
use crate::ch13_finetune::stages::LoraGpt;
use crate::error::{Error, Result, invalid};
use crate::float::Float;
use crate::optim::{AdamConfig, AdamW};
use crate::rng::Rng;
use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// β of the DPO loss when none is asked for.
pub const DEFAULT_BETA: f64 = 0.1;

/// How to fine-tune.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Steps.
    pub steps: usize,
    /// Examples per batch (pairs, for DPO).
    pub batch: usize,
    /// The schedule's peak learning rate.
    pub lr: f64,
    /// The seed of the batches, the adapters' A and the new rows' noise.
    pub seed: u64,
    /// LoRA's rank r; 0 fine-tunes every parameter.
    pub lora_rank: usize,
    /// LoRA's α (the update is scaled by α/r).
    pub lora_alpha: f64,
    /// DPO's β (read for preference pairs only).
    pub beta: f64,
}

/// What DPO did to the file's pairs: their [`PreferenceSummary`] before the first step (the
/// policy is π_ref then: margin 0) and after the last, over every pair of the file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Preferences {
    /// The pairs measured.
    pub pairs: usize,
    /// Before the first step.
    pub before: PreferenceSummary,
    /// After the last step.
    pub after: PreferenceSummary,
}

/// What a run produced.
pub struct Tuned {
    /// The model (merged, for LoRA) with one record a step in its history; its optimizer is
    /// the full run's (LoRA: a fresh one, unused).
    pub trainer: Trainer<f32>,
    /// Wall-clock seconds of the steps.
    pub seconds: f64,
    /// The values that trained: every parameter, or the adapters and the added rows.
    pub trainable: usize,
    /// The running mean of the loss at the end ([`RunningMean`]).
    pub running_loss: f64,
    /// DPO's measure of the pairs (None for SFT).
    pub preferences: Option<Preferences>,
}

/// The sequence log-probabilities (ln π(y_w), ln π(y_l)) of the pairs `picks` (indices into
/// `examples`, each with a rejected answer) under `model`, by the fused forward pass, `chunk`
/// pairs a batch of T = `seq_len` ([`batch_of`] with pairs, then [`pair_sums`]).
pub fn pair_log_probs(
    model: &Gpt<f32>,
    examples: &[Example],
    picks: &[usize],
    seq_len: usize,
    chunk: usize,
) -> Result<Vec<(f64, f64)>> {
    let mut fused = FusedStep::<f32>::new();
    let mut out = Vec::with_capacity(picks.len());
    for part in picks.chunks(chunk.max(1)) {
        let batch = batch_of(examples, part, seq_len, true);
        out.extend(pair_sums(&batch, &fused.target_log_probs(model, &batch)?));
    }
    Ok(out)
}

/// Fine-tunes `model` on `examples` of `mode` as `s` says (see the module's text); `added`
/// lists the ids of the rows the vocabulary gained (trained beside LoRA's adapters). `progress`
/// sees every step. A loss or gradient that is not finite stops the run, naming `--lr`.
///
/// DPO: π_ref is `model` as it is given; the sequence log-probabilities of every pair under it
/// are computed once, before the first step ([`pair_log_probs`]). Each step draws `s.batch`
/// pairs, computes ℓ at every position under the policy, the mean loss
/// L = (1/P) Σ_p −ln σ(m_p) and its weights w_r = −∂L/∂ℓ_r ([`dpo_weights`]), and steps on
/// the weighted loss Σ_r w_r·(−ℓ_r), whose gradient is ∂L/∂θ.
pub fn finetune(
    model: Gpt<f32>,
    examples: &[Example],
    mode: Mode,
    added: &[usize],
    s: &Settings,
    progress: &mut dyn Progress,
) -> Result<Tuned> {
    if examples.is_empty() {
        return Err(Error::Empty { op: "finetune", arg: "examples" });
    }
    let pairs = mode == Mode::Dpo;
    if pairs && !(s.beta.is_finite() && s.beta > 0.0) {
        return Err(invalid(
            "gpt finetune",
            "--beta",
            format!("must be finite and > 0, got {}", s.beta),
        ));
    }
    if pairs && examples.iter().any(|e| e.rejected.is_none()) {
        return Err(invalid("gpt finetune", "--data", "a DPO example lacks its rejected answer"));
    }
    let tc = train_config(s.batch, s.lr, s.steps)?;
    let t = seq_len(examples);
    let every: Vec<usize> = (0..examples.len()).collect();
    // π_ref's log-probabilities of every pair, once: the start model is π_ref.
    let reference =
        if pairs { pair_log_probs(&model, examples, &every, t, s.batch)? } else { Vec::new() };
    let mut rng = Rng::new(s.seed);
    let next = |rng: &mut Rng| {
        let picks = draw(examples.len(), s.batch, rng);
        let refs: Vec<(f64, f64)> =
            picks.iter().filter_map(|&i| reference.get(i).copied()).collect();
        (batch_of(examples, &picks, t, pairs), refs)
    };
    let (trainer, seconds, trainable, running_loss) = if s.lora_rank == 0 {
        let trainable = model.params.iter().map(|m| m.len()).sum();
        let mut trainer = Trainer::new(model, &tc, s.seed)?;
        let mut speed = Throughput::default();
        let mut running = RunningMean::default();
        while trainer.step < s.steps {
            let (batch, refs) = next(&mut rng);
            let start = Instant::now();
            let r = if pairs {
                let ell = trainer.target_log_probs(&batch)?;
                let (loss, weights) = dpo_weights(&batch, &ell, &refs, s.beta)?;
                let mut r = trainer.step_weighted(&batch, &weights, &tc)?;
                // The record holds the DPO loss, not the weighted sum the step minimised.
                r.loss = loss;
                if let Some(last) = trainer.history.last_mut() {
                    last.loss = loss;
                }
                r
            } else {
                trainer.step_on(&batch, &tc)?
            };
            speed.add(r.tokens, start.elapsed().as_secs_f64());
            check_finite(&r)?;
            progress.step(trainer.step, running.add(r.loss), speed.per_second());
        }
        progress.finish();
        (trainer, speed.seconds, trainable, running.value())
    } else {
        let mut lora = LoraGpt::new(model, s.lora_rank, s.lora_alpha, s.seed)?;
        let mut trainer = Trainer::new(lora.merged()?, &tc, s.seed)?;
        let rows = |m: &DMatrix<f32>| {
            DMatrix::from_fn(added.len(), m.ncols(), |i, j| f64::from(m[(added[i], j)]))
        };
        // The added rows of W_E (and W_U when untied), trained in full beside the adapters.
        let mut new_rows = vec![rows(trainer.model.wte())];
        if let Some(h) = trainer.model.lm_head() {
            new_rows.push(rows(h));
        }
        let adam = AdamConfig {
            learning_rate: s.lr,
            beta1: tc.beta1,
            beta2: tc.beta2,
            epsilon: tc.epsilon,
        };
        let mut optimizer = AdamW::<f64>::new(adam, 0.0)?;
        let mut fused = FusedStep::<f32>::new();
        let (mut speed, mut running) = (Throughput::default(), RunningMean::default());
        let mut trainable: usize =
            lora.adapters.iter().map(|(_, _, l)| l.a.len() + l.b.len()).sum::<usize>();
        trainable +=
            new_rows.iter().map(|m| m.len()).sum::<usize>() * usize::from(!added.is_empty());
        for step in 0..s.steps {
            let (batch, refs) = next(&mut rng);
            let start = Instant::now();
            let model = &mut trainer.model;
            let (loss, mut grads) = if pairs {
                let ell = fused.target_log_probs(model, &batch)?;
                let (loss, weights) = dpo_weights(&batch, &ell, &refs, s.beta)?;
                let on = Loss::Weighted(&weights);
                (loss, lora_gradients(&mut fused, model, &batch, on, &lora, added)?.1)
            } else {
                lora_gradients(&mut fused, model, &batch, Loss::Mean, &lora, added)?
            };
            let grad_norm = clip_global_norm(&mut grads.iter_mut().collect::<Vec<_>>(), 1.0)?;
            let lr = tc.schedule.at(step);
            optimizer.config.learning_rate = lr;
            let mut params: Vec<&mut DMatrix<f64>> =
                lora.adapters.iter_mut().flat_map(|(_, _, l)| [&mut l.a, &mut l.b]).collect();
            if !added.is_empty() {
                params.extend(new_rows.iter_mut());
            }
            let refs: Vec<&DMatrix<f64>> = grads.iter().collect();
            optimizer.step(&mut params, &refs, &vec![false; refs.len()])?;
            for (p, layer, l) in &lora.adapters {
                *model.params.of_mut(*p, *layer) = l.merged()?.map(|x| x as f32);
            }
            let targets = [Param::Wte, Param::LmHead];
            for (m, p) in new_rows.iter().zip(targets).filter(|_| !added.is_empty()) {
                if let Some(w) = model.params.get_mut(p, None) {
                    for (i, &id) in added.iter().enumerate() {
                        for j in 0..w.ncols() {
                            w[(id, j)] = m[(i, j)] as f32;
                        }
                    }
                }
            }
            speed.add(batch.inputs.len(), start.elapsed().as_secs_f64());
            let tokens = batch.inputs.len();
            let r = StepRecord { step, loss, lr, grad_norm, tokens, skipped: false };
            check_finite(&r)?;
            trainer.history.push(r);
            trainer.step += 1;
            progress.step(trainer.step, running.add(loss), speed.per_second());
        }
        progress.finish();
        (trainer, speed.seconds, trainable, running.value())
    };
    let preferences = if pairs {
        let after = pair_log_probs(&trainer.model, examples, &every, t, s.batch)?;
        Some(Preferences {
            pairs: examples.len(),
            before: preference_summary(&reference, &reference, s.beta)?,
            after: preference_summary(&after, &reference, s.beta)?,
        })
    } else {
        None
    };
    Ok(Tuned { trainer, seconds, trainable, running_loss, preferences })
}

/// Which loss [`lora_gradients`] differentiates.
#[derive(Clone, Copy, Debug)]
pub enum Loss<'a> {
    /// The mean cross-entropy over the scored positions (SFT).
    Mean,
    /// Σ_r w_r·(−ℓ_r), one weight a position (DPO's weights, [`dpo_weights`]).
    Weighted(&'a [f64]),
}

/// The loss `on` of `batch` under `model` (the merged model of `lora`) and the gradients of
/// what LoRA trains, in the optimizer's order: each adapter's ∂L/∂A (r×d_in) and ∂L/∂B
/// (d_out×r), from its merged matrix's ∂L/∂W by [`lora_weight_backward`]; then, when the
/// vocabulary gained the rows `added`, those rows of ∂L/∂W_E (|added|×d), and of ∂L/∂W_U when
/// the model's W_U is a tensor of its own. With W_E tied to the output, the rows' gradient is
/// the sum of both uses, as the fused step gives it. The mean loss falls back on the reference
/// pass for a model the fused step does not cover; the weighted one errors there, naming
/// `model`, as [`FusedStep::weighted_loss_and_grads`] does.
pub fn lora_gradients<T: Float>(
    fused: &mut FusedStep<T>,
    model: &Gpt<T>,
    batch: &Batch,
    on: Loss<'_>,
    lora: &LoraGpt,
    added: &[usize],
) -> Result<(f64, Vec<DMatrix<f64>>)> {
    let mut reference;
    let (loss, grads): (f64, &mut [DMatrix<T>]) = match on {
        Loss::Weighted(w) => fused.weighted_loss_and_grads(model, batch, w)?,
        Loss::Mean if StepPath::of(model) == StepPath::Fused => {
            fused.loss_and_grads(model, batch)?
        }
        Loss::Mean => {
            reference = model.loss_and_grads(batch)?;
            (reference.loss, &mut reference.grads)
        }
    };
    let mut out = Vec::new();
    for (p, layer, l) in &lora.adapters {
        let g = grads[model.params.at(*p, *layer)].map(|x| x.as_f64());
        let (d_a, d_b) = lora_weight_backward(l, &g)?;
        out.extend([d_a, d_b]);
    }
    if !added.is_empty() {
        let untied = model.lm_head().is_some();
        let tensors = if untied { vec![Param::Wte, Param::LmHead] } else { vec![Param::Wte] };
        for p in tensors {
            let g = &grads[model.params.at(p, 0)];
            out.push(DMatrix::from_fn(added.len(), g.ncols(), |i, j| g[(added[i], j)].as_f64()));
        }
    }
    Ok((loss, out))
}

/// Refuses a step whose loss or gradient norm is not finite: the run diverged.
fn check_finite(r: &StepRecord) -> Result<()> {
    if r.loss.is_finite() && r.grad_norm.is_finite() {
        return Ok(());
    }
    let reason = format!("diverged at step {}, nothing saved: try a smaller --lr", r.step + 1);
    Err(Error::Parse { file: "--lr".into(), line: None, reason })
}

/// A fine-tuned checkpoint's `finetune.json`: where it came from and how it was made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinetuneFile {
    /// `SFT` or `DPO`.
    pub mode: String,
    /// The checkpoint folder fine-tuned (absolute).
    pub checkpoint: String,
    /// The examples' file (absolute).
    pub data: String,
    /// The FNV-1a 64 fingerprint of its bytes.
    pub data_fnv1a64: String,
    /// Its examples.
    pub examples: usize,
    /// The end marker appended to every answer.
    pub end: String,
    /// The characters the vocabulary gained.
    pub added: String,
    /// Steps.
    pub steps: usize,
    /// Examples per batch.
    pub batch: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Seed.
    pub seed: u64,
    /// LoRA's rank (0: full fine-tuning).
    pub lora_rank: usize,
    /// LoRA's α, with a rank.
    pub lora_alpha: Option<f64>,
    /// The values that trained.
    pub trainable: usize,
    /// The loss's running mean at the end: nats per answer token (SFT), or the DPO loss.
    pub final_loss: f64,
    /// DPO's β (absent for SFT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<f64>,
    /// What DPO did to the file's pairs (absent for SFT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferences: Option<PreferenceRecord>,
}

/// [`Preferences`] as `finetune.json` records them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreferenceRecord {
    /// The pairs measured: every pair of the file.
    pub pairs: usize,
    /// The share the model ranks right itself, ln π(y_w) > ln π(y_l), before and after.
    pub preferred: [f64; 2],
    /// The mean of ln π(y_w) − ln π(y_l), before and after.
    pub log_ratio: [f64; 2],
    /// The mean implicit reward margin, before (0) and after.
    pub margin: [f64; 2],
    /// The share with a margin > 0, before (0) and after.
    pub ranked: [f64; 2],
}

impl PreferenceRecord {
    /// The record of `p`.
    pub fn of(p: &Preferences) -> PreferenceRecord {
        let (b, a) = (&p.before, &p.after);
        PreferenceRecord {
            pairs: p.pairs,
            preferred: [b.preferred, a.preferred],
            log_ratio: [b.log_ratio, a.log_ratio],
            margin: [b.margin, a.margin],
            ranked: [b.ranked, a.ranked],
        }
    }
}

/// Saves `tuned`'s model with the tokenizer's files `tokenizer_files` and `record` as the next
/// generation of `out` (whose lock the caller holds), the loss plot drawn into it before the
/// commit; returns the generation's folder.
pub fn save(
    out: &Path,
    tuned: &Tuned,
    tokenizer_files: &[(String, Vec<u8>)],
    record: &FinetuneFile,
) -> Result<PathBuf> {
    let model = &tuned.trainer.model;
    for (_, m) in model.tensors() {
        if m.iter().any(|x| !x.is_finite()) {
            let reason = "the weights hold NaN or ±∞, nothing saved: try a smaller --lr";
            return Err(Error::Parse { file: "--lr".into(), line: None, reason: reason.into() });
        }
    }
    let step = tuned.trainer.step.to_string();
    let mut files = model_files(model, &[("step".into(), step)])?;
    files.extend(tokenizer_files.iter().filter(|f| f.0 != RUN_FILE).cloned());
    let json = serde_json::to_string_pretty(record)
        .map_err(|e| invalid("gpt finetune", FINETUNE_FILE, e.to_string()))?;
    files.push((FINETUNE_FILE.to_string(), format!("{json}\n").into_bytes()));
    let trainer = &tuned.trainer;
    let mut plot = |tmp: &Path| crate::ch09_gpt::book::save_loss_plot(trainer, tmp).map(|_| ());
    folder::save_generation_with(&mut Disk, out, &files, &mut plot)
}

/// The training configuration a run of `s` follows (see [`train_config`]).
pub fn config_of(s: &Settings) -> Result<TrainConfig> {
    train_config(s.batch, s.lr, s.steps)
}

/// A checkpoint read for fine-tuning.
pub struct Loaded {
    /// Its model, in f32.
    pub model: Gpt<f32>,
    /// Its tokenizer's files (name, contents).
    pub tokenizer_files: Vec<(String, Vec<u8>)>,
    /// Where its files were found.
    pub resolved: folder::Resolved,
}

/// Reads the checkpoint folder `dir` for fine-tuning, every file within the memory `budget`:
/// its tokenizer (checked against the fingerprint its `train.json` records, if any) and its f32
/// GPT-2 model. Refused, naming `--checkpoint`, when it is a `gpt quantize` output (stored
/// weights do not train) or a Llama (chapter 12's decoder: `gpt finetune` trains chapter 9's
/// GPT). The model's memory is checked by the caller, once the vocabulary is final.
pub fn load(dir: &Path, budget: u64) -> Result<Loaded> {
    use crate::ch09_gpt::checkpoint::{
        CONFIG_FILE, MODEL_FILE, check_header_against_config, config_from_json,
        model_from_safetensors,
    };
    use crate::ch09_gpt::safetensors::SafeTensors;
    const OP: &str = "gpt finetune";
    folder::read_consistent(dir, |resolved| {
        let here = resolved.path.as_path();
        let read = |name: &str| super::budget::read_checkpoint_file(&here.join(name), budget);
        let config_bytes = read(CONFIG_FILE)?;
        let config_name = here.join(CONFIG_FILE).display().to_string();
        let kind =
            crate::ch11_precision::quant_file::storage_of_config(&config_bytes, &config_name)?;
        if kind != crate::ch11_precision::quant::Storage::F32 {
            let why = format!(
                "{}: stored as {}; fine-tune the f32 checkpoint",
                dir.display(),
                kind.name()
            );
            return Err(invalid(OP, "--checkpoint", why));
        }
        let value: serde_json::Value = serde_json::from_slice(&config_bytes).unwrap_or_default();
        if value.get("model_type").and_then(|v| v.as_str()) == Some("llama") {
            let why = format!("{}: a Llama; gpt finetune trains GPT-2 checkpoints", dir.display());
            return Err(invalid(OP, "--checkpoint", why));
        }
        let config = config_from_json(&config_bytes, &config_name)?;
        let tokenizer_files = super::run::read_tokenizer_files(here, budget)?;
        super::run::check_tokenizer(here, &tokenizer_files, budget)?;
        let f =
            SafeTensors::parse(read(MODEL_FILE)?, &here.join(MODEL_FILE).display().to_string())?;
        check_header_against_config(&config, &f)?;
        // The weights, their gradients and AdamW's moments must fit before a tensor is built.
        super::budget::check(&config, 1, 1, budget, "--memory-budget")?;
        let model = model_from_safetensors::<f32>(config, &f)?;
        Ok(Loaded { model, tokenizer_files, resolved: resolved.clone() })
    })
}
