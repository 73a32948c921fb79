//! The decoder's forward pass, its loss on a chapter 9 batch, and the backward pass, each
//! backward line naming the forward line it differentiates.

use super::{Decoder, Mlp, Norm};
use crate::ch06_attention::{
    FfnCache, LnCache, ffn_backward, ffn_forward, layer_norm_backward, layer_norm_forward,
};
use crate::ch09_gpt::data::{Batch, Token, check_ids};
use crate::ch09_gpt::model::{gather_rows, scatter_embedding_gradient, scatter_rows, scored};
use crate::ch12_modern::glu::{Gate, GatedMlp, GluCache, GluGrads, glu_forward};
use crate::ch12_modern::gqa::{GqaCache, gqa_backward_with, gqa_forward_with};
use crate::ch12_modern::rms_norm::{RmsCache, rms_norm_backward, rms_norm_forward};
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::Float;
use crate::float::ensure_finite;
use crate::matmul::{matmul, matmul_nt, matmul_tn};
use nalgebra::DMatrix;

/// A norm's cache.
#[derive(Clone, Debug)]
pub(super) enum NormCache<T: Float> {
    Layer(LnCache<T>),
    Rms(RmsCache<T>),
}

/// An MLP's cache.
#[derive(Clone, Debug)]
enum MlpCache<T: Float> {
    Gelu(FfnCache<T>),
    Gated(GluCache<T>),
}

/// One block's caches.
#[derive(Clone, Debug)]
struct LayerCache<T: Float> {
    norm1: NormCache<T>,
    attn: GqaCache<T>,
    norm2: NormCache<T>,
    mlp: MlpCache<T>,
}

/// What the backward pass needs from the forward pass.
#[derive(Clone, Debug)]
pub struct DecoderCache<T: Float> {
    inputs: Vec<Token>,
    seq_len: usize,
    layers: Vec<LayerCache<T>>,
    norm_f: NormCache<T>,
    /// h_f = Norm_f(x_L), N×C.
    pub hidden: DMatrix<T>,
}

/// The loss of a batch and every gradient.
#[derive(Clone, Debug)]
pub struct DecoderLoss<T: Float> {
    /// The mean next-token log-loss over the scored positions, in nats.
    pub loss: f64,
    /// ∂L/∂θ, held in a decoder of the model's shape: `grads.tensors()` lists them in the
    /// model's [`Decoder::tensors_mut`] order.
    pub grads: Decoder<T>,
}

/// y = Norm(x), by chapter 6's LayerNorm or the lesson's RMSNorm.
pub(super) fn norm_forward<T: Float>(
    n: &Norm<T>,
    x: &DMatrix<T>,
) -> Result<(DMatrix<T>, NormCache<T>)> {
    Ok(match n {
        Norm::Layer(ln) => {
            let (y, c) = layer_norm_forward(ln, x)?;
            (y, NormCache::Layer(c))
        }
        Norm::Rms(rms) => {
            let (y, c) = rms_norm_forward(rms, x)?;
            (y, NormCache::Rms(c))
        }
    })
}

/// Backward of [`norm_forward`]: ∂L/∂x, with ∂L/∂γ (and ∂L/∂β) written into `slot`.
fn norm_backward<T: Float>(
    n: &Norm<T>,
    cache: &NormCache<T>,
    d_y: &DMatrix<T>,
    slot: &mut Norm<T>,
) -> Result<DMatrix<T>> {
    match (n, cache, slot) {
        (Norm::Layer(ln), NormCache::Layer(c), Norm::Layer(s)) => {
            let g = layer_norm_backward(ln, c, d_y)?;
            (s.gamma, s.beta) = (g.d_gamma, g.d_beta);
            Ok(g.d_x)
        }
        (Norm::Rms(rms), NormCache::Rms(c), Norm::Rms(s)) => {
            let g = rms_norm_backward(rms, c, d_y)?;
            s.gamma = g.d_gamma;
            Ok(g.d_x)
        }
        _ => Err(invalid("Decoder::loss_and_grads", "cache", "was made by another kind of norm")),
    }
}

