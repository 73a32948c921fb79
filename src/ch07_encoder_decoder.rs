//! Chapter 7: the encoder–decoder transformer and cross-attention, worked and trained.
//!
//! The encoder reads the source sequence with unmasked self-attention. The decoder reads the
//! target shifted right behind a start token with causal self-attention, then asks the encoder
//! output with **cross-attention**: queries Q = Y W_Q from the decoder, keys K = E W_K and values
//! V = E W_V from the encoder output E, weights softmax(QKᵀ/√d_k) without a causal mask (a target
//! position may look at every source position; the two lengths may differ). An output projection
//! turns each decoder row into logits over the vocabulary; training minimises the cross-entropy of
//! the next target token (teacher forcing) and decoding picks the argmax token by token until the
//! end token.
//!
//! The prose is [`chapters/ch07_encoder_decoder.md`](../../chapters/ch07_encoder_decoder.md); the
//! tests are `tests/ch07_encoder_decoder.rs`.
//!
//! Layout: the worked cells of document 003 (decoder self-attention drawn from numpy's generator,
//! the encoder–decoder attention with its uniform weights), then the trainable parts built on
//! chapter 6 (its multi-head attention, LayerNorm, feed-forward net and post-LN block) and chapter
//! 5 (sinusoidal positions): padded batches and their masks, cross-attention, the decoder block,
//! the output projection and loss, then the model, the digit-reversal task, training with Adam and
//! greedy decoding, then `ERRATA`, `worked()`, `walk()`, `figures()`, `CHAPTER`.
//!
//! Conventions: a batch of B sequences padded to a common length T is a (B·T)×C matrix, sequence
//! b in rows b·T … b·T + T − 1, its real tokens first; a [`Batch`] says how long each one really is.

use crate::ch03_mlp::Activation;
use crate::ch06_attention::{
    AttnSpec, Block, BlockCache, BlockGrads, Ffn, FfnCache, FfnGrads, LAYER_NORM_EPS, LayerNorm,
    LnCache, LnGrads, MhaCache, MhaGrads, MultiHead, NormOrder, block_backward, block_forward,
    ffn_backward, ffn_forward, layer_norm_backward, layer_norm_forward, mha_backward, mha_forward,
    padding_mask,
};
use crate::errata::Erratum;
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::Float;
use crate::matmul::{matmul, matmul_nt, matmul_tn};
use crate::optim::{Adam, AdamConfig};
use crate::plot::{Figure, Heatmap, LineChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::rng::{NumpyMt19937, Rng};
use crate::sources::D3;
use crate::sources::{NUMPY, THIS_CRATE};
use nalgebra::DMatrix;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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

/// A number the way numpy prints it in an array at precision 8: fixed 8 decimals, trailing zeros
/// dropped but the point kept (`-1.4140849`, `0.`).
pub fn numpy_style(x: f64) -> String {
    let s = crate::snapshot::fixed(x, 8);
    let s = s.trim_end_matches('0');
    s.to_string()
}

/// A matrix row in numpy's style, entries separated by single spaces.
pub fn numpy_row(m: &DMatrix<f64>, r: usize) -> String {
    (0..m.ncols()).map(|c| numpy_style(m[(r, c)])).collect::<Vec<_>>().join(" ")
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
    /// Mask "future" source positions, as the text's step 4 says (cross-attention has no such mask).
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

// ───────────────────────────── batches and masks ─────────────────────────────

/// B sequences padded to a common length T, stacked as B·T rows: sequence b's real tokens are
/// rows b·T … b·T + lengths\[b\] − 1, the rest is padding that no real position may attend to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// T, the padded length.
    pub len: usize,
    /// The real length of each sequence (1 ≤ lengths\[b\] ≤ T).
    pub lengths: Vec<usize>,
}

impl Batch {
    /// A batch of padded length `len` with these real lengths; errors on an empty batch, a zero
    /// length or a length above `len`.
    pub fn new(len: usize, lengths: Vec<usize>) -> Result<Self> {
        if lengths.is_empty() || len == 0 {
            return Err(Error::Empty {
                op: "Batch::new",
                arg: "batch (no sequences or zero length)",
            });
        }
        if let Some(b) = lengths.iter().position(|&l| l == 0 || l > len) {
            return Err(invalid(
                "Batch::new",
                "lengths",
                format!("sequence {b} has length {}, outside 1..={len}", lengths[b]),
            ));
        }
        Ok(Batch { len, lengths })
    }

    /// Every sequence of the full length T.
    pub fn full(sequences: usize, len: usize) -> Result<Self> {
        Self::new(len, vec![len; sequences])
    }

    /// B.
    pub fn sequences(&self) -> usize {
        self.lengths.len()
    }

    /// B·T, the rows of a matrix holding this batch.
    pub fn rows(&self) -> usize {
        self.len * self.lengths.len()
    }

    fn check_rows<T>(&self, op: &'static str, arg: &'static str, x: &DMatrix<T>) -> Result<()> {
        if x.nrows() != self.rows() {
            return Err(shape_error(
                op,
                arg,
                format!(
                    "{} rows ({} sequences × length {})",
                    self.rows(),
                    self.sequences(),
                    self.len
                ),
                shape_of(x),
            ));
        }
        Ok(())
    }
}

// ───────────────────────────── attention between two sequences ─────────────────────────────

/// The attention specification (chapter 6's [`AttnSpec`]) for queries from `q_batch` over keys
/// from `kv_batch`: scores ÷ √d_k, the padded keys of each sequence masked with −∞, and for
/// self-attention of the decoder the causal mask on top.
pub fn attention_spec<T: Float>(
    q_batch: &Batch,
    kv_batch: &Batch,
    causal: bool,
) -> Result<AttnSpec<T>> {
    if q_batch.sequences() != kv_batch.sequences() {
        return Err(shape_error(
            "attention_spec",
            "query and key/value batches",
            format!("{} sequences in both", q_batch.sequences()),
            format!("{}", kv_batch.sequences()),
        ));
    }
    let spec = if causal {
        AttnSpec::causal(q_batch.len)
    } else {
        AttnSpec::cross(q_batch.len, kv_batch.len)
    };
    let spec = AttnSpec { kv_len: kv_batch.len, ..spec };
    if kv_batch.lengths.iter().all(|&l| l == kv_batch.len) {
        return Ok(spec); // nothing padded
    }
    Ok(spec.with_mask(padding_mask(&kv_batch.lengths, q_batch.len, kv_batch.len)?))
}

/// Cross-attention: queries from the decoder rows `y`, keys and values from the encoder output
/// `e`, with chapter 6's multi-head attention and no causal mask; only the source padding is
/// masked. Shapes: y (B·T_t)×C, e (B·T_s)×C, result (B·T_t)×C. T_t and T_s may differ.
///
/// Q = Y W_Q + b_Q, K = E W_K + b_K, V = E W_V + b_V; per sequence and head
/// A = softmax(QKᵀ/√d_k + padding mask), O = A V; heads concatenated, · W_O + b_O.
pub fn cross_attention_forward<T: Float>(
    y: &DMatrix<T>,
    y_batch: &Batch,
    e: &DMatrix<T>,
    e_batch: &Batch,
    w: &MultiHead<T>,
) -> Result<(DMatrix<T>, MhaCache<T>)> {
    const OP: &str = "cross_attention_forward";
    if y.ncols() != e.ncols() {
        return Err(shape_error(
            OP,
            "decoder and encoder widths",
            format!("the decoder's width {} to equal the encoder's", y.ncols()),
            format!("decoder {}, encoder {}", shape_of(y), shape_of(e)),
        ));
    }
    y_batch.check_rows(OP, "decoder input", y)?;
    e_batch.check_rows(OP, "encoder output", e)?;
    mha_forward(w, y, e, &attention_spec(y_batch, e_batch, false)?)
}

/// Backward of [`cross_attention_forward`]: chapter 6's multi-head backward pass. Its `d_x_kv` is
/// the gradient that flows into the encoder output, ∂E = ∂K W_Kᵀ + ∂V W_Vᵀ.
pub fn cross_attention_backward<T: Float>(
    w: &MultiHead<T>,
    cache: &MhaCache<T>,
    d_out: &DMatrix<T>,
) -> Result<MhaGrads<T>> {
    mha_backward(w, cache, d_out)
}

// ───────────────────── parameters and gradients as parallel lists ─────────────────────

fn mha_tensors<T: Float>(p: &MultiHead<T>) -> [&DMatrix<T>; 8] {
    [&p.w_q, &p.b_q, &p.w_k, &p.b_k, &p.w_v, &p.b_v, &p.w_o, &p.b_o]
}

fn mha_tensors_mut<T: Float>(p: &mut MultiHead<T>) -> [&mut DMatrix<T>; 8] {
    [&mut p.w_q, &mut p.b_q, &mut p.w_k, &mut p.b_k, &mut p.w_v, &mut p.b_v, &mut p.w_o, &mut p.b_o]
}

/// Multi-head gradients laid out as a [`MultiHead`] (∂W_Q in `w_q` …), so gradients and
/// parameters list their tensors in the same order.
fn mha_as_params<T: Float>(heads: usize, g: MhaGrads<T>) -> MultiHead<T> {
    MultiHead {
        heads,
        w_q: g.d_w_q,
        b_q: g.d_b_q,
        w_k: g.d_w_k,
        b_k: g.d_b_k,
        w_v: g.d_w_v,
        b_v: g.d_b_v,
        w_o: g.d_w_o,
        b_o: g.d_b_o,
    }
}

fn ln_as_params<T: Float>(like: &LayerNorm<T>, g: LnGrads<T>) -> LayerNorm<T> {
    LayerNorm { gamma: g.d_gamma, beta: g.d_beta, ..like.clone() }
}

fn ffn_as_params<T: Float>(like: &Ffn<T>, g: FfnGrads<T>) -> Ffn<T> {
    Ffn { w1: g.d_w1, b1: g.d_b1, w2: g.d_w2, b2: g.d_b2, act: like.act }
}

fn ffn_tensors<T: Float>(f: &Ffn<T>) -> [&DMatrix<T>; 4] {
    [&f.w1, &f.b1, &f.w2, &f.b2]
}

fn ffn_tensors_mut<T: Float>(f: &mut Ffn<T>) -> [&mut DMatrix<T>; 4] {
    [&mut f.w1, &mut f.b1, &mut f.w2, &mut f.b2]
}

/// Every tensor of an encoder layer (chapter 6's [`Block`]) in a fixed order.
pub fn block_tensors<T: Float>(b: &Block<T>) -> Vec<&DMatrix<T>> {
    let mut v: Vec<&DMatrix<T>> = mha_tensors(&b.attn).into();
    v.extend([&b.ln1.gamma, &b.ln1.beta]);
    v.extend(ffn_tensors(&b.ffn));
    v.extend([&b.ln2.gamma, &b.ln2.beta]);
    v
}

/// Every tensor of an encoder layer, mutable, in the order of [`block_tensors`].
pub fn block_tensors_mut<T: Float>(b: &mut Block<T>) -> Vec<&mut DMatrix<T>> {
    let mut v: Vec<&mut DMatrix<T>> = mha_tensors_mut(&mut b.attn).into();
    v.extend([&mut b.ln1.gamma, &mut b.ln1.beta]);
    v.extend(ffn_tensors_mut(&mut b.ffn));
    v.extend([&mut b.ln2.gamma, &mut b.ln2.beta]);
    v
}

fn block_grads_as_params<T: Float>(like: &Block<T>, g: BlockGrads<T>) -> Block<T> {
    Block {
        attn: mha_as_params(like.attn.heads, g.attn),
        ln1: ln_as_params(&like.ln1, g.ln1),
        ffn: ffn_as_params(&like.ffn, g.ffn),
        ln2: ln_as_params(&like.ln2, g.ln2),
        order: like.order,
    }
}

/// An encoder layer: chapter 6's block in the post-LN order of document 003's figure,
/// X₁ = LN₁(X + SelfAttention(X)), out = LN₂(X₁ + FFN(X₁)), with a ReLU feed-forward net.
/// Attention weights N(0, 1/C), W₁ N(0, 2/C) (it feeds a ReLU), W₂ N(0, 1/F), biases 0, γ = 1, β = 0.
pub fn encoder_block<T: Float>(
    width: usize,
    heads: usize,
    hidden: usize,
    rng: &mut Rng,
) -> Result<Block<T>> {
    if heads == 0 || !width.is_multiple_of(heads) {
        return Err(invalid(
            "encoder_block",
            "heads",
            format!("the width {width} must split into {heads} equal heads"),
        ));
    }
    Ok(Block {
        attn: MultiHead::random(
            heads,
            width,
            width,
            width / heads,
            width,
            1.0 / (width as f64).sqrt(),
            rng,
        )?,
        ln1: LayerNorm::new(width, LAYER_NORM_EPS)?,
        ffn: relu_ffn(width, hidden, rng),
        ln2: LayerNorm::new(width, LAYER_NORM_EPS)?,
        order: NormOrder::Post,
    })
}

fn relu_ffn<T: Float>(width: usize, hidden: usize, rng: &mut Rng) -> Ffn<T> {
    Ffn {
        w1: rng.normal_matrix(width, hidden, (2.0 / width as f64).sqrt()),
        b1: DMatrix::zeros(1, hidden),
        w2: rng.normal_matrix(hidden, width, (1.0 / hidden as f64).sqrt()),
        b2: DMatrix::zeros(1, width),
        act: Activation::Relu,
    }
}

/// Forward pass of an encoder layer over a padded batch (the padded keys masked).
/// Shapes: x (B·T)×C, result (B·T)×C.
pub fn encoder_block_forward<T: Float>(
    x: &DMatrix<T>,
    batch: &Batch,
    block: &Block<T>,
) -> Result<(DMatrix<T>, BlockCache<T>)> {
    batch.check_rows("encoder_block_forward", "x", x)?;
    block_forward(block, x, &attention_spec(batch, batch, false)?)
}

// ───────────────────────────── the decoder block ─────────────────────────────

/// One decoder layer, post-LN: Y₁ = LN₁(Y + CausalSelfAttention(Y)),
/// Y₂ = LN₂(Y₁ + CrossAttention(Y₁, E)), out = LN₃(Y₂ + FFN(Y₂)). Every part is chapter 6's.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderBlock<T: Float> {
    /// The causal self-attention.
    pub self_attention: MultiHead<T>,
    /// LayerNorm after the self-attention.
    pub norm1: LayerNorm<T>,
    /// The cross-attention (queries from the decoder, keys and values from the encoder output):
    /// its weights belong to the decoder layer, not to the encoder.
    pub cross_attention: MultiHead<T>,
    /// LayerNorm after the cross-attention.
    pub norm2: LayerNorm<T>,
    /// The feed-forward net.
    pub ffn: Ffn<T>,
    /// LayerNorm after the feed-forward net.
    pub norm3: LayerNorm<T>,
}

