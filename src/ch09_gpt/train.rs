//! Training: mini-batches, the loss and its gradients, clipping, AdamW on a schedule.
//!
//! One step: draw a batch from the data with the trainer's own [`Rng`]; forward and backward
//! ([`Gpt::loss_and_grads`]); clip the global gradient norm; set α from the [`Schedule`]; one
//! [`AdamW`] step. Everything the next step depends on (the model, the optimiser's moments and
//! step count, the generator's state, the step number, the losses so far) lives in the
//! [`Trainer`], so a trainer saved and loaded continues exactly as if it had never stopped, and
//! the same seed gives the same bits on the same machine.

use super::data::{Batch, SortTask, Token, random_windows};
use super::fast::FusedStep;
use super::model::Gpt;
use super::sample::{Decoding, generate};
use super::schedule::{Schedule, clip_global_norm};
pub use super::trainable::StepPath;
use super::trainable::Trainable;
use crate::error::{Result, invalid};
use crate::float::Float;
use crate::matmul::inputs::{Precision, StepRounding};
use crate::optim::{AdamConfig, AdamW};
use crate::rng::Rng;

/// How to train.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainConfig {
    /// Sequences per batch B.
    pub batch: usize,
    /// The learning rate over the steps.
    pub schedule: Schedule,
    /// AdamW's λ.
    pub weight_decay: f64,
    /// Adam's β₁.
    pub beta1: f64,
    /// Adam's β₂.
    pub beta2: f64,
    /// Adam's ε.
    pub epsilon: f64,
    /// Clip the global gradient norm to this, if set.
    pub clip: Option<f64>,
}

impl TrainConfig {
    /// nanoGPT's choices: β = (0.9, 0.95), ε = 10⁻⁸, λ = 0.1, clipping at 1.
    pub fn new(batch: usize, schedule: Schedule) -> TrainConfig {
        TrainConfig {
            batch,
            schedule,
            weight_decay: 0.1,
            beta1: 0.9,
            beta2: 0.95,
            epsilon: 1e-8,
            clip: Some(1.0),
        }
    }

    fn adam(&self) -> AdamConfig {
        AdamConfig {
            learning_rate: self.schedule.max_lr,
            beta1: self.beta1,
            beta2: self.beta2,
            epsilon: self.epsilon,
        }
    }
}

/// Where batches come from.
#[derive(Clone, Copy, Debug)]
pub enum Data<'a> {
    /// The digit-sorting task's training strings.
    Sort(&'a SortTask),
    /// Random windows of `seq_len + 1` tokens of a stream.
    Stream {
        /// The tokens.
        tokens: &'a [Token],
        /// T.
        seq_len: usize,
    },
}

impl Data<'_> {
    /// A batch of `batch` sequences, drawn with `rng`.
    pub fn batch(&self, batch: usize, rng: &mut Rng) -> Result<Batch> {
        match *self {
            Data::Sort(task) => Ok(task.batch(batch, rng)),
            Data::Stream { tokens, seq_len } => random_windows(tokens, seq_len, batch, rng),
        }
    }
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepRecord {
    /// The step's number, from 0.
    pub step: usize,
    /// The batch's loss before the update, in nats per token.
    pub loss: f64,
    /// The learning rate used.
    pub lr: f64,
    /// The global gradient norm before clipping.
    pub grad_norm: f64,
    /// Tokens in the batch (B·T).
    pub tokens: usize,
    /// Whether the update was skipped because a loss-scaled gradient overflowed (chapter 11's
    /// rule, see [`Trainer::step`]): then `grad_norm` is ∞ and neither the weights nor AdamW's
    /// moments changed.
    pub skipped: bool,
}