/// y = Mlp(x): chapter 6's GELU net or the lesson's gated MLP.
pub(super) fn mlp_forward<T: Float>(m: &Mlp<T>, x: &DMatrix<T>) -> Result<DMatrix<T>> {
    Ok(mlp_forward_cached(m, x)?.0)
}

fn mlp_forward_cached<T: Float>(m: &Mlp<T>, x: &DMatrix<T>) -> Result<(DMatrix<T>, MlpCache<T>)> {
    Ok(match m {
        Mlp::Gelu(f) => {
            let (y, c) = ffn_forward(f, x)?;
            (y, MlpCache::Gelu(c))
        }
        Mlp::Gated(g) => {
            let (y, c) = glu_forward(g, x)?;
            (y, MlpCache::Gated(c))
        }
    })
}

/// Backward of the MLP: ∂L/∂x, its weights' gradients written into `slot`.
fn mlp_backward<T: Float>(
    m: &Mlp<T>,
    cache: &MlpCache<T>,
    d_y: &DMatrix<T>,
    slot: &mut Mlp<T>,
) -> Result<DMatrix<T>> {
    match (m, cache, slot) {
        (Mlp::Gelu(f), MlpCache::Gelu(c), Mlp::Gelu(s)) => {
            let g = ffn_backward(f, c, d_y)?;
            (s.w1, s.b1, s.w2, s.b2) = (g.d_w1, g.d_b1, g.d_w2, g.d_b2);
            Ok(g.d_x)
        }
        (Mlp::Gated(p), MlpCache::Gated(c), Mlp::Gated(s)) => {
            let g = glu_backward_one_gate(p, c, d_y)?;
            (s.w_gate, s.w_up, s.w_down) = (g.d_w_gate, g.d_w_up, g.d_w_down);
            Ok(g.d_x)
        }
        _ => Err(invalid("Decoder::loss_and_grads", "cache", "was made by another kind of MLP")),
    }
}

/// φ(a) and φ′(a) of `gate` together, as [`Gate::apply`] and [`Gate::derivative`] compute
/// them: for SwiGLU one σ(a) serves both, φ = aσ and φ′ = σ(1 + a(1 − σ)) (the same operations in
/// the same order, so the same bits); GeGLU calls the two.
pub fn gate_and_slope(gate: Gate, a: f64) -> (f64, f64) {
    match gate {
        Gate::Swish => {
            let s = crate::ch01_logistic::sigmoid(a);
            (a * s, s * (1.0 + a * (1.0 - s)))
        }
        Gate::Gelu => (gate.apply(a), gate.derivative(a)),
    }
}

/// [`glu_backward`] as the decoder's step runs it, bit for bit: the same products in the same
/// order, with ∂L/∂A = ∂L/∂H ⊙ B ⊙ φ′(A) and ∂L/∂B = ∂L/∂H ⊙ φ(A) in one pass that evaluates
/// the gate once per entry ([`gate_and_slope`]; the lesson's function evaluates σ twice for
/// SwiGLU), and without checking the weights again (the decoder's were checked when it was
/// built or read; `d_y` and the shapes are checked). N×C in, as [`glu_backward`].
///
/// [`glu_backward`]: crate::ch12_modern::glu::glu_backward
pub fn glu_backward_one_gate<T: Float>(
    p: &GatedMlp<T>,
    cache: &GluCache<T>,
    d_y: &DMatrix<T>,
) -> Result<GluGrads<T>> {
    const OP: &str = "glu_backward";
    let want = (cache.h.nrows(), p.w_down.ncols());
    if d_y.shape() != want || cache.a.shape() != cache.b.shape() {
        return Err(shape_error(OP, "d_y", format!("{}×{}", want.0, want.1), shape_of(d_y)));
    }
    ensure_finite(OP, "d_y", d_y)?;
    let d_w_down = matmul_tn(&cache.h, d_y)?; //                          Y = H W_down
    let d_h = matmul_nt(d_y, &p.w_down)?;
    if d_h.shape() != cache.a.shape() {
        return Err(shape_error(OP, "cache", format!("{:?}", d_h.shape()), shape_of(&cache.a)));
    }
    let mut d_a = d_h.clone(); //                                          H = φ(A) ⊙ B
    let mut d_b = d_h;
    let entries = d_a.iter_mut().zip(d_b.iter_mut()).zip(cache.a.iter().zip(cache.b.iter()));
    for ((da, db), (&a, &b)) in entries {
        let (phi, slope) = gate_and_slope(p.gate, a.as_f64());
        let d = *da;
        *da = d * b * T::of(slope);
        *db = d * T::of(phi);
    }
    let d_w_gate = matmul_tn(&cache.x, &d_a)?; //                         A = X W_gate
    let d_w_up = matmul_tn(&cache.x, &d_b)?; //                           B = X W_up
    let d_x = matmul_nt(&d_a, &p.w_gate)? + matmul_nt(&d_b, &p.w_up)?;
    Ok(GluGrads { d_x, d_w_gate, d_w_up, d_w_down })
}

