//! The decoder's training step with its buffers kept from step to step: the same loss and
//! gradients as [`Decoder::loss_and_grads`], computed as chapter 9's fused step computes GPT-2's.
//!
//! [`Decoder::loss_and_grads`] is the reference: it chains the lesson's functions, each of which
//! allocates its outputs, copies every head out of the projections and back, rotates copies, and
//! computes all T² scores of a head before masking half of them. [`DecoderStep`] computes the same
//! mathematics for the configurations [`supports`] names (rotary positions in either pairing,
//! RMSNorm, a gated MLP, any H_kv dividing H, no QK-norm, no biases, tied or untied):
//!
//! - **No matrix allocated per step.** Every activation the backward pass reads and every
//!   gradient lives in the workspace, sized on the first step and reused (the trainer keeps it,
//!   [`Trainable::Workspace`]); a step allocates only the loss's few vectors of length N.
//! - **One product for Q, K and V, one for the gate's A and B.** W_Q, W_K, W_V (and W_gate,
//!   W_up) are copied side by side at each step, so \[Q K V\] = n₁\[W_Q W_K W_V\] is one product
//!   into one buffer (N×(H + 2H_kv)·d_h) and its backward two; a head of a sequence is a view
//!   into it ([`MatRef`]), and the rotation turns the query and key columns where they are.
//! - **Causal attention by blocks of query rows**, each multiplying only the keys it may see;
//!   a key/value head's gradient is the sum over its group, accumulated by the products (β = 1).
//! - **Residuals in place**: h = x + att·W_O and x' = h + H·W_down are products with β = 1 onto
//!   x; every norm's backward adds into the same ∂x buffer.
//! - **The gate once per entry**: the forward pass keeps φ(A) and φ′(A) (one σ(A) gives both for
//!   SwiGLU), so the backward pass evaluates no exponential. SwiGLU is computed in the model's
//!   type (the reference widens to f64: the same bits in f64, within rounding in f32); GeGLU keeps
//!   the lesson's f64 functions.
//!
//! Every product goes through chapter 10's [`gemm_with`] with the trainer's [`Settings`]; the
//! products give the same bits for any thread count, and nothing else is threaded. The column-major
//! layout of the reference is kept, so per-row statistics (RMSNorm's r, softmax's maximum and sum)
//! are gathered column by column for all rows at once.
//!
//! [`Trainable::Workspace`]: crate::ch09_gpt::trainable::Trainable::Workspace
//! [`MatRef`]: crate::matmul::MatRef
//! [`gemm_with`]: crate::matmul::gemm_with

use super::{Decoder, Mlp, MlpKind, Norm, NormKind, PositionKind};
use crate::ch09_gpt::data::Batch;
use crate::ch09_gpt::fast::{CAUSAL_BLOCK, cross_entropy_by_columns};
use crate::ch12_modern::glu::Gate;
use crate::ch12_modern::gqa::Rotary;
use crate::error::{Error, Result, invalid};
use crate::float::Float;
use crate::matmul::{MatMut, Settings};
use nalgebra::DMatrix;

/// Tensors per block in [`Decoder::tensors_mut`] order for the configurations [`supports`]
/// covers: γ₁, W_Q, W_K, W_V, W_O, γ₂, W_gate, W_up, W_down.
const PER_LAYER: usize = 9;

/// Whether [`DecoderStep`] covers `model`: rotary positions (either pairing), RMSNorm everywhere,
/// a gated MLP, no QK-norm, no biases (tied or untied, any H_kv dividing H), and every tensor at
/// the shape [`Decoder::zeros`] gives its configuration. Any other decoder trains through the
/// reference [`Decoder::loss_and_grads`].
pub fn supports<T: Float>(model: &Decoder<T>) -> bool {
    let c = &model.config;
    let kinds = matches!(c.positions, PositionKind::Rotary { .. })
        && c.norm == NormKind::Rms
        && matches!(c.mlp, MlpKind::Gated(_))
        && !c.qk_norm
        && !c.biases
        && c.validate().is_ok();
    kinds && shaped_as_configured(model)
}

