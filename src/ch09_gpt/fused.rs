//! The training step made fast: the same loss and gradients as [`Gpt::loss_and_grads`], computed
//! without its detours.
//!
//! [`Gpt::loss_and_grads`] is the reference: it chains chapter 6's general functions (any mask,
//! any head width, post- or pre-LN), and each of them allocates its outputs, copies every head
//! out of the projections and back in, and computes all T² attention scores before masking half
//! of them. This module computes exactly the same mathematics for the GPT of this chapter
//! (pre-LN blocks, causal self-attention, GELU, ε inside the square root) in a way that keeps the
//! CPU busy with arithmetic:
//!
//! - **No matrix allocated per step.** Every activation the backward pass needs and every
//!   gradient lives in a [`FusedStep`] kept by the trainer and reused from step to step.
//! - **One product for Q, K and V.** The three projections read the same input, so they are one
//!   product with W_QKV = \[W_Q W_K W_V\] (d×3d), and their backward is one product too:
//!   ∂n₁ = ∂QKV·W_QKVᵀ, ∂W_QKV = n₁ᵀ∂QKV.
//! - **Attention without copies, causal half mostly skipped.** Each head of each sequence is a view
//!   into the QKV buffer (a head is a block of columns, a sequence a block of rows, see [`MatRef`]
//!   and [`MatMut`]), so its products read it and write their results where they are. Queries go
//!   in blocks of [`CAUSAL_BLOCK`] rows, and a block multiplies only the keys it may see; the
//!   softmax touches only the entries j ≤ i.
//! - **Residuals accumulate in place.** h = x + a·W_O + b_O is one product with β = 1 onto x;
//!   every "∂x gets ∂h directly and through the branch" is an addition into the same buffer.
//! - **The batch in shards.** The B sequences are cut into [`GRADIENT_SHARDS`] parts; each part
//!   runs forward and backward on its own (on its own thread when there are threads to spare) and
//!   the parts' gradients are added in a fixed order. The shards are fixed by the batch, not by
//!   the thread count, so one thread and two give the same bits.
//!
//! The column-major layout of the reference is kept (row r of an N×C matrix is token r), so every
//! per-row statistic (LayerNorm's μ and σ, softmax's maximum and sum) is accumulated column by
//! column for all rows at once, reading memory in order.
//!
//! Tests check it against the reference in f64 (equal to 10⁻¹⁰ relative) and in f32, by finite
//! differences of its own, and that a model whose shape it does not cover is refused
//! ([`supports`]) so the trainer falls back to the reference.
//!
//! The step in three files: this one holds the workspace ([`FusedStep`]: every buffer, sized
//! once), the shards and the views of one head of one sequence; `forward.rs` the forward pass
//! with the loss and its gradient at the logits; `backward.rs` the backward pass, each line
//! naming the forward line it differentiates.

mod backward;
mod forward;
#[cfg(test)]
mod tests;

pub(crate) use forward::{
    Products, Strided, StridedMut, add_row, causal_block_forward, row_product,
};

use super::data::Batch;
use super::model::Gpt;
use crate::ch03_mlp::Activation;
use crate::ch06_attention::{Epsilon, LayerNorm, LnCache, NormOrder};
use crate::error::{Error, Result, invalid};
use crate::float::Float;
use crate::matmul::{MatMut, MatRef, product_choices};
use crate::threads::with_threads;
use nalgebra::DMatrix;

/// Into how many parts the batch is cut (at most; a batch of one sequence is one part). Each part
/// can run on its own thread; two suits the two-core machines this crate is measured on. The
/// gradient depends on this number only through rounding (the sums over the batch are grouped
/// differently), and not at all on the number of threads.
pub const GRADIENT_SHARDS: usize = 2;

