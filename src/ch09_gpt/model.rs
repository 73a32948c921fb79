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
//! The lesson in four files: the parameter table (`table.rs`, [`PARAMETERS`]), the store of the
//! tensors in GPT-2's layout (`params.rs`, [`Params`]; [`Gpt::new`]'s initialisation), the forward
//! and backward pass over whole sequences (`pass.rs`: [`Gpt::forward`], [`Gpt::loss_and_grads`])
//! and one token at a time with a key/value cache (`step.rs`: [`Gpt::reference_step`]), all with
//! chapter 6's functions. The fast paths ([`FusedStep`](super::fast::FusedStep), [`Gpt::step`])
//! are the engine's, in [`fast`](super::fast); this module uses none of it.

mod params;
mod pass;
mod step;
mod table;

pub use params::{Grads, Params};
pub use pass::{Cache, Hidden, LossAndGrads};
pub(crate) use pass::{gather_rows, scatter_embedding_gradient, scatter_rows, scored};
pub use step::KvCache;
pub use table::{
    Dim, Gpt2Tensor, Init, PARAMETERS, Param, Part, Presence, Shape, Spec, TENSORS_PER_BLOCK,
    block_tensor_name, full_name, gpt2_layout, parameters_saturating, spec_of,
};

use super::config::{Config, Positions};
use crate::ch03_mlp::Activation;
use crate::ch06_attention::{
    Block, BlockGrads, Epsilon, Ffn, LayerNorm, LnView, MultiHead, NormOrder,
};
use crate::error::Result;
use crate::float::Float;
use crate::rng::Rng;
use nalgebra::DMatrix;

/// The standard deviation of GPT-2's initial weights.
pub const INIT_STD: f64 = 0.02;

/// What a block is besides its parameters: chapter 6's choices, which GPT-2 fixes
/// ([`BlockForm::GPT2`])
/// and a model assembled by hand may vary (the reference pass covers every form; the fast path
/// and the cached step GPT-2's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockForm {
    /// Where the LayerNorms sit (GPT-2: before each branch).
    pub order: NormOrder,
    /// The MLP's non-linearity (GPT-2: GELU, tanh form).
    pub act: Activation,
    /// Where ε enters LN₁ and LN₂ (GPT-2: inside the square root).
    pub ln1: Epsilon,
    /// LN₂'s.
    pub ln2: Epsilon,
}

impl BlockForm {
    /// GPT-2's block: pre-LN, GELU (tanh form), ε inside the square root.
    pub const GPT2: BlockForm = BlockForm {
        order: NormOrder::Pre,
        act: Activation::GeluTanh,
        ln1: Epsilon::InsideSqrt,
        ln2: Epsilon::InsideSqrt,
    };
}

/// A GPT-2-style model: its parameters in one store, in GPT-2's layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Gpt<T: Float> {
    /// The shape.
    pub config: Config,
    /// Every parameter tensor, in the table's order ([`PARAMETERS`]).
    pub params: Params<T>,
    /// Chapter 5's fixed sinusoids (n_ctx×d) when the positions are not learned (then not a
    /// parameter); 0×0 when they are (W_P is in `params`).
    pub fixed_positions: DMatrix<T>,
    /// Each block's form.
    pub blocks: Vec<BlockForm>,
    /// Where ε enters the final LayerNorm.
    pub ln_f: Epsilon,
}

