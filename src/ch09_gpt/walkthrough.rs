//! D3's "I love AI" example, recomputed from its stated inputs.
//!
//! Three tokens with 2-dimensional embeddings U, a position table W_p, h₀ = U + W_p; a masked
//! attention mix for "love" with weights 0.1 on "I", 0.9 on itself and 0 on the future token
//! "AI"; and a feed-forward step h₂ = h₁ × W with a 2×2 matrix W. The document prints the
//! position table and W as flat lists; we read them row by row (position p is row p, W's first
//! row is (0.2, 0.3)), the reading under which its h₀ comes out exactly. What the document prints
//! for h₀, h₁ and h₂ is in `book.rs`, beside the worked numbers that compare against it.

use crate::error::{Result, invalid, shape_error};
use crate::matmul::matmul;
use nalgebra::DMatrix;

/// The tokens, in order.
pub const TOKENS: [&str; 3] = ["I", "love", "AI"];

/// The embeddings U, one row per token.
pub const EMBEDDINGS: [[f64; 2]; 3] = [[0.12, 0.87], [0.56, 0.32], [0.74, 0.51]];

/// The position table W_p as printed: six numbers, read as three rows of two.
pub const POSITIONS_FLAT: [f64; 6] = [0.02, 0.04, 0.03, 0.07, 0.05, 0.09];

/// The attention weights of "love" over ("I", "love", "AI").
pub const LOVE_WEIGHTS: [f64; 3] = [0.1, 0.9, 0.0];

/// The feed-forward matrix W as printed, read as two rows of two.
pub const FEED_FORWARD_FLAT: [f64; 4] = [0.2, 0.3, 0.4, 0.5];

/// U as a 3×2 matrix.
pub fn embeddings() -> DMatrix<f64> {
    DMatrix::from_fn(3, 2, |r, c| EMBEDDINGS[r][c])
}

/// W_p as a 3×2 matrix (row p is position p).
pub fn position_table() -> DMatrix<f64> {
    DMatrix::from_row_slice(3, 2, &POSITIONS_FLAT)
}

/// W as a 2×2 matrix.
pub fn feed_forward_weight() -> DMatrix<f64> {
    DMatrix::from_row_slice(2, 2, &FEED_FORWARD_FLAT)
}

/// h₀ = U + W_p: token embedding plus the position row of each token's place.
pub fn h0() -> DMatrix<f64> {
    embeddings() + position_table()
}

/// The causally masked mix for the token at `position`: Σⱼ wⱼ h\[j\], where the weights must be a
/// probability distribution (non-negative, summing to 1) that puts zero weight on every later
/// position. Returns a 1×d row.
pub fn masked_mix(weights: &[f64], h: &DMatrix<f64>, position: usize) -> Result<DMatrix<f64>> {
    const OP: &str = "masked_mix";
    if weights.len() != h.nrows() {
        return Err(shape_error(
            OP,
            "weights and h",
            format!("{} weights (one per row of h)", h.nrows()),
            format!("{}", weights.len()),
        ));
    }
    if position >= h.nrows() {
        return Err(invalid(
            OP,
            "position",
            format!("{position} is past the last token {}", h.nrows().saturating_sub(1)),
        ));
    }
    if let Some(j) = (position + 1..weights.len()).find(|&j| weights[j] != 0.0) {
        return Err(invalid(
            OP,
            "weights",
            format!(
                "token {position} may not attend to the later token {j} (weight {})",
                weights[j]
            ),
        ));
    }
    if weights.iter().any(|w| !w.is_finite() || *w < 0.0)
        || (weights.iter().sum::<f64>() - 1.0).abs() > 1e-12
    {
        return Err(invalid(
            OP,
            "weights",
            format!("must be non-negative and sum to 1, got {weights:?}"),
        ));
    }
    matmul(&DMatrix::from_row_slice(1, weights.len(), weights), h)
}

/// h₁("love") = 0.1·h₀("I") + 0.9·h₀("love").
pub fn h1_love() -> Result<DMatrix<f64>> {
    masked_mix(&LOVE_WEIGHTS, &h0(), 1)
}

/// h₂ = h₁ × W for a 1×2 row h₁.
pub fn h2_of(h1: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    matmul(h1, &feed_forward_weight())
}