/// Every tensor, norm and table at the shape and kind its configuration gives (read in place:
/// the trainer asks at every step).
fn shaped_as_configured<T: Float>(model: &Decoder<T>) -> bool {
    let c = &model.config;
    let (d, f, v, d_h) = (c.width, c.hidden, c.vocab_size, c.head_dim());
    let (q, kv) = (c.n_heads * d_h, c.n_kv_heads * d_h);
    let gamma = |n: &Norm<T>| matches!(n, Norm::Rms(r) if r.gamma.shape() == (1, d));
    let layer_ok = |l: &super::DecoderLayer<T>| {
        let a = &l.attn;
        let shapes = |g: &crate::ch12_modern::glu::GatedMlp<T>| {
            g.w_gate.shape() == (d, f) && g.w_up.shape() == (d, f) && g.w_down.shape() == (f, d)
        };
        let mlp = matches!(&l.mlp, Mlp::Gated(g) if Some(g.gate) == gate_of(model) && shapes(g));
        gamma(&l.norm1)
            && gamma(&l.norm2)
            && mlp
            && (a.n_heads, a.n_kv_heads) == (c.n_heads, c.n_kv_heads)
            && a.w_q.shape() == (d, q)
            && a.w_k.shape() == (d, kv)
            && a.w_v.shape() == (d, kv)
            && a.w_o.shape() == (q, d)
            && a.qk_norm.is_none()
            && a.biases.is_none()
    };
    let pairing = match c.positions {
        PositionKind::Rotary { pairing, .. } => Some(pairing),
        PositionKind::Learned => None,
    };
    let rope = model.rope.as_ref().is_some_and(|r| {
        Some(r.pairing) == pairing
            && r.table.head_dim() == d_h
            && r.table.context() == c.context
            && r.table.sin.shape() == r.table.cos.shape()
    });
    let unembedding = match &model.lm_head {
        Some(w) => !c.tied && w.shape() == (v, d),
        None => c.tied,
    };
    model.layers.len() == c.layers
        && model.layers.iter().all(layer_ok)
        && model.wte.shape() == (v, d)
        && model.wpe.is_none()
        && gamma(&model.norm_f)
        && rope
        && unembedding
}

fn gate_of<T: Float>(model: &Decoder<T>) -> Option<Gate> {
    match model.config.mlp {
        MlpKind::Gated(g) => Some(g),
        MlpKind::Gelu => None,
    }
}

/// What one block's backward pass reads from its forward pass.
#[derive(Clone)]
struct BlockSaved<T: Float> {
    /// Norm₁: x̂ = x/r and r per row; n₁ = γ₁ ⊙ x̂.
    x_hat1: DMatrix<T>,
    r1: Vec<T>,
    n1: DMatrix<T>,
    /// \[W_Q W_K W_V\] side by side, copied at each step, C×(H + 2H_kv)·d_h.
    w_qkv: DMatrix<T>,
    /// \[Q K V\] after the rotation of Q and K, N×(H + 2H_kv)·d_h.
    qkv: DMatrix<T>,
    /// The attention weights, one T×T column-major matrix per (sequence, query head).
    weights: Vec<T>,
    /// The heads' outputs side by side, N×H·d_h.
    att: DMatrix<T>,
    /// Norm₂ as Norm₁.
    x_hat2: DMatrix<T>,
    r2: Vec<T>,
    n2: DMatrix<T>,
    /// \[W_gate W_up\] side by side, copied at each step, C×2F.
    w_gu: DMatrix<T>,
    /// \[A B\] = n₂\[W_gate W_up\], then \[φ(A) B\], N×2F; φ′(A) and H = φ(A) ⊙ B, N×F.
    ab: DMatrix<T>,
    slope: DMatrix<T>,
    h: DMatrix<T>,
}

/// The decoder's step workspace: every buffer of the forward and backward passes and every
/// gradient, sized for a batch shape and a configuration on the first step and reused while they
/// stay the same.
#[derive(Clone)]
pub struct DecoderStep<T: Float> {
    /// (B, T, the configuration) the buffers were sized for.
    sized_for: Option<(usize, usize, super::DecoderConfig)>,
    blocks: Vec<BlockSaved<T>>,
    /// The residual stream x (forward), then ∂L/∂x (backward), N×C.
    x: DMatrix<T>,
    /// Norm_f: x̂, r, h_f.
    x_hat_f: DMatrix<T>,
    r_f: Vec<T>,
    h_f: DMatrix<T>,
    /// The logits, then (in place) ∂L/∂z, N×V.
    logits: DMatrix<T>,
    /// ∂L/∂n of whichever norm is being differentiated, N×C.
    d_n: DMatrix<T>,
    /// ∂L/∂(concatenated heads), N×H·d_h; ∂L/∂\[Q K V\].
    d_att: DMatrix<T>,
    d_qkv: DMatrix<T>,
    /// \[∂L/∂H ·\] then \[∂L/∂A ∂L/∂B\], N×2F.
    d_ab: DMatrix<T>,
    /// ∂L/∂\[W_Q W_K W_V\] and ∂L/∂\[W_gate W_up\] before they are copied to their tensors.
    d_w_qkv: DMatrix<T>,
    d_w_gu: DMatrix<T>,
    /// ∂L/∂A then ∂L/∂S of one head, T×T; per-row scratch of length max(2T, N).
    d_scores: Vec<T>,
    rows: Vec<T>,
    /// −ln p(target) of each row from the last step.
    nll: Vec<f64>,
    /// The gradients, in [`Decoder::tensors_mut`] order.
    grads: Vec<DMatrix<T>>,
}