/// Whether [`FusedStep`] covers `model`: every block pre-LN with GELU (tanh form), every
/// LayerNorm with ε inside the square root, and the weights shaped as [`Gpt::new`] shapes them
/// (W_Q, W_K, W_V, W_O d×d, W₁ d×4d, W₂ 4d×d, heads dividing d). Models loaded from a checkpoint
/// or built by [`Gpt::new`] always are; a model assembled by hand from chapter 6's parts may not
/// be, and then the trainer uses the reference [`Gpt::loss_and_grads`].
pub fn supports<T: Float>(model: &Gpt<T>) -> bool {
    let c = &model.config;
    let d = c.width;
    let ln_ok = |ln: &LayerNorm<T>| ln.placement == Epsilon::InsideSqrt;
    // Every parameter shaped as the table says, and the position table n_ctx×d even when fixed.
    let shaped = model
        .shape()
        .order()
        .into_iter()
        .zip(model.tensors())
        .all(|((s, _), (_, m))| m.shape() == (s.rows.of(c), s.cols.of(c)));
    d > 0
        && c.heads > 0
        && d.is_multiple_of(c.heads)
        && model.blocks.len() == c.layers
        && shaped
        && model.wpe.shape() == (c.context, d)
        && ln_ok(&model.ln_f)
        && model.blocks.iter().all(|b| {
            b.order == NormOrder::Pre
                && b.ffn.act == Activation::GeluTanh
                && ln_ok(&b.ln1)
                && ln_ok(&b.ln2)
                && b.attn.heads == c.heads
        })
}

/// A LayerNorm's saved forward values for N rows of width C, as chapter 6 keeps them.
fn ln_cache<T: Float>(n: usize, c: usize) -> LnCache<T> {
    LnCache { x_hat: DMatrix::zeros(n, c), denom: vec![T::zero(); n], sigma: vec![T::zero(); n] }
}

/// What one block's backward pass needs from its forward pass, for the rows of one shard.
#[derive(Clone, Debug)]
struct BlockSaved<T: Float> {
    ln1: LnCache<T>,
    /// n₁ = LN₁(x), N×d.
    n1: DMatrix<T>,
    /// \[Q K V\] = n₁W_QKV + b_QKV, N×3d.
    qkv: DMatrix<T>,
    /// Attention weights, one T×T column-major matrix per (sequence, head); only j ≤ i is used.
    weights: Vec<T>,
    /// The heads' outputs side by side, N×d.
    att: DMatrix<T>,
    ln2: LnCache<T>,
    /// n₂ = LN₂(h), N×d.
    n2: DMatrix<T>,
    /// z₁ = n₂W₁ + b₁, N×4d.
    z1: DMatrix<T>,
    /// a₁ = GELU(z₁), N×4d.
    a1: DMatrix<T>,
}

/// One shard: some whole sequences of the batch, with every buffer its passes use and its own
/// gradients.
#[derive(Clone, Debug)]
struct Shard<T: Float> {
    /// The first sequence of the batch in this shard, and how many.
    first: usize,
    seqs: usize,
    blocks: Vec<BlockSaved<T>>,
    ln_f: LnCache<T>,
    /// h_f = LN_f(x_L), N×d.
    h_f: DMatrix<T>,
    /// The logits, then (in place) ∂L/∂z, N×V.
    logits: DMatrix<T>,
    /// The residual stream x (forward), then ∂L/∂x (backward), N×d.
    x: DMatrix<T>,
    /// ∂L/∂n for whichever LayerNorm output is being differentiated, N×d.
    d_n: DMatrix<T>,
    /// ∂L/∂(concatenated heads), N×d.
    d_att: DMatrix<T>,
    /// ∂L/∂\[Q K V\], N×3d.
    d_qkv: DMatrix<T>,
    /// ∂L/∂a₁ then ∂L/∂z₁, N×4d.
    d_z1: DMatrix<T>,
    /// ∂L/∂W_QKV before it is split into W_Q, W_K, W_V's gradients, d×3d.
    d_w_qkv: DMatrix<T>,
    /// ∂L/∂A then ∂L/∂S of one head, T×T.
    d_scores: Vec<T>,
    /// Scratch of length T for Σ_j A ⊙ ∂A per row.
    row_a: Vec<T>,
    /// This shard's gradients, in [`Gpt::tensors`] order.
    grads: Vec<DMatrix<T>>,
    /// Σ over this shard's scored rows of −ln p(target).
    loss_sum: f64,
}

/// The reusable state of the fused step: the fused QKV weights and one shard (its own buffers
/// and gradients) per part of the batch. Buffers are sized on the first step and resized only
/// when the batch or model shape changes. Memory: every activation the backward pass needs, plus
/// one full set of gradients per shard (for GPT-2 124M in f32, about 0.5 GB each).
#[derive(Clone, Default)]
pub struct FusedStep<T: Float> {
    /// W_QKV = \[W_Q W_K W_V\] (d×3d) and b_QKV (1×3d) of every block, refreshed each step.
    w_qkv: Vec<(DMatrix<T>, DMatrix<T>)>,
    shards: Vec<Shard<T>>,
    /// (B, T, the model's shape) the buffers were sized for.
    sized_for: Option<(usize, usize, super::config::Config, bool, bool)>,
}

