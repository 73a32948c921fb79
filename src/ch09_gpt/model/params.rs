//! The model's parameters: one table ([`PARAMETERS`]) says, for every tensor, its name, its shape
//! as a function of the config, its name and layout in GPT-2's files, whether AdamW decays it and
//! how [`Gpt::new`] initialises it. Everything else is derived from the table: the order of the
//! tensors (of the gradients, of AdamW's moments and of the checkpoint), the decay mask, the
//! shapes a config expects ([`Config::tensor_shapes`]), the checkpoint's tensors
//! ([`gpt2_layout`]) and the fused step's offsets into its list of gradients ([`Slots`]).

use super::Gpt;
use crate::ch06_attention::{Block, BlockGrads, Ffn, LayerNorm, MultiHead};
use crate::ch09_gpt::config::{Config, MLP_EXPANSION, Positions};
use crate::error::{Result, invalid, shape_error, shape_of};
use crate::float::Float;
use nalgebra::DMatrix;

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

/// How [`Gpt::new`] initialises a tensor (GPT-2's scheme).
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
    /// How [`Gpt::new`] initialises it.
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
    spec(Param::BO, "attn.c_proj.bias", Blk, (One, Wd), Gpt2::Own("attn.c_proj.bias"), false, Zeros),
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

// ─────────────── the table's rows as the struct's fields (the only place that maps them) ───────

/// Every field of the model that the table names, as (row, block index, matrix); `$r` is `&` or
/// `&mut`. The order here does not matter: [`Shape::order`] puts them in the table's.
macro_rules! fields {
    ($model:expr, $($r:tt)+) => {{
        let m = $model;
        let mut out = vec![(Param::Wte, None, $($r)+ m.wte), (Param::Wpe, None, $($r)+ m.wpe)];
        for (l, b) in ($($r)+ m.blocks).iter_mut_or_iter().enumerate() {
            let (a, f) = ($($r)+ b.attn, $($r)+ b.ffn);
            let l = Some(l);
            out.extend([
                (Param::Ln1Gamma, l, $($r)+ b.ln1.gamma),
                (Param::Ln1Beta, l, $($r)+ b.ln1.beta),
                (Param::WQ, l, $($r)+ a.w_q),
                (Param::BQ, l, $($r)+ a.b_q),
                (Param::WK, l, $($r)+ a.w_k),
                (Param::BK, l, $($r)+ a.b_k),
                (Param::WV, l, $($r)+ a.w_v),
                (Param::BV, l, $($r)+ a.b_v),
                (Param::WO, l, $($r)+ a.w_o),
                (Param::BO, l, $($r)+ a.b_o),
                (Param::Ln2Gamma, l, $($r)+ b.ln2.gamma),
                (Param::Ln2Beta, l, $($r)+ b.ln2.beta),
                (Param::W1, l, $($r)+ f.w1),
                (Param::B1, l, $($r)+ f.b1),
                (Param::W2, l, $($r)+ f.w2),
                (Param::B2, l, $($r)+ f.b2),
            ]);
        }
        out.push((Param::LnFGamma, None, $($r)+ m.ln_f.gamma));
        out.push((Param::LnFBeta, None, $($r)+ m.ln_f.beta));
        if let Some(h) = ($($r)+ m.lm_head).iter_mut_or_iter().next() {
            out.push((Param::LmHead, None, h));
        }
        out
    }};
}

/// `iter()` or `iter_mut()`, whichever the borrow allows, so one macro serves both.
trait IterEither {
    type Iter;
    fn iter_mut_or_iter(self) -> Self::Iter;
}

impl<'a, X> IterEither for &'a Vec<X> {
    type Iter = std::slice::Iter<'a, X>;
    fn iter_mut_or_iter(self) -> Self::Iter {
        self.iter()
    }
}

impl<'a, X> IterEither for &'a mut Vec<X> {
    type Iter = std::slice::IterMut<'a, X>;
    fn iter_mut_or_iter(self) -> Self::Iter {
        self.iter_mut()
    }
}

impl<'a, X> IterEither for &'a Option<X> {
    type Iter = std::option::Iter<'a, X>;
    fn iter_mut_or_iter(self) -> Self::Iter {
        self.iter()
    }
}

impl<'a, X> IterEither for &'a mut Option<X> {
    type Iter = std::option::IterMut<'a, X>;
    fn iter_mut_or_iter(self) -> Self::Iter {
        self.iter_mut()
    }
}

/// Puts (row, block, item) in the table's order for `shape`, leaving out what it lacks.
fn in_order<X>(shape: Shape, items: Vec<(Param, Option<usize>, X)>) -> Vec<X> {
    let row = |p: Param| PARAMETERS.iter().position(|r| r.param == p).unwrap_or(0);
    let mut keyed: Vec<Option<(Param, Option<usize>, X)>> = items.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(keyed.len());
    let index = |p: Param, l: Option<usize>| (row(p), l);
    let mut by_key: std::collections::HashMap<(usize, Option<usize>), usize> = keyed
        .iter()
        .enumerate()
        .filter_map(|(i, k)| k.as_ref().map(|(p, l, _)| (index(*p, *l), i)))
        .collect();
    for (s, l) in shape.order() {
        if let Some(i) = by_key.remove(&index(s.param, l))
            && let Some((_, _, x)) = keyed[i].take()
        {
            out.push(x);
        }
    }
    out
}

