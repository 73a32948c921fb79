//! D3's worked cells, recomputed: the decoder's self-attention cell (weights drawn
//! from numpy's generator, seed 42) and the encoder–decoder attention cell (its uniform weights),
//! each under the reading the cell computes and the one the text describes.
//!
//! The decoder cell: Q = (Y + PE)W_q, K = (Y + PE)W_k, V = (Y + PE)W_v, A = softmax(QKᵀ) (÷√d_k
//! and the causal mask only in the text's reading), output A V W_o, then a LayerNorm without γ, β.
//! The encoder–decoder cell: Q from the decoder output, K and V from the encoder output,
//! A = softmax(QKᵀ/divisor), output A V.

use crate::error::{Result, invalid, shape_error, shape_of};
use crate::float::Float;
use crate::matmul::{matmul, matmul_nt};
use crate::rng::NumpyMt19937;
use nalgebra::DMatrix;

// ───────────────────────────── the worked cells' inputs ─────────────────────────────

/// The width of the walk-through's vectors, d_model = d_k = d_v = 4.
pub const WORKED_WIDTH: usize = 4;

/// Y + PE for "`<start>` de nada" exactly as the decoder cell types it (rounded to the printed
/// decimals), one row per target token.
pub const Y_PLUS_PE: [[f64; 4]; 3] =
    [[0.0, 1.0, 0.0, 1.0], [0.6415, 1.39995, 0.3001, 1.1], [1.4093, 0.8998, -0.3998, 1.3]];

/// The seed the decoder cell passes to `np.random.seed` before drawing W_q, W_k, W_v, W_o.
pub const NUMPY_SEED: u32 = 42;

/// ε of both LayerNorm formulas in the cells.
pub const WORKED_EPSILON: f64 = 1e-6;

/// The encoder's final LayerNorm output as the encoder–decoder cell types it.
pub const ENCODER_OUTPUT: [[f64; 4]; 3] = [
    [-1.34164072, -0.44721357, 0.44721357, 1.34164072],
    [-1.34164071, -0.44721357, 0.44721357, 1.34164071],
    [-1.34164075, -0.44721358, 0.44721358, 1.34164075],
];

/// The decoder's LayerNorm output as the encoder–decoder cell types it (the decoder cell's
/// printed result).
pub const DECODER_OUTPUT: [[f64; 4]; 3] = [
    [-0.46049196, -1.4140849, 0.81224991, 1.06232694],
    [-0.46121408, -1.41736871, 0.85625689, 1.02232591],
    [-0.46146504, -1.41536061, 0.83223948, 1.04458616],
];

/// The query weights the encoder–decoder cell uses (the same 0/1 matrix as the encoder's W_Q).
pub const CROSS_W_Q: [[f64; 4]; 4] =
    [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]];
/// The key weights of the encoder–decoder cell.
pub const CROSS_W_K: [[f64; 4]; 4] =
    [[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]];
/// The value weights of the encoder–decoder cell.
pub const CROSS_W_V: [[f64; 4]; 4] =
    [[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0]];

/// What the encoder–decoder cell divides the scores by: √3, where the text says √d_k = √4.
pub const CELL_SCORE_DIVISOR: f64 = 1.732_050_807_568_877_2; // √3
/// The divisor the text states, √d_k with d_k = 4.
pub const TEXT_SCORE_DIVISOR: f64 = 2.0;

/// A fixed-size table as a matrix.
pub fn table<const R: usize, const C: usize>(rows: &[[f64; C]; R]) -> DMatrix<f64> {
    DMatrix::from_fn(R, C, |r, c| rows[r][c])
}

// ───────────────────────────── small shared pieces ─────────────────────────────

