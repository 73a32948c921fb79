//! The fused step's workspace: every buffer sized for a batch and a model, and kept from call
//! to call. A buffer keeps its allocation when it is large enough ([`fit`]), so a workspace that
//! serves windows of changing length (generation without the cache) or batches of changing size
//! does not ask the kernel for fresh pages every time.

use super::{BlockSaved, FusedStep, LastRow, Shard, gradient_shards, supports};
use crate::ch06_attention::LnCache;
use crate::ch09_gpt::config::Config;
use crate::ch09_gpt::data::Batch;
use crate::ch09_gpt::model::{Gpt, Grads, KvCache, Shape};
use crate::error::Result;
use crate::float::Float;
use nalgebra::DMatrix;

/// A LayerNorm's saved forward values for N rows of width C, as chapter 6 keeps them.
pub(super) fn ln_cache<T: Float>(n: usize, c: usize) -> LnCache<T> {
    LnCache { x_hat: DMatrix::zeros(n, c), denom: vec![T::zero(); n], sigma: vec![T::zero(); n] }
}

/// `m` reshaped to rows×cols, keeping its allocation when that is large enough. The values it
/// held stay where they were in memory (new elements are zero): every pass writes a buffer
/// before it reads it, as it must when the workspace is reused at the same shape, and a test
/// holds a reused workspace to a fresh one's bits. Zeroing the buffers at every new window was
/// 4 % of generation without the cache.
fn fit<T: Float>(m: &mut DMatrix<T>, rows: usize, cols: usize) {
    if m.shape() == (rows, cols) {
        return;
    }
    let mut data: Vec<T> = std::mem::replace(m, DMatrix::zeros(0, 0)).data.into();
    fit_vec(&mut data, rows * cols);
    *m = DMatrix::from_vec(rows, cols, data);
}

/// `v` resized to `len` (see [`fit`]).
fn fit_vec<T: Float>(v: &mut Vec<T>, len: usize) {
    v.resize(len, T::zero());
}

/// [`fit`] for a LayerNorm's saved values over N rows of width C ([`ln_cache`]'s shapes).
fn fit_ln<T: Float>(ln: &mut LnCache<T>, n: usize, c: usize) {
    fit(&mut ln.x_hat, n, c);
    fit_vec(&mut ln.denom, n);
    fit_vec(&mut ln.sigma, n);
}

impl<T: Float> LastRow<T> {
    /// Sized for width d, hidden width f and vocabulary V.
    pub(super) fn new(d: usize, f: usize, v: usize) -> Self {
        let z = |cols: usize| DMatrix::zeros(1, cols);
        LastRow {
            att: z(d),
            x: z(d),
            ln2: ln_cache(1, d),
            n2: z(d),
            z1: z(f),
            a1: z(f),
            ln_f: ln_cache(1, d),
            h_f: z(d),
            logits: z(v),
        }
    }
}

impl<T: Float> BlockSaved<T> {
    /// A block's buffers for N rows of `seqs` sequences of T tokens ([`fit`] each).
    fn resize(&mut self, n: usize, seqs: usize, t: usize, c: &Config) {
        let (d, f) = (c.width, c.hidden());
        fit_ln(&mut self.ln1, n, d);
        fit(&mut self.n1, n, d);
        fit(&mut self.qkv, n, 3 * d);
        fit_vec(&mut self.weights, seqs * c.heads * t * t);
        fit(&mut self.att, n, d);
        fit_ln(&mut self.ln2, n, d);
        fit(&mut self.n2, n, d);
        fit(&mut self.z1, n, f);
        fit(&mut self.a1, n, f);
    }
}

impl<T: Float> Shard<T> {
    /// A shard with no rows; [`Shard::resize`] sizes it.
    pub(super) fn empty() -> Self {
        let e = || DMatrix::zeros(0, 0);
        Shard {
            first: 0,
            seqs: 0,
            blocks: Vec::new(),
            ln_f: ln_cache(0, 0),
            h_f: e(),
            logits: e(),
            x: e(),
            d_n: e(),
            d_att: e(),
            d_qkv: e(),
            d_z1: e(),
            d_scores: Vec::new(),
            row_a: Vec::new(),
            grads: Grads::empty(),
            last: LastRow::new(0, 0, 0),
            loss_sum: 0.0,
            nll: Vec::new(),
        }
    }