impl<T: Float> Default for DecoderStep<T> {
    fn default() -> Self {
        DecoderStep::new()
    }
}

impl<T: Float> std::fmt::Debug for DecoderStep<T> {
    /// What the workspace is sized for, not its values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecoderStep").field("sized_for (B, T, config)", &self.sized_for).finish()
    }
}

fn empty<T: Float>() -> DMatrix<T> {
    DMatrix::zeros(0, 0)
}

/// `m` at rows×cols: kept when it already is, else a fresh zero matrix.
fn fit<T: Float>(m: &mut DMatrix<T>, rows: usize, cols: usize) {
    if m.shape() != (rows, cols) {
        *m = DMatrix::zeros(rows, cols);
    }
}

impl<T: Float> DecoderStep<T> {
    /// An empty workspace; the first step sizes it.
    pub fn new() -> Self {
        DecoderStep {
            sized_for: None,
            blocks: Vec::new(),
            x: empty(),
            x_hat_f: empty(),
            r_f: Vec::new(),
            h_f: empty(),
            logits: empty(),
            d_n: empty(),
            d_att: empty(),
            d_qkv: empty(),
            d_ab: empty(),
            d_w_qkv: empty(),
            d_w_gu: empty(),
            d_scores: Vec::new(),
            rows: Vec::new(),
            nll: Vec::new(),
            grads: Vec::new(),
        }
    }

    /// Sizes every buffer for B sequences of T tokens of `model`, unless they already are.
    fn size(&mut self, model: &Decoder<T>, b: usize, t: usize) -> Result<()> {
        let key = (b, t, model.config);
        if self.sized_for == Some(key) {
            return Ok(());
        }
        let c = &model.config;
        let (n, d, f, d_h) = (b * t, c.width, c.hidden, c.head_dim());
        let (q, kv) = (c.n_heads * d_h, c.n_kv_heads * d_h);
        let block = || BlockSaved {
            x_hat1: DMatrix::zeros(n, d),
            r1: vec![T::zero(); n],
            n1: DMatrix::zeros(n, d),
            w_qkv: DMatrix::zeros(d, q + 2 * kv),
            qkv: DMatrix::zeros(n, q + 2 * kv),
            weights: vec![T::zero(); b * c.n_heads * t * t],
            att: DMatrix::zeros(n, q),
            x_hat2: DMatrix::zeros(n, d),
            r2: vec![T::zero(); n],
            n2: DMatrix::zeros(n, d),
            w_gu: DMatrix::zeros(d, 2 * f),
            ab: DMatrix::zeros(n, 2 * f),
            slope: DMatrix::zeros(n, f),
            h: DMatrix::zeros(n, f),
        };
        self.blocks = (0..c.layers).map(|_| block()).collect();
        for (m, cols) in [
            (&mut self.x, d),
            (&mut self.x_hat_f, d),
            (&mut self.h_f, d),
            (&mut self.logits, c.vocab_size),
            (&mut self.d_n, d),
            (&mut self.d_att, q),
            (&mut self.d_qkv, q + 2 * kv),
            (&mut self.d_ab, 2 * f),
        ] {
            fit(m, n, cols);
        }
        fit(&mut self.d_w_qkv, d, q + 2 * kv);
        fit(&mut self.d_w_gu, d, 2 * f);
        self.r_f = vec![T::zero(); n];
        self.d_scores = vec![T::zero(); t * t];
        self.rows = vec![T::zero(); (2 * t).max(n)];
        let mut zeros = Decoder::<T>::zeros(model.config)?;
        self.grads = zeros.tensors_mut().into_iter().map(|(_, m)| m.clone()).collect();
        self.sized_for = Some(key);
        Ok(())
    }

