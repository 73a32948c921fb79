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
//!
//! The lesson in three files: the parameters ([`Gpt::new`]'s initialisation, every tensor by
//! name and in a fixed order), the forward and backward pass over whole sequences (`pass.rs`:
//! [`Gpt::forward`], [`Gpt::loss_and_grads`]), and one token at a time with a key/value cache
//! (`step.rs`: [`Gpt::step`]).

mod params;
mod pass;
mod step;

pub use params::{TENSORS_PER_BLOCK, block_tensor_name};
pub(crate) use pass::scatter_embedding_gradient;
pub use pass::{Cache, Hidden, LossAndGrads};
pub use step::{DOT_LANES, KvCache, attend_one, dot, row_affine};

use super::config::{Config, Positions};
use crate::ch03_mlp::Activation;
use crate::ch06_attention::{Block, Ffn, LayerNorm, MultiHead, NormOrder};
use crate::error::Result;
use crate::float::Float;
use crate::rng::Rng;
use nalgebra::DMatrix;

/// The standard deviation of GPT-2's initial weights.
pub const INIT_STD: f64 = 0.02;

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
}
