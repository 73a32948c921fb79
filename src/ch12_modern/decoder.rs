//! The composed decoder: chapter 9's GPT with each part switchable to today's choice.
//!
//! For B sequences of T tokens (N = B·T rows, width C, vocabulary V, S scored positions):
//!
//! ```text
//! x₀ = W_E[u] (+ W_P[t] when the positions are learned)          N×C
//! h = x + Attn(Norm₁(x)),  x' = h + Mlp(Norm₂(h))                each of the l blocks
//! z = Norm_f(x_L) W_Uᵀ                                           S×V, W_U = W_E when tied
//! L = −(1/S) Σ_s ln softmax(z_s)[target_s]
//! ```
//!
//! where each part is one switch of [`DecoderConfig`]:
//! - positions: chapter 9's learned table W_P, or the rotation of every query and key
//!   ([`super::rope`], one cos/sin table for all the layers);
//! - Norm: chapter 6's LayerNorm (γ, β) or [`super::rms_norm`] (γ only);
//! - Attn: [`super::gqa`] with H_kv key/value heads (H_kv = H is GPT-2's multi-head attention),
//!   QK-norm on or off, biases on or off;
//! - Mlp: chapter 6's 4× GELU feed-forward net (biases on or off) or a gated one
//!   ([`super::glu`], SwiGLU or GeGLU, never with biases);
//! - the unembedding tied to W_E or a matrix of its own.
//!
//! With every switch at GPT-2's choice ([`DecoderConfig::gpt2`]) it computes what chapter 9's
//! [`Gpt`](crate::ch09_gpt::model::Gpt) computes: [`Decoder::from_gpt_tensors`] reads a GPT's
//! tensors into it, and a test holds the two losses and every gradient together. The forward and
//! backward are in `decoder/pass.rs`, the cached step in `decoder/step.rs`; every function they
//! call is the lesson's or chapter 6's, none is rewritten here.

pub mod fast;
mod pass;
mod step;

pub use pass::{DecoderCache, DecoderLoss, gate_and_slope, glu_backward_one_gate};
pub use step::{DecoderKv, DecoderWeights, StepProduct};

use super::glu::{Gate, GatedMlp};
use super::gqa::{Gqa, GqaBiases, Rotary};
use super::rms_norm::RmsNorm;
use super::rope::{Pairing, RopeTable};
use crate::ch03_mlp::Activation;
use crate::ch06_attention::{Epsilon, Ffn, LayerNorm};
use crate::ch09_gpt::config::{Config, MLP_EXPANSION};
use crate::ch09_gpt::model::{INIT_STD, Param, Params};
use crate::error::{Result, invalid};
use crate::float::Float;
use crate::rng::Rng;
use nalgebra::DMatrix;

/// How positions enter the decoder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PositionKind {
    /// A learned table W_P (context×C) added to the token embeddings (GPT-2).
    Learned,
    /// Every query and key rotated by tθ_i, θ_i = base^{−2i/d_h}, with the given pairing.
    Rotary {
        /// The base of the frequencies (10 000 in the paper, 500 000 in Llama 3).
        base: f64,
        /// Which columns of a head turn together.
        pairing: Pairing,
    },
}

/// Which normalisation the blocks and the final norm use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormKind {
    /// Chapter 6's LayerNorm, γ and β, ε inside the root (GPT-2).
    Layer,
    /// RMSNorm, γ only, ε inside the root.
    Rms,
}

/// Which MLP the blocks use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MlpKind {
    /// Chapter 6's two-layer net with GELU (tanh form) between (GPT-2).
    Gelu,
    /// A gated MLP, (φ(X W_gate) ⊙ X W_up) W_down, with φ the gate's function.
    Gated(Gate),
}

