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
//!   product with W_QKV = \[W_Q W_K W_V\] (d×3d, held so in the parameter store), and their
//!   backward is one product too: ∂n₁ = ∂QKV·W_QKVᵀ, ∂W_QKV = n₁ᵀ∂QKV.
//! - **Attention without copies, causal half mostly skipped.** Each head of each sequence is a view
//!   into the QKV buffer (a head is a block of columns, a sequence a block of rows, see [`MatRef`]
//!   and [`MatMut`]), so its products read it and write their results where they are. Queries go
//!   in blocks of [`CAUSAL_BLOCK`] rows, and a block multiplies only the keys it may see; the
//!   softmax touches only the entries j ≤ i.
//! - **Residuals accumulate in place.** h = x + a·W_O + b_O is one product with β = 1 onto x;
//!   every "∂x gets ∂h directly and through the branch" is an addition into the same buffer.
//! - **The batch in shards, the shards over every thread.** The B sequences are cut into
//!   [`gradient_shards`] parts (a power of two, each of at least [`MIN_SHARD_ROWS`] rows). Each
//!   part runs forward and backward on its own; the threads take the parts one after another
//!   from a shared queue (each part's products on the threads left over, if there are more
//!   threads than parts), and the parts' gradients and losses are added in part order, element
//!   by element. The parts are fixed by the batch and the model, never by the thread count, and
//!   which thread ran a part changes nothing, so every thread count gives the same bits.
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
//! naming the forward line it differentiates; `precision.rs` the value both passes take by
//! argument to round the products' inputs to bf16 or f16 and tally what that lost (mixed
//! precision, [`FusedStep::set_precision`]).

mod backward;
mod cached;
mod forward;
mod precision;
mod row_team;
mod shards;
#[cfg(test)]
mod tests;
mod workspace;

pub use cached::StepWeights;
pub use cached::{attend_one, row_affine};
pub use row_team::ROW_TEAM_WEIGHTS_PER_THREAD;
use row_team::with_row_team;
use shards::{add_in_shard_order, run_shards};
pub(crate) use workspace::Windows;

use forward::Outputs;
pub(crate) use forward::{
    Products, add_row, causal_block_forward, cross_entropy_by_columns, one_row_attention,
};
use precision::Rounder;

use super::data::Batch;
use super::model::{BlockForm, Gpt, Grads};
use crate::ch06_attention::{Epsilon, LnCache};
use crate::error::{Error, Result, invalid, shape_error};
use crate::float::Float;
use crate::matmul::inputs::{Precision, ProductInputs, StepRounding};
use crate::matmul::{MatMut, MatRef, Settings};
use crate::threads::share_pieces;
use nalgebra::DMatrix;

/// The fewest rows (tokens) a shard is given when the batch is cut. Each shard repeats work that
/// grows with the model, not with its rows: it packs every weight matrix for its forward and
/// backward products, writes a full gradient and adds it into the batch's, a few memory
/// operations per parameter against 6·rows flops per parameter of useful work. Measured on one
/// thread with `--child-train-tps` of `benches/ch09_gpt.rs` (alternating runs, medians, on a
/// loaded 2-core machine, so only a few percent are resolved): nanoGPT's CPU configuration
/// (768 rows) lost ≈ 15 % in shards of 64 rows, ≈ 6 % in shards of 128, ≈ 1 % in shards of 192
/// against 384; the width-96 model at batch 16 (1,024 rows) ≈ 4 % in shards of 256 against 512.
/// 256 keeps nanoGPT's batch and this chapter's corpus batch in the two shards they had.
pub const MIN_SHARD_ROWS: usize = 256;

