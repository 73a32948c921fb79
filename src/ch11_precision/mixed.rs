//! Mixed-precision training: the products of a training step take their inputs in a 16-bit
//! format and add up in f32; everything else stays f32.
//!
//! What a bf16 trainer does, and what chapter 9's fused step does with a [`Precision`]. The
//! mechanism lives below both chapters, beside the product (`matmul`'s input formats, re-exported
//! here); this module is the lesson: what it rounds, why, and the bound it keeps.
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

use super::format::{BF16, F16, F32, Format};

pub use crate::matmul::inputs::{
    MAX_LOSS_SCALE, Precision, ProductInputs, Rounding, StepRounding, gemm_rounded as gemm,
    round_entries, round_matrix,
};

impl ProductInputs {
    /// The format the inputs are rounded to (section 1's table): its fraction bits give the
    /// unit roundoff u of the bound above. [`ProductInputs::round`] rounds to it bit for bit as
    /// [`round_to_bf16`](super::format::round_to_bf16) and
    /// [`round_to_f16`](super::format::round_to_f16) do (a test holds them together).
    pub fn format(self) -> Format {
        match self {
            ProductInputs::F32 => F32,
            ProductInputs::Bf16 => BF16,
            ProductInputs::F16 => F16,
        }
    }
}
