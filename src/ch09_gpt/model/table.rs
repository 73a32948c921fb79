//! The parameter table ([`PARAMETERS`]): for every tensor of the GPT its name in GPT-2's files,
//! its shape as a function of the config, whether AdamW decays it and how
//! [`Gpt::new`](super::Gpt::new) initialises it; and what is derived from it alone: the order of
//! the tensors ([`Shape::order`]), where each sits in that order ([`Shape::index`]), the
//! checkpoint's tensors ([`gpt2_layout`]) and the parameter counts ([`Config::parameter_count`],
//! [`parameters_saturating`]).
//!
//! The model holds its tensors in GPT-2's layout: the query, key and value maps of a block are
//! one d×3d matrix `c_attn`, W_QKV = \[W_Q W_K W_V\], whose column blocks *are* W_Q, W_K and W_V
//! (the lesson reads them as views, [`Params::q_k_v`](super::Params::q_k_v)).

use crate::ch09_gpt::config::{Config, MLP_EXPANSION, Positions};

/// A size in the table, read from the config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    /// 1 (a bias or a LayerNorm parameter is one row).
    One,
    /// The width d.
    Width,
    /// Three widths 3d (queries, keys and values side by side).
    Width3,
    /// The MLP's hidden width 4d.
    Hidden,
    /// The vocabulary V.
    Vocab,
    /// The context n_ctx.
    Context,
}

impl Dim {
    /// The size for `config`.
    pub fn of(self, config: &Config) -> usize {
        match self {
            Dim::One => 1,
            Dim::Width => config.width,
            Dim::Width3 => config.width.saturating_mul(3),
            Dim::Hidden => config.width.saturating_mul(MLP_EXPANSION),
            Dim::Vocab => config.vocab_size,
            Dim::Context => config.context,
        }
    }
}

/// Where a tensor sits in the order: before the blocks, once per block, after the blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Before the blocks (the embeddings).
    Embedding,
    /// In every block, named `h.{l}.…`.
    Block,
    /// After the blocks (the final LayerNorm and the unembedding).
    Final,
}

/// When a tensor is a parameter of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Always.
    Always,
    /// Only with learned positions (chapter 5's sinusoids are fixed, not a parameter).
    LearnedPositions,
    /// Only when the unembedding is not tied to the token embedding.
    Untied,
}

/// How [`Gpt::new`](crate::ch09_gpt::model::Gpt::new) initialises a tensor (GPT-2's scheme).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Init {
    /// N(0, σ²) with σ = [`INIT_STD`](super::INIT_STD).
    Normal,
    /// A residual projection: N(0, (σ/√(2l))²), so the residual stream's variance does not grow
    /// with the depth l.
    Residual,
    /// 0 (biases, LayerNorm β).
    Zeros,
    /// 1 (LayerNorm γ).
    Ones,
}

/// Which tensor of the model a row of the table describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    /// W_E, V×d.
    Wte,
    /// W_P, n_ctx×d.
    Wpe,
    /// LN₁'s γ.
    Ln1Gamma,
    /// LN₁'s β.
    Ln1Beta,
    /// W_QKV = \[W_Q W_K W_V\], d×3d: the query, key and value maps side by side.
    WQkv,
    /// b_QKV = \[b_Q b_K b_V\], 1×3d.
    BQkv,
    /// W_O.
    WO,
    /// b_O.
    BO,
    /// LN₂'s γ.
    Ln2Gamma,
    /// LN₂'s β.
    Ln2Beta,
    /// W₁, d×4d.
    W1,
    /// b₁.
    B1,
    /// W₂, 4d×d.
    W2,
    /// b₂.
    B2,
    /// LN_f's γ.
    LnFGamma,
    /// LN_f's β.
    LnFBeta,
    /// W_U when untied, V×d.
    LmHead,
}

/// One row of the parameter table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The tensor.
    pub param: Param,
    /// Its name in GPT-2's files (in a block, after `h.{l}.`), and ours.
    pub name: &'static str,
    /// Before, in or after the blocks.
    pub part: Part,
    /// Rows.
    pub rows: Dim,
    /// Columns.
    pub cols: Dim,
    /// When it is a parameter.
    pub presence: Presence,
    /// Whether AdamW's weight decay acts on it: the embeddings and weight matrices, not the
    /// biases and LayerNorm parameters.
    pub decays: bool,
    /// How [`Gpt::new`](crate::ch09_gpt::model::Gpt::new) initialises it.
    pub init: Init,
    /// How many maps sit side by side in its columns (3 for W_QKV and b_QKV, else 1): each is
    /// initialised as a matrix of its own, rows×(cols/maps), one after another.
    pub maps: usize,
}

