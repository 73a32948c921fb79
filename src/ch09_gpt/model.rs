//! The GPT: embeddings, a stack of chapter 6's pre-LN blocks, a final LayerNorm, the unembedding,
//! and the next-token loss; forward and backward.
//!
//! Data flow for B sequences of T tokens (N = B·T rows, d = width, V = vocabulary):
//!
//! ```text
//! x₀ = W_E[u] + W_P[t]                          N×d   token row of W_E plus position row
//! x_{l+1} = block_l(x_l)                        N×d   h = x + MHA(LN₁(x)), x' = h + MLP(LN₂(h))
//! h_f = LN_f(x_L)                               N×d
//! z = h_f W_Uᵀ  (W_U = W_E when tied)           S×V   only the S rows that have a target
//! L = −(1/S) Σ ln softmax(z_s)[target_s]               mean next-token log-loss
//! ```
//!
//! and back, each line differentiating the one above it:
//!
//! ```text
//! ∂L/∂z = (softmax(z) − onehot)/S                      chapter 2
//! ∂L/∂h_f[scored rows] = ∂L/∂z · W_U,   ∂L/∂W_U = (∂L/∂z)ᵀ h_f
//! ∂L/∂x_L = LN_f backward;  ∂L/∂x_l = block_l backward (chapter 6)
//! ∂L/∂W_E[v] += Σ_{rows with token v} ∂L/∂x₀,   ∂L/∂W_P[t] = Σ_b ∂L/∂x₀[b, t]
//! tied: ∂L/∂W_E = (embedding use) + (unembedding use)
//! ```

use super::config::{Config, Positions};
use super::data::{Batch, Token, check_ids};
use crate::ch03_mlp::{Activation, activation_forward};
use crate::ch06_attention::{
    AttnSpec, Block, BlockCache, BlockGrads, Ffn, LayerNorm, LnCache, MultiHead, NormOrder,
    block_backward, block_forward, layer_norm_backward, layer_norm_forward,
};
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::Float;
use crate::matmul::{matmul, matmul_nt, matmul_tn};
use crate::rng::Rng;
use nalgebra::DMatrix;

/// The standard deviation of GPT-2's initial weights.
pub const INIT_STD: f64 = 0.02;

/// Tensors per block, in [`Gpt::tensors`] order.
pub const TENSORS_PER_BLOCK: usize = 16;

/// The name of tensor `i` of block `l` (our names: GPT-2's, except that the fused `c_attn` is
/// held as three matrices q, k, v).
pub fn block_tensor_name(l: usize, i: usize) -> String {
    const NAMES: [&str; TENSORS_PER_BLOCK] = [
        "ln_1.weight",
        "ln_1.bias",
        "attn.q.weight",
        "attn.q.bias",
        "attn.k.weight",
        "attn.k.bias",
        "attn.v.weight",
        "attn.v.bias",
        "attn.c_proj.weight",
        "attn.c_proj.bias",
        "ln_2.weight",
        "ln_2.bias",
        "mlp.c_fc.weight",
        "mlp.c_fc.bias",
        "mlp.c_proj.weight",
        "mlp.c_proj.bias",
    ];
    format!("h.{l}.{}", NAMES[i])
}

/// Whether tensor `i` of a block is a weight matrix (decayed by AdamW) rather than a bias or a
/// LayerNorm parameter.
fn block_tensor_decays(i: usize) -> bool {
    matches!(i, 2 | 4 | 6 | 8 | 12 | 14)
}

fn block_refs<T: Float>(b: &Block<T>) -> [&DMatrix<T>; TENSORS_PER_BLOCK] {
    let (a, f) = (&b.attn, &b.ffn);
    [
        &b.ln1.gamma,
        &b.ln1.beta,
        &a.w_q,
        &a.b_q,
        &a.w_k,
        &a.b_k,
        &a.w_v,
        &a.b_v,
        &a.w_o,
        &a.b_o,
        &b.ln2.gamma,
        &b.ln2.beta,
        &f.w1,
        &f.b1,
        &f.w2,
        &f.b2,
    ]
}