    /// The mean next-token loss of `batch` and ∂L/∂θ for every tensor, in
    /// [`Decoder::tensors_mut`] order (the slice belongs to the workspace and is overwritten by
    /// the next call), every product run with `settings`. The same values as
    /// [`Decoder::loss_and_grads`] up to rounding. Errors as it does on a bad batch, and, naming
    /// `model`, on a decoder [`supports`] does not cover.
    pub fn loss_and_grads(
        &mut self,
        model: &Decoder<T>,
        batch: &Batch,
        settings: Settings,
    ) -> Result<(f64, &mut [DMatrix<T>])> {
        const OP: &str = "DecoderStep::loss_and_grads";
        batch.check(OP, model.config.vocab_size)?;
        if !supports(model) {
            let why = "not covered by the kept-buffer step (fast::supports)";
            return Err(invalid(OP, "model", why));
        }
        if batch.seq_len > model.config.context {
            let why = format!("T = {} is longer than the context", batch.seq_len);
            return Err(invalid(OP, "batch", why));
        }
        let scored = batch.targets.iter().filter(|t| t.is_some()).count();
        if scored == 0 {
            return Err(Error::Empty { op: OP, arg: "targets (no position is scored)" });
        }
        self.size(model, batch.batch, batch.seq_len)?;
        let run = Run { settings, t: batch.seq_len, model };
        run.forward(self, &batch.inputs)?;
        let factors = vec![T::of(1.0 / scored as f64); batch.inputs.len()];
        let loss =
            cross_entropy_by_columns(&mut self.logits, &batch.targets, &factors, &mut self.nll);
        run.backward(self, &batch.inputs)?;
        Ok((loss / scored as f64, self.grads.as_mut_slice()))
    }
}

/// One step's constants: the products' settings, T and the model.
struct Run<'m, T: Float> {
    settings: Settings,
    t: usize,
    model: &'m Decoder<T>,
}

/// Columns c0 … c0 + k − 1 of a column-major matrix, to be written where they are.
fn cols_mut<T: Float>(m: &mut DMatrix<T>, c0: usize, k: usize) -> Result<MatMut<'_, T>> {
    let n = m.nrows();
    MatMut::new(&mut m.as_mut_slice()[c0 * n..], n, k, n.max(1))
}

/// γ and ε of an RMSNorm ([`supports`] has checked the kind).
fn rms<T: Float>(norm: &Norm<T>) -> Result<(&DMatrix<T>, f64)> {
    match norm {
        Norm::Rms(r) => Ok((&r.gamma, r.eps)),
        Norm::Layer(_) => Err(invalid("DecoderStep", "model", "has a LayerNorm")),
    }
}

/// RMSNorm of every row of x, as [`rms_norm_forward`] computes it (the same operations in the
/// same order, so the same bits), gathered column by column: r = √(Σ x²/C + ε), x̂ = x/r,
/// y = γ ⊙ x̂.
///
/// [`rms_norm_forward`]: crate::ch12_modern::rms_norm::rms_norm_forward
fn rms_forward<T: Float>(
    (gamma, eps): (&DMatrix<T>, f64),
    x: &DMatrix<T>,
    x_hat: &mut DMatrix<T>,
    r: &mut [T],
    y: &mut DMatrix<T>,
) {
    let n = x.nrows();
    r.fill(T::zero());
    for column in x.as_slice().chunks_exact(n) {
        for (s, &v) in r.iter_mut().zip(column) {
            *s += v * v; //                                                  Σ x²
        }
    }
    let (c, eps) = (T::of(x.ncols() as f64), T::of(eps));
    r.iter_mut().for_each(|s| *s = (*s / c + eps).sqrt()); //               r = √(… /C + ε)
    let columns = x.as_slice().chunks_exact(n).zip(x_hat.as_mut_slice().chunks_exact_mut(n));
    for ((xc, hc), (yc, &g)) in columns.zip(y.as_mut_slice().chunks_exact_mut(n).zip(gamma.iter()))
    {
        for (((&v, xh), yv), &rr) in xc.iter().zip(hc.iter_mut()).zip(yc.iter_mut()).zip(&*r) {
            *xh = v / rr; //                                                 x̂ = x / r
            *yv = g * *xh; //                                                y = γ x̂
        }
    }
}

