//! The parameter table ([`PARAMETERS`]): for every tensor of the GPT its name, its shape as a
//! function of the config, its name and layout in GPT-2's files, whether AdamW decays it and how
//! [`Gpt::new`](super::Gpt::new) initialises it; and what is derived from it alone: the order of
//! the tensors ([`Shape::order`]), the positions the fused step writes its gradients to
//! ([`Slots`]) and GPT-2's tensors ([`gpt2_layout`]).

use crate::ch09_gpt::config::{Config, MLP_EXPANSION, Positions};

/// A size in the table, read from the config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    /// 1 (a bias or a LayerNorm parameter is one row).
    One,
    /// The width d.
    Width,
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

/// How GPT-2's files store a tensor. Linear weights are in×out (GPT-2's `Conv1D`), the
/// orientation of our y = xW + b, so none is transposed; a tensor of one row is stored 1-D.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gpt2 {
    /// As it is held, under this name.
    Own(&'static str),
    /// As columns `part`·n … (`part` + 1)·n − 1 of the fused tensor `name` (GPT-2 keeps W_Q, W_K
    /// and W_V side by side in one d×3d matrix `c_attn`, their biases likewise).
    Fused {
        /// The fused tensor's name.
        name: &'static str,
        /// Which block of columns (0, 1, 2 for Q, K, V).
        part: usize,
        /// How many tensors are fused.
        of: usize,
    },
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
    /// W_Q.
    WQ,
    /// b_Q.
    BQ,
    /// W_K.
    WK,
    /// b_K.
    BK,
    /// W_V.
    WV,
    /// b_V.
    BV,
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
    /// Our name (in a block, after `h.{l}.`): GPT-2's, except that `c_attn` is held as three
    /// matrices q, k, v.
    pub name: &'static str,
    /// Before, in or after the blocks.
    pub part: Part,
    /// Rows.
    pub rows: Dim,
    /// Columns.
    pub cols: Dim,
    /// When it is a parameter.
    pub presence: Presence,
    /// Its name and layout in GPT-2's files.
    pub gpt2: Gpt2,
    /// Whether AdamW's weight decay acts on it: the embeddings and weight matrices, not the
    /// biases and LayerNorm parameters.
    pub decays: bool,
    /// How [`Gpt::new`](crate::ch09_gpt::model::Gpt::new) initialises it.
    pub init: Init,
}

const fn spec(
    param: Param,
    name: &'static str,
    part: Part,
    (rows, cols): (Dim, Dim),
    gpt2: Gpt2,
    decays: bool,
    init: Init,
) -> Spec {
    Spec { param, name, part, rows, cols, presence: Presence::Always, gpt2, decays, init }
}

const fn only(presence: Presence, s: Spec) -> Spec {
    Spec { presence, ..s }
}

const fn qkv(part: usize) -> Gpt2 {
    Gpt2::Fused { name: "attn.c_attn.weight", part, of: 3 }
}

const fn qkv_bias(part: usize) -> Gpt2 {
    Gpt2::Fused { name: "attn.c_attn.bias", part, of: 3 }
}

use Dim::{Context as Ctx, Hidden as Hid, One, Vocab as Voc, Width as Wd};
use Init::{Normal, Ones, Residual, Zeros};
use Part::{Block as Blk, Embedding as Emb, Final as Fin};