impl<T: Float> std::fmt::Debug for FusedStep<T> {
    /// What the workspace is sized for, not its millions of values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FusedStep")
            .field("shards", &self.shards.len())
            .field("sized_for (B, T, config, untied, with backward)", &self.sized_for)
            .finish()
    }
}

impl<T: Float> FusedStep<T> {
    /// An empty workspace; the first step sizes it.
    pub fn new() -> Self {
        FusedStep { w_qkv: Vec::new(), shards: Vec::new(), sized_for: None }
    }

    /// The mean next-token loss of `batch` and ∂L/∂θ for every parameter tensor, in
    /// [`Gpt::tensors`] order (the slice belongs to the workspace and is overwritten by the next
    /// call; the trainer clips it and hands it to AdamW in place).
    ///
    /// The same values as [`Gpt::loss_and_grads`] up to rounding. Errors as it does on a bad
    /// batch, and on a model [`supports`] does not cover.
    pub fn loss_and_grads(
        &mut self,
        model: &Gpt<T>,
        batch: &Batch,
    ) -> Result<(f64, &mut [DMatrix<T>])> {
        const OP: &str = "FusedStep::loss_and_grads";
        batch.check(OP, model.config.vocab_size)?;
        if !supports(model) {
            return Err(invalid(
                OP,
                "model",
                "its shape is not the one the fused step covers (see fused::supports); use \
                    Gpt::loss_and_grads",
            ));
        }
        if batch.seq_len > model.config.context {
            return Err(invalid(
                OP,
                "batch",
                format!(
                    "T = {} is longer than the context n_ctx = {}",
                    batch.seq_len, model.config.context
                ),
            ));
        }
        let scored = batch.targets.iter().filter(|t| t.is_some()).count();
        if scored == 0 {
            return Err(Error::Empty { op: "Gpt::loss", arg: "targets (no position is scored)" });
        }
        self.size(model, batch, true);
        self.refresh_qkv_weights(model);
        let scale = T::of(1.0 / scored as f64);
        let w_qkv = &self.w_qkv;
        let choices = product_choices();
        let threads = crate::threads::default_threads().min(self.shards.len());
        let results: Vec<Result<()>> = if threads <= 1 {
            self.shards.iter_mut().map(|s| s.run(model, w_qkv, batch, scale)).collect()
        } else {
            // The shards in `threads` groups: the first group runs here, each other on a thread of
            // its own. Each shard's products run on its own thread only, so the two levels of
            // threads do not compete for the cores.
            let per_group = self.shards.len().div_ceil(threads);
            let run_group = |group: &mut [Shard<T>]| -> Vec<Result<()>> {
                with_threads(1, || {
                    group.iter_mut().map(|s| s.run(model, w_qkv, batch, scale)).collect()
                })
            };
            std::thread::scope(|scope| {
                let mut groups = self.shards.chunks_mut(per_group);
                let here = groups.next().unwrap_or_default();
                let handles: Vec<_> =
                    groups.map(|g| scope.spawn(move || choices.run(|| run_group(g)))).collect();
                let mut out = run_group(here);
                for h in handles {
                    out.extend(h.join().unwrap_or_else(|_| {
                        vec![Err(invalid(OP, "shard", "a shard's thread panicked"))]
                    }));
                }
                out
            })
        };
        for r in results {
            r?;
        }
        // The batch's gradient is the sum of the shards' gradients, added in shard order.
        let (first, rest) = self.shards.split_at_mut(1);
        let mut loss_sum = first[0].loss_sum;
        for s in rest.iter() {
            loss_sum += s.loss_sum;
            for (g, gs) in first[0].grads.iter_mut().zip(&s.grads) {
                *g += gs;
            }
        }
        Ok((loss_sum / scored as f64, &mut first[0].grads))
    }