/// Row softmax of `scores` where `keep(i, j)` is false for masked entries, which get weight 0
/// (their score is −∞). Max-subtracted, so no exponential overflows. A row with no kept entry is
/// an error, never NaN.
pub fn masked_softmax_rows<T: Float>(
    op: &'static str,
    scores: &DMatrix<T>,
    keep: impl Fn(usize, usize) -> bool,
) -> Result<DMatrix<T>> {
    let mut out = DMatrix::zeros(scores.nrows(), scores.ncols());
    for i in 0..scores.nrows() {
        let mut max = T::neg_infinity();
        for j in 0..scores.ncols() {
            if keep(i, j) && scores[(i, j)] > max {
                max = scores[(i, j)];
            }
        }
        if max == T::neg_infinity() {
            return Err(invalid(
                op,
                "mask",
                format!("row {i} masks every key, so its softmax is undefined"),
            ));
        }
        let mut sum = T::zero();
        for j in 0..scores.ncols() {
            if keep(i, j) {
                let e = (scores[(i, j)] - max).exp();
                out[(i, j)] = e;
                sum += e;
            }
        }
        for j in 0..scores.ncols() {
            out[(i, j)] /= sum;
        }
    }
    Ok(out)
}

/// How a LayerNorm divides by the spread of a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// √(σ² + ε): the formula the document prints and its LayerNorm cell uses.
    SqrtVariancePlusEpsilon,
    /// σ + ε: what the decoder cell computes (`(x − mean)/(std + eps)`).
    StdPlusEpsilon,
}

/// Each row normalised to mean 0 and spread 1, without γ and β (γ = 1, β = 0):
/// (x − μ)/√(σ² + ε) or (x − μ)/(σ + ε), σ² the population variance of the row.
pub fn normalise_rows(x: &DMatrix<f64>, epsilon: f64, spread: Spread) -> DMatrix<f64> {
    let c = x.ncols() as f64;
    let mut out = x.clone();
    for r in 0..x.nrows() {
        let mean = x.row(r).sum() / c;
        let var = x.row(r).iter().map(|v| (v - mean).powi(2)).sum::<f64>() / c;
        let denom = match spread {
            Spread::SqrtVariancePlusEpsilon => (var + epsilon).sqrt(),
            Spread::StdPlusEpsilon => var.sqrt() + epsilon,
        };
        for j in 0..x.ncols() {
            out[(r, j)] = (x[(r, j)] - mean) / denom;
        }
    }
    out
}

// ───────────────────────────── the decoder cell ─────────────────────────────

/// The four 4×4 weight matrices the decoder cell draws, in its order: W_q, W_k, W_v, W_o, each
/// `np.random.rand(4, 4)` after `np.random.seed(42)`.
pub fn decoder_cell_weights() -> [DMatrix<f64>; 4] {
    let mut g = NumpyMt19937::new(NUMPY_SEED);
    let mut draw = || g.rand_matrix::<f64>(WORKED_WIDTH, WORKED_WIDTH);
    [draw(), draw(), draw(), draw()]
}

/// Which computation to run for the decoder's self-attention walk-through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecoderReading {
    /// Divide the scores by √d_k (the text: "the same as for the input stack"; the cell does not).
    pub scale: bool,
    /// Mask future positions (the text says the cell does; it does not).
    pub causal: bool,
    /// The LayerNorm formula.
    pub spread: Spread,
}

impl DecoderReading {
    /// What the cell computes: no scaling, no mask, (x − μ)/(σ + ε).
    pub const CELL: DecoderReading =
        DecoderReading { scale: false, causal: false, spread: Spread::StdPlusEpsilon };
    /// What the text describes: scaled by √d_k, causally masked, (x − μ)/√(σ² + ε).
    pub const TEXT: DecoderReading =
        DecoderReading { scale: true, causal: true, spread: Spread::SqrtVariancePlusEpsilon };
}

/// The decoder walk-through's quantities.
#[derive(Clone, Debug)]
pub struct DecoderCell {
    /// The 3×3 attention weights softmax(S), S = QKᵀ (÷√d_k when scaled).
    pub weights: DMatrix<f64>,
    /// A·V·W_o, the matrix the document labels the decoder's attention output.
    pub output: DMatrix<f64>,
    /// Its LayerNorm, the decoder output fed to the encoder–decoder attention.
    pub normalised: DMatrix<f64>,
}