fn block_muts<T: Float>(b: &mut Block<T>) -> [&mut DMatrix<T>; TENSORS_PER_BLOCK] {
    let (a, f) = (&mut b.attn, &mut b.ffn);
    [
        &mut b.ln1.gamma,
        &mut b.ln1.beta,
        &mut a.w_q,
        &mut a.b_q,
        &mut a.w_k,
        &mut a.b_k,
        &mut a.w_v,
        &mut a.b_v,
        &mut a.w_o,
        &mut a.b_o,
        &mut b.ln2.gamma,
        &mut b.ln2.beta,
        &mut f.w1,
        &mut f.b1,
        &mut f.w2,
        &mut f.b2,
    ]
}

fn block_grads_owned<T: Float>(g: BlockGrads<T>) -> [DMatrix<T>; TENSORS_PER_BLOCK] {
    let (a, f) = (g.attn, g.ffn);
    [
        g.ln1.d_gamma,
        g.ln1.d_beta,
        a.d_w_q,
        a.d_b_q,
        a.d_w_k,
        a.d_b_k,
        a.d_w_v,
        a.d_b_v,
        a.d_w_o,
        a.d_b_o,
        g.ln2.d_gamma,
        g.ln2.d_beta,
        f.d_w1,
        f.d_b1,
        f.d_w2,
        f.d_b2,
    ]
}

/// A GPT-2-style model.
#[derive(Clone, Debug, PartialEq)]
pub struct Gpt<T: Float> {
    /// The shape.
    pub config: Config,
    /// The token embedding W_E, V×d (row v is token v's vector).
    pub wte: DMatrix<T>,
    /// The position table W_P, n_ctx×d: learned, or chapter 5's fixed sinusoids (then not a
    /// parameter).
    pub wpe: DMatrix<T>,
    /// The blocks: chapter 6's pre-LN block with GELU (tanh form) and a 4d hidden layer.
    pub blocks: Vec<Block<T>>,
    /// The final LayerNorm.
    pub ln_f: LayerNorm<T>,
    /// The unembedding W_U (V×d) when untied; `None` means W_U = W_E.
    pub lm_head: Option<DMatrix<T>>,
}

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
    pub grads: Vec<DMatrix<T>>,
    /// ∂L/∂x₀, the gradient with respect to the input embeddings (N×d).
    pub d_x0: DMatrix<T>,
}

impl<T: Float> Gpt<T> {
    /// A freshly initialised model, as GPT-2 initialises: every weight matrix N(0, 0.02²), the
    /// two residual projections (attention and MLP `c_proj`) N(0, (0.02/√(2l))²) so the residual
    /// stream's variance does not grow with depth, biases 0, LayerNorm γ = 1, β = 0.
    pub fn new(config: Config, seed: u64) -> Result<Gpt<T>> {
        config.validate()?;
        let mut rng = Rng::new(seed);
        let d = config.width;
        let proj_std = INIT_STD / (2.0 * config.layers as f64).sqrt();
        let wte = rng.normal_matrix(config.vocab_size, d, INIT_STD);
        let wpe = match config.positions {
            Positions::Learned => rng.normal_matrix(config.context, d, INIT_STD),
            Positions::Sinusoidal => crate::ch05_positions::sinusoidal(config.context, d)?,
        };
        let mut blocks = Vec::with_capacity(config.layers);
        for _ in 0..config.layers {
            let z = |n: usize| DMatrix::zeros(1, n);
            let attn = MultiHead {
                heads: config.heads,
                w_q: rng.normal_matrix(d, d, INIT_STD),
                b_q: z(d),
                w_k: rng.normal_matrix(d, d, INIT_STD),
                b_k: z(d),
                w_v: rng.normal_matrix(d, d, INIT_STD),
                b_v: z(d),
                w_o: rng.normal_matrix(d, d, proj_std),
                b_o: z(d),
            };
            let ffn = Ffn {
                w1: rng.normal_matrix(d, config.hidden(), INIT_STD),
                b1: z(config.hidden()),
                w2: rng.normal_matrix(config.hidden(), d, proj_std),
                b2: z(d),
                act: Activation::GeluTanh,
            };
            let ln1 = LayerNorm::new(d, config.layer_norm_epsilon)?;
            let ln2 = LayerNorm::new(d, config.layer_norm_epsilon)?;
            blocks.push(Block { attn, ln1, ffn, ln2, order: NormOrder::Pre });
        }
        let lm_head = if config.tied {
            None
        } else {
            Some(rng.normal_matrix(config.vocab_size, d, INIT_STD))
        };
        Ok(Gpt {
            config,
            wte,
            wpe,
            blocks,
            ln_f: LayerNorm::new(d, config.layer_norm_epsilon)?,
            lm_head,
        })
    }

