//! What the trainer and the checkpoint code ask of a model: [`Trainable`].
//!
//! A training step needs, of any model with parameter tensors θ₁ … θ_n in a fixed order:
//!
//! ```text
//! (L, ∂L/∂θ₁, …, ∂L/∂θ_n) = loss_and_grads(batch)        the mean next-token log-loss
//! θ_i ← AdamW(θ_i, ∂L/∂θ_i, decays_i)                      after clipping the global norm
//! ```
//!
//! and a checkpoint needs the names of θ₁ … θ_n (the optimiser's moments are stored under them)
//! and the files that hold the model. Chapter 9's [`Gpt`] is one, computing through its fused
//! step ([`FusedStep`]) where it covers the model; a model of a later chapter is another, and
//! chapter 9's code never needs to know its type.

use super::checkpoint::model_files;
use super::data::Batch;
use super::fast::FusedStep;
use super::model::Gpt;
use crate::error::{Result, invalid};
use crate::float::Float;
use nalgebra::DMatrix;

/// Which computation gives a training step its loss and gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepPath {
    /// The fast path, [`FusedStep`]: the one used whenever it covers the model.
    Fused,
    /// The reference, [`Gpt::loss_and_grads`] (chapter 6's functions): for a model the fused
    /// step does not cover ([`super::fast::supports`]).
    Reference,
    /// The model's own step with its buffers kept by the trainer ([`Trainable::Workspace`]): a
    /// later chapter's model that has one (its products run with the trainer's settings; it has
    /// no rounded products and no weighted loss).
    Own,
}

impl StepPath {
    /// The path for `model`.
    pub fn of<T: Float>(model: &Gpt<T>) -> StepPath {
        if super::fast::supports(model) { StepPath::Fused } else { StepPath::Reference }
    }

    /// Its name, as `train.json` records it: `fused`, `reference` or `own`.
    pub fn name(self) -> &'static str {
        match self {
            StepPath::Fused => "fused",
            StepPath::Reference => "reference",
            StepPath::Own => "own",
        }
    }
}

/// Why a weighted step or the targets' log-probabilities are refused: only the fused step has them.
const WEIGHTED_ONLY_FUSED: &str = "the fused step does not cover it; weighted steps need it";

/// A model the [`Trainer`](super::train::Trainer) trains and the checkpoint code saves.
pub trait Trainable<T: Float>: Clone + std::fmt::Debug {
    /// The buffers of the model's own step ([`StepPath::Own`]), kept by the trainer from step to
    /// step and handed to [`Trainable::loss_and_grads_in`]; `()` for a model without one.
    type Workspace: Clone + std::fmt::Debug + Default;

    /// The names of the parameter tensors, in the order of [`Trainable::parameters_mut`] (the
    /// training state stores AdamW's moments under them).
    fn parameter_names(&self) -> Vec<String>;

    /// Every parameter tensor, mutable, in one fixed order.
    fn parameters_mut(&mut self) -> Vec<&mut DMatrix<T>>;

    /// Every parameter tensor, mutable, in [`Trainable::parameters_mut`] order, with whether
    /// AdamW decays it: what one optimiser step needs, taken in one walk over the model (no
    /// tensor copied, as a step must not).
    fn parameters_mut_and_decays(&mut self) -> (Vec<&mut DMatrix<T>>, Vec<bool>);

    /// Which computation [`Trainable::loss_and_grads_in`] uses: only chapter 9's model has the
    /// fused step; a model with a step of its own says [`StepPath::Own`].
    fn step_path(&self) -> StepPath {
        StepPath::Reference
    }