impl<T: Float> Gpt<T> {
    /// A freshly initialised model, as GPT-2 initialises, tensor by tensor in the order and by
    /// the rule of the parameter table ([`PARAMETERS`]): every weight matrix N(0, 0.02²), the
    /// two residual projections (attention and MLP `c_proj`) N(0, (0.02/√(2l))²) so the residual
    /// stream's variance does not grow with depth, biases 0, LayerNorm γ = 1, β = 0. W_QKV's
    /// three maps are drawn one after another, each as a d×d matrix of its own.
    pub fn new(config: Config, seed: u64) -> Result<Gpt<T>> {
        config.validate()?;
        let mut rng = Rng::new(seed);
        let proj_std = INIT_STD / (2.0 * config.layers as f64).sqrt();
        let fixed_positions = match config.positions {
            Positions::Learned => DMatrix::zeros(0, 0), // a parameter, drawn in the table's order
            Positions::Sinusoidal => {
                crate::ch05_positions::sinusoidal(config.context, config.width)?
            }
        };
        let params = Params::from_fn(&config, Shape::of_config(&config), |s, _, r, c| {
            let mut m = DMatrix::zeros(r, c);
            let cols = c / s.maps;
            for k in 0..s.maps {
                let map = match s.init {
                    Init::Normal => rng.normal_matrix(r, cols, INIT_STD),
                    Init::Residual => rng.normal_matrix(r, cols, proj_std),
                    Init::Zeros => DMatrix::zeros(r, cols),
                    Init::Ones => DMatrix::from_element(r, cols, T::one()),
                };
                m.columns_mut(k * cols, cols).copy_from(&map);
            }
            m
        });
        Gpt::with_params(config, params, fixed_positions)
    }

    /// The model of `config` with the tensors `params` (in the parameter table's order, for the
    /// config's [`Shape`]) and the fixed position table `fixed_positions` (n_ctx×d sinusoids, or
    /// 0×0 when the positions are learned), in GPT-2's form. The tensors' shapes are not checked
    /// here: a loader that keeps some matrices in another storage puts 0×0 in their place (what
    /// reads them checks them). Errors on a store of another shape than the config's.
    pub fn with_params(
        config: Config,
        params: Params<T>,
        fixed_positions: DMatrix<T>,
    ) -> Result<Gpt<T>> {
        if params.shape() != Shape::of_config(&config) || params.len() != params.shape().len() {
            return Err(crate::error::invalid(
                "Gpt::with_params",
                "params",
                "its tensors are not the ones the config's parameter table lists",
            ));
        }
        let blocks = vec![BlockForm::GPT2; config.layers];
        Ok(Gpt { config, params, fixed_positions, blocks, ln_f: Epsilon::InsideSqrt })
    }

    /// The token embedding W_E (V×d, row v is token v's vector).
    pub fn wte(&self) -> &DMatrix<T> {
        self.params.of(Param::Wte, 0)
    }

    /// The position table W_P (n_ctx×d): learned, or chapter 5's fixed sinusoids.
    pub fn wpe(&self) -> &DMatrix<T> {
        self.params.get(Param::Wpe, None).unwrap_or(&self.fixed_positions)
    }

    /// W_U when it is a tensor of its own (untied), else `None`.
    pub fn lm_head(&self) -> Option<&DMatrix<T>> {
        self.params.get(Param::LmHead, None)
    }

    /// The unembedding W_U (V×d): `lm_head` or, tied, `wte`.
    pub fn unembedding(&self) -> &DMatrix<T> {
        self.lm_head().unwrap_or(self.wte())
    }