impl<T: Float> DecoderBlock<T> {
    /// Attention weights N(0, 1/C), a ReLU feed-forward net as in [`encoder_block`], γ = 1, β = 0.
    pub fn random(width: usize, heads: usize, hidden: usize, rng: &mut Rng) -> Result<Self> {
        if heads == 0 || !width.is_multiple_of(heads) {
            return Err(invalid(
                "DecoderBlock::random",
                "heads",
                format!("the width {width} must split into {heads} equal heads"),
            ));
        }
        let std = 1.0 / (width as f64).sqrt();
        Ok(DecoderBlock {
            self_attention: MultiHead::random(heads, width, width, width / heads, width, std, rng)?,
            norm1: LayerNorm::new(width, LAYER_NORM_EPS)?,
            cross_attention: MultiHead::random(
                heads,
                width,
                width,
                width / heads,
                width,
                std,
                rng,
            )?,
            norm2: LayerNorm::new(width, LAYER_NORM_EPS)?,
            ffn: relu_ffn(width, hidden, rng),
            norm3: LayerNorm::new(width, LAYER_NORM_EPS)?,
        })
    }

    /// Every tensor, in a fixed order (the order of [`DecoderBlock::tensors_mut`]).
    pub fn tensors(&self) -> Vec<&DMatrix<T>> {
        let mut v: Vec<&DMatrix<T>> = mha_tensors(&self.self_attention).into();
        v.extend([&self.norm1.gamma, &self.norm1.beta]);
        v.extend(mha_tensors(&self.cross_attention));
        v.extend([&self.norm2.gamma, &self.norm2.beta]);
        v.extend(ffn_tensors(&self.ffn));
        v.extend([&self.norm3.gamma, &self.norm3.beta]);
        v
    }