    /// The mean next-token loss of `batch` and ∂L/∂θ_i for every tensor, in
    /// [`Trainable::parameters_mut`] order. The gradients live in `fused` (the fused step's
    /// buffers), in `own` (the model's own step's) or in `scratch`, whichever the model computes
    /// with; the trainer clips them and hands them to AdamW in place. `fused` also carries the
    /// trainer's product settings ([`FusedStep::settings`]).
    fn loss_and_grads_in<'w>(
        &self,
        batch: &Batch,
        fused: &'w mut FusedStep<T>,
        own: &'w mut Self::Workspace,
        scratch: &'w mut Vec<DMatrix<T>>,
    ) -> Result<(f64, &'w mut [DMatrix<T>])>;

    /// Σ_r w_r·(−ln p_r(target_r)) over the scored rows of `batch` (one weight per row, B·T of
    /// them) and its gradient for every tensor, in [`Trainable::parameters_mut`] order: the step
    /// of chapter 13's preference and reward losses. Only chapter 9's fused step computes it; any
    /// other model is refused in one line.
    fn weighted_loss_and_grads_in<'w>(
        &self,
        batch: &Batch,
        weights: &[f64],
        fused: &'w mut FusedStep<T>,
    ) -> Result<(f64, &'w mut [DMatrix<T>])> {
        let _ = (batch, weights, fused);
        Err(invalid("Trainer::step_weighted", "model", WEIGHTED_ONLY_FUSED))
    }

    /// ln p(target) at every position of `batch` (B·T values, 0 where unscored), forward only.
    /// Only chapter 9's fused step computes it; any other model is refused in one line.
    fn target_log_probs_in(&self, batch: &Batch, fused: &mut FusedStep<T>) -> Result<Vec<f64>> {
        let _ = (batch, fused);
        Err(invalid("Trainer::target_log_probs", "model", WEIGHTED_ONLY_FUSED))
    }

    /// The mean next-token loss of `batch`, without gradients (validation).
    fn batch_loss(&self, batch: &Batch) -> Result<f64>;

    /// The files (name, contents) that hold the model in a checkpoint folder, with `metadata`
    /// (the step) in the weights' header: for chapter 9's model GPT-2's `config.json` and
    /// `model.safetensors` ([`model_files`]). Errors on a model no layout holds.
    fn model_files(&self, metadata: &[(String, String)]) -> Result<Vec<(String, Vec<u8>)>>;
}

impl<T: Float> Trainable<T> for Gpt<T> {
    /// Chapter 9's buffers are the fused step's own ([`FusedStep`]).
    type Workspace = ();

    fn parameter_names(&self) -> Vec<String> {
        self.tensors().into_iter().map(|(n, _)| n).collect()
    }

    fn parameters_mut(&mut self) -> Vec<&mut DMatrix<T>> {
        self.tensors_mut()
    }

    fn parameters_mut_and_decays(&mut self) -> (Vec<&mut DMatrix<T>>, Vec<bool>) {
        let decays = self.decay_mask();
        (self.tensors_mut(), decays)
    }

    fn step_path(&self) -> StepPath {
        StepPath::of(self)
    }

    /// The fused step where it covers the model, else [`Gpt::loss_and_grads`] into `scratch`.
    fn loss_and_grads_in<'w>(
        &self,
        batch: &Batch,
        fused: &'w mut FusedStep<T>,
        _own: &'w mut (),
        scratch: &'w mut Vec<DMatrix<T>>,
    ) -> Result<(f64, &'w mut [DMatrix<T>])> {
        if StepPath::of(self) == StepPath::Fused {
            fused.loss_and_grads(self, batch)
        } else {
            let mut r = self.loss_and_grads(batch)?;
            let taken = r.grads.iter_mut().map(|m| std::mem::replace(m, DMatrix::zeros(0, 0)));
            *scratch = taken.collect();
            Ok((r.loss, scratch.as_mut_slice()))
        }
    }

    /// The fused step's weighted loss where it covers the model; refused otherwise.
    fn weighted_loss_and_grads_in<'w>(
        &self,
        batch: &Batch,
        weights: &[f64],
        fused: &'w mut FusedStep<T>,
    ) -> Result<(f64, &'w mut [DMatrix<T>])> {
        if StepPath::of(self) != StepPath::Fused {
            return Err(invalid("Trainer::step_weighted", "model", WEIGHTED_ONLY_FUSED));
        }
        fused.weighted_loss_and_grads(self, batch, weights)
    }

    fn target_log_probs_in(&self, batch: &Batch, fused: &mut FusedStep<T>) -> Result<Vec<f64>> {
        fused.target_log_probs(self, batch)
    }

    fn batch_loss(&self, batch: &Batch) -> Result<f64> {
        self.loss(batch)
    }

    fn model_files(&self, metadata: &[(String, String)]) -> Result<Vec<(String, Vec<u8>)>> {
        model_files(self, metadata)
    }
}