/// The decoder cell under a reading: Q = (Y + PE)W_q, K = (Y + PE)W_k, V = (Y + PE)W_v,
/// A = softmax(QKᵀ, divided by √d_k if scaled, causally masked if asked), output = A V W_o, then
/// LayerNorm without γ, β.
pub fn decoder_cell(reading: DecoderReading) -> Result<DecoderCell> {
    let [w_q, w_k, w_v, w_o] = decoder_cell_weights();
    let y = table(&Y_PLUS_PE);
    let (q, k, v) = (matmul(&y, &w_q)?, matmul(&y, &w_k)?, matmul(&y, &w_v)?);
    let mut scores = matmul_nt(&q, &k)?;
    if reading.scale {
        scores /= (WORKED_WIDTH as f64).sqrt();
    }
    let weights = masked_softmax_rows("decoder_cell", &scores, |i, j| !reading.causal || j <= i)?;
    let output = matmul(&matmul(&weights, &v)?, &w_o)?;
    let normalised = normalise_rows(&output, WORKED_EPSILON, reading.spread);
    Ok(DecoderCell { weights, output, normalised })
}

// ───────────────────────────── the encoder–decoder cell ─────────────────────────────

/// How a cell applies a weight matrix W to the rows of X.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Orientation {
    /// X·W, as the text writes Q = LN(x_o) × W_Q.
    AsWritten,
    /// X·Wᵀ, as the cell computes it (`X.dot(W.T)`).
    Transposed,
}

/// Which computation to run for the encoder–decoder attention walk-through.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossReading {
    /// How the weights are applied.
    pub orientation: Orientation,
    /// What the scores are divided by.
    pub divisor: f64,
    /// Mask "future" source positions, as the text's step 4 says (cross-attention has no such
    /// mask).
    pub causal: bool,
}

impl CrossReading {
    /// What the cell computes: X·Wᵀ, scores ÷ √3, no mask.
    pub const CELL: CrossReading = CrossReading {
        orientation: Orientation::Transposed,
        divisor: CELL_SCORE_DIVISOR,
        causal: false,
    };
    /// What the text describes: X·W, scores ÷ √4, "apply masking".
    pub const TEXT: CrossReading = CrossReading {
        orientation: Orientation::AsWritten,
        divisor: TEXT_SCORE_DIVISOR,
        causal: true,
    };
    /// Cross-attention done right: X·W, ÷ √d_k, no mask.
    pub const STANDARD: CrossReading = CrossReading {
        orientation: Orientation::AsWritten,
        divisor: TEXT_SCORE_DIVISOR,
        causal: false,
    };
}

/// The encoder–decoder walk-through's quantities.
#[derive(Clone, Debug)]
pub struct CrossCell {
    /// Scores QKᵀ/divisor, 3 target rows × 3 source columns.
    pub scores: DMatrix<f64>,
    /// Their row softmax.
    pub weights: DMatrix<f64>,
    /// weights · V.
    pub output: DMatrix<f64>,
}

/// The encoder–decoder cell under a reading: Q from the decoder output, K and V from the encoder
/// output, softmax of the divided scores, times V. Its inputs are the typed [`DECODER_OUTPUT`]
/// and [`ENCODER_OUTPUT`].
pub fn cross_cell(reading: CrossReading) -> Result<CrossCell> {
    cross_cell_on(&table(&DECODER_OUTPUT), &table(&ENCODER_OUTPUT), reading)
}

/// [`cross_cell`] on any decoder and encoder outputs (widths 4, any lengths).
pub fn cross_cell_on(
    decoder: &DMatrix<f64>,
    encoder: &DMatrix<f64>,
    reading: CrossReading,
) -> Result<CrossCell> {
    if decoder.ncols() != WORKED_WIDTH || encoder.ncols() != WORKED_WIDTH {
        return Err(shape_error(
            "cross_cell",
            "decoder and encoder outputs",
            "4 columns each",
            format!("{} and {}", shape_of(decoder), shape_of(encoder)),
        ));
    }
    let apply = |x: &DMatrix<f64>, w: &[[f64; 4]; 4]| -> Result<DMatrix<f64>> {
        let w = table(w);
        match reading.orientation {
            Orientation::AsWritten => matmul(x, &w),
            Orientation::Transposed => matmul_nt(x, &w),
        }
    };
    let q = apply(decoder, &CROSS_W_Q)?;
    let k = apply(encoder, &CROSS_W_K)?;
    let v = apply(encoder, &CROSS_W_V)?;
    let scores = matmul_nt(&q, &k)? / reading.divisor;
    let weights = masked_softmax_rows("cross_cell", &scores, |i, j| !reading.causal || j <= i)?;
    let output = matmul(&weights, &v)?;
    Ok(CrossCell { scores, weights, output })
}