    /// Every tensor, mutable, in the order of [`DecoderBlock::tensors`].
    pub fn tensors_mut(&mut self) -> Vec<&mut DMatrix<T>> {
        let mut v: Vec<&mut DMatrix<T>> = mha_tensors_mut(&mut self.self_attention).into();
        v.extend([&mut self.norm1.gamma, &mut self.norm1.beta]);
        v.extend(mha_tensors_mut(&mut self.cross_attention));
        v.extend([&mut self.norm2.gamma, &mut self.norm2.beta]);
        v.extend(ffn_tensors_mut(&mut self.ffn));
        v.extend([&mut self.norm3.gamma, &mut self.norm3.beta]);
        v
    }
}

/// What the decoder block's backward pass needs.
#[derive(Clone, Debug)]
pub struct DecoderBlockCache<T: Float> {
    self_attention: MhaCache<T>,
    norm1: LnCache<T>,
    /// The cross-attention's cache; its `weights` (one (B·T_t)×T_s matrix per head) are the
    /// cross-attention maps.
    pub cross_attention: MhaCache<T>,
    norm2: LnCache<T>,
    ffn: FfnCache<T>,
    norm3: LnCache<T>,
}

/// Forward pass of a [`DecoderBlock`]: y (B·T_t)×C the decoder stream, e (B·T_s)×C the encoder
/// output. Result (B·T_t)×C.
pub fn decoder_block_forward<T: Float>(
    y: &DMatrix<T>,
    y_batch: &Batch,
    e: &DMatrix<T>,
    e_batch: &Batch,
    block: &DecoderBlock<T>,
) -> Result<(DMatrix<T>, DecoderBlockCache<T>)> {
    y_batch.check_rows("decoder_block_forward", "y", y)?;
    let (a, self_attention) =
        mha_forward(&block.self_attention, y, y, &attention_spec(y_batch, y_batch, true)?)?;
    let (y1, norm1) = layer_norm_forward(&block.norm1, &(y + a))?;
    let (c, cross_attention) =
        cross_attention_forward(&y1, y_batch, e, e_batch, &block.cross_attention)?;
    let (y2, norm2) = layer_norm_forward(&block.norm2, &(&y1 + c))?;
    let (f, ffn) = ffn_forward(&block.ffn, &y2)?;
    let (out, norm3) = layer_norm_forward(&block.norm3, &(&y2 + f))?;
    Ok((out, DecoderBlockCache { self_attention, norm1, cross_attention, norm2, ffn, norm3 }))
}

/// Backward of [`decoder_block_forward`]: (∂L/∂y, ∂L/∂e, the weights' gradients laid out as a
/// [`DecoderBlock`]). ∂L/∂e is the gradient the cross-attention sends into the encoder output.
pub fn decoder_block_backward<T: Float>(
    cache: &DecoderBlockCache<T>,
    block: &DecoderBlock<T>,
    d_out: &DMatrix<T>,
) -> Result<(DMatrix<T>, DMatrix<T>, DecoderBlock<T>)> {
    let norm3 = layer_norm_backward(&block.norm3, &cache.norm3, d_out)?; //      out = LN₃(s₃)
    let ffn = ffn_backward(&block.ffn, &cache.ffn, &norm3.d_x)?; //               s₃ = Y₂ + FFN(Y₂)
    let d_y2 = &norm3.d_x + &ffn.d_x;
    let norm2 = layer_norm_backward(&block.norm2, &cache.norm2, &d_y2)?; //      Y₂ = LN₂(s₂)
    let cross =
        cross_attention_backward(&block.cross_attention, &cache.cross_attention, &norm2.d_x)?; // s₂ = Y₁ + Cross(Y₁, E)
    let d_y1 = &norm2.d_x + &cross.d_x_q;
    let d_e = cross.d_x_kv.clone();
    let norm1 = layer_norm_backward(&block.norm1, &cache.norm1, &d_y1)?; //      Y₁ = LN₁(s₁)
    let selfa = mha_backward(&block.self_attention, &cache.self_attention, &norm1.d_x)?; // s₁ = Y + Attn(Y, Y)
    let d_y = &norm1.d_x + &selfa.d_x_q + &selfa.d_x_kv;
    let heads = block.self_attention.heads;
    let grads = DecoderBlock {
        self_attention: mha_as_params(heads, selfa),
        norm1: ln_as_params(&block.norm1, norm1),
        cross_attention: mha_as_params(block.cross_attention.heads, cross),
        norm2: ln_as_params(&block.norm2, norm2),
        ffn: ffn_as_params(&block.ffn, ffn),
        norm3: ln_as_params(&block.norm3, norm3),
    };
    Ok((d_y, d_e, grads))
}

// ───────────────────────────── the loss ─────────────────────────────

fn add_row<T: Float>(m: &mut DMatrix<T>, row: &DMatrix<T>) {
    for r in 0..m.nrows() {
        for c in 0..m.ncols() {
            m[(r, c)] += row[(0, c)];
        }
    }
}

fn column_sums<T: Float>(m: &DMatrix<T>) -> DMatrix<T> {
    DMatrix::from_fn(1, m.ncols(), |_, c| m.column(c).iter().copied().sum())
}

/// Cross-entropy of the rows of `logits` (N×V) against `labels` (one per row; `None` rows, the
/// padding, are skipped), averaged over the labelled rows. The labelled rows go through chapter 2's
/// [`crate::ch02_softmax::cross_entropy_from_logits_with_gradient`] (log-sum-exp, from the logits);
/// returns the loss and ∂L/∂logits = (softmax − one-hot)/N on labelled rows, 0 on padding rows.
pub fn padded_cross_entropy<T: Float>(
    logits: &DMatrix<T>,
    labels: &[Option<usize>],
) -> Result<(T, DMatrix<T>)> {
    const OP: &str = "padded_cross_entropy";
    if labels.len() != logits.nrows() {
        return Err(shape_error(
            OP,
            "labels",
            format!("{} labels (one per row of logits)", logits.nrows()),
            format!("{}", labels.len()),
        ));
    }
    let rows: Vec<usize> = (0..labels.len()).filter(|&r| labels[r].is_some()).collect();
    if rows.is_empty() {
        return Err(Error::Empty { op: OP, arg: "labels (every row is padding)" });
    }
    let targets: Vec<usize> = labels.iter().flatten().copied().collect();
    let real = DMatrix::from_fn(rows.len(), logits.ncols(), |i, c| logits[(rows[i], c)]);
    let (loss, d_real) =
        crate::ch02_softmax::cross_entropy_from_logits_with_gradient(&real, &targets)?;
    let mut d = DMatrix::zeros(logits.nrows(), logits.ncols());
    for (i, &r) in rows.iter().enumerate() {
        d.row_mut(r).copy_from(&d_real.row(i)); // padding rows keep a zero gradient
    }
    Ok((loss, d))
}

// ───────────────────────────── the model ─────────────────────────────

/// The shape of an encoder–decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// Tokens in the vocabulary (source and target share it).
    pub vocab: usize,
    /// C = d_model, the width of every row.
    pub width: usize,
    /// Attention heads (must divide the width).
    pub heads: usize,
    /// The feed-forward net's hidden width F.
    pub hidden: usize,
    /// Encoder layers.
    pub encoder_layers: usize,
    /// Decoder layers.
    pub decoder_layers: usize,
    /// The most positions either stream may hold (the source; the start token plus the target).
    pub max_len: usize,
}

impl ModelConfig {
    fn check(&self) -> Result<()> {
        const OP: &str = "EncoderDecoder::new";
        if self.vocab == 0
            || self.width == 0
            || self.hidden == 0
            || self.max_len == 0
            || self.encoder_layers == 0
            || self.decoder_layers == 0
        {
            return Err(invalid(OP, "config", format!("every size must be positive: {self:?}")));
        }
        if self.heads == 0
            || !self.width.is_multiple_of(self.heads)
            || !self.width.is_multiple_of(2)
        {
            return Err(invalid(
                OP,
                "width and heads",
                format!(
                    "the width {} must be even and split into {} heads",
                    self.width, self.heads
                ),
            ));
        }
        Ok(())
    }
}

