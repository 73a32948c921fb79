//! The forward pass over B sequences of T tokens, the loss, and the hand-written backward pass,
//! each backward line naming the forward line it differentiates (the data flow is in the notes of
//! [`model`](super)).

use super::table::Param;
use super::{Gpt, Grads, layer_norm_of, store_block_grads};
use crate::ch06_attention::{
    AttnSpec, Block, BlockCache, LnCache, block_backward, block_forward, layer_norm_backward,
    layer_norm_forward,
};
use crate::ch09_gpt::data::{Batch, Token, check_ids};
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::Float;
use crate::matmul::{matmul, matmul_nt, matmul_tn};
use nalgebra::DMatrix;

/// The final hidden states h_f with the blocks' caches and the final LayerNorm's cache.
pub type Hidden<T> = (DMatrix<T>, Vec<BlockCache<T>>, LnCache<T>);

/// What the backward pass needs from the forward pass.
#[derive(Clone, Debug)]
pub struct Cache<T: Float> {
    /// The input tokens, B·T.
    pub inputs: Vec<Token>,
    /// T.
    pub seq_len: usize,
    /// The blocks' caches.
    pub blocks: Vec<BlockCache<T>>,
    /// The final LayerNorm's cache.
    pub ln_f: LnCache<T>,
    /// h_f = LN_f(x_L), N×d.
    pub hidden: DMatrix<T>,
}

/// The loss and every gradient.
#[derive(Clone, Debug)]
pub struct LossAndGrads<T: Float> {
    /// The mean next-token log-loss over the scored positions, in nats.
    pub loss: f64,
    /// ∂L/∂θ for every parameter tensor, in [`Gpt::tensors`] order.
    pub grads: Grads<T>,
    /// ∂L/∂x₀, the gradient with respect to the input embeddings (N×d).
    pub d_x0: DMatrix<T>,
}

impl<T: Float> Gpt<T> {
    // ───────────────────────────── forward ─────────────────────────────

    fn check_sequences(&self, op: &'static str, inputs: &[Token], seq_len: usize) -> Result<usize> {
        if inputs.is_empty() || seq_len == 0 {
            return Err(Error::Empty { op, arg: "inputs" });
        }
        if !inputs.len().is_multiple_of(seq_len) {
            return Err(shape_error(
                op,
                "inputs and seq_len",
                format!("a multiple of T = {seq_len} tokens"),
                format!("{}", inputs.len()),
            ));
        }
        if seq_len > self.config.context {
            return Err(invalid(
                op,
                "seq_len",
                format!("T = {seq_len} is longer than the context n_ctx = {}", self.config.context),
            ));
        }
        check_ids(op, "inputs", inputs, self.config.vocab_size)?;
        Ok(inputs.len() / seq_len)
    }

    /// x₀ = W_E\[u\] + W_P\[t\]: row b·T + t is token u_{b,t}'s embedding plus position t's row.
    pub fn embed(&self, inputs: &[Token], seq_len: usize) -> Result<DMatrix<T>> {
        self.check_sequences("Gpt::embed", inputs, seq_len)?;
        let mut x = DMatrix::zeros(inputs.len(), self.config.width);
        self.embed_into(inputs, seq_len, &mut x);
        Ok(x)
    }

    /// [`Gpt::embed`] into `x` ((B·T)×d, one row per input), ids and shapes already checked.
    pub(crate) fn embed_into(&self, inputs: &[Token], seq_len: usize, x: &mut DMatrix<T>) {
        let n = x.nrows();
        let (vocab, ctx) = (self.config.vocab_size, self.config.context);
        let (wte, wpe) = (self.wte().as_slice(), self.wpe().as_slice());
        // Column by column, the order x is stored in: channel c of row r.
        for (c, column) in x.as_mut_slice().chunks_exact_mut(n).enumerate() {
            for (r, (out, &u)) in column.iter_mut().zip(inputs).enumerate() {
                *out = wte[c * vocab + u as usize] + wpe[c * ctx + r % seq_len];
            }
        }
    }

    /// The blocks and the final LayerNorm on input embeddings x₀ ((B·T)×d): h_f and the cache.
    pub fn forward_embeddings(&self, x0: &DMatrix<T>, seq_len: usize) -> Result<Hidden<T>> {
        self.forward_blocks(&self.chapter6_blocks(), x0, seq_len)
    }

    /// Every block as chapter 6's [`Block`] ([`Gpt::block`]: copies, made once a pass).
    fn chapter6_blocks(&self) -> Vec<Block<T>> {
        (0..self.blocks.len()).map(|l| self.block(l)).collect()
    }

