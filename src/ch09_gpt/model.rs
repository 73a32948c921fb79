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
mod table;

pub(crate) use pass::scatter_embedding_gradient;
pub use pass::{Cache, Hidden, LossAndGrads};
pub use step::{DOT_LANES, KvCache, attend_one, dot, row_affine};
pub use table::{
    Dim, Gpt2, Gpt2Tensor, Init, PARAMETERS, Param, Part, Presence, Shape, Slots, Spec,
    TENSORS_PER_BLOCK, block_tensor_name, full_name, gpt2_layout, spec_of,
};

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
    /// A freshly initialised model, as GPT-2 initialises, tensor by tensor in the order and by
    /// the rule of the parameter table ([`PARAMETERS`]): every weight matrix N(0, 0.02²), the
    /// two residual projections (attention and MLP `c_proj`) N(0, (0.02/√(2l))²) so the residual
    /// stream's variance does not grow with depth, biases 0, LayerNorm γ = 1, β = 0.
    pub fn new(config: Config, seed: u64) -> Result<Gpt<T>> {
        config.validate()?;
        let mut rng = Rng::new(seed);
        let d = config.width;
        let proj_std = INIT_STD / (2.0 * config.layers as f64).sqrt();
        let e = || DMatrix::zeros(0, 0);
        let ln = || LayerNorm::new(d, config.layer_norm_epsilon);
        let mut blocks = Vec::with_capacity(config.layers);
        for _ in 0..config.layers {
            let (ln1, ln2) = (ln()?, ln()?);
            blocks.push(unfilled_block(
                config.heads,
                Activation::GeluTanh,
                ln1,
                ln2,
                NormOrder::Pre,
            ));
        }
        let wpe = match config.positions {
            Positions::Learned => e(), // a parameter: drawn below, in the table's order
            Positions::Sinusoidal => crate::ch05_positions::sinusoidal(config.context, d)?,
        };
        let lm_head = (!config.tied).then(e);
        let mut model = Gpt { config, wte: e(), wpe, blocks, ln_f: ln()?, lm_head };
        let order = model.shape().order();
        for ((s, _), slot) in order.into_iter().zip(model.tensors_mut()) {
            let (r, c) = (s.rows.of(&config), s.cols.of(&config));
            *slot = match s.init {
                Init::Normal => rng.normal_matrix(r, c, INIT_STD),
                Init::Residual => rng.normal_matrix(r, c, proj_std),
                Init::Zeros => DMatrix::zeros(r, c),
                Init::Ones => DMatrix::from_element(r, c, T::one()),
            };
        }
        Ok(model)
    }

    /// The unembedding W_U (V×d): `lm_head` or, tied, `wte`.
    pub fn unembedding(&self) -> &DMatrix<T> {
        self.lm_head.as_ref().unwrap_or(&self.wte)
    }
}

/// A block whose weight matrices and biases are all 0×0, for the parameter table to fill
/// ([`Gpt::new`] draws them, [`Gpt::cast`] converts them).
fn unfilled_block<T: Float>(
    heads: usize,
    act: Activation,
    ln1: LayerNorm<T>,
    ln2: LayerNorm<T>,
    order: NormOrder,
) -> Block<T> {
    let e = || DMatrix::zeros(0, 0);
    let attn = MultiHead {
        heads,
        w_q: e(),
        b_q: e(),
        w_k: e(),
        b_k: e(),
        w_v: e(),
        b_v: e(),
        w_o: e(),
        b_o: e(),
    };
    let ffn = Ffn { w1: e(), b1: e(), w2: e(), b2: e(), act };
    Block { attn, ln1, ffn, ln2, order }
}