/// A transformer encoder–decoder: token embeddings plus sinusoidal positions on both sides, a
/// stack of encoder layers (chapter 6's [`Block`], post-LN), a stack of [`DecoderBlock`]s that cross-attend to the last encoder
/// output, and an output projection to logits over the vocabulary, logits = Y W_out + b_out.
///
/// The same type holds gradients (same shapes), so optimisers pair tensors by position.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderDecoder<T: Float> {
    /// The shape.
    pub config: ModelConfig,
    /// Source token embeddings, V×C.
    pub source_embedding: DMatrix<T>,
    /// Target token embeddings, V×C.
    pub target_embedding: DMatrix<T>,
    /// The encoder layers.
    pub encoder: Vec<Block<T>>,
    /// The decoder layers.
    pub decoder: Vec<DecoderBlock<T>>,
    /// W_out, C×V.
    pub w_out: DMatrix<T>,
    /// b_out, 1×V.
    pub b_out: DMatrix<T>,
}

/// Everything a forward pass over a batch keeps for the backward pass.
#[derive(Clone, Debug)]
pub struct ForwardCache<T: Float> {
    source: Vec<Vec<usize>>,
    target_in: Vec<Vec<usize>>,
    source_batch: Batch,
    target_batch: Batch,
    encoder: Vec<BlockCache<T>>,
    /// The decoder layers' caches (their cross-attention weights included).
    pub decoder: Vec<DecoderBlockCache<T>>,
    decoder_out: DMatrix<T>,
}

/// The gradients and loss of one batch.
#[derive(Clone, Debug)]
pub struct Gradients<T: Float> {
    /// The mean cross-entropy over the real target positions.
    pub loss: T,
    /// ∂loss/∂(every tensor), in an [`EncoderDecoder`] of the model's shapes.
    pub grads: EncoderDecoder<T>,
}

impl<T: Float> EncoderDecoder<T> {
    /// A model with random weights from `seed`: embeddings N(0, 1), attention N(0, 1/C), FFN
    /// He-style, W_out N(0, 1/C), LayerNorm γ = 1, β = 0, biases 0.
    pub fn new(config: ModelConfig, seed: u64) -> Result<Self> {
        config.check()?;
        let mut rng = Rng::new(seed);
        let (v, c) = (config.vocab, config.width);
        Ok(EncoderDecoder {
            config,
            source_embedding: rng.normal_matrix(v, c, 1.0),
            target_embedding: rng.normal_matrix(v, c, 1.0),
            encoder: (0..config.encoder_layers)
                .map(|_| encoder_block(c, config.heads, config.hidden, &mut rng))
                .collect::<Result<_>>()?,
            decoder: (0..config.decoder_layers)
                .map(|_| DecoderBlock::random(c, config.heads, config.hidden, &mut rng))
                .collect::<Result<_>>()?,
            w_out: rng.normal_matrix(c, v, 1.0 / (c as f64).sqrt()),
            b_out: DMatrix::zeros(1, v),
        })
    }

    /// Every tensor in a fixed order: embeddings, encoder layers, decoder layers, W_out, b_out.
    pub fn tensors(&self) -> Vec<&DMatrix<T>> {
        let mut v = vec![&self.source_embedding, &self.target_embedding];
        for b in &self.encoder {
            v.extend(block_tensors(b));
        }
        for b in &self.decoder {
            v.extend(b.tensors());
        }
        v.extend([&self.w_out, &self.b_out]);
        v
    }

    /// Every tensor, mutable, in the order of [`EncoderDecoder::tensors`].
    pub fn tensors_mut(&mut self) -> Vec<&mut DMatrix<T>> {
        let mut v = vec![&mut self.source_embedding, &mut self.target_embedding];
        for b in &mut self.encoder {
            v.extend(block_tensors_mut(b));
        }
        for b in &mut self.decoder {
            v.extend(b.tensors_mut());
        }
        v.extend([&mut self.w_out, &mut self.b_out]);
        v
    }

    /// The number of trainable numbers.
    pub fn parameter_count(&self) -> usize {
        self.tensors().iter().map(|m| m.len()).sum()
    }

    /// A copy with every tensor replaced, in the order of [`EncoderDecoder::tensors`] (shapes
    /// must match). For gradient checks and for loading.
    pub fn with_tensors(&self, tensors: &[DMatrix<T>]) -> Result<Self> {
        let mut out = self.clone();
        let n = out.tensors().len();
        if tensors.len() != n {
            return Err(invalid(
                "EncoderDecoder::with_tensors",
                "tensors",
                format!("expected {n} tensors, got {}", tensors.len()),
            ));
        }
        for (i, (slot, t)) in out.tensors_mut().into_iter().zip(tensors).enumerate() {
            if slot.shape() != t.shape() {
                return Err(shape_error(
                    "EncoderDecoder::with_tensors",
                    "tensor",
                    format!("tensor {i} of {}", shape_of(slot)),
                    shape_of(t),
                ));
            }
            slot.copy_from(t);
        }
        Ok(out)
    }

    /// All zeros, the shapes of this model (a gradient accumulator).
    pub fn zeros_like(&self) -> Self {
        let mut z = self.clone();
        for t in z.tensors_mut() {
            t.fill(T::zero());
        }
        z
    }

    fn check_tokens(
        &self,
        op: &'static str,
        arg: &'static str,
        seqs: &[Vec<usize>],
    ) -> Result<Batch> {
        if seqs.is_empty() {
            return Err(Error::Empty { op, arg });
        }
        for (b, s) in seqs.iter().enumerate() {
            if s.is_empty() {
                return Err(invalid(op, arg, format!("sequence {b} is empty")));
            }
            if s.len() > self.config.max_len {
                return Err(invalid(
                    op,
                    arg,
                    format!(
                        "sequence {b} has {} positions, more than the model's maximum {}",
                        s.len(),
                        self.config.max_len
                    ),
                ));
            }
            if let Some(&t) = s.iter().find(|&&t| t >= self.config.vocab) {
                return Err(invalid(
                    op,
                    arg,
                    format!(
                        "sequence {b} holds token id {t}, outside the vocabulary 0..{}",
                        self.config.vocab
                    ),
                ));
            }
        }
        let len = seqs.iter().map(|s| s.len()).max().unwrap_or(1);
        Batch::new(len, seqs.iter().map(|s| s.len()).collect())
    }

    /// Rows E[token] + PE[position]; padding rows (past a sequence's end) are zero.
    fn embed(&self, table: &DMatrix<T>, seqs: &[Vec<usize>], batch: &Batch) -> Result<DMatrix<T>> {
        let c = self.config.width;
        let pe = crate::ch05_positions::sinusoidal::<T>(batch.len, c)?;
        let mut x = DMatrix::zeros(batch.rows(), c);
        for (b, s) in seqs.iter().enumerate() {
            for (p, &t) in s.iter().enumerate() {
                for j in 0..c {
                    x[(b * batch.len + p, j)] = table[(t, j)] + pe[(p, j)];
                }
            }
        }
        Ok(x)
    }

    fn embed_backward(
        d_table: &mut DMatrix<T>,
        seqs: &[Vec<usize>],
        batch: &Batch,
        d_x: &DMatrix<T>,
    ) {
        for (b, s) in seqs.iter().enumerate() {
            for (p, &t) in s.iter().enumerate() {
                for j in 0..d_table.ncols() {
                    d_table[(t, j)] += d_x[(b * batch.len + p, j)];
                }
            }
        }
    }

    /// Runs the encoder over the source sequences: the encoder output ((B·T_s)×C), its batch and
    /// the layer caches.
    pub fn encode(&self, source: &[Vec<usize>]) -> Result<(DMatrix<T>, Batch, Vec<BlockCache<T>>)> {
        let batch = self.check_tokens("EncoderDecoder::encode", "source", source)?;
        let mut x = self.embed(&self.source_embedding, source, &batch)?;
        let mut caches = Vec::with_capacity(self.encoder.len());
        for block in &self.encoder {
            let (out, cache) = encoder_block_forward(&x, &batch, block)?;
            x = out;
            caches.push(cache);
        }
        Ok((x, batch, caches))
    }

    /// Logits ((B·T_t)×V) for every position of the decoder inputs (start token first), given an
    /// encoder output; also the forward cache.
    pub fn forward(
        &self,
        source: &[Vec<usize>],
        target_in: &[Vec<usize>],
    ) -> Result<(DMatrix<T>, ForwardCache<T>)> {
        const OP: &str = "EncoderDecoder::forward";
        let (e, source_batch, encoder) = self.encode(source)?;
        let target_batch = self.check_tokens(OP, "target", target_in)?;
        if target_in.len() != source.len() {
            return Err(shape_error(
                OP,
                "source and target batches",
                format!("{} target sequences", source.len()),
                format!("{}", target_in.len()),
            ));
        }
        let mut y = self.embed(&self.target_embedding, target_in, &target_batch)?;
        let mut decoder = Vec::with_capacity(self.decoder.len());
        for block in &self.decoder {
            let (out, cache) = decoder_block_forward(&y, &target_batch, &e, &source_batch, block)?;
            y = out;
            decoder.push(cache);
        }
        let mut logits = matmul(&y, &self.w_out)?;
        add_row(&mut logits, &self.b_out);
        let cache = ForwardCache {
            source: source.to_vec(),
            target_in: target_in.to_vec(),
            source_batch,
            target_batch,
            encoder,
            decoder,
            decoder_out: y,
        };
        Ok((logits, cache))
    }