    /// [`Gpt::forward_embeddings`] through `blocks`.
    fn forward_blocks(
        &self,
        blocks: &[Block<T>],
        x0: &DMatrix<T>,
        seq_len: usize,
    ) -> Result<Hidden<T>> {
        const OP: &str = "Gpt::forward_embeddings";
        if x0.ncols() != self.config.width
            || seq_len == 0
            || !x0.nrows().is_multiple_of(seq_len)
            || x0.nrows() == 0
        {
            return Err(shape_error(
                OP,
                "x0",
                format!("(B·{seq_len})×{}", self.config.width),
                shape_of(x0),
            ));
        }
        if seq_len > self.config.context {
            return Err(invalid(
                OP,
                "seq_len",
                format!("T = {seq_len} is longer than the context n_ctx = {}", self.config.context),
            ));
        }
        let spec = AttnSpec::causal(seq_len);
        let mut x = x0.clone();
        let mut caches = Vec::with_capacity(blocks.len());
        for b in blocks {
            let (y, cache) = block_forward(b, &x, &spec)?; // x_{l+1} = block_l(x_l)
            x = y;
            caches.push(cache);
        }
        let (h, ln_f) = layer_norm_forward(&layer_norm_of(self.ln_f()), &x)?; // h_f = LN_f(x_L)
        Ok((h, caches, ln_f))
    }

    /// The whole forward pass to the final hidden states, keeping what backward needs.
    pub fn forward(&self, inputs: &[Token], seq_len: usize) -> Result<Cache<T>> {
        let x0 = self.embed(inputs, seq_len)?;
        let (hidden, blocks, ln_f) = self.forward_embeddings(&x0, seq_len)?;
        Ok(Cache { inputs: inputs.to_vec(), seq_len, blocks, ln_f, hidden })
    }

    /// Logits z = h W_Uᵀ for hidden rows h (n×d): n×V.
    pub fn logits_of(&self, hidden: &DMatrix<T>) -> Result<DMatrix<T>> {
        matmul_nt(hidden, self.unembedding())
    }

    /// The logits at every position of B sequences of T tokens: (B·T)×V.
    pub fn logits(&self, inputs: &[Token], seq_len: usize) -> Result<DMatrix<T>> {
        let cache = self.forward(inputs, seq_len)?;
        self.logits_of(&cache.hidden)
    }

    /// The mean next-token loss of a batch (no gradients).
    pub fn loss(&self, batch: &Batch) -> Result<f64> {
        batch.check("Gpt::loss", self.config.vocab_size)?;
        let cache = self.forward(&batch.inputs, batch.seq_len)?;
        let (rows, targets) = scored(batch)?;
        let z = self.logits_of(&gather_rows(&cache.hidden, &rows))?;
        Ok(crate::ch02_softmax::cross_entropy_from_logits(&z, &targets)?.as_f64())
    }

    // ───────────────────────────── backward ─────────────────────────────

    /// The loss of a batch and the gradient of every parameter tensor (and of the input
    /// embeddings), by the forward pass and the hand-written backward pass.
    pub fn loss_and_grads(&self, batch: &Batch) -> Result<LossAndGrads<T>> {
        batch.check("Gpt::loss_and_grads", self.config.vocab_size)?;
        let x0 = self.embed(&batch.inputs, batch.seq_len)?;
        self.loss_and_grads_from_embeddings(&x0, batch)
    }