/// Into how many shards the fused step cuts a batch of `batch` sequences of `seq_len` tokens for
/// a model shaped by `config`: the largest power of two that gives every shard at least
/// [`MIN_SHARD_ROWS`] rows, at most one shard per sequence, and keeps the shards' own gradient
/// copies (one full set of parameters each, [`Config::parameter_count`]) within the memory of
/// the values the forward pass saves for the whole batch (so the step needs at most about twice
/// its activations); at least one. A power of two, so that 2, 4, 8 or 16 threads share the
/// shards evenly.
///
/// nanoGPT's CPU configuration (4 layers, width 128, context 64, batch 12: 768 rows) and this
/// chapter's corpus model (batch 8 of 64 tokens) get 2 shards, the 6-layer, width-384,
/// context-256 model of the thread benchmark at batch 16 gets 16 (one per sequence), GPT-2 124M
/// at 12 sequences of 64 tokens 1 (two copies of its 124·10⁶ parameters would outweigh the
/// 161·10⁶ saved values): its products then use every thread.
///
/// The count depends on the batch and the model only, never on the threads: the gradient is a
/// sum over shards added in shard order, so it depends on this number through rounding alone
/// (the sums over the batch are grouped differently), and on the thread count not at all.
///
/// [`Config::parameter_count`]: super::config::Config::parameter_count
pub fn gradient_shards(config: &super::config::Config, batch: usize, seq_len: usize) -> usize {
    let saved = batch.saturating_mul(saved_values_per_sequence(config, seq_len));
    let parameters = usize::try_from(config.parameter_count()).unwrap_or(usize::MAX).max(1);
    let most = (batch.saturating_mul(seq_len) / MIN_SHARD_ROWS).min(batch).min(saved / parameters);
    if most <= 1 { 1 } else { 1 << most.ilog2() }
}

/// The values one sequence of T tokens keeps in a shard's buffers (see [`BlockSaved`] and
/// `Shard`): per block the LayerNorm caches, n₁, \[Q K V\], the heads' outputs, n₂ (8d per row,
/// LayerNorms' two statistics not counted), z₁ and a₁ (2·4d per row) and the attention weights
/// (h·T²); after the blocks the final LayerNorm, h_f, the residual stream and the logits
/// (3d + V per row).
fn saved_values_per_sequence(c: &super::config::Config, t: usize) -> usize {
    let (d, f) = (c.width, c.hidden());
    let rows = |per_row: usize| t.saturating_mul(per_row);
    let per_block = rows((8 * d).saturating_add(2 * f)).saturating_add(c.heads * rows(t));
    c.layers.saturating_mul(per_block).saturating_add(rows((3 * d).saturating_add(c.vocab_size)))
}

/// Whether [`FusedStep`] covers `model`: every block pre-LN with GELU (tanh form), every
/// LayerNorm with ε inside the square root, and the weights shaped as [`Gpt::new`] shapes them
/// (W_Q, W_K, W_V, W_O d×d, W₁ d×4d, W₂ 4d×d, heads dividing d). Models loaded from a checkpoint
/// or built by [`Gpt::new`] always are; a model assembled by hand from chapter 6's parts may not
/// be, and then the trainer uses the reference [`Gpt::loss_and_grads`].
pub fn supports<T: Float>(model: &Gpt<T>) -> bool {
    let c = &model.config;
    let d = c.width;
    // Every parameter shaped as the table says, and the position table n_ctx×d even when fixed.
    let shaped = model
        .shape()
        .order()
        .into_iter()
        .zip(model.params.iter())
        .all(|((s, _), m)| m.shape() == (s.rows.of(c), s.cols.of(c)));
    d > 0
        && c.heads > 0
        && d.is_multiple_of(c.heads)
        && model.blocks.len() == c.layers
        && model.params.len() == model.shape().len()
        && shaped
        && model.wpe().shape() == (c.context, d)
        && model.ln_f == Epsilon::InsideSqrt
        && model.blocks.iter().all(|b| *b == BlockForm::GPT2)
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

/// The buffers of a forward pass that produces the last row only ([`Outputs::LastRow`]): the last
/// block's attention output and everything after it, one row each.
#[derive(Clone, Debug)]
struct LastRow<T: Float> {
    /// The heads' outputs, then the residual stream, 1×d.
    att: DMatrix<T>,
    x: DMatrix<T>,
    ln2: LnCache<T>,
    /// n₂, z₁ and a₁ of the row.
    n2: DMatrix<T>,
    z1: DMatrix<T>,
    a1: DMatrix<T>,
    ln_f: LnCache<T>,
    /// h_f and the logits of the row, 1×d and 1×V.
    h_f: DMatrix<T>,
    logits: DMatrix<T>,
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
    /// ∂L/∂A then ∂L/∂S of one head, T×T.
    d_scores: Vec<T>,
    /// Scratch of length T for Σ_j A ⊙ ∂A per row.
    row_a: Vec<T>,
    /// This shard's gradients, in [`Gpt::tensors`] order.
    grads: Grads<T>,
    /// The last row's buffers when only it is computed ([`Outputs::LastRow`]).
    last: LastRow<T>,
    /// Σ over this shard's scored rows of −ln p(target).
    loss_sum: f64,
    /// −ln p(target) of each of this shard's rows (0 where unscored), from the last pass.
    nll: Vec<f64>,
}

/// The reusable state of the fused step: one shard (its own buffers and gradients) per part of
/// the batch. Buffers are sized on the first step and resized only
/// when the batch or model shape changes. Memory: every activation the backward pass needs, plus
/// one full set of gradients per shard (for GPT-2 124M in f32, about 0.5 GB each), which
/// [`gradient_shards`] keeps within the activations' own memory.
#[derive(Clone, Default)]
pub struct FusedStep<T: Float> {
    shards: Vec<Shard<T>>,
    /// (B, T, the model's shape) the buffers were sized for.
    sized_for: Option<(usize, usize, super::config::Config, bool, bool)>,
    /// How the products round their inputs, and the loss scale (chapter 11; f32 by default).
    precision: Precision,
    /// How the products run: backend, kernel, threads (chapter 10; the process's by default).
    settings: Settings,
    /// What the last step's roundings did.
    rounding: StepRounding,
}

impl<T: Float> std::fmt::Debug for FusedStep<T> {
    /// What the workspace is sized for, not its millions of values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FusedStep")
            .field("shards", &self.shards.len())
            .field("sized_for (B, T, config, untied, with backward)", &self.sized_for)
            .field("precision", &self.precision)
            .field("settings", &self.settings)
            .finish()
    }
}