    /// The unembedding W_U (V×d): `lm_head` or, tied, `wte`.
    pub fn unembedding(&self) -> &DMatrix<T> {
        self.lm_head.as_ref().unwrap_or(&self.wte)
    }

    /// Every parameter tensor with its name, in a fixed order: `wte`, `wpe` (if learned), each
    /// block's 16 tensors ([`block_tensor_name`]), `ln_f.weight`, `ln_f.bias`, `lm_head.weight`
    /// (if untied).
    pub fn tensors(&self) -> Vec<(String, &DMatrix<T>)> {
        let mut out = vec![("wte.weight".to_string(), &self.wte)];
        if self.config.positions == Positions::Learned {
            out.push(("wpe.weight".to_string(), &self.wpe));
        }
        for (l, b) in self.blocks.iter().enumerate() {
            out.extend(
                block_refs(b).into_iter().enumerate().map(|(i, m)| (block_tensor_name(l, i), m)),
            );
        }
        out.push(("ln_f.weight".to_string(), &self.ln_f.gamma));
        out.push(("ln_f.bias".to_string(), &self.ln_f.beta));
        if let Some(h) = &self.lm_head {
            out.push(("lm_head.weight".to_string(), h));
        }
        out
    }

    /// The same tensors, mutable, in the same order.
    pub fn tensors_mut(&mut self) -> Vec<&mut DMatrix<T>> {
        let mut out = vec![&mut self.wte];
        if self.config.positions == Positions::Learned {
            out.push(&mut self.wpe);
        }
        for b in self.blocks.iter_mut() {
            out.extend(block_muts(b));
        }
        out.push(&mut self.ln_f.gamma);
        out.push(&mut self.ln_f.beta);
        if let Some(h) = self.lm_head.as_mut() {
            out.push(h);
        }
        out
    }

    /// Which tensors AdamW decays: the embeddings and the weight matrices, not the biases and
    /// LayerNorm parameters.
    pub fn decay_mask(&self) -> Vec<bool> {
        let mut out = vec![true];
        if self.config.positions == Positions::Learned {
            out.push(true);
        }
        for _ in &self.blocks {
            out.extend((0..TENSORS_PER_BLOCK).map(block_tensor_decays));
        }
        out.extend([false, false]);
        if self.lm_head.is_some() {
            out.push(true);
        }
        out
    }

    /// The number of parameters (equals [`Config::parameter_count`] by construction; a test
    /// checks it).
    pub fn parameter_count(&self) -> usize {
        self.tensors().iter().map(|(_, m)| m.len()).sum()
    }

    /// Replaces every parameter tensor, in [`Gpt::tensors`] order; shapes must match.
    pub fn set_tensors(&mut self, values: &[DMatrix<T>]) -> Result<()> {
        let names: Vec<String> = self.tensors().into_iter().map(|(n, _)| n).collect();
        if values.len() != names.len() {
            return Err(invalid(
                "Gpt::set_tensors",
                "values",
                format!("{} tensors given, the model has {}", values.len(), names.len()),
            ));
        }
        for ((slot, v), name) in self.tensors_mut().into_iter().zip(values).zip(&names) {
            if slot.shape() != v.shape() {
                return Err(shape_error(
                    "Gpt::set_tensors",
                    "a tensor",
                    format!("{name} {}", shape_of(slot)),
                    shape_of(v),
                ));
            }
            slot.copy_from(v);
        }
        Ok(())
    }