/// The switches and sizes of a decoder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecoderConfig {
    /// V, the token ids.
    pub vocab_size: usize,
    /// The longest sequence, n_ctx (rows of W_P or of the rotary table).
    pub context: usize,
    /// l, the blocks.
    pub layers: usize,
    /// H, the query heads.
    pub n_heads: usize,
    /// H_kv, the key/value heads (divides H).
    pub n_kv_heads: usize,
    /// C, the residual stream's width (H·d_h).
    pub width: usize,
    /// F, the MLP's hidden width (4C for GPT-2, about 8C/3 for a gated MLP).
    pub hidden: usize,
    /// Learned or rotary positions.
    pub positions: PositionKind,
    /// LayerNorm or RMSNorm.
    pub norm: NormKind,
    /// GELU or gated MLP.
    pub mlp: MlpKind,
    /// RMSNorm on each head's queries and keys before the rotation.
    pub qk_norm: bool,
    /// Biases on the attention's four projections and on the GELU MLP's two layers.
    pub biases: bool,
    /// The unembedding is W_E's transpose.
    pub tied: bool,
    /// ε of every norm, inside the root.
    pub eps: f64,
}

impl DecoderConfig {
    /// GPT-2's choices: learned positions, LayerNorm (ε = 10⁻⁵), 4× GELU MLP, H_kv = H, no
    /// QK-norm, biases, tied unembedding.
    pub fn gpt2(
        vocab_size: usize,
        context: usize,
        layers: usize,
        heads: usize,
        width: usize,
    ) -> Self {
        DecoderConfig {
            vocab_size,
            context,
            layers,
            n_heads: heads,
            n_kv_heads: heads,
            width,
            hidden: MLP_EXPANSION * width,
            positions: PositionKind::Learned,
            norm: NormKind::Layer,
            mlp: MlpKind::Gelu,
            qk_norm: false,
            biases: true,
            tied: true,
            eps: crate::ch09_gpt::config::GPT2_LAYER_NORM_EPSILON,
        }
    }

    /// The decoder of chapter 9's configuration (learned positions only).
    pub fn of_gpt(c: &Config) -> Result<Self> {
        c.validate()?;
        if c.positions != crate::ch09_gpt::config::Positions::Learned {
            return Err(invalid("DecoderConfig::of_gpt", "config", "has no learned positions"));
        }
        let mut d = DecoderConfig::gpt2(c.vocab_size, c.context, c.layers, c.heads, c.width);
        (d.tied, d.eps) = (c.tied, c.layer_norm_epsilon);
        Ok(d)
    }

    /// d_h = C/H.
    pub fn head_dim(&self) -> usize {
        self.width / self.n_heads.max(1)
    }

    /// Checks every size ≥ 1, H_kv | H, H | C, an even d_h under rotation, a base > 1, no biases
    /// with a gated MLP, ε finite and > 0.
    pub fn validate(&self) -> Result<()> {
        const OP: &str = "DecoderConfig::validate";
        for (arg, v) in [
            ("vocab_size", self.vocab_size),
            ("context", self.context),
            ("layers", self.layers),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.n_kv_heads),
            ("width", self.width),
            ("hidden", self.hidden),
        ] {
            if v == 0 {
                return Err(invalid(OP, arg, "must be at least 1, got 0"));
            }
        }
        if !self.width.is_multiple_of(self.n_heads) {
            let why = format!("{} heads do not divide the width {}", self.n_heads, self.width);
            return Err(invalid(OP, "n_heads", why));
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            let why = format!("{} does not divide n_heads {}", self.n_kv_heads, self.n_heads);
            return Err(invalid(OP, "n_kv_heads", why));
        }
        if let PositionKind::Rotary { base, .. } = self.positions {
            if !self.head_dim().is_multiple_of(2) {
                let why =
                    format!("rotary positions need an even head width; got {}", self.head_dim());
                return Err(invalid(OP, "width", why));
            }
            if !(base.is_finite() && base > 1.0) {
                return Err(invalid(OP, "base", format!("must be finite and > 1; got {base}")));
            }
        }
        if self.biases && matches!(self.mlp, MlpKind::Gated(_)) {
            let why = "the gated MLP has no biases (turn the biases off)";
            return Err(invalid(OP, "biases", why));
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(invalid(OP, "eps", format!("must be finite and > 0, got {}", self.eps)));
        }
        for (arg, a, b) in [
            ("vocab_size", self.vocab_size, self.width),
            ("context", self.context, self.width),
            ("hidden", self.hidden, self.width),
        ] {
            if a.checked_mul(b).is_none() {
                return Err(invalid(OP, arg, format!("{a} is too large for any memory")));
            }
        }
        Ok(())
    }
}

/// A norm with its parameters: chapter 6's LayerNorm or the lesson's RMSNorm.
#[derive(Clone, Debug, PartialEq)]
pub enum Norm<T: Float> {
    /// γ and β.
    Layer(LayerNorm<T>),
    /// γ.
    Rms(RmsNorm<T>),
}