    /// Teacher forcing: the decoder reads `target_in` = [start, t₁, …, t_n] and is scored on
    /// predicting `labels` = [t₁, …, t_n, end] position by position (the two must have equal
    /// lengths per sequence). Returns the mean cross-entropy over all real positions and the
    /// gradient of every tensor.
    pub fn loss_and_gradients(
        &self,
        source: &[Vec<usize>],
        target_in: &[Vec<usize>],
        labels: &[Vec<usize>],
    ) -> Result<Gradients<T>> {
        const OP: &str = "EncoderDecoder::loss_and_gradients";
        let (logits, cache) = self.forward(source, target_in)?;
        self.check_tokens(OP, "labels", labels)?;
        if labels.len() != target_in.len()
            || labels.iter().zip(target_in).any(|(l, t)| l.len() != t.len())
        {
            return Err(shape_error(
                OP,
                "labels",
                "one label per decoder input position",
                format!(
                    "{} label sequences for {} inputs, or unequal lengths",
                    labels.len(),
                    target_in.len()
                ),
            ));
        }
        let tb = &cache.target_batch;
        let mut row_labels = vec![None; tb.rows()];
        for (b, l) in labels.iter().enumerate() {
            for (p, &t) in l.iter().enumerate() {
                row_labels[b * tb.len + p] = Some(t);
            }
        }
        let (loss, d_logits) = padded_cross_entropy(&logits, &row_labels)?;
        let grads = self.backward(&cache, &d_logits)?;
        Ok(Gradients { loss, grads })
    }

    /// The backward pass from ∂L/∂logits to every tensor.
    pub fn backward(
        &self,
        cache: &ForwardCache<T>,
        d_logits: &DMatrix<T>,
    ) -> Result<EncoderDecoder<T>> {
        let mut g = self.zeros_like();
        g.w_out = matmul_tn(&cache.decoder_out, d_logits)?; // logits = Y W_out + b_out
        g.b_out = column_sums(d_logits);
        let mut d_y = matmul_nt(d_logits, &self.w_out)?;
        let mut d_e = DMatrix::zeros(cache.source_batch.rows(), self.config.width);
        for (i, block) in self.decoder.iter().enumerate().rev() {
            let (dy, de, gb) = decoder_block_backward(&cache.decoder[i], block, &d_y)?;
            d_y = dy;
            d_e += de; // every decoder layer reads the same encoder output
            g.decoder[i] = gb;
        }
        Self::embed_backward(&mut g.target_embedding, &cache.target_in, &cache.target_batch, &d_y);
        for (i, block) in self.encoder.iter().enumerate().rev() {
            let mut gb = block_backward(block, &cache.encoder[i], &d_e)?;
            d_e = std::mem::replace(&mut gb.d_x, DMatrix::zeros(0, 0));
            g.encoder[i] = block_grads_as_params(block, gb);
        }
        Self::embed_backward(&mut g.source_embedding, &cache.source, &cache.source_batch, &d_e);
        Ok(g)
    }

    /// Greedy decoding: encode each source once, then start from `[start]` and append the argmax
    /// token until `end` or until the decoder input reaches the model's maximum length. Returns
    /// each output without the start and end tokens.
    pub fn greedy_decode(
        &self,
        source: &[Vec<usize>],
        start: usize,
        end: usize,
    ) -> Result<Vec<Vec<usize>>> {
        const OP: &str = "EncoderDecoder::greedy_decode";
        for (arg, t) in [("start token", start), ("end token", end)] {
            if t >= self.config.vocab {
                return Err(invalid(
                    OP,
                    arg,
                    format!("{t} is outside the vocabulary 0..{}", self.config.vocab),
                ));
            }
        }
        let (e, source_batch, _) = self.encode(source)?;
        let mut inputs: Vec<Vec<usize>> = vec![vec![start]; source.len()];
        let mut done = vec![false; source.len()];
        while inputs[0].len() < self.config.max_len && done.iter().any(|d| !d) {
            let batch = Batch::full(source.len(), inputs[0].len())?;
            let mut y = self.embed(&self.target_embedding, &inputs, &batch)?;
            for block in &self.decoder {
                y = decoder_block_forward(&y, &batch, &e, &source_batch, block)?.0;
            }
            let last = DMatrix::from_fn(source.len(), self.config.width, |b, j| {
                y[(b * batch.len + batch.len - 1, j)]
            });
            let mut logits = matmul(&last, &self.w_out)?;
            add_row(&mut logits, &self.b_out);
            for (b, input) in inputs.iter_mut().enumerate() {
                let next = argmax(logits.row(b).iter().copied());
                input.push(next); // finished sequences keep growing in lock-step; cut below
                if next == end {
                    done[b] = true;
                }
            }
        }
        Ok(inputs
            .into_iter()
            .map(|s| {
                let body = &s[1..];
                body.iter().position(|&t| t == end).map_or(body.to_vec(), |p| body[..p].to_vec())
            })
            .collect())
    }
}

fn argmax<T: Float>(values: impl Iterator<Item = T>) -> usize {
    let mut best = (0, T::neg_infinity());
    for (i, v) in values.enumerate() {
        if v > best.1 {
            best = (i, v);
        }
    }
    best.0
}

// ───────────────────────────── the task: reversing digit strings ─────────────────────────────

/// Token ids 0–9 are the digits.
pub const DIGITS: usize = 10;
/// The padding token (never fed to a real position; padded rows are masked).
pub const PAD: usize = 10;
/// The start token the decoder input begins with.
pub const START: usize = 11;
/// The end token the decoder must emit after the last digit.
pub const END: usize = 12;
/// The vocabulary: ten digits, pad, start, end.
pub const VOCAB: usize = 13;

/// Reverse a string of decimal digits whose length is drawn uniformly from `min_len..=max_len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReversalTask {
    /// The shortest source.
    pub min_len: usize,
    /// The longest source.
    pub max_len: usize,
}

impl ReversalTask {
    /// How many different sources exist: Σ_{L=min}^{max} 10^L.
    pub fn possible_sequences(&self) -> f64 {
        (self.min_len..=self.max_len).map(|l| 10f64.powi(l as i32)).sum()
    }

    /// One source: a length, then that many digits. (A task with `min_len > max_len` always
    /// draws `min_len` digits; [`train`] refuses such a task.)
    pub fn sample(&self, rng: &mut Rng) -> Vec<usize> {
        let len = self.min_len + rng.below(self.max_len.saturating_sub(self.min_len) + 1);
        (0..len).map(|_| rng.below(DIGITS)).collect()
    }

    /// The correct output for a source: its digits in reverse order.
    pub fn target(source: &[usize]) -> Vec<usize> {
        source.iter().rev().copied().collect()
    }

    /// `count` distinct sources from `seed`: the held-out set.
    pub fn held_out(&self, count: usize, seed: u64) -> Result<Vec<Vec<usize>>> {
        if (count as f64) > self.possible_sequences() / 2.0 {
            return Err(invalid(
                "ReversalTask::held_out",
                "count",
                format!(
                    "{count} is more than half of the {} possible sources",
                    self.possible_sequences()
                ),
            ));
        }
        let mut rng = Rng::new(seed);
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let s = self.sample(&mut rng);
            if seen.insert(s.clone()) {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// A training batch of sources, none of them in `exclude` (the held-out set), so training and
    /// evaluation are disjoint by construction.
    pub fn training_batch(
        &self,
        rng: &mut Rng,
        size: usize,
        exclude: &HashSet<Vec<usize>>,
    ) -> Vec<Vec<usize>> {
        let mut out = Vec::with_capacity(size);
        while out.len() < size {
            let s = self.sample(rng);
            if !exclude.contains(&s) {
                out.push(s);
            }
        }
        out
    }
}

/// Teacher forcing for a batch of sources: decoder inputs [start, reversed…] and labels
/// [reversed…, end], each one longer than its source.
pub fn teacher_forcing(sources: &[Vec<usize>]) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    sources
        .iter()
        .map(|s| {
            let t = ReversalTask::target(s);
            let mut input = vec![START];
            input.extend(&t);
            let mut labels = t;
            labels.push(END);
            (input, labels)
        })
        .unzip()
}

/// Everything that defines a training run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainConfig {
    /// The model's shape (its vocabulary must be [`VOCAB`]).
    pub model: ModelConfig,
    /// The task.
    pub task: ReversalTask,
    /// Adam steps.
    pub steps: usize,
    /// Sources per step.
    pub batch_size: usize,
    /// The peak learning rate.
    pub learning_rate: f64,
    /// Steps of linear warm-up to the peak; afterwards the rate falls along a half cosine to 10 %
    /// of the peak at the last step.
    pub warmup: usize,
    /// Seeds the weights and the training stream.
    pub seed: u64,
    /// Size of the held-out set.
    pub held_out: usize,
    /// Seeds the held-out set.
    pub held_out_seed: u64,
}