impl<T: Float> Decoder<T> {
    /// Checks B sequences of `seq_len` tokens: not empty, whole sequences, no longer than the
    /// context, every id below V.
    fn check_sequences(&self, op: &'static str, inputs: &[Token], seq_len: usize) -> Result<()> {
        if inputs.is_empty() || seq_len == 0 {
            return Err(Error::Empty { op, arg: "inputs" });
        }
        if !inputs.len().is_multiple_of(seq_len) {
            let want = format!("a multiple of T = {seq_len} tokens");
            return Err(shape_error(op, "inputs and seq_len", want, inputs.len().to_string()));
        }
        if seq_len > self.config.context {
            let why = format!("T = {seq_len} is longer than the context {}", self.config.context);
            return Err(invalid(op, "seq_len", why));
        }
        check_ids(op, "inputs", inputs, self.config.vocab_size)
    }

    /// x₀: row b·T + t is W_E\[u_{b,t}\], plus W_P\[t\] when the positions are learned.
    pub fn embed(&self, inputs: &[Token], seq_len: usize) -> Result<DMatrix<T>> {
        self.check_sequences("Decoder::embed", inputs, seq_len)?;
        let token = |r: usize, c: usize| self.wte[(inputs[r] as usize, c)];
        Ok(match &self.wpe {
            Some(wpe) => DMatrix::from_fn(inputs.len(), self.config.width, |r, c| {
                token(r, c) + wpe[(r % seq_len, c)]
            }),
            None => DMatrix::from_fn(inputs.len(), self.config.width, token),
        })
    }