/// A model being trained and everything its next step depends on: chapter 9's [`Gpt`] unless
/// another [`Trainable`] model is named.
#[derive(Clone, Debug)]
pub struct Trainer<T: Float, M: Trainable<T> = Gpt<T>> {
    /// The model.
    pub model: M,
    /// AdamW with its moments.
    pub optimizer: AdamW<T>,
    /// The generator that draws the batches.
    pub rng: Rng,
    /// Steps taken.
    pub step: usize,
    /// One record per step taken.
    pub history: Vec<StepRecord>,
    /// The fused step's buffers, reused from step to step (not part of the training state: a
    /// trainer loaded from a checkpoint starts with an empty one and gets the same bits).
    pub(crate) workspace: FusedStep<T>,
    /// The model's own step's buffers ([`Trainable::Workspace`]), kept likewise.
    pub(crate) own: M::Workspace,
}

impl<T: Float, M: Trainable<T>> Trainer<T, M> {
    /// A trainer at step 0; `seed` seeds the batches (the model has its own seed).
    pub fn new(model: M, config: &TrainConfig, seed: u64) -> Result<Trainer<T, M>> {
        if config.batch == 0 {
            return Err(invalid("Trainer::new", "batch", "must hold at least one sequence"));
        }
        let optimizer = AdamW::new(config.adam(), config.weight_decay)?;
        Ok(Trainer {
            model,
            optimizer,
            rng: Rng::new(seed),
            step: 0,
            history: Vec::new(),
            workspace: FusedStep::new(),
            own: M::Workspace::default(),
        })
    }

    /// Chapter 11's mixed precision for the following steps ([`FusedStep::set_precision`]):
    /// the products' input format and the loss scale S, which [`Trainer::step`] halves whenever
    /// a scaled gradient overflows. Errors, naming `precision`, on a model the fused step does
    /// not cover unless it is [`Precision::F32`] (the reference path has no rounding).
    pub fn set_precision(&mut self, precision: Precision) -> Result<()> {
        if precision != Precision::F32 && self.path() != StepPath::Fused {
            return Err(invalid(
                "Trainer::set_precision",
                "precision",
                "rounded products need the fused step, which does not cover this model",
            ));
        }
        self.workspace.set_precision(precision);
        Ok(())
    }

    /// The precision of the next step: the products' input format and the current loss scale S
    /// (the one [`Trainer::set_precision`] set, halved once for every skipped step since).
    pub fn precision(&self) -> Precision {
        self.workspace.precision()
    }

    /// The steps taken so far whose update was skipped because a scaled gradient overflowed
    /// ([`StepRecord::skipped`]).
    pub fn skipped_steps(&self) -> usize {
        self.history.iter().filter(|r| r.skipped).count()
    }

    /// How the fused step's products run for the following steps ([`FusedStep::set_settings`]):
    /// backend, kernel, threads (the thread count is AdamW's too); a model's own step
    /// ([`StepPath::Own`]) runs its products with them too. The reference path (a model the fused
    /// step does not cover) keeps the process's.
    pub fn set_settings(&mut self, settings: crate::matmul::Settings) {
        self.workspace.set_settings(settings);
        self.optimizer.moments.threads = settings.threads;
    }

    /// What the last step's roundings did (chapter 11; zero with f32 products).
    pub fn rounding(&self) -> StepRounding {
        self.workspace.rounding()
    }

    /// Which computation [`Trainer::step`] uses for this model.
    pub fn path(&self) -> StepPath {
        self.model.step_path()
    }

    /// One training step. The loss and gradients come from the fused step
    /// ([`super::fast::FusedStep`]) when it covers the model, else from the reference
    /// [`Gpt::loss_and_grads`]; both compute the same mathematics (a test compares them).
    ///
    /// With a loss scale S > 1 ([`Trainer::set_precision`]) a gradient that is still NaN or ±∞
    /// after the division by S means a scaled gradient overflowed the products' format (f16's
    /// largest number is 65504): chapter 11's rule then halves S for the following steps and
    /// skips this step's update. The batch is used up and the step counted (the schedule moves
    /// on), but the weights, AdamW's moments and its step count stay as they were; the record
    /// says `skipped`, with the batch's loss and an infinite gradient norm. S never falls below
    /// 1: at S = 1 a non-finite gradient is the run diverging, returned as it is.
    pub fn step(&mut self, data: &Data, config: &TrainConfig) -> Result<StepRecord> {
        let batch = data.batch(config.batch, &mut self.rng)?;
        self.step_on(&batch, config)
    }

