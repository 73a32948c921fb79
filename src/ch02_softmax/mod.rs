//! Chapter 2: softmax, temperature and cross-entropy, from one example to multiclass training.
//!
//! K logits z = (z₁, …, z_K) become a probability distribution by the softmax
//! ŷᵢ = e^{zᵢ} / Σⱼ e^{zⱼ}; a temperature T divides the logits first,
//! ŷᵢ = e^{zᵢ/T} / Σⱼ e^{zⱼ/T}; the cross-entropy L = −Σᵢ yᵢ ln ŷᵢ scores ŷ against the truth y,
//! and its gradient with respect to the logits is the famous ŷ − y. Multinomial (softmax)
//! regression, Z = XW + b trained on the mean cross-entropy, closes the chapter. The prose is
//! [`chapters/ch02_softmax.md`](../../chapters/ch02_softmax.md); the tests are
//! `tests/ch02_softmax.rs`.
//!
//! The lesson, in the order the documents derive it:
//! - [`probabilities`]: softmax (row-wise and of one vector), its backward pass and Jacobian
//!   J = diag(ŷ) − ŷŷᵀ, log-softmax, log-sum-exp, temperature, entropy;
//! - [`loss`]: the cross-entropy from probabilities, ∂L/∂ŷ = −y/ŷ, ∂L/∂z = Jᵀ(−y/ŷ) = ŷ − y,
//!   and from logits by log-sum-exp, with one gradient step on the logits;
//! - [`script`]: D3's 2000-step script, replayed;
//! - [`regression`]: Z = XW + 1bᵀ forward and backward, and its training.
//!
//! [`book`] holds what the book shows of the chapter (errata, worked numbers, walk-through,
//! figures).
//!
//! Conventions: a batch of logits is an N×K matrix with one row per sample (or per token, in
//! chapters 6 and 9, which reuse [`softmax_rows_forward`], [`log_softmax_rows`] and
//! [`cross_entropy_from_logits`] in `f32`); every row-wise function treats each row as its own
//! distribution. A single example is a [`DVector`](nalgebra::DVector). Targets are class indices
//! `0..K`.
//!
//! Stable by construction: every softmax subtracts its row's maximum before exponentiating, so
//! the largest exponential is e⁰ = 1 and nothing overflows; logarithms of probabilities are formed
//! by log-sum-exp, never as ln of a rounded probability. A logit of −∞ is a mask and gets
//! probability exactly 0; a row whose every logit is −∞ is an error (there is nothing to
//! normalise). NaN and +∞ are always errors.

pub mod book;
pub mod loss;
pub mod probabilities;
pub mod regression;
pub mod script;

pub use loss::{
    cross_entropy, cross_entropy_from_logit_vector, cross_entropy_from_logits,
    cross_entropy_from_logits_backward, cross_entropy_from_logits_with_gradient,
    d_cross_entropy_d_logits, d_cross_entropy_d_probabilities, d_logits_by_chain_rule, logit_step,
    mix_towards_target, one_hot,
};
pub use probabilities::{
    DISTRIBUTION_TOLERANCE, argmax_rows, check_distribution, entropy, log_softmax,
    log_softmax_rows, log_softmax_rows_backward, log_sum_exp, log_sum_exp_rows, logits_of, softmax,
    softmax_jacobian, softmax_rows_backward, softmax_rows_forward, softmax_rows_with_temperature,
    softmax_with_base, softmax_with_temperature,
};
pub use regression::{
    CENTRE_RADIUS, CLASSES, DATA_SEED, LEARNING_RATE, PER_CLASS, STEPS, TrainConfig, Trained,
    chapter_model, regression_logits, regression_logits_backward, regression_loss_and_gradient,
    smoothness_bound, summed_weight_gradient, three_clouds, train,
};
pub use script::{
    Replay, SCRIPT_ITERATIONS, SCRIPT_LEARNING_RATE, SCRIPT_PRINT_EVERY, SCRIPT_START,
    SCRIPT_TRUE_CLASS, ScriptLine, WORDS, document_replay, replay_script,
};
