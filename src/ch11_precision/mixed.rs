//! Mixed-precision training: the products of a training step take their inputs in a 16-bit
//! format and add up in f32; everything else stays f32.
//!
//! What a bf16 trainer does, and what this module lets chapter 9's fused step do:
//!
//! - **The inputs of every product are rounded** to the format ([`ProductInputs`]): in the
//!   forward pass the activations and the weights (n₁·W_QKV, Q·Kᵀ, A·V, att·W_O, n₂·W₁, a₁·W₂,
//!   h_f·W_Uᵀ), in the backward pass the incoming gradient ∂Y and the saved activation or weight
//!   it meets (∂Y·Wᵀ, Xᵀ·∂Y, and attention's four). A rounded value is stored as the f32 it
//!   widens to, exactly: a bf16 or f16 number *is* an f32 number, so the product that follows is
//!   the f32 product of the rounded inputs, accumulated in f32 ([`gemm`]). This is the portable
//!   form of a bf16 product (the 16-bit values widened to f32 before the multiply-add), and it
//!   gives the same bits on every machine that gives them for f32.
//! - **Everything else stays f32**: the master weights AdamW updates, the gradients summed over
//!   the batch, AdamW's two moments, LayerNorm, softmax, GELU, the residual stream and the loss.
//! - **Loss scaling** ([`Precision::loss_scale`]) for f16: the loss's gradient is multiplied by a
//!   power of two S before the backward pass, so that small gradients stay above f16's smallest
//!   subnormal 2^{−24}, and every gradient is divided by S in f32 before clipping and AdamW. A
//!   power of two makes both multiplications exact (unless they leave f32's range), so a scaled
//!   step differs from an unscaled one only by what the 16-bit roundings did. The scale here is
//!   static: the tests and the chapter's runs measure that it leaves no input beyond f16's largest
//!   number ([`Rounding::overflows`] stays 0); a dynamic scaler would halve S and skip the step
//!   when one does.
//!
//! The bound every rounded product obeys: with |δ|, |η| ≤ u (the format's unit roundoff, 2^{−8}
//! for bf16, 2^{−11} for f16, in its normal range), â = a(1 + δ), b̂ = b(1 + η), so
//!
//! ```text
//! |Σ_p â_p b̂_p − Σ_p a_p b_p| ≤ (2u + u²) Σ_p |a_p| |b_p|
//! ```
//!
//! and the f32 accumulation adds at most γ_k Σ_p |â_p| |b̂_p| (γ_k = k·2^{−24}/(1 − k·2^{−24})).
//! The tests hold the step's products to both, against the f64 product of inputs rounded by the
//! `half` crate.

use super::format::{BF16, F16, F32, Format, round_to_bf16, round_to_f16};
use crate::error::{Result, invalid};
use crate::float::Float;
use crate::matmul::Op;
use nalgebra::DMatrix;

/// The format a product's two inputs are rounded to before the f32 multiply-add.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProductInputs {
    /// Not rounded: the step as chapter 9 computes it, to the bit.
    #[default]
    F32,
    /// Rounded to bf16 (7 fraction bits, f32's range): u = 2^{−8}.
    Bf16,
    /// Rounded to IEEE binary16 (10 fraction bits, largest 65504, subnormals below 2^{−14},
    /// nothing below 2^{−25}): u = 2^{−11}.
    F16,
}

impl ProductInputs {
    /// The three, widest first.
    pub const ALL: [ProductInputs; 3] =
        [ProductInputs::F32, ProductInputs::Bf16, ProductInputs::F16];

    /// The format the inputs are rounded to.
    pub fn format(self) -> Format {
        match self {
            ProductInputs::F32 => F32,
            ProductInputs::Bf16 => BF16,
            ProductInputs::F16 => F16,
        }
    }

    /// The name the chapter prints: `f32`, `bf16`, `f16`.
    pub fn name(self) -> &'static str {
        self.format().name
    }

    /// x rounded to the format (to nearest, ties to even) and widened back to f32, exactly: x
    /// itself for f32, [`round_to_bf16`] or [`round_to_f16`] otherwise.
    #[inline]
    pub fn round(self, x: f32) -> f32 {
        match self {
            ProductInputs::F32 => x,
            ProductInputs::Bf16 => round_to_bf16(x),
            ProductInputs::F16 => round_to_f16(x),
        }
    }
}

/// What rounding a set of values did: how many nonzero values became 0 (underflow: below half
/// the format's smallest subnormal, 2^{−25} in f16) and how many finite values became ±∞
/// (overflow: from 65520 on in f16).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rounding {
    /// Nonzero values rounded to zero.
    pub underflows: u64,
    /// Finite values rounded to ±∞.
    pub overflows: u64,
}

impl std::ops::AddAssign for Rounding {
    fn add_assign(&mut self, other: Rounding) {
        self.underflows += other.underflows;
        self.overflows += other.overflows;
    }
}