    /// [`Trainer::step`] on a batch the caller made (the trainer's generator draws nothing):
    /// for data the [`Data`] sources do not cover, such as chapter 13's fine-tuning examples.
    pub fn step_on(&mut self, batch: &Batch, config: &TrainConfig) -> Result<StepRecord> {
        self.step_with(batch, None, config)
    }

    /// [`Trainer::step_on`] with the weighted loss Σ_r w_r·(−ln p_r(target_r)) of
    /// [`FusedStep::weighted_loss_and_grads`] (`weights`: one per position of the batch, B·T)
    /// in place of the mean: the same clipping, schedule, AdamW and overflow rule, by the same
    /// code. A loss whose derivative with respect to each token's ln p_r is c_r (chapter 13's
    /// DPO and GRPO) takes its step with w_r = −c_r. The record's loss is the weighted sum.
    ///
    /// Errors as [`FusedStep::weighted_loss_and_grads`], and, naming `model`, on a model the
    /// fused step does not cover (the reference pass has no weighted form).
    pub fn step_weighted(
        &mut self,
        batch: &Batch,
        weights: &[f64],
        config: &TrainConfig,
    ) -> Result<StepRecord> {
        self.step_with(batch, Some(weights), config)
    }

    /// ln p(target) at every position of `batch` under the trainer's model, by the fused step's
    /// forward pass in the trainer's own workspace ([`FusedStep::target_log_probs`]: length B·T,
    /// 0.0 at unscored positions). What [`Trainer::step_weighted`]'s weights are computed from.
    /// Errors as it does, and on a model the fused step does not cover.
    pub fn target_log_probs(&mut self, batch: &Batch) -> Result<Vec<f64>> {
        self.model.target_log_probs_in(batch, &mut self.workspace)
    }

    /// One step on `batch`: the mean loss (`weights` None) or the weighted one.
    fn step_with(
        &mut self,
        batch: &Batch,
        weights: Option<&[f64]>,
        config: &TrainConfig,
    ) -> Result<StepRecord> {
        let precision = self.precision();
        let lr = config.schedule.at(self.step);
        let tokens = batch.inputs.len();
        let mut reference = Vec::new();
        let (loss, grads) = match weights {
            None => {
                let (fused, own) = (&mut self.workspace, &mut self.own);
                self.model.loss_and_grads_in(batch, fused, own, &mut reference)?
            }
            Some(w) => self.model.weighted_loss_and_grads_in(batch, w, &mut self.workspace)?,
        };
        let scaled = precision.loss_scale > 1.0;
        if scaled && grads.iter().any(|g| g.iter().any(|x| !x.is_finite())) {
            let halved = Precision::new(precision.inputs, precision.loss_scale / 2.0)?;
            self.workspace.set_precision(halved);
            let record = StepRecord {
                step: self.step,
                loss,
                lr,
                grad_norm: f64::INFINITY,
                tokens,
                skipped: true,
            };
            self.step += 1;
            self.history.push(record);
            return Ok(record);
        }
        let grad_norm = match config.clip {
            Some(c) => clip_global_norm(&mut grads.iter_mut().collect::<Vec<_>>(), c)?,
            None => super::schedule::global_norm(&grads.iter().collect::<Vec<_>>()),
        };
        self.optimizer.config = AdamConfig { learning_rate: lr, ..config.adam() };
        self.optimizer.weight_decay = config.weight_decay;
        let (mut params, decay) = self.model.parameters_mut_and_decays();
        let grads: Vec<&nalgebra::DMatrix<T>> = grads.iter().collect();
        self.optimizer.step(&mut params, &grads, &decay)?;
        let record = StepRecord { step: self.step, loss, lr, grad_norm, tokens, skipped: false };
        self.step += 1;
        self.history.push(record);
        Ok(record)
    }

    /// Steps until `until` steps have been taken, calling `on_step` after each.
    pub fn run(
        &mut self,
        data: &Data,
        config: &TrainConfig,
        until: usize,
        mut on_step: impl FnMut(&StepRecord),
    ) -> Result<()> {
        while self.step < until {
            let r = self.step(data, config)?;
            on_step(&r);
        }
        Ok(())
    }
}