impl<T: Float> FusedStep<T> {
    /// An empty workspace; the first step sizes it.
    pub fn new() -> Self {
        FusedStep {
            shards: Vec::new(),
            sized_for: None,
            precision: Precision::F32,
            settings: Settings::default(),
            rounding: StepRounding::default(),
        }
    }

    /// How the step's products run from the next step on (chapter 10's [`Settings`]): who
    /// computes them, which kernel, how many threads the step may use in all (its batch shards
    /// and their products share them). The default leaves each to the process
    /// (`LLM_WORKBOOK_BACKEND`, `LLM_WORKBOOK_KERNEL`, `LLM_WORKBOOK_THREADS`). Any thread count
    /// gives the same bits; another kernel rounds otherwise.
    pub fn set_settings(&mut self, settings: Settings) {
        self.settings = settings;
    }

    /// The settings the step's products run with.
    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// Mixed precision (chapter 11): from the next step on, every product's two inputs are
    /// rounded to `precision.inputs` (activations and weights in the forward pass, the incoming
    /// gradient ∂Y and the saved activation or weight in the backward pass; see
    /// [`ProductInputs`]), the loss's gradient is multiplied by `precision.loss_scale` = S,
    /// and the parameters' gradients are divided by S in f32 after the sum over the batch. The
    /// master weights, the gradient sums and everything between the products stay in the
    /// model's type. [`Precision::F32`] (the default) is chapter 9's step, bit for bit.
    pub fn set_precision(&mut self, precision: Precision) {
        self.precision = precision;
    }

    /// The precision the steps use.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// What the last step's roundings did (zero with f32 inputs): the underflows of the backward
    /// pass's gradient inputs, and the over- and underflows of every other input.
    pub fn rounding(&self) -> StepRounding {
        self.rounding
    }

    /// The mean next-token loss of `batch` and ∂L/∂θ for every parameter tensor, in
    /// [`Gpt::tensors`] order (the slice belongs to the workspace and is overwritten by the next
    /// call; the trainer clips it and hands it to AdamW in place).
    ///
    /// The same values as [`Gpt::loss_and_grads`] up to rounding. Errors as it does on a bad
    /// batch, and on a model [`supports`] does not cover. It is
    /// [`FusedStep::weighted_loss_and_grads`] with w_r = 1/S on the S scored rows (the same code,
    /// the weight held once; a test holds the two to the same bits).
    pub fn loss_and_grads(
        &mut self,
        model: &Gpt<T>,
        batch: &Batch,
    ) -> Result<(f64, &mut [DMatrix<T>])> {
        let scored = self.check("FusedStep::loss_and_grads", model, batch)?;
        // With loss scaling (chapter 11) ∂L/∂z is S times the mean's; S = 1 gives 1/scored.
        let scale = T::of(self.precision.loss_scale / scored as f64);
        let loss_sum = self.forward_backward(model, batch, &vec![scale; batch.inputs.len()])?;
        Ok((loss_sum / scored as f64, self.unscaled_grads()))
    }