/// Backward of [`rms_forward`] as [`rms_norm_backward`] computes it: ∂L/∂γ = Σ_rows ∂y ⊙ x̂
/// written into `d_gamma`, and ∂L/∂x = (g − x̂·mean(g ⊙ x̂))/r with g = γ ⊙ ∂y added into `d_x`;
/// `mean` is scratch of at least N.
///
/// [`rms_norm_backward`]: crate::ch12_modern::rms_norm::rms_norm_backward
fn rms_backward<T: Float>(
    gamma: &DMatrix<T>,
    (x_hat, r): (&DMatrix<T>, &[T]),
    d_y: &DMatrix<T>,
    d_x: &mut DMatrix<T>,
    d_gamma: &mut DMatrix<T>,
    mean: &mut [T],
) {
    let n = d_y.nrows();
    let mean = &mut mean[..n];
    mean.fill(T::zero());
    let pairs = d_y.as_slice().chunks_exact(n).zip(x_hat.as_slice().chunks_exact(n));
    for ((dy, xh), (dg, &g)) in pairs.zip(d_gamma.as_mut_slice().iter_mut().zip(gamma.iter())) {
        *dg = dy.iter().zip(xh).map(|(&a, &b)| a * b).sum::<T>(); //   ∂γ = Σ_rows ∂y ⊙ x̂
        for ((m, &a), &b) in mean.iter_mut().zip(dy).zip(xh) {
            *m += g * a * b; //                                            Σ g ⊙ x̂
        }
    }
    let c = T::of(d_y.ncols() as f64);
    mean.iter_mut().for_each(|m| *m /= c);
    let pairs = d_y.as_slice().chunks_exact(n).zip(x_hat.as_slice().chunks_exact(n));
    for ((dy, xh), (dx, &g)) in pairs.zip(d_x.as_mut_slice().chunks_exact_mut(n).zip(gamma.iter()))
    {
        for ((((dx, &a), &b), &m), &rr) in dx.iter_mut().zip(dy).zip(xh).zip(&*mean).zip(r) {
            *dx += (g * a - b * m) / rr; //                    ∂x += (g − x̂ mean(g ⊙ x̂)) / r
        }
    }
}

/// Turns the pairs of `heads` heads of width d_h (from column 0 of `m`) by ±tθ_i in place, row
/// r at position r mod T: the lesson's rotation, the same operations ([`rope_forward`] with
/// `sign` = 1, [`rope_backward`] with −1).
///
/// [`rope_forward`]: crate::ch12_modern::rope::rope_forward
/// [`rope_backward`]: crate::ch12_modern::rope::rope_backward
fn rotate_in_place<T: Float>(
    m: &mut DMatrix<T>,
    heads: usize,
    rope: &Rotary<T>,
    t: usize,
    sign: T,
) {
    let (n, d_h, ctx) = (m.nrows(), rope.table.head_dim(), rope.table.context());
    let (cos, sin) = (rope.table.cos.as_slice(), rope.table.sin.as_slice());
    for head in m.as_mut_slice()[..heads * d_h * n].chunks_exact_mut(d_h * n) {
        for i in 0..d_h / 2 {
            let (ca, cb) = rope.pairing.columns(d_h, i);
            let (left, right) = head.split_at_mut(cb * n);
            let (col_a, col_b) = (&mut left[ca * n..(ca + 1) * n], &mut right[..n]);
            let (cos_i, sin_i) = (&cos[i * ctx..i * ctx + t], &sin[i * ctx..i * ctx + t]);
            for (seq_a, seq_b) in col_a.chunks_exact_mut(t).zip(col_b.chunks_exact_mut(t)) {
                let angles = cos_i.iter().zip(sin_i);
                for ((a, b), (&c, &s)) in seq_a.iter_mut().zip(seq_b.iter_mut()).zip(angles) {
                    let (s, x, y) = (sign * s, *a, *b);
                    *a = x * c - y * s; //                           a′ = a cos − b sin
                    *b = x * s + y * c; //                           b′ = a sin + b cos
                }
            }
        }
    }
}

/// The blocks of at most [`CAUSAL_BLOCK`] query rows covering 0 … T − 1, as (first, past-the-end).
fn blocks(t: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..t).step_by(CAUSAL_BLOCK).map(move |r0| (r0, (r0 + CAUSAL_BLOCK).min(t)))
}

mod pass;

/// `parts` (each C×k_i) side by side in `out` (C×Σk_i): column-major, one copy each.
fn side_by_side<T: Float>(out: &mut DMatrix<T>, parts: [&DMatrix<T>; 3]) {
    let mut at = 0;
    for p in parts.into_iter().filter(|p| !p.is_empty()) {
        out.as_mut_slice()[at..at + p.len()].copy_from_slice(p.as_slice());
        at += p.len();
    }
}

/// `whole` (C×Σk_i) cut into `parts` (each C×k_i, in order): the inverse of [`side_by_side`].
fn cut_into<T: Float>(whole: &DMatrix<T>, parts: [&mut DMatrix<T>; 3]) {
    let mut at = 0;
    for p in parts {
        let len = p.len();
        p.as_mut_slice().copy_from_slice(&whole.as_slice()[at..at + len]);
        at += len;
    }
}