/// The running mean of the training loss: an exponential moving average with weight
/// [`RunningMean::DECAY`] on the past, bias-corrected as Adam corrects its moments. After t
/// losses ℓ₁…ℓ_t it is
///
/// ```text
/// m_t = Σ_s β^(t−s)·ℓ_s / Σ_s β^(t−s)       β = 0.95
/// ```
///
/// a weighted mean of the losses so far (the first value is ℓ₁ itself, and early on every loss
/// weighs about the same), never the first loss carried with weight β^t into later steps, which
/// left a plain average started at ℓ₁ far above a loss that falls fast.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunningMean {
    /// Σ β^(t−s)·ℓ_s.
    sum: f64,
    /// Σ β^(t−s) = (1 − β^t)/(1 − β).
    weight: f64,
}

impl RunningMean {
    /// β, the weight of the past.
    pub const DECAY: f64 = 0.95;

    /// Adds a loss; returns the mean so far.
    pub fn add(&mut self, loss: f64) -> f64 {
        self.sum = Self::DECAY * self.sum + loss;
        self.weight = Self::DECAY * self.weight + 1.0;
        self.value()
    }

    /// The mean so far (NaN before any loss).
    pub fn value(&self) -> f64 {
        if self.weight == 0.0 { f64::NAN } else { self.sum / self.weight }
    }
}

/// Training speed, defined once: the tokens of the training batches (B·T a step) divided by
/// the wall-clock seconds of the training steps alone (forward, backward, clipping and AdamW;
/// saves, plots and validation are not counted). The progress line and every summary print this
/// one figure.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Throughput {
    /// Tokens of the steps counted.
    pub tokens: usize,
    /// Their seconds.
    pub seconds: f64,
}

impl Throughput {
    /// Counts one step of `tokens` tokens that took `seconds`.
    pub fn add(&mut self, tokens: usize, seconds: f64) {
        self.tokens += tokens;
        self.seconds += seconds;
    }

    /// Tokens per second (None before any time was measured).
    pub fn per_second(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.tokens as f64 / self.seconds)
    }
}

/// How a training run shows its progress. The library prints nothing: whoever runs the training
/// implements this (the binary draws a progress bar); `()` shows nothing.
pub trait Progress {
    /// A step was taken: `steps` taken so far, the loss to show (the batch's, or a running mean),
    /// and the tokens per second so far where the run measures them.
    fn step(&mut self, steps: usize, loss: f64, tokens_per_s: Option<f64>);
    /// The run's steps are over.
    fn finish(&mut self) {}
}

impl Progress for () {
    fn step(&mut self, _steps: usize, _loss: f64, _tokens_per_s: Option<f64>) {}
}

/// The mean loss over a list of batches, weighted by their scored positions (so it is the mean
/// over every scored token), in nats per token.
pub fn mean_loss<T: Float>(model: &Gpt<T>, batches: &[Batch]) -> Result<f64> {
    let mut total = 0.0;
    let mut count = 0usize;
    for b in batches {
        let n = b.scored();
        total += model.loss(b)? * n as f64;
        count += n;
    }
    if count == 0 {
        return Err(crate::error::Error::Empty { op: "mean_loss", arg: "batches" });
    }
    Ok(total / count as f64)
}

/// The sorting task's score: the fraction of `strings` whose sorted copy the model writes out
/// exactly, generating greedily (with the key/value cache) after the string.
pub fn sort_accuracy<T: Float>(model: &Gpt<T>, strings: &[Vec<Token>]) -> Result<f64> {
    let mut right = 0usize;
    let mut rng = Rng::new(0);
    for s in strings {
        let g = generate(model, s, s.len(), &Decoding::Greedy, &mut rng, true)?;
        let mut sorted = s.clone();
        sorted.sort_unstable();
        right += usize::from(g.new_tokens() == sorted.as_slice());
    }
    Ok(right as f64 / strings.len().max(1) as f64)
}