/// The chapter's configuration: 2 encoder and 1 decoder layers of width 32 with 4 heads,
/// sources of 3 to 8 digits (111,111,000 possible), 1,000 held out.
pub const CHAPTER_CONFIG: TrainConfig = TrainConfig {
    model: ModelConfig {
        vocab: VOCAB,
        width: 32,
        heads: 4,
        hidden: 64,
        encoder_layers: 2,
        decoder_layers: 1,
        max_len: 9,
    },
    task: ReversalTask { min_len: 3, max_len: 8 },
    steps: 1000,
    batch_size: 48,
    learning_rate: 3e-3,
    warmup: 100,
    seed: 7,
    held_out: 1000,
    held_out_seed: 2024,
};

/// The learning rate at `step` (0-based) of a run.
pub fn learning_rate_at(config: &TrainConfig, step: usize) -> f64 {
    let peak = config.learning_rate;
    if step < config.warmup {
        return peak * (step + 1) as f64 / config.warmup as f64;
    }
    let span = config.steps.saturating_sub(config.warmup).max(1) as f64;
    let progress = ((step - config.warmup) as f64 / span).min(1.0);
    peak * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()))
}

/// A trained model and its record.
#[derive(Clone, Debug)]
pub struct Trained {
    /// The model (f32, the fast type).
    pub model: EncoderDecoder<f32>,
    /// The mean training loss of every step.
    pub losses: Vec<f64>,
    /// The held-out sources, never trained on.
    pub held_out: Vec<Vec<usize>>,
    /// The configuration that produced it.
    pub config: TrainConfig,
}

/// Trains an encoder–decoder on the reversal task with Adam and teacher forcing.
pub fn train(config: &TrainConfig) -> Result<Trained> {
    const OP: &str = "train";
    if config.model.vocab != VOCAB {
        return Err(invalid(
            OP,
            "model.vocab",
            format!("the reversal task needs {VOCAB} tokens, got {}", config.model.vocab),
        ));
    }
    if config.task.min_len == 0 || config.task.min_len > config.task.max_len {
        return Err(invalid(
            OP,
            "task",
            format!(
                "lengths must satisfy 1 ≤ min ≤ max, got {}..={}",
                config.task.min_len, config.task.max_len
            ),
        ));
    }
    if config.task.max_len + 1 > config.model.max_len {
        return Err(invalid(
            OP,
            "task.max_len",
            format!(
                "a target of {} digits needs {} decoder positions, the model has {}",
                config.task.max_len,
                config.task.max_len + 1,
                config.model.max_len
            ),
        ));
    }
    if config.batch_size == 0 || config.steps == 0 || config.warmup == 0 || config.held_out == 0 {
        return Err(invalid(OP, "batch_size, steps, warmup, held_out", "must all be positive"));
    }
    let held_out = config.task.held_out(config.held_out, config.held_out_seed)?;
    let exclude: HashSet<Vec<usize>> = held_out.iter().cloned().collect();
    let mut model = EncoderDecoder::<f32>::new(config.model, config.seed)?;
    let mut adam = Adam::<f32>::new(AdamConfig {
        learning_rate: config.learning_rate,
        ..AdamConfig::default()
    })?;
    let mut rng = Rng::new(config.seed ^ 0x5EED_DA7A);
    let mut losses = Vec::with_capacity(config.steps);
    for step in 0..config.steps {
        let sources = config.task.training_batch(&mut rng, config.batch_size, &exclude);
        let (inputs, labels) = teacher_forcing(&sources);
        let g = model.loss_and_gradients(&sources, &inputs, &labels)?;
        losses.push(g.loss.as_f64());
        adam.config.learning_rate = learning_rate_at(config, step);
        let grads = g.grads.tensors();
        adam.step(&mut model.tensors_mut(), &grads)?;
    }
    Ok(Trained { model, losses, held_out, config: *config })
}

impl Trained {
    /// Greedy outputs for the held-out sources.
    pub fn held_out_outputs(&self) -> Result<Vec<Vec<usize>>> {
        self.model.greedy_decode(&self.held_out, START, END)
    }

    /// The fraction of held-out sources whose greedy output is exactly their reverse (every digit,
    /// and the end token in the right place).
    pub fn exact_match(&self) -> Result<f64> {
        let outputs = self.held_out_outputs()?;
        let right = outputs
            .iter()
            .zip(&self.held_out)
            .filter(|(o, s)| **o == ReversalTask::target(s))
            .count();
        Ok(right as f64 / self.held_out.len() as f64)
    }

    /// The last decoder layer's cross-attention for one source, averaged over the heads: one row
    /// per decoder input position (start, then the greedy output), one column per source digit.
    pub fn cross_attention_map(&self, source: &[usize]) -> Result<DMatrix<f64>> {
        let src = vec![source.to_vec()];
        let out = self.model.greedy_decode(&src, START, END)?;
        let mut input = vec![START];
        input.extend(&out[0]);
        input.truncate(self.model.config.max_len);
        let (_, cache) = self.model.forward(&src, &[input])?;
        let last = cache
            .decoder
            .last()
            .ok_or(Error::Empty { op: "cross_attention_map", arg: "decoder layers" })?;
        let maps = &last.cross_attention.weights;
        let mut mean = DMatrix::<f64>::zeros(maps[0].nrows(), maps[0].ncols());
        for m in maps {
            mean += crate::float::cast::<f32, f64>(m);
        }
        Ok(mean / maps.len() as f64)
    }
}