/// The MLP of a block with its parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Mlp<T: Float> {
    /// Chapter 6's net (its biases held at zero and not trained when the biases are off).
    Gelu(Ffn<T>),
    /// The lesson's gated MLP.
    Gated(GatedMlp<T>),
}

/// One block's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderLayer<T: Float> {
    /// Norm₁, before the attention.
    pub norm1: Norm<T>,
    /// The attention (its `rope` is `None`: the decoder's one table is passed to it).
    pub attn: Gqa<T>,
    /// Norm₂, before the MLP.
    pub norm2: Norm<T>,
    /// The MLP.
    pub mlp: Mlp<T>,
}

/// A decoder: its configuration and every tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoder<T: Float> {
    /// The switches and sizes.
    pub config: DecoderConfig,
    /// W_E, V×C.
    pub wte: DMatrix<T>,
    /// W_P, context×C, when the positions are learned.
    pub wpe: Option<DMatrix<T>>,
    /// The blocks.
    pub layers: Vec<DecoderLayer<T>>,
    /// The final norm.
    pub norm_f: Norm<T>,
    /// W_U, V×C, when untied.
    pub lm_head: Option<DMatrix<T>>,
    /// The rotation's table (context × d_h/2) and pairing, once for all layers, when rotary.
    pub rope: Option<Rotary<T>>,
}

impl<T: Float> Decoder<T> {
    /// A freshly initialised decoder, as chapter 9 initialises GPT-2: every weight matrix
    /// N(0, 0.02²), the two residual projections (W_O and the MLP's last matrix)
    /// N(0, (0.02/√(2l))²), biases and β 0, every γ 1. The tensors are drawn in
    /// [`Decoder::tensors_mut`] order.
    pub fn new(config: DecoderConfig, seed: u64) -> Result<Self> {
        let mut model = Decoder::zeros(config)?;
        let mut rng = Rng::new(seed);
        let proj_std = INIT_STD / (2.0 * config.layers as f64).sqrt();
        for (name, m) in model.tensors_mut() {
            let (r, c) = m.shape();
            *m = if name.ends_with("gamma") {
                DMatrix::from_element(r, c, T::one())
            } else if name.ends_with("beta")
                || name.contains(".b_")
                || name.contains(".b1")
                || name.contains(".b2")
            {
                DMatrix::zeros(r, c)
            } else if name.ends_with("w_o") || name.ends_with("w2") || name.ends_with("w_down") {
                rng.normal_matrix(r, c, proj_std)
            } else {
                rng.normal_matrix(r, c, INIT_STD)
            };
        }
        Ok(model)
    }

    /// Every tensor of `config` zero (γ too): the shapes, and the store of a gradient.
    pub fn zeros(config: DecoderConfig) -> Result<Self> {
        config.validate()?;
        let c = config;
        let (d, d_h, f) = (c.width, c.head_dim(), c.hidden);
        let z = |r: usize, k: usize| DMatrix::<T>::zeros(r, k);
        let norm = |w: usize| match c.norm {
            NormKind::Layer => Norm::Layer(LayerNorm {
                gamma: z(1, w),
                beta: z(1, w),
                eps: c.eps,
                placement: Epsilon::InsideSqrt,
            }),
            NormKind::Rms => Norm::Rms(RmsNorm { gamma: z(1, w), eps: c.eps }),
        };
        let rms = |w: usize| RmsNorm { gamma: z(1, w), eps: c.eps };
        let (q_cols, kv_cols) = (c.n_heads * d_h, c.n_kv_heads * d_h);
        let layer = || DecoderLayer {
            norm1: norm(d),
            attn: Gqa {
                n_heads: c.n_heads,
                n_kv_heads: c.n_kv_heads,
                w_q: z(d, q_cols),
                w_k: z(d, kv_cols),
                w_v: z(d, kv_cols),
                w_o: z(q_cols, d),
                qk_norm: c.qk_norm.then(|| (rms(d_h), rms(d_h))),
                rope: None,
                biases: c.biases.then(|| GqaBiases {
                    b_q: z(1, q_cols),
                    b_k: z(1, kv_cols),
                    b_v: z(1, kv_cols),
                    b_o: z(1, d),
                }),
            },
            norm2: norm(d),
            mlp: match c.mlp {
                MlpKind::Gelu => Mlp::Gelu(Ffn {
                    w1: z(d, f),
                    b1: z(1, f),
                    w2: z(f, d),
                    b2: z(1, d),
                    act: Activation::GeluTanh,
                }),
                MlpKind::Gated(gate) => {
                    Mlp::Gated(GatedMlp { w_gate: z(d, f), w_up: z(d, f), w_down: z(f, d), gate })
                }
            },
        };
        let rope = match c.positions {
            PositionKind::Learned => None,
            PositionKind::Rotary { base, pairing } => {
                Some(Rotary { table: RopeTable::new(c.context, d_h, base)?, pairing })
            }
        };
        Ok(Decoder {
            config,
            wte: z(c.vocab_size, d),
            wpe: (c.positions == PositionKind::Learned).then(|| z(c.context, d)),
            layers: (0..c.layers).map(|_| layer()).collect(),
            norm_f: norm(d),
            lm_head: (!c.tied).then(|| z(c.vocab_size, d)),
            rope,
        })
    }