    /// Every buffer for the sequences `first` … `first + seqs − 1` of T tokens (N = seqs·T rows)
    /// of a model shaped by `c` ([`fit`] each); with `backward` (the model's tensors) also the
    /// backward pass's scratch and a gradient of every tensor, else none.
    fn resize(&mut self, first: usize, seqs: usize, t: usize, c: &Config, backward: Option<Shape>) {
        let (d, f, v) = (c.width, c.hidden(), c.vocab_size);
        let n = seqs * t;
        let nb = if backward.is_some() { n } else { 0 }; // rows of the backward-only buffers
        (self.first, self.seqs, self.loss_sum) = (first, seqs, 0.0);
        self.blocks.truncate(c.layers);
        self.blocks.resize_with(c.layers, || BlockSaved {
            ln1: ln_cache(0, 0),
            n1: DMatrix::zeros(0, 0),
            qkv: DMatrix::zeros(0, 0),
            weights: Vec::new(),
            att: DMatrix::zeros(0, 0),
            ln2: ln_cache(0, 0),
            n2: DMatrix::zeros(0, 0),
            z1: DMatrix::zeros(0, 0),
            a1: DMatrix::zeros(0, 0),
        });
        for block in &mut self.blocks {
            block.resize(n, seqs, t, c);
        }
        fit_ln(&mut self.ln_f, n, d);
        fit(&mut self.h_f, n, d);
        fit(&mut self.logits, n, v);
        fit(&mut self.x, n, d);
        fit(&mut self.d_n, nb, d);
        fit(&mut self.d_att, nb, d);
        fit(&mut self.d_qkv, nb, 3 * d);
        fit(&mut self.d_z1, nb, f);
        fit_vec(&mut self.d_scores, if backward.is_some() { t * t } else { 0 });
        fit_vec(&mut self.row_a, t);
        if (self.last.x.ncols(), self.last.z1.ncols(), self.last.logits.ncols()) != (d, f, v) {
            self.last = LastRow::new(d, f, v);
        }
        self.grads = match backward {
            Some(shape) => Grads::zeros(c, shape),
            None => Grads::empty(),
        };
    }
}

impl<T: Float> FusedStep<T> {
    /// Sizes every buffer for this batch and model, unless they already are. A buffer keeps its
    /// allocation when it is large enough ([`fit`]): generation without the cache runs the
    /// forward pass over a window one token longer at every step, and fresh buffers for each had
    /// the kernel map and zero ≈ 20 MB of pages per token (1.26·10⁶ page faults against 3·10⁴ in
    /// `--child-generate` of `benches/ch09_gpt.rs`; 24.5 tokens/s against 32.7 without the cache,
    /// one thread, alternating runs).
    /// `backward`: also the gradients and the backward pass's scratch (a forward pass alone, as
    /// [`FusedStep::last_logits`] runs, needs neither).
    pub(super) fn size(&mut self, model: &Gpt<T>, batch: &Batch, backward: bool) {
        let key = (batch.batch, batch.seq_len, model.config, model.lm_head().is_some(), backward);
        if self.sized_for == Some(key) {
            return;
        }
        let c = &model.config;
        let t = batch.seq_len;
        let parts = gradient_shards(c, batch.batch, t);
        let tensors = backward.then(|| model.shape());
        self.shards.truncate(parts);
        self.shards.resize_with(parts, Shard::empty);
        for (p, shard) in self.shards.iter_mut().enumerate() {
            // Sequences split as evenly as possible, the first parts taking the remainder.
            let first = p * (batch.batch / parts) + p.min(batch.batch % parts);
            let seqs = batch.batch / parts + usize::from(p < batch.batch % parts);
            shard.resize(first, seqs, t, c, tensors);
        }
        self.sized_for = Some(key);
    }
}

/// The full forward pass over the windows of one generation ([`generate`]): the fused one when
/// it covers the model ([`supports`]), with one workspace whose buffers grow with the window and
/// are kept, the model checked once, not at every token (it stays borrowed, so it cannot change
/// in between); else the reference ([`Gpt::reference_last_logits`],
/// [`Gpt::reference_prefill`]). The same values as [`Gpt::last_logits`] and [`Gpt::prefill`]; a
/// test holds them.
///
/// [`generate`]: crate::ch09_gpt::sample::generate
pub(crate) struct Windows<'m, T: Float> {
    model: &'m Gpt<T>,
    /// The fused workspace, `None` for a model the fused pass does not cover.
    step: Option<FusedStep<T>>,
    /// Whether `step` has checked this model.
    fused: bool,
}

impl<'m, T: Float> Windows<'m, T> {
    /// An empty workspace for `model`.
    pub(crate) fn new(model: &'m Gpt<T>) -> Self {
        Windows { model, step: supports(model).then(FusedStep::new), fused: false }
    }

    /// The logits of the last position of `tokens` ([`Gpt::last_logits`]).
    pub(crate) fn last_logits(&mut self, tokens: &[u32]) -> Result<Vec<T>> {
        let Some(step) = self.step.as_mut() else {
            return self.model.reference_last_logits(tokens);
        };
        let logits = step.forward_one("Gpt::last_logits", self.model, tokens, !self.fused);
        self.fused = logits.is_ok();
        logits
    }

    /// A key/value cache of `tokens` and the logits of their last position ([`Gpt::prefill`]).
    pub(crate) fn prefill(&mut self, tokens: &[u32]) -> Result<(KvCache<T>, Vec<T>)> {
        if self.step.is_none() {
            return self.model.reference_prefill(tokens);
        }
        let logits = self.last_logits(tokens)?;
        let step = self.step.as_ref().expect("checked above");
        Ok((step.cache_of(self.model, tokens.len()), logits))
    }
}