    /// The LayerNorm of γ `gamma` and β `beta` (of block `layer`), ε placed as `placement`, read
    /// where the store holds them.
    pub fn ln(
        &self,
        (gamma, beta): (Param, Param),
        layer: usize,
        placement: Epsilon,
    ) -> LnView<'_, T> {
        LnView {
            gamma: self.params.of(gamma, layer),
            beta: self.params.of(beta, layer),
            eps: self.config.layer_norm_epsilon,
            placement,
        }
    }

    /// LN₁ of block `l`.
    pub fn ln1(&self, l: usize) -> LnView<'_, T> {
        self.ln((Param::Ln1Gamma, Param::Ln1Beta), l, self.form(l).ln1)
    }

    /// LN₂ of block `l`.
    pub fn ln2(&self, l: usize) -> LnView<'_, T> {
        self.ln((Param::Ln2Gamma, Param::Ln2Beta), l, self.form(l).ln2)
    }

    /// The final LayerNorm.
    pub fn ln_f(&self) -> LnView<'_, T> {
        self.ln((Param::LnFGamma, Param::LnFBeta), 0, self.ln_f)
    }

    /// Block `l`'s form (GPT-2's past the last block).
    pub fn form(&self, l: usize) -> BlockForm {
        self.blocks.get(l).copied().unwrap_or(BlockForm::GPT2)
    }

    /// Block `l` as chapter 6's [`Block`], for chapter 6's functions: the table's block rows
    /// walked, each tensor's maps copied out of the store into chapter 6's fields
    /// (`block_fields`; W_Q, W_K, W_V out of W_QKV's column blocks). The reference pass pays
    /// this copy, 12d² + 13d values a block per pass: about the work of one product of a single
    /// row with the block's weights, against the pass's 2·12d² per row. Measured on `gpt
    /// train`'s default model (3 blocks, d = 96, a batch of 16 × 64, f32, one thread) by
    /// `cargo bench --bench ch09_gpt -- --block-copy`: the three copies took 1.0 to 1.1 ms
    /// against 95 to 454 ms for one reference forward and backward, 1.1 % of the pass at most
    /// (fastest of 20 each, two runs, 2 cores at load average 4 to 8). The fast path copies
    /// nothing.
    pub fn block(&self, l: usize) -> Block<T> {
        let empty = || DMatrix::zeros(0, 0);
        let form = self.form(l);
        let (heads, [w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o]) =
            (self.config.heads, std::array::from_fn(|_| empty()));
        let attn = MultiHead { heads, w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o };
        let ffn = Ffn { w1: empty(), b1: empty(), w2: empty(), b2: empty(), act: form.act };
        let (ln1, ln2) = (self.ln1(l), self.ln2(l));
        let ln = |v: LnView<'_, T>| LayerNorm {
            gamma: empty(),
            beta: empty(),
            eps: v.eps,
            placement: v.placement,
        };
        let mut block = Block { attn, ln1: ln(ln1), ffn, ln2: ln(ln2), order: form.order };
        for spec in PARAMETERS.iter().filter(|s| s.part == Part::Block) {
            let Some(stored) = self.params.get(spec.param, Some(l)) else { continue };
            let width = stored.ncols() / spec.maps;
            for (k, field) in
                block_fields(BlockRefs::of_block(&mut block), spec.param).into_iter().enumerate()
            {
                *field = stored.columns(k * width, width).into_owned();
            }
        }
        block
    }
}

/// Chapter 6's LayerNorm holding copies of γ and β (for chapter 6's checked functions).
pub(crate) fn layer_norm_of<T: Float>(v: LnView<'_, T>) -> LayerNorm<T> {
    LayerNorm { gamma: v.gamma.clone(), beta: v.beta.clone(), eps: v.eps, placement: v.placement }
}

/// Writes chapter 6's gradients of block `l` into the gradients' store: the mirror of
/// [`Gpt::block`], the table's block rows walked (∂W_Q, ∂W_K, ∂W_V into ∂W_QKV's column blocks).
pub(crate) fn store_block_grads<T: Float>(grads: &mut Grads<T>, l: usize, mut g: BlockGrads<T>) {
    for spec in PARAMETERS.iter().filter(|s| s.part == Part::Block) {
        let Some(stored) = grads.get_mut(spec.param, Some(l)) else { continue };
        let width = stored.ncols() / spec.maps;
        for (k, field) in
            block_fields(BlockRefs::of_grads(&mut g), spec.param).into_iter().enumerate()
        {
            stored.columns_mut(k * width, width).copy_from(field);
        }
    }
}

