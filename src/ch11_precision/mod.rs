//! Chapter 11: the numbers themselves — floating-point formats, and why the earlier chapters'
//! numerical tricks work.
//!
//! In the order the chapter reasons:
//! - [`format`](mod@format): f64, f32, bf16 and f16 — sign, exponent, fraction; ε, the largest
//!   and smallest normal, the subnormals, the ulp; our own conversions f32 → bf16 and f32 ↔ f16
//!   with round to nearest, ties to even;
//! - [`tricks`]: overflow of e^z and the max shift of softmax and log-sum-exp, cancellation in
//!   1 − σ(z) and the loss from logits — the printed formulas, to compare with the stable forms
//!   of chapters 1 and 2;
//! - [`summation`]: the error of a sum against n, left to right, in lanes, pairwise and Kahan's,
//!   against an exact reference;
//! - [`steps`]: the error of forward and central differences against the step h, which sets the
//!   gradient checker's step;
//! - [`mixed`]: training with the products' inputs rounded to bf16 or f16 and everything else
//!   in f32, with loss scaling for f16 (chapter 9's fused step takes a [`Precision`]; the
//!   formats, tallies and rounded product sit below both chapters, in [`crate::matmul`], and
//!   are re-exported here);
//!   [`bf16_product`]: the bound a product of bf16 matrices keeps, widened to f32 in packing or
//!   two products per instruction (VDPBF16PS).
//! - [`quant`]: weights in blocks of 32 with one scale, int8 and 4-bit, what that costs in loss;
//!   [`quant_step`]: chapter 9's cached step reading those blocks (and [`bf16_weights`], bf16
//!   patterns widened per dot); [`quant_file`]: on disk.
//!
//! [`book`] holds the worked table, the walk-through and the figures. The prose is
//! [`chapters/ch11_precision.md`](../../chapters/ch11_precision.md); the tests are
//! `tests/ch11_precision.rs`.

pub mod bf16_product;
pub mod bf16_weights;
pub mod book;
pub mod format;
pub mod mixed;
pub mod quant;
pub mod quant_file;
pub mod quant_step;
pub mod runs;
pub mod steps;
pub mod summation;
pub mod tricks;

pub use format::{
    BF16, F16, F32, F64, FORMATS, Fields, Format, bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16,
    pow2, round_to_bf16, round_to_f16,
};
pub use mixed::{
    MAX_LOSS_SCALE, Precision, ProductInputs, Rounding, StepRounding, round_entries, round_matrix,
};
pub use steps::{Difference, best_step, checker_step, step_errors, sweep};
pub use summation::{
    METHODS, Method, grid_values, kahan_sum, naive_sum, pairwise_roundings, pairwise_sum,
    summation_errors,
};
pub use tricks::{
    bce_through_probability, log_sum_exp_unshifted, one_minus_sigmoid, overflow_threshold,
    relative_error, softmax_unshifted,
};
