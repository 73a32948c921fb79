//! Chapter 11: floating point — [chapters/ch11_precision.md](../../chapters/ch11_precision.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch11_precision`.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value.

use llm_workbook::Result;
use llm_workbook::ch11_precision::Difference;

/// **Rounding an f32 to bf16**: the bf16 bit pattern (in a `u16`) nearest the f32 `x`. bf16 is
/// f32's sign, its 8 exponent bits and the top 7 of its 23 fraction bits, so the answer is the
/// top 16 bits of `x.to_bits()`, rounded by the 16 bits dropped: up when they are more than half
/// (`0x8000`), down when less, and on an exact tie to the even pattern (the one whose last bit is
/// 0). A carry out of the fraction goes into the exponent; past the largest bf16 the result is
/// ±∞ (`0x7F80` with the sign). A NaN must stay a NaN of the same sign: keep its top 16 bits and
/// set the quiet bit `0x0040`.
///
/// Chapter: [2. Rounding to nearest, ties to even][section-2].
///
/// [section-2]: ../../chapters/ch11_precision.md#2-rounding-to-nearest-ties-to-even
pub fn f32_to_bf16(x: f32) -> u16 {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch11_precision::f32_to_bf16(x);
    todo!()
}

/// **Decoding an f16**: the value of the IEEE binary16 pattern `bits` (1 sign bit s, 5 exponent
/// bits e, 10 fraction bits f, bias 15), as an f32 (every f16 value is one exactly):
/// (−1)^s · 2^{e−15} · (1 + f/2^{10}) for 0 < e < 31; (−1)^s · 2^{−14} · f/2^{10} for e = 0 (zero
/// and the subnormals); ±∞ for e = 31, f = 0; NaN of sign s for e = 31, f ≠ 0.
///
/// Chapter: [1. Four formats][section-1].
///
/// [section-1]: ../../chapters/ch11_precision.md#1-four-formats
pub fn f16_to_f32(bits: u16) -> f32 {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch11_precision::f16_to_f32(bits);
    todo!()
}

/// **Choosing the step of a finite difference**: the step h that balances the truncation error
/// (∝ h for `Difference::Forward`, ∝ h² for `Difference::Central`) against the rounding error
/// (∝ ε/h) for a function whose value and derivatives are of order 1: ε^{1/2} forward, ε^{1/3}
/// central, with ε the machine epsilon of the type computed in. Error naming `epsilon` unless
/// 0 < ε < 1.
///
/// Section 6 derives h* = 2√(ε|f|/|f″|) and (3ε|f|/|f‴|)^{1/3}; with |f|, |f″| and |f‴| of order 1
/// only the powers of ε are known, so the constants 2 and 3^{1/3} are dropped: they move h by a
/// factor under 2, along the flat bottom of the error's curve, while the power of ε moves it by
/// orders of magnitude. The judge accepts the step with the constants (2ε^{1/2}, (3ε)^{1/3}) too.
///
/// Chapter: [6. The step of a gradient check][section-6].
///
/// [section-6]: ../../chapters/ch11_precision.md#6-the-step-of-a-gradient-check
pub fn balanced_step(kind: Difference, epsilon: f64) -> Result<f64> {
    #[cfg(feature = "solutions")]
    return kind.balanced_step(epsilon);
    todo!()
}

/// **A compensated sum**: Σ xᵢ in f32 by Kahan's method, left to right: s = 0, c = 0, then for
/// each x: y = x − c, t = s + y, c = (t − s) − y, s = t; the answer is s (0 for no values).
///
/// Chapter: [5. Summation error grows with n][section-5].
///
/// [section-5]: ../../chapters/ch11_precision.md#5-summation-error-grows-with-n
pub fn kahan_sum(xs: &[f32]) -> f32 {
    #[cfg(feature = "solutions")]
    return solution::kahan_sum(xs);
    todo!()
}

/// **Quantizing one block**: the scale s = max_i |w_i| / L of the weights `w` (the largest
/// *magnitude*, whatever its sign, over the largest level L: 127 for int8, 7 for 4-bit) and the
/// codes q_i = round(w_i / s), rounded to nearest with ties away from zero (`f32::round`), kept
/// within −L … L. A block of zeros has s = 0 and every code 0 (no division).
///
/// Chapter: [8. Quantized weights: int8 and 4-bit blocks][section-q].
///
/// [section-q]: ../../chapters/ch11_precision.md#8-quantized-weights-int8-and-4-bit-blocks
pub fn quantize_block(w: &[f32], max_level: i32) -> (f32, Vec<i8>) {
    #[cfg(feature = "solutions")]
    return solution::quantize_block(w, max_level);
    todo!()
}

/// **Dequantizing one block**: ŵ_i = s·q_i for the codes `codes` of a block with scale `scale`.
///
/// Chapter: [8. Quantized weights: int8 and 4-bit blocks][section-q].
///
/// [section-q]: ../../chapters/ch11_precision.md#8-quantized-weights-int8-and-4-bit-blocks
pub fn dequantize_block(scale: f32, codes: &[i8]) -> Vec<f32> {
    #[cfg(feature = "solutions")]
    return solution::dequantize_block(scale, codes);
    todo!()
}

/// **A dot product with an int8 block**: s · Σ_i q_i·x_i for the f32 activations `x` and one
/// block's codes `codes` (at most 32, as long as `x`) and scale `scale`: the codes widened to
/// f32, multiplied by the activations and summed, the sum scaled once.
///
/// Chapter: [8. Quantized weights: int8 and 4-bit blocks][section-q].
///
/// [section-q]: ../../chapters/ch11_precision.md#8-quantized-weights-int8-and-4-bit-blocks
pub fn int8_block_dot(x: &[f32], scale: f32, codes: &[i8]) -> f32 {
    #[cfg(feature = "solutions")]
    return solution::int8_block_dot(x, scale, codes);
    todo!()
}

// The `solutions` feature's adapters (src/solutions.rs).
#[cfg(feature = "solutions")]
use llm_workbook_exercises::solutions::ch11_precision as solution;