const fn spec(
    param: Param,
    name: &'static str,
    part: Part,
    (rows, cols): (Dim, Dim),
    decays: bool,
    init: Init,
) -> Spec {
    Spec { param, name, part, rows, cols, presence: Presence::Always, decays, init, maps: 1 }
}

const fn only(presence: Presence, s: Spec) -> Spec {
    Spec { presence, ..s }
}

/// Q, K and V side by side: three maps in one tensor.
const fn q_k_v(s: Spec) -> Spec {
    Spec { maps: 3, ..s }
}

use Dim::{Context as Ctx, Hidden as Hid, One, Vocab as Voc, Width as Wd, Width3 as Wd3};
use Init::{Normal, Ones, Residual, Zeros};
use Part::{Block as Blk, Embedding as Emb, Final as Fin};

/// Every parameter tensor of the GPT, in the one order everything follows (GPT-2's): the
/// embeddings, each block's tensors (block 0, 1, …), the final LayerNorm and the unembedding.
/// Linear weights are in×out (GPT-2's `Conv1D`), the orientation of y = xW + b.
#[rustfmt::skip]
pub const PARAMETERS: [Spec; 17] = [
    only(Presence::Always, spec(Param::Wte, "wte.weight", Emb, (Voc, Wd), true, Normal)),
    only(Presence::LearnedPositions, spec(Param::Wpe, "wpe.weight", Emb, (Ctx, Wd), true, Normal)),
    spec(Param::Ln1Gamma, "ln_1.weight", Blk, (One, Wd), false, Ones),
    spec(Param::Ln1Beta, "ln_1.bias", Blk, (One, Wd), false, Zeros),
    q_k_v(spec(Param::WQkv, "attn.c_attn.weight", Blk, (Wd, Wd3), true, Normal)),
    q_k_v(spec(Param::BQkv, "attn.c_attn.bias", Blk, (One, Wd3), false, Zeros)),
    spec(Param::WO, "attn.c_proj.weight", Blk, (Wd, Wd), true, Residual),
    spec(Param::BO, "attn.c_proj.bias", Blk, (One, Wd), false, Zeros),
    spec(Param::Ln2Gamma, "ln_2.weight", Blk, (One, Wd), false, Ones),
    spec(Param::Ln2Beta, "ln_2.bias", Blk, (One, Wd), false, Zeros),
    spec(Param::W1, "mlp.c_fc.weight", Blk, (Wd, Hid), true, Normal),
    spec(Param::B1, "mlp.c_fc.bias", Blk, (One, Hid), false, Zeros),
    spec(Param::W2, "mlp.c_proj.weight", Blk, (Hid, Wd), true, Residual),
    spec(Param::B2, "mlp.c_proj.bias", Blk, (One, Wd), false, Zeros),
    spec(Param::LnFGamma, "ln_f.weight", Fin, (One, Wd), false, Ones),
    spec(Param::LnFBeta, "ln_f.bias", Fin, (One, Wd), false, Zeros),
    only(Presence::Untied, spec(Param::LmHead, "lm_head.weight", Fin, (Voc, Wd), true, Normal)),
];

/// Tensors per block (the table's rows in [`Part::Block`]).
pub const TENSORS_PER_BLOCK: usize = count_block_rows();