    /// A weighted next-token loss and its gradient, for losses built on sequence
    /// log-probabilities (chapter 13's DPO and GRPO): with one weight w_r per position r of the
    /// batch (`weights`, length B·T, row r = sequence r / T, position r mod T),
    ///
    /// ```text
    /// L = Σ_r w_r · (−ln p_r(target_r))     over the scored positions r (no 1/S)
    /// ∂L/∂z_r = w_r · (softmax(z_r) − onehot(target_r)),   then back through the model
    /// ```
    ///
    /// Weights may have either sign; those of unscored positions are read for their finiteness
    /// only. [`FusedStep::loss_and_grads`] is the case w_r = 1/S (S scored positions). Since
    /// ∂(−ln p_r)/∂θ = −∂ln p_r/∂θ, a loss whose derivative with respect to each ln p_r is c_r
    /// has the gradient of this one with w_r = −c_r. The gradients are as in
    /// [`FusedStep::loss_and_grads`] (the workspace's, in [`Gpt::tensors`] order; loss scaling
    /// multiplies the weights by S and divides the gradients by S after the sum).
    ///
    /// Errors as [`FusedStep::loss_and_grads`], and, naming `weights`, on a length other than
    /// B·T, a weight that is NaN or ±∞, or one that overflows the model's type once scaled.
    pub fn weighted_loss_and_grads(
        &mut self,
        model: &Gpt<T>,
        batch: &Batch,
        weights: &[f64],
    ) -> Result<(f64, &mut [DMatrix<T>])> {
        const OP: &str = "FusedStep::weighted_loss_and_grads";
        self.check(OP, model, batch)?;
        let rows = batch.inputs.len();
        if weights.len() != rows {
            let want = format!("{rows} (B·T)");
            return Err(shape_error(OP, "weights", want, weights.len().to_string()));
        }
        crate::float::ensure_finite_slice(OP, "weights", weights)?;
        let s = self.precision.loss_scale;
        let factors: Vec<T> = weights.iter().map(|&w| T::of(s * w)).collect();
        if let Some(r) = factors.iter().position(|f| !f.is_finite()) {
            let reason = format!("w[{r}] = {:e} × the loss scale overflows", weights[r]);
            return Err(invalid(OP, "weights", reason));
        }
        self.forward_backward(model, batch, &factors)?;
        let nll = self.shards.iter().flat_map(|s| s.nll.iter());
        let loss = batch
            .targets
            .iter()
            .zip(nll.zip(weights))
            .filter(|(t, _)| t.is_some())
            .map(|(_, (l, w))| w * l)
            .sum();
        Ok((loss, self.unscaled_grads()))
    }

    /// ln p(target) at every position of `batch` by the fused forward pass alone (no gradients):
    /// ℓ_r = ln softmax(z_r)\[target_r\], length B·T in the batch's order (row r = sequence r / T,
    /// position r mod T). Unscored positions (target `None`) hold 0.0, a placeholder, not a
    /// log-probability. The parts of a sequence's log-probability: ln π(y) = Σ over the answer's
    /// positions of ℓ_r. The products round their inputs as [`FusedStep::set_precision`] says.
    ///
    /// Errors as [`FusedStep::loss_and_grads`].
    pub fn target_log_probs(&mut self, model: &Gpt<T>, batch: &Batch) -> Result<Vec<f64>> {
        self.check("FusedStep::target_log_probs", model, batch)?;
        // Keep the backward buffers if the workspace has them: a step on the same shape follows.
        let backward = self.sized_for.as_ref().is_some_and(|k| k.4);
        self.size(model, batch, backward);
        let inputs = self.precision.inputs;
        for r in run_shards(&mut self.shards, self.settings, |s, products| {
            s.forward_scores(model, batch, Rounder::new(products, inputs))
        }) {
            r?;
        }
        Ok(self.shards.iter().flat_map(|s| s.nll.iter().map(|&l| 0.0 - l)).collect())
    }