    /// The logits of the last position of one sequence (`tokens`, at most n_ctx of them), by the
    /// fused forward pass: what [`Gpt::last_logits`] returns, computed the way the training step
    /// computes its forward pass (no gradients, no backward buffers). Length V.
    ///
    /// Errors on an empty sequence, a token id outside the vocabulary, a sequence longer than the
    /// context, a model [`supports`] does not cover, and a weight that makes a logit NaN or ∞.
    pub fn last_logits(&mut self, model: &Gpt<T>, tokens: &[u32]) -> Result<Vec<T>> {
        self.forward_one("FusedStep::last_logits", model, tokens)
    }

    /// [`Gpt::prefill`] by the fused forward pass: a key/value cache holding every block's
    /// \[Q K V\] rows for `tokens` (rows 0 … T − 1 of each block's buffer, in the same layout),
    /// and the logits of the last position. Errors as [`FusedStep::last_logits`].
    pub fn prefill(
        &mut self,
        model: &Gpt<T>,
        tokens: &[u32],
    ) -> Result<(super::model::KvCache<T>, Vec<T>)> {
        let logits = self.forward_one("FusedStep::prefill", model, tokens)?;
        let t = tokens.len();
        let mut kv = model.new_kv_cache();
        for (cached, s) in kv.qkv.iter_mut().zip(&self.shards[0].blocks) {
            cached.rows_mut(0, t).copy_from(&s.qkv);
        }
        kv.len = t;
        Ok((kv, logits))
    }

    /// The forward pass over one sequence, keeping every block's buffers; the last row's logits.
    fn forward_one(&mut self, op: &'static str, model: &Gpt<T>, tokens: &[u32]) -> Result<Vec<T>> {
        if tokens.is_empty() {
            return Err(Error::Empty { op, arg: "tokens" });
        }
        super::data::check_ids(op, "tokens", tokens, model.config.vocab_size)?;
        if !supports(model) {
            return Err(invalid(
                op,
                "model",
                "its shape is not the one the fused step covers (see fused::supports)",
            ));
        }
        if tokens.len() > model.config.context {
            return Err(invalid(
                op,
                "tokens",
                format!(
                    "T = {} is longer than the context n_ctx = {}",
                    tokens.len(),
                    model.config.context
                ),
            ));
        }
        let t = tokens.len();
        let shape = Batch { inputs: Vec::new(), targets: Vec::new(), batch: 1, seq_len: t };
        self.size(model, &shape, false);
        self.refresh_qkv_weights(model);
        let shard = &mut self.shards[0];
        shard.forward(model, &self.w_qkv, tokens, t)?;
        Ok(shard.logits.row(t - 1).iter().copied().collect())
    }

    /// Sizes every buffer for this batch and model, unless they already are.
    /// `backward`: also the gradients and the backward pass's scratch (a forward pass alone, as
    /// [`FusedStep::last_logits`] runs, needs neither).
    fn size(&mut self, model: &Gpt<T>, batch: &Batch, backward: bool) {
        let key = (batch.batch, batch.seq_len, model.config, model.lm_head.is_some(), backward);
        if self.sized_for == Some(key) {
            return;
        }
        let c = &model.config;
        let (d, f, v, t, h) = (c.width, c.hidden(), c.vocab_size, batch.seq_len, c.heads);
        let parts = batch.batch.min(GRADIENT_SHARDS);
        let shapes: Vec<(usize, usize)> = model.tensors().iter().map(|(_, m)| m.shape()).collect();
        self.shards = (0..parts)
            .map(|p| {
                // Sequences split as evenly as possible, the first parts taking the remainder.
                let first = p * (batch.batch / parts) + p.min(batch.batch % parts);
                let seqs = batch.batch / parts + usize::from(p < batch.batch % parts);
                let n = seqs * t;
                let z = |cols: usize| DMatrix::zeros(n, cols);
                let nb = if backward { n } else { 0 }; // rows of the backward-only buffers
                let zb = |cols: usize| DMatrix::zeros(nb, cols);
                Shard {
                    first,
                    seqs,
                    blocks: (0..c.layers)
                        .map(|_| BlockSaved {
                            ln1: ln_cache(n, d),
                            n1: z(d),
                            qkv: z(3 * d),
                            weights: vec![T::zero(); seqs * h * t * t],
                            att: z(d),
                            ln2: ln_cache(n, d),
                            n2: z(d),
                            z1: z(f),
                            a1: z(f),
                        })
                        .collect(),
                    ln_f: ln_cache(n, d),
                    h_f: z(d),
                    logits: z(v),
                    x: z(d),
                    d_n: zb(d),
                    d_att: zb(d),
                    d_qkv: zb(3 * d),
                    d_z1: zb(f),
                    d_w_qkv: if backward { DMatrix::zeros(d, 3 * d) } else { DMatrix::zeros(0, 0) },
                    d_scores: vec![T::zero(); if backward { t * t } else { 0 }],
                    row_a: vec![T::zero(); t],
                    grads: if backward {
                        shapes.iter().map(|&(r, k)| DMatrix::zeros(r, k)).collect()
                    } else {
                        Vec::new()
                    },
                    loss_sum: 0.0,
                }
            })
            .collect();
        self.w_qkv =
            (0..c.layers).map(|_| (DMatrix::zeros(d, 3 * d), DMatrix::zeros(1, 3 * d))).collect();
        self.sized_for = Some(key);
    }