static CHAPTER_MODEL: OnceLock<Trained> = OnceLock::new();
static TRAINING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The chapter's trained model ([`CHAPTER_CONFIG`]), trained once per process.
pub fn chapter_model() -> Result<&'static Trained> {
    if let Some(t) = CHAPTER_MODEL.get() {
        return Ok(t);
    }
    let _guard = TRAINING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(t) = CHAPTER_MODEL.get() {
        return Ok(t);
    }
    let trained = train(&CHAPTER_CONFIG)?;
    Ok(CHAPTER_MODEL.get_or_init(|| trained))
}

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D3,
        section: "Prepare and Embed Target Sequence for Decoder (Attention Masking) and the Decoder Attention Heads cell",
        printed: "The text says the Python cell masks the future tokens; the cell's weights softmax(QKᵀ) have row 1 = 0.12451364 0.56641068 0.30907567",
        correct: "The cell applies no mask. With the causal mask row 1 is 1 0 0 and the first output row is 1.48356448 1.24013147 1.84159274 1.80408131 instead of 2.82896639 2.49151229 3.27935978 3.36785616 (the last row, which may see every token, is unchanged)",
        why: "The cell exponentiates the full 3×3 score matrix; nothing sets the scores above the diagonal to −∞, so <start> attends to 'de' and 'nada', the very tokens it is meant to predict.",
        test: "tests/ch07_encoder_decoder.rs::decoder_cell_applies_no_causal_mask",
    },
    Erratum {
        document: D3,
        section: "Prepare and Embed Target Sequence for Decoder and the Decoder Attention Heads cell",
        printed: "The text: the decoder's attention head follows the encoder's math, softmax(QKᵀ/√d_k)V; the cell computes exp(QKᵀ) with no division",
        correct: "With ÷√d_k = ÷2 (unmasked, as in the cell) the weights' row 1 is 0.2123884 0.45298941 0.33462219 and the first output row 2.71375426 2.3908812 3.13827038 3.23460218",
        why: "The cell omits the 1/√d_k of the formula it says it follows, so its scores are twice too large and its weights too peaked.",
        test: "tests/ch07_encoder_decoder.rs::decoder_cell_does_not_scale_the_scores",
    },
    Erratum {
        document: D3,
        section: "Prepare and Embed Target Sequence for Decoder (Attention₂ for the decoder)",
        printed: "Attention₂(Q, K, V) = [[2.82896639 2.49151229 3.27935978 3.36785616] …]",
        correct: "That matrix is softmax(QKᵀ)·V·W_o, one head already multiplied by the output matrix W_o; the attention output softmax(QKᵀ)·V is [[0.71925419 1.65933026 1.94938668 1.81203693] …]",
        why: "The cell multiplies by W_o ('project the output back') before printing, and there is no second head: the label names neither.",
        test: "tests/ch07_encoder_decoder.rs::decoder_output_is_attention_times_w_o",
    },
    Erratum {
        document: D3,
        section: "Prepare and Embed Target Sequence for Decoder (LN(x_o) of the decoder)",
        printed: "The text: the decoder's LayerNorm is the input's, (x − μ)/√(σ² + ε); printed LN row 1 = -0.46049196 -1.4140849 0.81224991 1.06232694",
        correct: "(x − μ)/√(σ² + ε) as stated gives -0.46049142 -1.41408325 0.81224896 1.0623257",
        why: "The decoder cell divides by std + ε, (x − μ)/(σ + ε), while the input's LayerNorm (and the printed formula) divides by √(σ² + ε); the two differ by about 1.6·10⁻⁶, visible at the printed 8 decimals.",
        test: "tests/ch07_encoder_decoder.rs::decoder_layer_norm_divides_by_std_plus_eps",
    },
    Erratum {
        document: D3,
        section: "Prepare and Embed Target Sequence for Decoder (the decoder's LN(x_o) as a whole)",
        printed: "LN(x_o) row 1 = -0.46049196 -1.4140849 0.81224991 1.06232694 (no mask, no ÷√d_k, ÷(σ + ε))",
        correct: "With all three of the text's steps (causal mask, ÷√d_k, ÷√(σ² + ε)) row 1 is -0.44147247 -1.42943838 1.01157498 0.85933588; rows 2 and 3 change too",
        why: "The three differences above combined: the encoder–decoder cell then reads a decoder output that is not the one the text derives.",
        test: "tests/ch07_encoder_decoder.rs::decoder_cell_as_the_text_describes_it",
    },
    Erratum {
        document: D3,
        section: "Decoder Stack Processing with Encoder Output (steps 1–2) and the Calculate Encoder-Decoder Output cell",
        printed: "Q = LN(x_o) × W_Q, K = LN(x_e) × W_K, V = LN(x_e) × W_V; output rows -1.7888543 1.7888543 0. 0.",
        correct: "As written (X·W) every output row is 0 -0.89442715 0 0.89442715; the printed rows come from X·Wᵀ",
        why: "The cell computes `X.dot(W.T)`, transposing every weight matrix; the uniform attention weights hide nothing here, so the two readings give different outputs.",
        test: "tests/ch07_encoder_decoder.rs::cross_cell_transposes_the_weights",
    },
    Erratum {
        document: D3,
        section: "Decoder Stack Processing with Encoder Output (step 3) and the Calculate Encoder-Decoder Output cell",
        printed: "Scores = Q × Kᵀ/√4 (d_k = 4 columns); the cell divides by np.sqrt(3)",
        correct: "÷√4 = 2: row 1 of the scores is 0.31462187 0.31462186 0.31462187 instead of 0.36329404 0.36329403 0.36329405; the printed weights and output do not change at 8 decimals",
        why: "The cell's divisor is √3 although d_k = 4. The printed numbers survive only because all three keys are (almost) the same vector, so every score row is constant and any divisor gives weights 1/3.",
        test: "tests/ch07_encoder_decoder.rs::cross_cell_divides_by_sqrt_3_not_sqrt_4",
    },
    Erratum {
        document: D3,
        section: "Decoder Stack Processing with Encoder Output (step 4, Apply Masking)",
        printed: "Step 4 masks the future words here as well, as in the decoder's self-attention",
        correct: "Cross-attention has no causal mask: every target position may read every source position (the cell, rightly, masks nothing; only padding of the source is masked). A causal mask would give row 1 the weights 1 0 0",
        why: "The source sentence is given in full before decoding starts and its positions are not 'the future' of any target position; the lengths may even differ, so 'j > i' has no meaning across the two sequences.",
        test: "tests/ch07_encoder_decoder.rs::cross_attention_has_no_causal_mask",
    },
];