/// Every parameter tensor of the GPT, in the one order everything follows: the embeddings, each
/// block's tensors (block 0, 1, …), the final LayerNorm and the unembedding.
#[rustfmt::skip]
pub const PARAMETERS: [Spec; 21] = [
    only(Presence::Always,
         spec(Param::Wte, "wte.weight", Emb, (Voc, Wd), Gpt2::Own("wte.weight"), true, Normal)),
    only(Presence::LearnedPositions,
         spec(Param::Wpe, "wpe.weight", Emb, (Ctx, Wd), Gpt2::Own("wpe.weight"), true, Normal)),
    spec(Param::Ln1Gamma, "ln_1.weight", Blk, (One, Wd), Gpt2::Own("ln_1.weight"), false, Ones),
    spec(Param::Ln1Beta, "ln_1.bias", Blk, (One, Wd), Gpt2::Own("ln_1.bias"), false, Zeros),
    spec(Param::WQ, "attn.q.weight", Blk, (Wd, Wd), qkv(0), true, Normal),
    spec(Param::BQ, "attn.q.bias", Blk, (One, Wd), qkv_bias(0), false, Zeros),
    spec(Param::WK, "attn.k.weight", Blk, (Wd, Wd), qkv(1), true, Normal),
    spec(Param::BK, "attn.k.bias", Blk, (One, Wd), qkv_bias(1), false, Zeros),
    spec(Param::WV, "attn.v.weight", Blk, (Wd, Wd), qkv(2), true, Normal),
    spec(Param::BV, "attn.v.bias", Blk, (One, Wd), qkv_bias(2), false, Zeros),
    spec(Param::WO, "attn.c_proj.weight", Blk, (Wd, Wd),
         Gpt2::Own("attn.c_proj.weight"), true, Residual),
    spec(Param::BO, "attn.c_proj.bias", Blk, (One, Wd),
         Gpt2::Own("attn.c_proj.bias"), false, Zeros),
    spec(Param::Ln2Gamma, "ln_2.weight", Blk, (One, Wd), Gpt2::Own("ln_2.weight"), false, Ones),
    spec(Param::Ln2Beta, "ln_2.bias", Blk, (One, Wd), Gpt2::Own("ln_2.bias"), false, Zeros),
    spec(Param::W1, "mlp.c_fc.weight", Blk, (Wd, Hid), Gpt2::Own("mlp.c_fc.weight"), true, Normal),
    spec(Param::B1, "mlp.c_fc.bias", Blk, (One, Hid), Gpt2::Own("mlp.c_fc.bias"), false, Zeros),
    spec(Param::W2, "mlp.c_proj.weight", Blk, (Hid, Wd),
         Gpt2::Own("mlp.c_proj.weight"), true, Residual),
    spec(Param::B2, "mlp.c_proj.bias", Blk, (One, Wd), Gpt2::Own("mlp.c_proj.bias"), false, Zeros),
    spec(Param::LnFGamma, "ln_f.weight", Fin, (One, Wd), Gpt2::Own("ln_f.weight"), false, Ones),
    spec(Param::LnFBeta, "ln_f.bias", Fin, (One, Wd), Gpt2::Own("ln_f.bias"), false, Zeros),
    only(Presence::Untied,
         spec(Param::LmHead, "lm_head.weight", Fin, (Voc, Wd),
              Gpt2::Own("lm_head.weight"), true, Normal)),
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

    fn has(&self, s: &Spec) -> bool {
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

/// The position of every tensor in the order of a model's tensors, for the fused step's flat
/// list of gradients.
#[derive(Clone, Debug)]
pub struct Slots {
    /// Position of each table row's tensor (block tensors: in block 0), `None` if absent.
    at: [Option<usize>; PARAMETERS.len()],
    /// Tensors per block.
    stride: usize,
}

impl Slots {
    /// The positions for a model of this shape.
    pub fn of(shape: Shape) -> Slots {
        let mut at = [None; PARAMETERS.len()];
        for (i, (s, l)) in shape.order().into_iter().enumerate() {
            let row = PARAMETERS.iter().position(|r| r.param == s.param).unwrap_or(0);
            if l.is_none_or(|l| l == 0) {
                at[row] = Some(i);
            }
        }
        Slots { at, stride: TENSORS_PER_BLOCK }
    }

    /// Where `param` sits (in block `layer` for a block tensor); `None` if the model lacks it.
    pub fn get(&self, param: Param, layer: usize) -> Option<usize> {
        let row = PARAMETERS.iter().position(|r| r.param == param)?;
        let base = self.at[row]?;
        Some(if PARAMETERS[row].part == Part::Block { base + self.stride * layer } else { base })
    }

    /// As [`Slots::get`] for a tensor every model has (0 if it is absent).
    pub fn at(&self, param: Param, layer: usize) -> usize {
        self.get(param, layer).unwrap_or(0)
    }
}

/// One tensor of GPT-2's file, derived from the table: its name, its shape, and which of our
/// tensors it holds, side by side in its columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpt2Tensor {
    /// GPT-2's name (block tensors with `h.{l}.`).
    pub name: String,
    /// Rows and columns of the 2-D matrix it is read into (1 row for a 1-D tensor).
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Whether the file stores it 1-D.
    pub one_d: bool,
    /// Our tensors it holds, in column order, each with its block index.
    pub parts: Vec<(Param, Option<usize>)>,
}

/// GPT-2's tensors for a model of `config`'s sizes and `shape`'s tensors, in file order.
pub fn gpt2_layout(config: &Config, shape: Shape) -> Vec<Gpt2Tensor> {
    let mut out: Vec<Gpt2Tensor> = Vec::new();
    for (s, l) in shape.order() {
        let (rows, cols) = (s.rows.of(config), s.cols.of(config));
        match s.gpt2 {
            Gpt2::Own(name) => out.push(Gpt2Tensor {
                name: full_name(name, l),
                rows,
                cols,
                one_d: s.rows == Dim::One,
                parts: vec![(s.param, l)],
            }),
            Gpt2::Fused { name, part, of } => {
                let name = full_name(name, l);
                // Parts 1, 2, … join the tensor part 0 started (the table lists a weight's
                // parts interleaved with its bias's, so it is found by name).
                match out.iter_mut().rev().find(|t| t.name == name).filter(|_| part > 0) {
                    Some(t) => {
                        t.cols += cols;
                        t.parts.push((s.param, l));
                    }
                    None => {
                        let mut parts = Vec::with_capacity(of);
                        parts.push((s.param, l));
                        out.push(Gpt2Tensor { name, rows, cols, one_d: s.rows == Dim::One, parts })
                    }
                }
            }
        }
    }
    out
}