    /// W_QKV = \[W_Q W_K W_V\] and b_QKV = \[b_Q b_K b_V\]: in column-major storage each is three
    /// contiguous copies.
    fn refresh_qkv_weights(&mut self, model: &Gpt<T>) {
        for ((w, b), blk) in self.w_qkv.iter_mut().zip(&model.blocks) {
            let a = &blk.attn;
            for (part, (src_w, src_b)) in
                [(&a.w_q, &a.b_q), (&a.w_k, &a.b_k), (&a.w_v, &a.b_v)].into_iter().enumerate()
            {
                let (nw, nb) = (src_w.len(), src_b.len());
                w.as_mut_slice()[part * nw..(part + 1) * nw].copy_from_slice(src_w.as_slice());
                b.as_mut_slice()[part * nb..(part + 1) * nb].copy_from_slice(src_b.as_slice());
            }
        }
    }
}

impl<T: Float> Shard<T> {
    /// Forward and backward over this shard's sequences; `scale` = 1/(scored positions of the
    /// whole batch), so the shards' gradients add up to the batch mean's.
    fn run(
        &mut self,
        model: &Gpt<T>,
        w_qkv: &[(DMatrix<T>, DMatrix<T>)],
        batch: &Batch,
        scale: T,
    ) -> Result<()> {
        let t = batch.seq_len;
        let rows = self.first * t..(self.first + self.seqs) * t;
        let inputs = &batch.inputs[rows.clone()];
        let targets = &batch.targets[rows];
        self.forward(model, w_qkv, inputs, t)?;
        self.loss_sum = self.loss_and_logit_gradient(targets, scale);
        self.backward(model, w_qkv, inputs, t)
    }
}

/// Query rows per block when causal attention skips the entries above the diagonal: the height
/// of the AVX-512 f32 register tile (32), so every block is whole tiles. With T = 64 this does
/// 3/4 of the full T×T work (the top-right quarter is never computed).
pub const CAUSAL_BLOCK: usize = 32;

/// Where one head of one sequence sits in a column-major buffer with N rows: the T rows s·T … of
/// d_k columns starting at column `col0` (for \[Q K V\], col0 = part·d + h·d_k with part 0, 1, 2
/// for Q, K, V).
#[derive(Clone, Copy, Debug)]
struct Heads {
    n: usize,
    t: usize,
    d_k: usize,
}

impl Heads {
    /// Rows r0 … r1 − 1 of the head, read where they are.
    fn rows<'a, T>(
        &self,
        buf: &'a [T],
        col0: usize,
        s: usize,
        (r0, r1): (usize, usize),
    ) -> Result<MatRef<'a, T>> {
        MatRef::new(&buf[col0 * self.n + s * self.t + r0..], r1 - r0, self.d_k, self.n)
    }

    /// Rows r0 … r1 − 1 of the head, to be written where they are.
    fn rows_mut<'a, T>(
        &self,
        buf: &'a mut [T],
        col0: usize,
        s: usize,
        (r0, r1): (usize, usize),
    ) -> Result<MatMut<'a, T>> {
        MatMut::new(&mut buf[col0 * self.n + s * self.t + r0..], r1 - r0, self.d_k, self.n)
    }
}

/// The blocks of [`CAUSAL_BLOCK`] rows that cover 0 … T − 1, as (first, past-the-end). The
/// benchmark replays the same blocks.
pub fn causal_blocks(t: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..t).step_by(CAUSAL_BLOCK).map(move |r0| (r0, (r0 + CAUSAL_BLOCK).min(t)))
}
