//! Chapter 1: logistic regression and binary cross-entropy.
//!
//! One neuron: z = wᵀx + b, ŷ = σ(z) = 1/(1 + e^{−z}) = P(y = 1 | x), trained by gradient
//! descent on the binary cross-entropy ℓ = −[y ln ŷ + (1 − y) ln(1 − ŷ)]. The prose is
//! [`chapters/ch01_logistic.md`](../../chapters/ch01_logistic.md); the tests are
//! `tests/ch01_logistic.rs`.
//!
//! The lesson, in the order the document derives it:
//! - [`neuron`]: σ(z), the 0.5 rule, and z = Xw + b forward and backward;
//! - [`loss`]: ℓ from ŷ and, stably, from z; the Bernoulli likelihood it is −ln of;
//! - [`gradient`]: the three chain-rule factors ∂ℓ/∂ŷ · ∂ŷ/∂z · ∂z/∂w = (ŷ − y)x, and the batch
//!   gradient ∇w L = Xᵀ(ŷ − y)/N, ∂L/∂b = Σ(ŷ − y)/N;
//! - [`training`]: w ← w − α∇w L, b ← b − α ∂L/∂b, the largest safe α, the two-cloud data.
//!
//! [`book`] holds what the book shows of the chapter (errata, worked numbers, walk-through,
//! figures).
//!
//! Conventions (as everywhere in the crate): a batch is an N×D matrix `x` with one sample per
//! row; weights `w` and labels `y` are vectors.

pub mod book;
pub mod gradient;
pub mod loss;
pub mod neuron;
pub mod training;

pub use gradient::{d_loss_d_yhat, d_yhat_d_z, d_z_d_w, loss_and_gradient, sample_gradient};
pub use loss::{
    batch_likelihood, bce, bce_from_logit, bce_mean_from_logits, bernoulli_likelihood,
    log_likelihood,
};
pub use neuron::{
    LogitGrads, THRESHOLD, classify, logits_backward, logits_forward, predict_proba, sigmoid,
    sigmoid_derivative,
};
pub use training::{
    DATA_SEED, LEARNING_RATE, PER_CLASS, STEPS, TrainConfig, Trained, augmented_gram_lambda_max,
    chapter_model, smoothness_bound, train, two_clouds,
};