    /// The whole forward pass to the final hidden states, keeping what the backward needs.
    pub fn forward(&self, inputs: &[Token], seq_len: usize) -> Result<DecoderCache<T>> {
        let mut x = self.embed(inputs, seq_len)?; //                       x₀
        let rope = self.rope.as_ref();
        let mut layers = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            let (n1, norm1) = norm_forward(&layer.norm1, &x)?; //           n₁ = Norm₁(x)
            let (a, attn) = gqa_forward_with(&layer.attn, rope, &n1, seq_len)?; // Attn(n₁)
            let h = x + a; //                                               h = x + Attn(n₁)
            let (n2, norm2) = norm_forward(&layer.norm2, &h)?; //           n₂ = Norm₂(h)
            let (m, mlp) = mlp_forward_cached(&layer.mlp, &n2)?; //         Mlp(n₂)
            x = h + m; //                                                   x' = h + Mlp(n₂)
            layers.push(LayerCache { norm1, attn, norm2, mlp });
        }
        let (hidden, norm_f) = norm_forward(&self.norm_f, &x)?; //          h_f = Norm_f(x_L)
        Ok(DecoderCache { inputs: inputs.to_vec(), seq_len, layers, norm_f, hidden })
    }

    /// The logits at every position of B sequences of T tokens: (B·T)×V, z = h_f W_Uᵀ.
    pub fn logits(&self, inputs: &[Token], seq_len: usize) -> Result<DMatrix<T>> {
        matmul_nt(&self.forward(inputs, seq_len)?.hidden, self.unembedding())
    }

    /// The mean next-token loss of a batch (no gradients).
    pub fn loss(&self, batch: &Batch) -> Result<f64> {
        batch.check("Decoder::loss", self.config.vocab_size)?;
        let cache = self.forward(&batch.inputs, batch.seq_len)?;
        let (rows, targets) = scored(batch)?;
        let z = matmul_nt(&gather_rows(&cache.hidden, &rows), self.unembedding())?;
        Ok(crate::ch02_softmax::cross_entropy_from_logits(&z, &targets)?.as_f64())
    }

    /// The loss of a batch and the gradient of every parameter tensor, by the forward pass and
    /// the backward pass:
    ///
    /// ```text
    /// ∂L/∂z = (softmax(z) − onehot)/S;  ∂L/∂h_s = ∂L/∂z W_U,  ∂L/∂W_U = (∂L/∂z)ᵀ h_s
    /// ∂L/∂x_L = Norm_f backward;  per block, last first:
    ///   x' = h + Mlp(Norm₂(h))   ⇒ ∂L/∂h = ∂L/∂x' + Norm₂ backward(Mlp backward(∂L/∂x'))
    ///   h = x + Attn(Norm₁(x))   ⇒ ∂L/∂x = ∂L/∂h + Norm₁ backward(Attn backward(∂L/∂h))
    /// ∂L/∂W_E[u] += ∂L/∂x₀ rows (and ∂L/∂W_P[t]);  tied: ∂L/∂W_E += ∂L/∂W_U
    /// ```
    pub fn loss_and_grads(&self, batch: &Batch) -> Result<DecoderLoss<T>> {
        batch.check("Decoder::loss_and_grads", self.config.vocab_size)?;
        let cache = self.forward(&batch.inputs, batch.seq_len)?;
        let (rows, targets) = scored(batch)?;
        let h_s = gather_rows(&cache.hidden, &rows);
        let z = matmul_nt(&h_s, self.unembedding())?; //                  z = h_s W_Uᵀ
        let (loss, d_z) =
            crate::ch02_softmax::cross_entropy_from_logits_with_gradient(&z, &targets)?;
        let mut grads = Decoder::zeros(self.config)?;
        let d_hs = matmul(&d_z, self.unembedding())?; //                  ∂h_s = ∂z W_U
        let d_wu = matmul_tn(&d_z, &h_s)?; //                             ∂W_U = ∂zᵀ h_s
        let mut d_hidden = DMatrix::zeros(cache.hidden.nrows(), cache.hidden.ncols());
        scatter_rows(&mut d_hidden, &d_hs, &rows); //                     h_s = rows of h_f
        // h_f = Norm_f(x_L)
        let mut d_x = norm_backward(&self.norm_f, &cache.norm_f, &d_hidden, &mut grads.norm_f)?;
        let rope = self.rope.as_ref();
        for (l, (layer, c)) in self.layers.iter().zip(&cache.layers).enumerate().rev() {
            let slot = &mut grads.layers[l];
            // x' = h + Mlp(n₂), n₂ = Norm₂(h)
            let d_n2 = mlp_backward(&layer.mlp, &c.mlp, &d_x, &mut slot.mlp)?;
            let d_h = d_x + norm_backward(&layer.norm2, &c.norm2, &d_n2, &mut slot.norm2)?;
            // h = x + Attn(n₁), n₁ = Norm₁(x)
            let g = gqa_backward_with(&layer.attn, rope, &c.attn, &d_h)?;
            let a = &mut slot.attn;
            (a.w_q, a.w_k, a.w_v, a.w_o) = (g.d_w_q, g.d_w_k, g.d_w_v, g.d_w_o);
            a.biases = g.d_biases;
            if let (Some((qn, kn)), Some((dq, dk))) = (&mut a.qk_norm, g.d_qk_gamma) {
                (qn.gamma, kn.gamma) = (dq, dk);
            }
            d_x = d_h + norm_backward(&layer.norm1, &c.norm1, &g.d_x, &mut slot.norm1)?;
        }
        // x₀ = W_E[u] (+ W_P[t])
        let (inputs, t) = (&cache.inputs, cache.seq_len);
        scatter_embedding_gradient(&d_x, inputs, t, &mut grads.wte, grads.wpe.as_mut());
        match &mut grads.lm_head {
            Some(slot) => *slot = d_wu,
            None => grads.wte += &d_wu, // tied: W_E's two uses add
        }
        Ok(DecoderLoss { loss: loss.as_f64(), grads })
    }
}