/// Takes the gradient of block tensor `p` out of chapter 6's block gradients.
pub(super) fn take_block_grad<T: Float>(g: &mut BlockGrads<T>, p: Param) -> Option<DMatrix<T>> {
    let (a, f) = (&mut g.attn, &mut g.ffn);
    let m = match p {
        Param::Ln1Gamma => &mut g.ln1.d_gamma,
        Param::Ln1Beta => &mut g.ln1.d_beta,
        Param::WQ => &mut a.d_w_q,
        Param::BQ => &mut a.d_b_q,
        Param::WK => &mut a.d_w_k,
        Param::BK => &mut a.d_b_k,
        Param::WV => &mut a.d_w_v,
        Param::BV => &mut a.d_b_v,
        Param::WO => &mut a.d_w_o,
        Param::BO => &mut a.d_b_o,
        Param::Ln2Gamma => &mut g.ln2.d_gamma,
        Param::Ln2Beta => &mut g.ln2.d_beta,
        Param::W1 => &mut f.d_w1,
        Param::B1 => &mut f.d_b1,
        Param::W2 => &mut f.d_w2,
        Param::B2 => &mut f.d_b2,
        Param::Wte | Param::Wpe | Param::LnFGamma | Param::LnFBeta | Param::LmHead => return None,
    };
    Some(std::mem::replace(m, DMatrix::zeros(0, 0)))
}

impl<T: Float> Gpt<T> {
    /// Which optional tensors this model has.
    pub fn shape(&self) -> Shape {
        Shape {
            layers: self.blocks.len(),
            learned_positions: self.config.positions == Positions::Learned,
            untied: self.lm_head.is_some(),
        }
    }

    /// Tensor `p` (of block `layer` for a block tensor), if the model has that field.
    pub fn tensor(&self, p: Param, layer: Option<usize>) -> Option<&DMatrix<T>> {
        fields!(self, &).into_iter().find(|(q, l, _)| (*q, *l) == (p, layer)).map(|f| f.2)
    }

    /// Tensor `p`, mutable.
    pub fn tensor_mut(&mut self, p: Param, layer: Option<usize>) -> Option<&mut DMatrix<T>> {
        fields!(self, &mut).into_iter().find(|(q, l, _)| (*q, *l) == (p, layer)).map(|f| f.2)
    }

    /// Every parameter tensor with its name, in the table's order ([`PARAMETERS`]): `wte`, `wpe`
    /// (if learned), each block's 16 tensors ([`block_tensor_name`]), `ln_f.weight`,
    /// `ln_f.bias`, `lm_head.weight` (if untied).
    pub fn tensors(&self) -> Vec<(String, &DMatrix<T>)> {
        let shape = self.shape();
        let named = fields!(self, &)
            .into_iter()
            .map(|(p, l, m)| (p, l, (full_name(spec_of(p).name, l), m)))
            .collect();
        in_order(shape, named)
    }

    /// The same tensors, mutable, in the same order.
    pub fn tensors_mut(&mut self) -> Vec<&mut DMatrix<T>> {
        let shape = self.shape();
        in_order(shape, fields!(self, &mut))
    }

    /// Which tensors AdamW decays, in [`Gpt::tensors`] order (the table's `decays`).
    pub fn decay_mask(&self) -> Vec<bool> {
        self.shape().order().into_iter().map(|(s, _)| s.decays).collect()
    }

    /// The number of parameters (equals
    /// [`Config::parameter_count`](crate::ch09_gpt::config::Config::parameter_count) by
    /// construction; a test checks it).
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

    /// The model in another float type (f64 for checks, f32 for speed): every matrix of the
    /// model (the parameters, and a fixed position table) converted, the rest as it is.
    pub fn cast<U: Float>(&self) -> Gpt<U> {
        let c = |m: &DMatrix<T>| crate::float::cast::<T, U>(m);
        let ln = |l: &LayerNorm<T>| LayerNorm {
            gamma: c(&l.gamma),
            beta: c(&l.beta),
            eps: l.eps,
            placement: l.placement,
        };
        let mut out = Gpt {
            config: self.config,
            wte: c(&self.wte),
            wpe: c(&self.wpe),
            blocks: self
                .blocks
                .iter()
                .map(|b| {
                    let e = || DMatrix::zeros(0, 0);
                    Block {
                        attn: MultiHead {
                            heads: b.attn.heads,
                            w_q: e(),
                            b_q: e(),
                            w_k: e(),
                            b_k: e(),
                            w_v: e(),
                            b_v: e(),
                            w_o: e(),
                            b_o: e(),
                        },
                        ln1: ln(&b.ln1),
                        ffn: Ffn { w1: e(), b1: e(), w2: e(), b2: e(), act: b.ffn.act },
                        ln2: ln(&b.ln2),
                        order: b.order,
                    }
                })
                .collect(),
            ln_f: ln(&self.ln_f),
            lm_head: self.lm_head.as_ref().map(c),
        };
        // The blocks' matrices, by the table (wte, wpe, ln_f and lm_head are converted above).
        let all = self.shape();
        let sources = in_order(all, fields!(self, &));
        for (dst, src) in in_order(all, fields!(&mut out, &mut)).into_iter().zip(sources) {
            *dst = c(src);
        }
        out
    }
}