/// Chapter 6's tensors of one block, values or gradients, by what they are.
struct BlockRefs<'b, T: Float> {
    ln1: [&'b mut DMatrix<T>; 2],
    qkv: [[&'b mut DMatrix<T>; 3]; 2],
    out: [&'b mut DMatrix<T>; 2],
    ln2: [&'b mut DMatrix<T>; 2],
    ffn: [&'b mut DMatrix<T>; 4],
}

impl<'b, T: Float> BlockRefs<'b, T> {
    /// A block's parameters.
    fn of_block(b: &'b mut Block<T>) -> Self {
        let (a, f) = (&mut b.attn, &mut b.ffn);
        BlockRefs {
            ln1: [&mut b.ln1.gamma, &mut b.ln1.beta],
            qkv: [[&mut a.w_q, &mut a.w_k, &mut a.w_v], [&mut a.b_q, &mut a.b_k, &mut a.b_v]],
            out: [&mut a.w_o, &mut a.b_o],
            ln2: [&mut b.ln2.gamma, &mut b.ln2.beta],
            ffn: [&mut f.w1, &mut f.b1, &mut f.w2, &mut f.b2],
        }
    }

    /// A block's parameter gradients.
    fn of_grads(g: &'b mut BlockGrads<T>) -> Self {
        let (a, f) = (&mut g.attn, &mut g.ffn);
        BlockRefs {
            ln1: [&mut g.ln1.d_gamma, &mut g.ln1.d_beta],
            qkv: [
                [&mut a.d_w_q, &mut a.d_w_k, &mut a.d_w_v],
                [&mut a.d_b_q, &mut a.d_b_k, &mut a.d_b_v],
            ],
            out: [&mut a.d_w_o, &mut a.d_b_o],
            ln2: [&mut g.ln2.d_gamma, &mut g.ln2.d_beta],
            ffn: [&mut f.d_w1, &mut f.d_b1, &mut f.d_w2, &mut f.d_b2],
        }
    }
}

/// The fields of chapter 6's block that hold the table's block row `param`, one per map, in the
/// table's map order (W_Q, W_K, W_V for c_attn): where the table's rows meet chapter 6's names.
/// None for a row outside a block.
fn block_fields<T: Float>(refs: BlockRefs<'_, T>, param: Param) -> Vec<&mut DMatrix<T>> {
    let BlockRefs {
        ln1: [ln1_gamma, ln1_beta],
        qkv: [w_qkv, b_qkv],
        out: [w_o, b_o],
        ln2: [ln2_gamma, ln2_beta],
        ffn: [w1, b1, w2, b2],
    } = refs;
    match param {
        Param::Ln1Gamma => vec![ln1_gamma],
        Param::Ln1Beta => vec![ln1_beta],
        Param::WQkv => w_qkv.into(),
        Param::BQkv => b_qkv.into(),
        Param::WO => vec![w_o],
        Param::BO => vec![b_o],
        Param::Ln2Gamma => vec![ln2_gamma],
        Param::Ln2Beta => vec![ln2_beta],
        Param::W1 => vec![w1],
        Param::B1 => vec![b1],
        Param::W2 => vec![w2],
        Param::B2 => vec![b2],
        Param::Wte | Param::Wpe | Param::LnFGamma | Param::LnFBeta | Param::LmHead => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    /// The engine's names, and the `matmul` items beyond its public products: what the lesson
    /// must not use (its products are `matmul`, `matmul_nt` and `matmul_tn`).
    const ENGINE: [&str; 9] = [
        "fast::",
        "RowTeam",
        "row_team",
        "row_product",
        "Strided",
        "threads",
        "workshop",
        "gemm",
        "MatRef",
    ];

    /// Each line of `code` (comments left out) that names the engine, as "line: text".
    fn engine_uses(code: &str) -> Vec<String> {
        code.lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("")))
            .filter(|(_, l)| ENGINE.iter().any(|e| l.contains(e)))
            .map(|(i, l)| format!("{i}: {}", l.trim()))
            .collect()
    }

    #[test]
    fn the_lesson_imports_nothing_from_the_engine() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ch09_gpt");
        let mut files = vec![dir.join("model.rs")];
        for entry in std::fs::read_dir(dir.join("model")).unwrap() {
            files.push(entry.unwrap().path());
        }
        assert!(files.len() >= 5, "{files:?}");
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            // The code, not its tests (this module lists the engine's names).
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let found = engine_uses(code);
            assert!(found.is_empty(), "{} uses the engine:\n{}", f.display(), found.join("\n"));
        }
        // A planted import of each kind is seen; a comment naming the engine is not.
        let planted = "use crate::ch09_gpt::fast::{Products, row_product};\n\
                       // the engine (fast::Windows) is not read here\n\
                       use crate::matmul::{MatRef, gemm};\n\
                       fn f() { crate::threads::default_threads(); }\n";
        let found = engine_uses(planted);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].starts_with("1:") && found[1].starts_with("3:"), "{found:?}");
    }
}