    /// As [`Gpt::loss_and_grads`], from given input embeddings x₀ (so their gradient can be
    /// checked by finite differences). The token ids of `batch.inputs` still decide which rows
    /// of W_E receive x₀'s gradient.
    pub fn loss_and_grads_from_embeddings(
        &self,
        x0: &DMatrix<T>,
        batch: &Batch,
    ) -> Result<LossAndGrads<T>> {
        const OP: &str = "Gpt::loss_and_grads";
        batch.check(OP, self.config.vocab_size)?;
        let blocks = self.chapter6_blocks();
        let (hidden, caches, ln_f_cache) = self.forward_blocks(&blocks, x0, batch.seq_len)?;
        let (rows, targets) = scored(batch)?;
        let h_s = gather_rows(&hidden, &rows);
        let z = self.logits_of(&h_s)?; //                      z = h_s W_Uᵀ
        // L = CE(z)
        let (loss, d_z) =
            crate::ch02_softmax::cross_entropy_from_logits_with_gradient(&z, &targets)?;
        let d_hs = matmul(&d_z, self.unembedding())?; //       z = h_s W_Uᵀ ⇒ ∂h_s = ∂z W_U
        let d_wu = matmul_tn(&d_z, &h_s)?; //                  z = h_s W_Uᵀ ⇒ ∂W_U = ∂zᵀ h_s
        let mut d_h = DMatrix::zeros(hidden.nrows(), hidden.ncols()); // h_s = rows of h_f
        scatter_rows(&mut d_h, &d_hs, &rows);
        // h_f = LN_f(x_L)
        let ln_f = layer_norm_backward(&layer_norm_of(self.ln_f()), &ln_f_cache, &d_h)?;
        let mut d_x = ln_f.d_x;
        let mut grads = Grads::zeros(&self.config, self.shape());
        for (l, (b, cache)) in blocks.iter().zip(&caches).enumerate().rev() {
            let mut g = block_backward(b, cache, &d_x)?; //    x_{l+1} = block_l(x_l)
            d_x = std::mem::replace(&mut g.d_x, DMatrix::zeros(0, 0));
            store_block_grads(&mut grads, l, g);
        }
        // x₀ = W_E[u] + W_P[t]: scatter ∂x₀ back to the rows that were looked up (W_P's
        // gradient is dropped when the positions are fixed).
        let mut d_wpe = DMatrix::zeros(self.config.context, self.config.width);
        let d_wte = grads.of_mut(Param::Wte, 0);
        scatter_embedding_gradient(&d_x, &batch.inputs, batch.seq_len, d_wte, Some(&mut d_wpe));
        if self.lm_head().is_none() {
            *d_wte += &d_wu; // tied: W_E is used twice, so its gradient is the sum of both uses
        }
        for (param, g) in [(Param::Wpe, d_wpe), (Param::LmHead, d_wu)] {
            if let Some(slot) = grads.get_mut(param, None) {
                *slot = g;
            }
        }
        *grads.of_mut(Param::LnFGamma, 0) = ln_f.d_gamma;
        *grads.of_mut(Param::LnFBeta, 0) = ln_f.d_beta;
        Ok(LossAndGrads { loss: loss.as_f64(), grads, d_x0: d_x })
    }
}

/// The backward of the lookup x₀ = W_E\[u\] + W_P\[t\]: adds row r of ∂L/∂x₀ (`d_x0`, (B·T)×d)
/// into row u_r of `d_wte` (V×d) and, when given, into row r mod T of `d_wpe` (n_ctx×d). Column
/// by column, the order the matrices are stored in.
pub(crate) fn scatter_embedding_gradient<T: Float>(
    d_x0: &DMatrix<T>,
    inputs: &[Token],
    seq_len: usize,
    d_wte: &mut DMatrix<T>,
    mut d_wpe: Option<&mut DMatrix<T>>,
) {
    let n = d_x0.nrows();
    let (vocab, ctx) = (d_wte.nrows(), d_wpe.as_ref().map_or(0, |w| w.nrows()));
    for (c, column) in d_x0.as_slice().chunks_exact(n).enumerate() {
        for (r, (&u, &dx)) in inputs.iter().zip(column).enumerate() {
            d_wte.as_mut_slice()[c * vocab + u as usize] += dx;
            if let Some(w) = d_wpe.as_deref_mut() {
                w.as_mut_slice()[c * ctx + r % seq_len] += dx;
            }
        }
    }
}

/// The rows with a target and the targets, as chapter 2's cross-entropy takes them.
pub(crate) fn scored(batch: &Batch) -> Result<(Vec<usize>, Vec<usize>)> {
    let mut rows = Vec::new();
    let mut targets = Vec::new();
    for (r, t) in batch.targets.iter().enumerate() {
        if let Some(t) = t {
            rows.push(r);
            targets.push(*t as usize);
        }
    }
    if rows.is_empty() {
        return Err(Error::Empty { op: "Gpt::loss", arg: "targets (no position is scored)" });
    }
    Ok((rows, targets))
}

pub(crate) fn gather_rows<T: Float>(m: &DMatrix<T>, rows: &[usize]) -> DMatrix<T> {
    if rows.len() == m.nrows() && rows.iter().enumerate().all(|(i, &r)| i == r) {
        return m.clone();
    }
    DMatrix::from_fn(rows.len(), m.ncols(), |i, c| m[(rows[i], c)])
}

pub(crate) fn scatter_rows<T: Float>(dst: &mut DMatrix<T>, src: &DMatrix<T>, rows: &[usize]) {
    for c in 0..src.ncols() {
        for (i, &r) in rows.iter().enumerate() {
            dst[(r, c)] += src[(i, c)];
        }
    }
}