const fn count_block_rows() -> usize {
    let mut i = 0;
    let mut n = 0;
    while i < PARAMETERS.len() {
        if matches!(PARAMETERS[i].part, Part::Block) {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The table's row for `param`.
pub fn spec_of(param: Param) -> &'static Spec {
    PARAMETERS.iter().find(|s| s.param == param).unwrap_or(&PARAMETERS[0])
}

/// Which optional tensors a model has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Blocks.
    pub layers: usize,
    /// Learned positions (W_P is a parameter).
    pub learned_positions: bool,
    /// An unembedding of its own (W_U is a parameter).
    pub untied: bool,
}

impl Shape {
    /// The tensors `config` describes.
    pub fn of_config(config: &Config) -> Shape {
        Shape {
            layers: config.layers,
            learned_positions: config.positions == Positions::Learned,
            untied: !config.tied,
        }
    }

    /// Whether a model of this shape has the tensor of row `s`.
    pub fn has(&self, s: &Spec) -> bool {
        match s.presence {
            Presence::Always => true,
            Presence::LearnedPositions => self.learned_positions,
            Presence::Untied => self.untied,
        }
    }

    /// Every tensor in order, as (table row, block index for block tensors).
    pub fn order(&self) -> Vec<(&'static Spec, Option<usize>)> {
        let of = |part: Part| PARAMETERS.iter().filter(move |s| s.part == part && self.has(s));
        let mut out: Vec<_> = of(Part::Embedding).map(|s| (s, None)).collect();
        for l in 0..self.layers {
            out.extend(of(Part::Block).map(|s| (s, Some(l))));
        }
        out.extend(of(Part::Final).map(|s| (s, None)));
        out
    }

    /// How many tensors a model of this shape has.
    pub fn len(&self) -> usize {
        let present = |part: Part| PARAMETERS.iter().filter(move |s| s.part == part && self.has(s));
        present(Part::Embedding).count()
            + self.layers * TENSORS_PER_BLOCK
            + present(Part::Final).count()
    }

    /// Whether the model has no tensors (never: W_E is always one).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where `param` (of block `layer` for a block tensor) sits in [`Shape::order`]: the tensors
    /// of the table before it that the model has, counted without listing them. `None` if the
    /// model lacks it or `layer` is past the last block.
    pub fn index(&self, param: Param, layer: usize) -> Option<usize> {
        let row = PARAMETERS.iter().position(|r| r.param == param)?;
        let s = &PARAMETERS[row];
        if !self.has(s) || (s.part == Part::Block && layer >= self.layers) {
            return None;
        }
        let before =
            |part: Part| PARAMETERS[..row].iter().filter(|r| r.part == part && self.has(r)).count();
        let embeddings =
            PARAMETERS.iter().filter(|r| r.part == Part::Embedding && self.has(r)).count();
        Some(match s.part {
            Part::Embedding => before(Part::Embedding),
            Part::Block => embeddings + layer * TENSORS_PER_BLOCK + before(Part::Block),
            Part::Final => embeddings + self.layers * TENSORS_PER_BLOCK + before(Part::Final),
        })
    }
}

/// A tensor's full name: `h.{l}.` before a block tensor's.
pub fn full_name(name: &str, layer: Option<usize>) -> String {
    match layer {
        Some(l) => format!("h.{l}.{name}"),
        None => name.to_string(),
    }
}

/// The name of tensor `i` of block `l`, in the table's order.
pub fn block_tensor_name(l: usize, i: usize) -> String {
    let name = PARAMETERS.iter().filter(|s| s.part == Part::Block).nth(i).map_or("?", |s| s.name);
    full_name(name, Some(l))
}

/// One tensor of GPT-2's file, derived from the table: its name and its shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpt2Tensor {
    /// GPT-2's name (block tensors with `h.{l}.`).
    pub name: String,
    /// Rows and columns of the 2-D matrix it is read into (1 row for a 1-D tensor).
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Whether the file stores it 1-D (a tensor of one row).
    pub one_d: bool,
}

/// GPT-2's tensors for a model of `config`'s sizes and `shape`'s tensors, in file order: the
/// model's own tensors, in the model's order (the model holds GPT-2's layout).
pub fn gpt2_layout(config: &Config, shape: Shape) -> Vec<Gpt2Tensor> {
    shape
        .order()
        .into_iter()
        .map(|(s, l)| Gpt2Tensor {
            name: full_name(s.name, l),
            rows: s.rows.of(config),
            cols: s.cols.of(config),
            one_d: s.rows == Dim::One,
        })
        .collect()
}

/// The parameter count of `c` by the table, in 128-bit integers that stop at `u128::MAX`
/// instead of overflowing (the memory budget calls it before validating sizes).
pub fn parameters_saturating(c: &Config) -> u128 {
    let shape = Shape::of_config(c);
    let size = |s: &Spec| (s.rows.of(c) as u128).saturating_mul(s.cols.of(c) as u128);
    PARAMETERS.iter().filter(|s| shape.has(s)).fold(0u128, |total, s| {
        let copies = if s.part == Part::Block { c.layers as u128 } else { 1 };
        total.saturating_add(copies.saturating_mul(size(s)))
    })
}

impl Config {
    /// Every tensor our GPT holds, as (Hugging Face GPT-2 name, rows, columns), in the order of
    /// the checkpoint (the parameter table's, [`PARAMETERS`]). Linear weights are stored in×out
    /// (GPT-2's `Conv1D` layout), biases and LayerNorm parameters as 1×n rows.
    pub fn tensor_shapes(&self) -> Vec<(String, usize, usize)> {
        gpt2_layout(self, Shape::of_config(self))
            .into_iter()
            .map(|t| (t.name, t.rows, t.cols))
            .collect()
    }

    /// The number of parameters: the sum of [`Config::tensor_shapes`]. Per block that is
    /// 12d² + 13d (attention 4d² + 4d, MLP 8d² + 5d, two LayerNorms 4d).
    pub fn parameter_count(&self) -> u64 {
        u64::try_from(parameters_saturating(self)).unwrap_or(u64::MAX)
    }

    /// The parameters of one block by the table: 12d² + 13d.
    pub fn block_parameters(&self) -> u64 {
        let size = |s: &Spec| (s.rows.of(self) as u64).saturating_mul(s.cols.of(self) as u64);
        PARAMETERS.iter().filter(|s| s.part == Part::Block).map(size).sum()
    }
}