/// Rounds every value to `inputs`'s format in place ([`ProductInputs::round`]; an f64 value is
/// first rounded to f32, so this is meant for f32 data) and counts what was lost. With
/// [`ProductInputs::F32`] nothing is read or written.
pub fn round_entries<T: Float>(inputs: ProductInputs, values: &mut [T]) -> Rounding {
    let mut tally = Rounding::default();
    if inputs == ProductInputs::F32 {
        return tally;
    }
    let mut round = |x: f32| {
        let r = inputs.round(x);
        tally.underflows += u64::from(r == 0.0 && x != 0.0);
        tally.overflows += u64::from(r.is_infinite() && x.is_finite());
        r
    };
    // For f32 data the two conversions are the identity.
    values.iter_mut().for_each(|v| *v = T::of(f64::from(round(v.as_f64() as f32))));
    tally
}

/// A copy of the matrix m with every entry rounded by [`round_entries`], and the tally.
pub fn round_matrix<T: Float>(inputs: ProductInputs, m: &DMatrix<T>) -> (DMatrix<T>, Rounding) {
    let mut copy = m.clone();
    let tally = round_entries(inputs, copy.as_mut_slice());
    (copy, tally)
}

/// What the roundings of one training step did, in two tallies: the gradient inputs of the
/// backward pass's products (∂Y: the loss's gradient and every gradient flowing back), and the
/// other inputs of every product (activations and weights, forward and backward).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepRounding {
    /// The backward pass's gradient inputs: their underflows are the gradient lost to f16.
    pub gradients: Rounding,
    /// Every other product input.
    pub others: Rounding,
}

impl std::ops::AddAssign for StepRounding {
    fn add_assign(&mut self, other: StepRounding) {
        self.gradients += other.gradients;
        self.others += other.others;
    }
}

/// C ← α·op(Â)·op(B̂) + β·C, where Â and B̂ are A and B with every entry rounded to `inputs`'s
/// format ([`round_matrix`]) and the product is chapter 10's f32 product
/// ([`crate::matmul::gemm`]): the mixed-precision product. With [`ProductInputs::F32`] it is that
/// product of A and B themselves, the same bits. Shapes as [`crate::matmul::gemm`] (op(A) m×k,
/// op(B) k×n, C m×n); errors as it does. Returns the tallies of A's and B's rounding.
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: Float>(
    inputs: ProductInputs,
    alpha: T,
    a: &DMatrix<T>,
    ta: Op,
    b: &DMatrix<T>,
    tb: Op,
    beta: T,
    c: &mut DMatrix<T>,
) -> Result<(Rounding, Rounding)> {
    if inputs == ProductInputs::F32 {
        crate::matmul::gemm(alpha, a, ta, b, tb, beta, c)?;
        return Ok((Rounding::default(), Rounding::default()));
    }
    let (ra, ta_tally) = round_matrix(inputs, a);
    let (rb, tb_tally) = round_matrix(inputs, b);
    crate::matmul::gemm(alpha, &ra, ta, &rb, tb, beta, c)?;
    Ok((ta_tally, tb_tally))
}

/// How a training step rounds: the products' input format and the loss scale S.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Precision {
    /// The format of every product's two inputs.
    pub inputs: ProductInputs,
    /// S: the loss's gradient is multiplied by S before the backward pass and every parameter's
    /// gradient divided by S (in f32) after it. A power of two from 1 to [`MAX_LOSS_SCALE`].
    pub loss_scale: f64,
}

/// The largest loss scale accepted, 2^{24}: beyond it a scaled gradient of f32's size would
/// overflow f16 whatever the model.
pub const MAX_LOSS_SCALE: f64 = 16_777_216.0;

impl Default for Precision {
    fn default() -> Self {
        Precision::F32
    }
}

impl Precision {
    /// f32 products, no scaling: chapter 9's step.
    pub const F32: Precision = Precision { inputs: ProductInputs::F32, loss_scale: 1.0 };

    /// `inputs` with the loss scale `loss_scale`. Errors unless the scale is a power of two from
    /// 1 to [`MAX_LOSS_SCALE`] (a power of two keeps scaling and unscaling exact).
    pub fn new(inputs: ProductInputs, loss_scale: f64) -> Result<Precision> {
        let power_of_two = loss_scale.is_finite()
            && (1.0..=MAX_LOSS_SCALE).contains(&loss_scale)
            && loss_scale.log2().fract() == 0.0;
        if !power_of_two {
            return Err(invalid(
                "Precision::new",
                "loss_scale",
                format!("must be a power of two from 1 to 2^24, got {loss_scale}"),
            ));
        }
        Ok(Precision { inputs, loss_scale })
    }

    /// The run's label: `f32`, `bf16`, `f16`, or `f16, S = 2^10` when scaled.
    pub fn label(&self) -> String {
        if self.loss_scale == 1.0 {
            self.inputs.name().to_string()
        } else {
            format!("{}, S = 2^{}", self.inputs.name(), self.loss_scale.log2() as i32)
        }
    }
}