fn row_text(m: &DMatrix<f64>, r: usize) -> String {
    numpy_row(m, r)
}

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let mut rows = Vec::new();
    let mut g = NumpyMt19937::new(NUMPY_SEED);
    let first: Vec<String> = (0..4).map(|_| numpy_style(g.next_f64())).collect();
    rows.push(Worked::text(
        "numpy_seed_42_rand_starts_0_37454012_0_95071431",
        NUMPY,
        "np.random.seed(42); first four np.random.rand() (W_q's first row)",
        "0.37454012 0.95071431 0.73199394 0.59865848",
        first.join(" "),
    ));
    let cell = decoder_cell(DecoderReading::CELL)?;
    const OUT: [&str; 3] = [
        "2.82896639 2.49151229 3.27935978 3.36785616",
        "2.93697775 2.57919015 3.42996786 3.49210994",
        "2.95810782 2.60399936 3.43836135 3.51718943",
    ];
    const LN: [&str; 3] = [
        "-0.46049196 -1.4140849 0.81224991 1.06232694",
        "-0.46121408 -1.41736871 0.85625689 1.02232591",
        "-0.46146504 -1.41536061 0.83223948 1.04458616",
    ];
    for (r, printed) in OUT.iter().enumerate() {
        rows.push(Worked::text(
            "decoder_cell_output_is_2_82896639",
            D3,
            format!("decoder cell output, row {}", r + 1),
            printed,
            row_text(&cell.output, r),
        ));
    }
    for (r, printed) in LN.iter().enumerate() {
        rows.push(Worked::text(
            "decoder_cell_layer_norm_is_minus_0_46049196",
            D3,
            format!("decoder cell LayerNorm, row {}", r + 1),
            printed,
            row_text(&cell.normalised, r),
        ));
    }
    let text = decoder_cell(DecoderReading::TEXT)?;
    rows.push(Worked::erratum(
        "decoder_cell_applies_no_causal_mask",
        D3,
        "decoder output row 1 with the causal mask the text announces (unscaled, as the cell)",
        OUT[0],
        row_text(&decoder_cell(DecoderReading { causal: true, ..DecoderReading::CELL })?.output, 0),
    ));
    rows.push(Worked::erratum(
        "decoder_cell_does_not_scale_the_scores",
        D3,
        "decoder output row 1 with ÷√d_k (unmasked, as the cell)",
        OUT[0],
        row_text(&decoder_cell(DecoderReading { scale: true, ..DecoderReading::CELL })?.output, 0),
    ));
    rows.push(Worked::erratum(
        "decoder_layer_norm_divides_by_std_plus_eps",
        D3,
        "decoder LayerNorm row 1 by the stated (x − μ)/√(σ² + ε)",
        LN[0],
        row_text(&normalise_rows(&cell.output, WORKED_EPSILON, Spread::SqrtVariancePlusEpsilon), 0),
    ));
    rows.push(Worked::erratum(
        "decoder_cell_as_the_text_describes_it",
        D3,
        "decoder LayerNorm row 1 as the text describes it (÷√d_k, causal mask, √(σ² + ε))",
        LN[0],
        row_text(&text.normalised, 0),
    ));
    let cross = cross_cell(CrossReading::CELL)?;
    const WEIGHTS: &str = "0.33333333 0.33333333 0.33333334";
    const CROSS_OUT: &str = "-1.7888543 1.7888543 0. 0.";
    for r in 0..3 {
        rows.push(Worked::text(
            "cross_cell_weights_are_uniform",
            D3,
            format!("encoder–decoder weights, row {}", r + 1),
            WEIGHTS,
            row_text(&cross.weights, r),
        ));
    }
    for r in 0..3 {
        rows.push(Worked::text(
            "cross_cell_output_is_minus_1_7888543",
            D3,
            format!("encoder–decoder output, row {}", r + 1),
            CROSS_OUT,
            row_text(&cross.output, r),
        ));
    }
    rows.push(Worked::erratum(
        "cross_cell_transposes_the_weights",
        D3,
        "encoder–decoder output row 1 with Q = XW_Q, K = EW_K, V = EW_V as written",
        CROSS_OUT,
        row_text(
            &cross_cell(CrossReading {
                orientation: Orientation::AsWritten,
                ..CrossReading::CELL
            })?
            .output,
            0,
        ),
    ));
    rows.push(Worked::text(
        "cross_cell_divides_by_sqrt_3_not_sqrt_4",
        D3,
        "encoder–decoder weights row 1 with the text's ÷√4 (equal to the printed ÷√3 row at 8 decimals)",
        WEIGHTS,
        row_text(&cross_cell(CrossReading { divisor: TEXT_SCORE_DIVISOR, ..CrossReading::CELL })?.weights, 0),
    ));
    rows.push(Worked::erratum(
        "cross_attention_has_no_causal_mask",
        D3,
        "encoder–decoder weights row 1 under the text's step 4 mask",
        WEIGHTS,
        row_text(&cross_cell(CrossReading { causal: true, ..CrossReading::CELL })?.weights, 0),
    ));
    let trained = chapter_model()?;
    let accuracy = trained.exact_match()?;
    rows.push(Worked::text(
        "trained_model_reverses_99_percent_of_held_out_sequences",
        THIS_CRATE,
        format!(
            "held-out exact match of greedy decoding ({} sources of {}–{} digits, disjoint from training)",
            trained.held_out.len(),
            trained.config.task.min_len,
            trained.config.task.max_len
        ),
        "≥ 0.99",
        if accuracy >= 0.99 { "≥ 0.99".to_string() } else { format!("{accuracy:.3}") },
    ));
    Ok(rows)
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The chapter in the order the document derives it.
pub fn walk(out: &mut Walk) -> Result<()> {
    out.decimals = 8;
    out.step("1. numpy's generator, reproduced: np.random.seed(42), then np.random.rand(4, 4) four times")?;
    let [w_q, w_k, w_v, w_o] = decoder_cell_weights();
    out.matrix("W_q", &w_q)?;
    out.matrix("W_k", &w_k)?;
    out.matrix("W_v", &w_v)?;
    out.matrix("W_o", &w_o)?;
    out.step("2. Decoder self-attention as the cell computes it: no mask, no ÷√d_k")?;
    let y = table(&Y_PLUS_PE);
    out.matrix("Y + PE (as typed in the cell)", &y)?;
    let cell = decoder_cell(DecoderReading::CELL)?;
    out.matrix("A = softmax(QKᵀ)", &cell.weights)?;
    out.matrix("A·V·W_o (printed as Attention₂)", &cell.output)?;
    out.matrix("(x − μ)/(σ + ε)", &cell.normalised)?;
    out.step("3. The same cell as the text describes it: causal mask, ÷√d_k, (x − μ)/√(σ² + ε)")?;
    let text = decoder_cell(DecoderReading::TEXT)?;
    out.matrix("A (masked, scaled)", &text.weights)?;
    out.matrix("A·V·W_o", &text.output)?;
    out.matrix("LayerNorm", &text.normalised)?;
    out.step("4. Encoder–decoder attention as the cell computes it: X·Wᵀ, ÷√3, no mask")?;
    let cross = cross_cell(CrossReading::CELL)?;
    out.matrix("scores (every row constant: the encoder rows are equal)", &cross.scores)?;
    out.matrix("weights", &cross.weights)?;
    out.matrix("output", &cross.output)?;
    out.step("5. Cross-attention done as the formulas say: X·W, ÷√d_k, no causal mask")?;
    let standard = cross_cell(CrossReading::STANDARD)?;
    out.matrix("weights", &standard.weights)?;
    out.matrix("output", &standard.output)?;
    out.step("6. A trained encoder–decoder reversing digit strings")?;
    out.decimals = 4;
    let trained = chapter_model()?;
    let c = trained.config;
    out.say(&format!(
        "model: width {}, {} heads, FFN {}, {} encoder + {} decoder layers, {} parameters",
        c.model.width,
        c.model.heads,
        c.model.hidden,
        c.model.encoder_layers,
        c.model.decoder_layers,
        trained.model.parameter_count()
    ))?;
    out.say(&format!(
        "task: reverse {}–{} digits ({:.0} possible sources); {} Adam steps of {} sources, peak α = {}",
        c.task.min_len,
        c.task.max_len,
        c.task.possible_sequences(),
        c.steps,
        c.batch_size,
        c.learning_rate
    ))?;
    out.scalar("first training loss", trained.losses[0])?;
    out.scalar("last training loss", *trained.losses.last().unwrap_or(&f64::NAN))?;
    out.scalar("held-out exact match (1,000 sources)", trained.exact_match()?)?;
    let example = &trained.held_out[0];
    let decoded = trained.model.greedy_decode(std::slice::from_ref(example), START, END)?;
    out.say(&format!("example: {} → {}", digits(example), digits(&decoded[0])))?;
    out.matrix(
        "its cross-attention (rows: <start> and outputs; columns: source digits)",
        &trained.cross_attention_map(example)?,
    )?;
    Ok(())
}

/// Digits as a string, other tokens by name.
pub fn digits(tokens: &[usize]) -> String {
    tokens
        .iter()
        .map(|&t| match t {
            d if d < DIGITS => char::from(b'0' + d as u8).to_string(),
            PAD => "<pad>".into(),
            START => "<start>".into(),
            END => "<end>".into(),
            other => format!("<{other}>"),
        })
        .collect()
}

/// The held-out source the heatmap shows: the first one of the longest length.
pub fn heatmap_example(trained: &Trained) -> Vec<usize> {
    let longest = trained.held_out.iter().map(|s| s.len()).max().unwrap_or(0);
    trained.held_out.iter().find(|s| s.len() == longest).cloned().unwrap_or_default()
}

/// The chapter's figures as data: (file stem, figure).
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let names = |m: &DMatrix<f64>| -> Vec<Vec<f64>> {
        (0..m.nrows()).map(|r| m.row(r).iter().copied().collect()).collect()
    };
    let cell = decoder_cell(DecoderReading::CELL)?;
    let text = decoder_cell(DecoderReading::TEXT)?;
    let tokens: Vec<String> = ["<start>", "de", "nada"].iter().map(|s| s.to_string()).collect();
    let decoder_weights = |title: &str, m: &DMatrix<f64>| {
        Figure::Heatmap(Heatmap {
            title: title.into(),
            x_label: "key (target token)".into(),
            y_label: "query (target token)".into(),
            values: names(m),
            col_names: tokens.clone(),
            row_names: tokens.clone(),
            annotate: true,
        })
    };
    let trained = chapter_model()?;
    let example = heatmap_example(trained);
    let map = trained.cross_attention_map(&example)?;
    let decoded = trained.model.greedy_decode(std::slice::from_ref(&example), START, END)?;
    let mut rows = vec!["<start>".to_string()];
    rows.extend(decoded[0].iter().map(|&t| digits(&[t])));
    let cross = Figure::Heatmap(Heatmap {
        title: format!(
            "Cross-attention of the trained model: {} → {}",
            digits(&example),
            digits(&decoded[0])
        ),
        x_label: "source digit (key)".into(),
        y_label: "decoder input (query)".into(),
        values: names(&map),
        col_names: example.iter().map(|&t| digits(&[t])).collect(),
        row_names: rows.into_iter().take(map.nrows()).collect(),
        annotate: true,
    });
    let loss = Figure::Line(LineChart {
        title: format!("Training loss, Adam, batches of {}", trained.config.batch_size),
        x_label: "step".into(),
        y_label: "mean cross-entropy per target token".into(),
        series: vec![Series::new(
            "training loss",
            trained.losses.iter().enumerate().map(|(i, &l)| (i as f64, l)).collect(),
        )],
        markers: false,
    });
    Ok(vec![
        (
            "ch07_decoder_cell_weights".into(),
            decoder_weights(
                "Decoder self-attention as the cell computes it (no mask, no ÷√d_k)",
                &cell.weights,
            ),
        ),
        (
            "ch07_decoder_text_weights".into(),
            decoder_weights(
                "Decoder self-attention as the text describes it (causal, ÷√d_k)",
                &text.weights,
            ),
        ),
        ("ch07_cross_attention".into(), cross),
        ("ch07_loss".into(), loss),
    ])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 7,
    stem: "ch07_encoder_decoder",
    title: "The encoder–decoder transformer and cross-attention",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
