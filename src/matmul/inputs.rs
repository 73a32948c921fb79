//! The format of a product's inputs: the mechanism of mixed-precision training.
//!
//! A mixed-precision step rounds the two inputs of every product to a 16-bit format and adds up
//! in f32; everything else stays f32. A rounded value is stored as the f32 it widens to, exactly
//! (a bf16 or f16 number *is* an f32 number), so the product that follows is the f32 product of
//! the rounded inputs ([`gemm_rounded`]): the portable form of a 16-bit product, the same bits
//! on every machine that gives them for f32.
//!
//! Here: the formats ([`ProductInputs`]), the rounding of a slice or matrix with a tally of what
//! was lost ([`round_entries`], [`Rounding`], and [`StepRounding`] for a whole training step),
//! the rounded product, and a step's precision with its loss scale ([`Precision`]). The book's
//! chapter on floating point teaches the formats, their bit patterns and the bound a rounded
//! product keeps; its own conversions (written from the formats' definitions and tested against
//! the `half` crate) are the reference the rounding here is tested against, bit for bit.

use super::{Op, Settings, gemm_with};
use crate::error::{Result, invalid};
use crate::float::Float;
use nalgebra::DMatrix;

/// The format a product's two inputs are rounded to before the f32 multiply-add.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProductInputs {
    /// Not rounded: the f32 product, to the bit.
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

    /// The format's name: `f32`, `bf16`, `f16`.
    pub fn name(self) -> &'static str {
        match self {
            ProductInputs::F32 => "f32",
            ProductInputs::Bf16 => "bf16",
            ProductInputs::F16 => "f16",
        }
    }

    /// x rounded to the format (to nearest, ties to even) and widened back to f32, exactly: x
    /// itself for f32. NaN stays a NaN of the same sign, made quiet, its payload cut to the
    /// format's fraction; a finite x past the format's largest number becomes ±∞.
    #[inline]
    pub fn round(self, x: f32) -> f32 {
        match self {
            ProductInputs::F32 => x,
            ProductInputs::Bf16 => nearest_bf16(x),
            ProductInputs::F16 => nearest_f16(x),
        }
    }
}

/// f32's sign bit.
const SIGN: u32 = 0x8000_0000;
/// f32's quiet-NaN bit (the fraction's top bit).
const QUIET: u32 = 0x0040_0000;
/// The f32 fraction bits bf16 drops (its pattern is f32's top 16 bits).
const BF16_DROPPED: u32 = 16;
/// The f32 fraction bits f16 drops in its normal range (23 − 10).
const F16_DROPPED: u32 = 13;
/// The smallest normal f16, 2^{−14}, as f32 bits.
const F16_MIN_NORMAL: u32 = 0x3880_0000;
/// The first f32 that rounds to f16's ∞: 65520, halfway between 65504 and 2^{16}.
const F16_OVERFLOW: u32 = 0x477f_f000;
/// 2^{−1}: added to |x| < 2^{−14}, it leaves f32's ulp at 2^{−24}, f16's subnormal step, so the
/// sum is |x| rounded to that step (ties to even, as 2^{−1} is an even multiple of it).
const F16_SUBNORMAL_SHIFT: f32 = 0.5;

/// x rounded to the nearest bf16 (ties to even) and widened back: add just under half of the
/// dropped 16 bits, plus the kept part's last bit, and clear them. A carry out of the fraction
/// raises the exponent; one past the largest finite number gives ∞'s pattern.
#[inline]
fn nearest_bf16(x: f32) -> f32 {
    let bits = x.to_bits();
    let low = (1 << BF16_DROPPED) - 1;
    if x.is_nan() {
        return f32::from_bits((bits | QUIET) & !low);
    }
    let rounded = bits + (low >> 1) + ((bits >> BF16_DROPPED) & 1);
    f32::from_bits(rounded & !low)
}

/// x rounded to the nearest f16 (ties to even) and widened back: in f16's normal range as for
/// bf16 with 13 dropped bits; below it, to f16's subnormal step 2^{−24} by one f32 addition;
/// from 65520 on, ±∞.
#[inline]
fn nearest_f16(x: f32) -> f32 {
    let bits = x.to_bits();
    let (sign, magnitude) = (bits & SIGN, bits & !SIGN);
    let low = (1 << F16_DROPPED) - 1;
    if x.is_nan() {
        return f32::from_bits((bits | QUIET) & !low);
    }
    let rounded = if magnitude >= F16_OVERFLOW {
        f32::INFINITY.to_bits()
    } else if magnitude >= F16_MIN_NORMAL {
        (magnitude + (low >> 1) + ((magnitude >> F16_DROPPED) & 1)) & !low
    } else {
        // Both operations are exact but the rounding of the sum.
        ((f32::from_bits(magnitude) + F16_SUBNORMAL_SHIFT) - F16_SUBNORMAL_SHIFT).to_bits()
    };
    f32::from_bits(sign | rounded)
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
/// format ([`round_matrix`]) and the product is the f32 product [`gemm_with`], run with
/// `settings`: the mixed-precision product. With [`ProductInputs::F32`] it is that product of A
/// and B themselves, the same bits. Shapes as [`gemm_with`] (op(A) m×k, op(B) k×n, C m×n); errors
/// as it does. Returns the tallies of A's and B's rounding.
#[allow(clippy::too_many_arguments)]
pub fn gemm_rounded<T: Float>(
    inputs: ProductInputs,
    settings: Settings,
    alpha: T,
    a: &DMatrix<T>,
    ta: Op,
    b: &DMatrix<T>,
    tb: Op,
    beta: T,
    c: &mut DMatrix<T>,
) -> Result<(Rounding, Rounding)> {
    if inputs == ProductInputs::F32 {
        gemm_with(settings, alpha, a, ta, b, tb, beta, c)?;
        return Ok((Rounding::default(), Rounding::default()));
    }
    let (ra, ta_tally) = round_matrix(inputs, a);
    let (rb, tb_tally) = round_matrix(inputs, b);
    gemm_with(settings, alpha, &ra, ta, &rb, tb, beta, c)?;
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
    /// f32 products, no scaling: the plain f32 step.
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