    /// The model in another float type (f64 for checks, f32 for speed).
    pub fn cast<U: Float>(&self) -> Gpt<U> {
        let c = |m: &DMatrix<T>| crate::float::cast::<T, U>(m);
        let ln = |l: &LayerNorm<T>| LayerNorm {
            gamma: c(&l.gamma),
            beta: c(&l.beta),
            eps: l.eps,
            placement: l.placement,
        };
        Gpt {
            config: self.config,
            wte: c(&self.wte),
            wpe: c(&self.wpe),
            blocks: self
                .blocks
                .iter()
                .map(|b| Block {
                    attn: MultiHead {
                        heads: b.attn.heads,
                        w_q: c(&b.attn.w_q),
                        b_q: c(&b.attn.b_q),
                        w_k: c(&b.attn.w_k),
                        b_k: c(&b.attn.b_k),
                        w_v: c(&b.attn.w_v),
                        b_v: c(&b.attn.b_v),
                        w_o: c(&b.attn.w_o),
                        b_o: c(&b.attn.b_o),
                    },
                    ln1: ln(&b.ln1),
                    ffn: Ffn {
                        w1: c(&b.ffn.w1),
                        b1: c(&b.ffn.b1),
                        w2: c(&b.ffn.w2),
                        b2: c(&b.ffn.b2),
                        act: b.ffn.act,
                    },
                    ln2: ln(&b.ln2),
                    order: b.order,
                })
                .collect(),
            ln_f: ln(&self.ln_f),
            lm_head: self.lm_head.as_ref().map(c),
        }
    }

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
        let (wte, wpe) = (self.wte.as_slice(), self.wpe.as_slice());
        // Column by column, the order x is stored in: channel c of row r.
        for (c, column) in x.as_mut_slice().chunks_exact_mut(n).enumerate() {
            for (r, (out, &u)) in column.iter_mut().zip(inputs).enumerate() {
                *out = wte[c * vocab + u as usize] + wpe[c * ctx + r % seq_len];
            }
        }
    }

    /// The blocks and the final LayerNorm on input embeddings x₀ ((B·T)×d): h_f and the cache.
    pub fn forward_embeddings(&self, x0: &DMatrix<T>, seq_len: usize) -> Result<Hidden<T>> {
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
        let mut caches = Vec::with_capacity(self.blocks.len());
        for b in &self.blocks {
            let (y, cache) = block_forward(b, &x, &spec)?; // x_{l+1} = block_l(x_l)
            x = y;
            caches.push(cache);
        }
        let (h, ln_f) = layer_norm_forward(&self.ln_f, &x)?; // h_f = LN_f(x_L)
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
        let (hidden, caches, ln_f_cache) = self.forward_embeddings(x0, batch.seq_len)?;
        let (rows, targets) = scored(batch)?;
        let h_s = gather_rows(&hidden, &rows);
        let z = self.logits_of(&h_s)?; //                                          z = h_s W_Uᵀ
        let (loss, d_z) =
            crate::ch02_softmax::cross_entropy_from_logits_with_gradient(&z, &targets)?; // L = CE(z)
        let d_hs = matmul(&d_z, self.unembedding())?; //                           z = h_s W_Uᵀ ⇒ ∂h_s = ∂z W_U
        let d_wu = matmul_tn(&d_z, &h_s)?; //                                      z = h_s W_Uᵀ ⇒ ∂W_U = ∂zᵀ h_s
        let mut d_h = DMatrix::zeros(hidden.nrows(), hidden.ncols()); //          h_s = rows of h_f
        scatter_rows(&mut d_h, &d_hs, &rows);
        let ln_f = layer_norm_backward(&self.ln_f, &ln_f_cache, &d_h)?; //         h_f = LN_f(x_L)
        let mut d_x = ln_f.d_x;
        let mut block_grads = Vec::with_capacity(self.blocks.len());
        for (b, cache) in self.blocks.iter().zip(&caches).rev() {
            let mut g = block_backward(b, cache, &d_x)?; //                        x_{l+1} = block_l(x_l)
            d_x = std::mem::replace(&mut g.d_x, DMatrix::zeros(0, 0));
            block_grads.push(g);
        }
        block_grads.reverse();
        // x₀ = W_E[u] + W_P[t]: scatter ∂x₀ back to the rows that were looked up.
        let d = self.config.width;
        let mut d_wte = DMatrix::zeros(self.config.vocab_size, d);
        let mut d_wpe = DMatrix::zeros(self.config.context, d);
        scatter_embedding_gradient(
            &d_x,
            &batch.inputs,
            batch.seq_len,
            &mut d_wte,
            Some(&mut d_wpe),
        );
        if self.lm_head.is_none() {
            d_wte += &d_wu; // tied: W_E is used twice, so its gradient is the sum of both uses
        }
        let mut grads = vec![d_wte];
        if self.config.positions == Positions::Learned {
            grads.push(d_wpe);
        }
        for g in block_grads {
            grads.extend(block_grads_owned(g));
        }
        grads.push(ln_f.d_gamma);
        grads.push(ln_f.d_beta);
        if self.lm_head.is_some() {
            grads.push(d_wu);
        }
        Ok(LossAndGrads { loss: loss.as_f64(), grads, d_x0: d_x })
    }

    // ───────────────────────────── one token at a time, with a cache ─────────────────────────────

    /// An empty key/value cache for [`Gpt::step`].
    pub fn new_kv_cache(&self) -> KvCache<T> {
        let d = self.config.width;
        KvCache {
            keys: vec![DMatrix::zeros(self.config.context, d); self.blocks.len()],
            values: vec![DMatrix::zeros(self.config.context, d); self.blocks.len()],
            len: 0,
        }
    }

    /// Feeds one token at the next position of the cache and returns its logits (length V).
    ///
    /// Each block computes the new token's query, key and value; the key and value join the
    /// cache; the query attends over every cached position (all earlier, so no mask is needed);
    /// the rest of the block acts on the one row. The result equals the last row of the full
    /// forward pass over the cached tokens (a test checks it to 10⁻⁹ in f64). Errors when the
    /// cache is full (the caller slides the window, see [`super::sample::generate`]).
    ///
    /// One row at a time, every product is a row times a matrix, and the work is reading each
    /// weight once (O(parameters + T·d) per token). So this path does not go through the blocked
    /// product, which would first copy each weight matrix into packed panels: [`row_affine`]
    /// takes each output as a dot product with a column of the weight, which column-major
    /// storage keeps contiguous, and [`attend_one`] reads the cached keys and values the same
    /// way. LayerNorm, GELU and the softmax are chapter 6's, 3's and 2's own functions.
    pub fn step(&self, cache: &mut KvCache<T>, token: Token) -> Result<Vec<T>> {
        const OP: &str = "Gpt::step";
        check_ids(OP, "token", &[token], self.config.vocab_size)?;
        if cache.len >= self.config.context {
            return Err(invalid(
                OP,
                "cache",
                format!(
                    "holds {} tokens, the whole context; slide the window and rebuild it",
                    cache.len
                ),
            ));
        }
        let (d, n_ctx) = (self.config.width, self.config.context);
        if cache.keys.len() != self.blocks.len()
            || cache.values.len() != self.blocks.len()
            || cache.keys.iter().chain(&cache.values).any(|m| m.shape() != (n_ctx, d))
        {
            return Err(invalid(
                OP,
                "cache",
                format!(
                    "was made for another model (expected {} blocks of {n_ctx}×{d} keys and values)",
                    self.blocks.len()
                ),
            ));
        }
        let pos = cache.len;
        let n = pos + 1;
        let mut x =
            DMatrix::from_fn(1, d, |_, c| self.wte[(token as usize, c)] + self.wpe[(pos, c)]);
        for (l, b) in self.blocks.iter().enumerate() {
            let (n1, _) = layer_norm_forward(&b.ln1, &x)?; //                         n₁ = LN₁(x)
            let q = row_affine(OP, n1.as_slice(), &b.attn.w_q, &b.attn.b_q)?; //       q = n₁W_Q + b_Q
            let k = row_affine(OP, n1.as_slice(), &b.attn.w_k, &b.attn.b_k)?; //       k = n₁W_K + b_K
            let v = row_affine(OP, n1.as_slice(), &b.attn.w_v, &b.attn.b_v)?; //       v = n₁W_V + b_V
            if k.len() != d || v.len() != d {
                return Err(shape_error(
                    OP,
                    "w_k and w_v (columns: the cache's width)",
                    format!("{d}"),
                    format!("{} and {}", k.len(), v.len()),
                ));
            }
            for c in 0..d {
                cache.keys[l][(pos, c)] = k[c];
                cache.values[l][(pos, c)] = v[c];
            }
            let heads = attend_one(OP, &q, &cache.keys[l], &cache.values[l], n, b.attn.heads)?; // every head over positions 0 … pos
            let a = row_affine(OP, &heads, &b.attn.w_o, &b.attn.b_o)?; //               a = concat · W_O + b_O
            if a.len() != d {
                return Err(shape_error(
                    OP,
                    "w_o (columns)",
                    format!("{d}"),
                    format!("{}", a.len()),
                ));
            }
            let h = x + DMatrix::from_vec(1, d, a); //                                   h = x + a
            let (n2, _) = layer_norm_forward(&b.ln2, &h)?; //                          n₂ = LN₂(h)
            let z1 = row_affine(OP, n2.as_slice(), &b.ffn.w1, &b.ffn.b1)?; //           z₁ = n₂W₁ + b₁
            let a1 = activation_forward(b.ffn.act, &DMatrix::from_vec(1, z1.len(), z1)); // a₁ = GELU(z₁)
            let f = row_affine(OP, a1.as_slice(), &b.ffn.w2, &b.ffn.b2)?; //            f = a₁W₂ + b₂
            if f.len() != d {
                return Err(shape_error(
                    OP,
                    "w2 (columns)",
                    format!("{d}"),
                    format!("{}", f.len()),
                ));
            }
            x = h + DMatrix::from_vec(1, d, f); //                                      x' = h + f
        }
        cache.len = n;
        let (h, _) = layer_norm_forward(&self.ln_f, &x)?;
        let logits: Vec<T> = self.logits_of(&h)?.iter().copied().collect();
        crate::float::ensure_finite_slice(OP, "logits (a weight holds NaN or ∞)", &logits)?;
        Ok(logits)
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

/// y = x·W + b for one row x (length `in`), W in×out, b 1×out: y_j = b_j + x · W\[:, j\], each a
/// dot product with one column of W (contiguous in column-major storage). Errors on shapes that
/// do not chain.
pub fn row_affine<T: Float>(
    op: &'static str,
    x: &[T],
    w: &DMatrix<T>,
    b: &DMatrix<T>,
) -> Result<Vec<T>> {
    if x.len() != w.nrows() {
        return Err(shape_error(
            op,
            "x and W (x's length must equal W's rows)",
            format!("x of length {}", w.nrows()),
            format!("{}, W {}", x.len(), shape_of(w)),
        ));
    }
    if b.nrows() != 1 || b.ncols() != w.ncols() {
        return Err(shape_error(
            op,
            "b",
            format!("1×{} (one bias per output)", w.ncols()),
            shape_of(b),
        ));
    }
    if w.nrows() == 0 {
        return Ok(b.iter().copied().collect());
    }
    Ok(w.as_slice()
        .chunks_exact(w.nrows())
        .zip(b.iter())
        .map(|(column, &bias)| bias + dot(x, column))
        .collect())
}

/// Lanes of independent partial sums in [`dot`]: enough for the compiler to keep a vector
/// register's worth of multiply-adds in flight (the order of the additions is then fixed by this
/// number, not by the hardware, so results are reproducible).
pub const DOT_LANES: usize = 16;

/// Σᵢ aᵢbᵢ over equal-length slices, summed in [`DOT_LANES`] interleaved partial sums.
pub fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    let mut lanes = [T::zero(); DOT_LANES];
    let (ca, cb) = (a.chunks_exact(DOT_LANES), b.chunks_exact(DOT_LANES));
    let tail: T = ca.remainder().iter().zip(cb.remainder()).map(|(&x, &y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..DOT_LANES {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().copied().sum::<T>() + tail
}

/// Causal attention of one new query row q (all heads side by side, length H·d_k) over the first
/// `n` rows of the cached keys and values (n_ctx×(H·d_k) each, column-major): for each head h,
/// s_p = q_h · K_h\[p\] / √d_k for p < n, a = softmax(s) (chapter 2, one row per head), and
/// o_h = Σ_p a_p V_h\[p\]. Returns the heads' outputs side by side. A column of the cache holds one
/// channel of every position, contiguous, so scores are built channel by channel (s += q_c K[:, c])
/// and outputs are dot products of a with a column of V.
pub fn attend_one<T: Float>(
    op: &'static str,
    q: &[T],
    keys: &DMatrix<T>,
    values: &DMatrix<T>,
    n: usize,
    heads: usize,
) -> Result<Vec<T>> {
    let width = keys.ncols();
    if heads == 0 || q.len() != width || values.ncols() != width || !width.is_multiple_of(heads) {
        return Err(shape_error(
            op,
            "q and the cache (width H·d_k)",
            format!("{width}, divisible by {heads} heads"),
            format!("q of length {}", q.len()),
        ));
    }
    if n == 0 || n > keys.nrows() || values.nrows() != keys.nrows() {
        return Err(invalid(
            op,
            "n",
            format!("{n} positions; the cache holds {} rows", keys.nrows()),
        ));
    }
    let d_k = width / heads;
    let scale = T::of(1.0 / (d_k as f64).sqrt());
    let rows = keys.nrows();
    let mut scores = DMatrix::zeros(heads, n);
    for h in 0..heads {
        let mut s = vec![T::zero(); n];
        let head = h * d_k..(h + 1) * d_k;
        for (&qc, key_column) in
            q[head.clone()].iter().zip(keys.as_slice().chunks_exact(rows).skip(head.start))
        {
            for (sp, &kp) in s.iter_mut().zip(&key_column[..n]) {
                *sp += qc * kp;
            }
        }
        for (p, sp) in s.into_iter().enumerate() {
            scores[(h, p)] = sp * scale;
        }
    }
    let weights = crate::ch02_softmax::softmax_rows_forward(&scores)?; // one distribution per head
    let mut out = vec![T::zero(); width];
    for h in 0..heads {
        let a: Vec<T> = weights.row(h).iter().copied().collect();
        let head = h * d_k..(h + 1) * d_k;
        for (o, value_column) in
            out[head.clone()].iter_mut().zip(values.as_slice().chunks_exact(rows).skip(head.start))
        {
            *o = dot(&a, &value_column[..n]);
        }
    }
    Ok(out)
}

/// The keys and values of every block for the tokens fed so far (rows 0 … len − 1 in use).
#[derive(Clone, Debug)]
pub struct KvCache<T: Float> {
    /// One n_ctx×d matrix of keys per block.
    pub keys: Vec<DMatrix<T>>,
    /// One n_ctx×d matrix of values per block.
    pub values: Vec<DMatrix<T>>,
    /// Tokens cached.
    pub len: usize,
}

/// The rows with a target and the targets, as chapter 2's cross-entropy takes them.
fn scored(batch: &Batch) -> Result<(Vec<usize>, Vec<usize>)> {
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

fn gather_rows<T: Float>(m: &DMatrix<T>, rows: &[usize]) -> DMatrix<T> {
    if rows.len() == m.nrows() && rows.iter().enumerate().all(|(i, &r)| i == r) {
        return m.clone();
    }
    DMatrix::from_fn(rows.len(), m.ncols(), |i, c| m[(rows[i], c)])
}

fn scatter_rows<T: Float>(dst: &mut DMatrix<T>, src: &DMatrix<T>, rows: &[usize]) {
    for c in 0..src.ncols() {
        for (i, &r) in rows.iter().enumerate() {
            dst[(r, c)] += src[(i, c)];
        }
    }
}