    /// Every parameter tensor with its name, in one fixed order: wte, wpe, then per block
    /// norm1, the attention (w_q, w_k, w_v, w_o, the biases, the QK-norm γs), norm2, the MLP,
    /// then norm_f and lm_head; a tensor the configuration does not have is left out. The
    /// gradients of [`Decoder::loss_and_grads`] come in this order.
    pub fn tensors_mut(&mut self) -> Vec<(String, &mut DMatrix<T>)> {
        let mut out: Vec<(String, &mut DMatrix<T>)> = vec![("wte".into(), &mut self.wte)];
        if let Some(w) = &mut self.wpe {
            out.push(("wpe".into(), w));
        }
        let biases = self.config.biases;
        for (l, layer) in self.layers.iter_mut().enumerate() {
            let name = |s: &str| format!("l{l}.{s}");
            push_norm(&mut out, name("norm1"), &mut layer.norm1);
            let a = &mut layer.attn;
            for (s, m) in [("w_q", &mut a.w_q), ("w_k", &mut a.w_k), ("w_v", &mut a.w_v)] {
                out.push((name(&format!("attn.{s}")), m));
            }
            out.push((name("attn.w_o"), &mut a.w_o));
            if let Some(b) = &mut a.biases {
                for (s, m) in [
                    ("b_q", &mut b.b_q),
                    ("b_k", &mut b.b_k),
                    ("b_v", &mut b.b_v),
                    ("b_o", &mut b.b_o),
                ] {
                    out.push((name(&format!("attn.{s}")), m));
                }
            }
            if let Some((qn, kn)) = &mut a.qk_norm {
                out.push((name("attn.q_norm.gamma"), &mut qn.gamma));
                out.push((name("attn.k_norm.gamma"), &mut kn.gamma));
            }
            push_norm(&mut out, name("norm2"), &mut layer.norm2);
            match &mut layer.mlp {
                Mlp::Gelu(f) => {
                    out.push((name("mlp.w1"), &mut f.w1));
                    if biases {
                        out.push((name("mlp.b1"), &mut f.b1));
                    }
                    out.push((name("mlp.w2"), &mut f.w2));
                    if biases {
                        out.push((name("mlp.b2"), &mut f.b2));
                    }
                }
                Mlp::Gated(g) => {
                    out.push((name("mlp.w_gate"), &mut g.w_gate));
                    out.push((name("mlp.w_up"), &mut g.w_up));
                    out.push((name("mlp.w_down"), &mut g.w_down));
                }
            }
        }
        push_norm(&mut out, "norm_f".into(), &mut self.norm_f);
        if let Some(w) = &mut self.lm_head {
            out.push(("lm_head".into(), w));
        }
        out
    }

    /// Copies of every tensor with its name, in [`Decoder::tensors_mut`] order.
    pub fn tensors(&self) -> Vec<(String, DMatrix<T>)> {
        // One copy of the model, its tensors moved out of it rather than copied again.
        let mut copy = self.clone();
        copy.tensors_mut()
            .into_iter()
            .map(|(n, m)| (n, std::mem::replace(m, DMatrix::zeros(0, 0))))
            .collect()
    }