    /// The checks every batch call makes: the batch, the model's shape, the context, at least
    /// one scored position. Returns the scored positions' count.
    fn check(&self, op: &'static str, model: &Gpt<T>, batch: &Batch) -> Result<usize> {
        batch.check(op, model.config.vocab_size)?;
        if !supports(model) {
            return Err(invalid(
                op,
                "model",
                "its shape is not the one the fused step covers (see fast::supports); use \
                    Gpt::loss_and_grads",
            ));
        }
        if batch.seq_len > model.config.context {
            return Err(invalid(
                op,
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
        Ok(scored)
    }

    /// Forward and backward over every shard with ∂L/∂z_r = k_r·(softmax(z_r) − onehot) at each
    /// scored row r (`factors`, one per position of the batch, the loss scale included); the
    /// gradient summed over the shards into the first. Returns Σ over scored rows of
    /// −ln p(target), unweighted; each shard keeps its rows' values in `nll`.
    fn forward_backward(&mut self, model: &Gpt<T>, batch: &Batch, factors: &[T]) -> Result<f64> {
        self.size(model, batch, true);
        let inputs = self.precision.inputs;
        let settings = self.settings;
        let threads = settings.threads.unwrap_or_else(crate::threads::default_threads);
        let results = run_shards(&mut self.shards, settings, |s, products| {
            s.run(model, batch, factors, Rounder::new(products, inputs))
        });
        // The shards' tallies, added in shard order.
        let mut rounding = StepRounding::default();
        for r in results {
            rounding += r?;
        }
        self.rounding = rounding;
        Ok(add_in_shard_order(&mut self.shards, threads))
    }

    /// The summed gradient, divided by the loss scale when there is one.
    fn unscaled_grads(&mut self) -> &mut [DMatrix<T>] {
        let loss_scale = self.precision.loss_scale;
        let first = &mut self.shards[0];
        if loss_scale != 1.0 {
            // Unscaled in the model's type before clipping and AdamW: exact for a power of two.
            let unscale = T::of(1.0 / loss_scale);
            first.grads.iter_mut().for_each(|g| *g *= unscale);
        }
        &mut first.grads[..]
    }

    /// The logits of the last position of one sequence (`tokens`, at most n_ctx of them), by the
    /// fused forward pass: what [`Gpt::last_logits`] returns, computed the way the training step
    /// computes its forward pass (no gradients, no backward buffers). Length V.
    ///
    /// Errors on an empty sequence, a token id outside the vocabulary, a sequence longer than the
    /// context, a model [`supports`] does not cover, and a weight that makes a logit NaN or ∞.
    pub fn last_logits(&mut self, model: &Gpt<T>, tokens: &[u32]) -> Result<Vec<T>> {
        self.forward_one("FusedStep::last_logits", model, tokens, true)
    }

    /// [`Gpt::prefill`] by the fused forward pass: a key/value cache holding every block's
    /// \[Q K V\] rows for `tokens` (rows 0 … T − 1 of each block's buffer, in the same layout),
    /// and the logits of the last position. Errors as [`FusedStep::last_logits`].
    pub fn prefill(
        &mut self,
        model: &Gpt<T>,
        tokens: &[u32],
    ) -> Result<(super::model::KvCache<T>, Vec<T>)> {
        let logits = self.forward_one("FusedStep::prefill", model, tokens, true)?;
        Ok((self.cache_of(model, tokens.len()), logits))
    }

    /// A key/value cache holding rows 0 … T − 1 of every block's \[Q K V\] buffer.
    fn cache_of(&self, model: &Gpt<T>, t: usize) -> super::model::KvCache<T> {
        let mut kv = model.new_kv_cache();
        for (cached, s) in kv.qkv.iter_mut().zip(&self.shards[0].blocks) {
            cached.rows_mut(0, t).copy_from(&s.qkv);
        }
        kv.len = t;
        kv
    }

    /// The forward pass over one sequence, keeping every block's buffers; the last row's logits.
    /// `new_model`: check that the fused pass covers the model ([`supports`]) (false only where
    /// that was done for this very model: [`Windows`], at every token after its first).
    fn forward_one(
        &mut self,
        op: &'static str,
        model: &Gpt<T>,
        tokens: &[u32],
        new_model: bool,
    ) -> Result<Vec<T>> {
        if tokens.is_empty() {
            return Err(Error::Empty { op, arg: "tokens" });
        }
        super::data::check_ids(op, "tokens", tokens, model.config.vocab_size)?;
        if new_model && !supports(model) {
            return Err(invalid(
                op,
                "model",
                "its shape is not the one the fused step covers (see fast::supports)",
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
        let shard = &mut self.shards[0];
        let rounder = &mut Rounder::new(self.settings, ProductInputs::F32);
        shard.forward(model, tokens, t, Outputs::LastRow, rounder)?;
        Ok(shard.last.logits.iter().copied().collect())
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