    /// Replaces every tensor by `values`, in [`Decoder::tensors_mut`] order. Errors on another
    /// count or shape.
    pub fn set_tensors(&mut self, values: &[DMatrix<T>]) -> Result<()> {
        const OP: &str = "Decoder::set_tensors";
        let slots = self.tensors_mut();
        if slots.len() != values.len() {
            let why = format!("{} tensors given, the model has {}", values.len(), slots.len());
            return Err(invalid(OP, "values", why));
        }
        if let Some((name, _)) = slots.iter().zip(values).find(|((_, m), v)| m.shape() != v.shape())
        {
            return Err(invalid(OP, "values", format!("{} has another shape", name.0)));
        }
        for ((_, m), v) in slots.into_iter().zip(values) {
            m.copy_from(v);
        }
        Ok(())
    }

    /// The number of parameters.
    pub fn parameter_count(&self) -> usize {
        self.tensors().iter().map(|(_, m)| m.len()).sum()
    }

    /// The unembedding W_U: `lm_head`, or W_E when tied.
    pub fn unembedding(&self) -> &DMatrix<T> {
        self.lm_head.as_ref().unwrap_or(&self.wte)
    }

    /// The decoder of GPT-2's choices holding chapter 9's tensors `params` (a GPT's weights or
    /// their gradients, in chapter 9's store, of the model `config`): W_QKV and b_QKV split into
    /// their three maps, every other tensor copied as it is. Errors on a configuration without
    /// learned positions or a store of another shape.
    pub fn from_gpt_tensors(config: &Config, params: &Params<T>) -> Result<Self> {
        let mut d = Decoder::zeros(DecoderConfig::of_gpt(config)?)?;
        let get = |p: Param, l: Option<usize>| {
            params.get(p, l).cloned().ok_or_else(|| {
                invalid("Decoder::from_gpt_tensors", "params", format!("{p:?} is missing"))
            })
        };
        d.wte = get(Param::Wte, None)?;
        d.wpe = Some(get(Param::Wpe, None)?);
        d.lm_head = if config.tied { None } else { Some(get(Param::LmHead, None)?) };
        let ln = |g: Param, b: Param, l: Option<usize>| -> Result<Norm<T>> {
            Ok(Norm::Layer(LayerNorm {
                gamma: get(g, l)?,
                beta: get(b, l)?,
                eps: config.layer_norm_epsilon,
                placement: Epsilon::InsideSqrt,
            }))
        };
        d.norm_f = ln(Param::LnFGamma, Param::LnFBeta, None)?;
        let third =
            |m: &DMatrix<T>, k: usize| m.columns(k * config.width, config.width).into_owned();
        for (l, layer) in d.layers.iter_mut().enumerate() {
            let at = Some(l);
            layer.norm1 = ln(Param::Ln1Gamma, Param::Ln1Beta, at)?;
            layer.norm2 = ln(Param::Ln2Gamma, Param::Ln2Beta, at)?;
            let (w, b) = (get(Param::WQkv, at)?, get(Param::BQkv, at)?);
            let a = &mut layer.attn;
            (a.w_q, a.w_k, a.w_v, a.w_o) =
                (third(&w, 0), third(&w, 1), third(&w, 2), get(Param::WO, at)?);
            a.biases = Some(GqaBiases {
                b_q: third(&b, 0),
                b_k: third(&b, 1),
                b_v: third(&b, 2),
                b_o: get(Param::BO, at)?,
            });
            layer.mlp = Mlp::Gelu(Ffn {
                w1: get(Param::W1, at)?,
                b1: get(Param::B1, at)?,
                w2: get(Param::W2, at)?,
                b2: get(Param::B2, at)?,
                act: Activation::GeluTanh,
            });
        }
        Ok(d)
    }
}

/// A norm's γ (and β) into the list of tensors.
fn push_norm<'a, T: Float>(
    out: &mut Vec<(String, &'a mut DMatrix<T>)>,
    name: String,
    norm: &'a mut Norm<T>,
) {
    match norm {
        Norm::Layer(n) => {
            out.push((format!("{name}.gamma"), &mut n.gamma));
            out.push((format!("{name}.beta"), &mut n.beta));
        }
        Norm::Rms(n) => out.push((format!("{name}.gamma"), &mut n.gamma)),
    }
}
