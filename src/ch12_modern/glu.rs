//! Gated MLPs: SwiGLU (Llama, Mistral, Qwen) and GeGLU (Gemma).
//!
//! ```text
//! A = X W_gate,   B = X W_up          (N×F each)
//! H = φ(A) ⊙ B                        φ = SiLU (Swish) or GELU: the gate
//! Y = H W_down                        (N×C)
//! ```
//!
//! with no biases, as in the models that use them. Three matrices of C×F instead of the GPT-2
//! MLP's two of C×4C: the hidden width F = 8C/3 keeps the parameter count (3·C·8C/3 = 8C²), and
//! Llama rounds it up to a multiple of 256 ([`gated_hidden_width`]).

use crate::ch01_logistic::sigmoid;
use crate::ch03_mlp::Activation;
use crate::error::{Result, invalid, shape_error, shape_of};
use crate::float::{Float, ensure_finite};
use crate::matmul::{matmul, matmul_nt, matmul_tn};
use nalgebra::DMatrix;

/// The multiple Llama rounds the gated hidden width up to.
pub const LLAMA_HIDDEN_MULTIPLE: usize = 256;

/// The function on the gate branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// SiLU (Swish with β = 1): φ(a) = a σ(a); φ′(a) = σ(a)(1 + a(1 − σ(a))). SwiGLU.
    Swish,
    /// GELU in its tanh form (chapter 3's [`Activation::GeluTanh`]). GeGLU.
    Gelu,
}

impl Gate {
    /// The MLP's name: "SwiGLU" or "GeGLU".
    pub fn name(self) -> &'static str {
        match self {
            Gate::Swish => "SwiGLU",
            Gate::Gelu => "GeGLU",
        }
    }

    /// φ(a).
    pub fn apply(self, a: f64) -> f64 {
        match self {
            Gate::Swish => a * sigmoid(a),
            Gate::Gelu => Activation::GeluTanh.apply(a),
        }
    }

    /// φ′(a).
    pub fn derivative(self, a: f64) -> f64 {
        match self {
            Gate::Swish => {
                let s = sigmoid(a);
                s * (1.0 + a * (1.0 - s))
            }
            Gate::Gelu => Activation::GeluTanh.derivative(a),
        }
    }
}

/// The hidden width of a gated MLP that keeps the 4× MLP's parameter count, rounded up to a
/// multiple: F = m·⌈⌊8C/3⌋/m⌉ (C = 4096, m = 256 gives Llama 2 7B's 11 008). Errors on a zero
/// width or multiple.
pub fn gated_hidden_width(d_model: usize, multiple: usize) -> Result<usize> {
    if d_model == 0 || multiple == 0 {
        return Err(invalid(
            "gated_hidden_width",
            "d_model, multiple",
            format!("both must be at least 1; got {d_model}, {multiple}"),
        ));
    }
    Ok((8 * d_model / 3).div_ceil(multiple) * multiple)
}

/// The weights of a gated MLP: W_gate and W_up C×F, W_down F×C, and the gate's function.
#[derive(Clone, Debug, PartialEq)]
pub struct GatedMlp<T: Float> {
    /// W_gate, C×F: its product goes through φ.
    pub w_gate: DMatrix<T>,
    /// W_up, C×F: its product is multiplied by the gate, unchanged.
    pub w_up: DMatrix<T>,
    /// W_down, F×C.
    pub w_down: DMatrix<T>,
    /// φ.
    pub gate: Gate,
}

impl<T: Float> GatedMlp<T> {
    /// Checks that the three shapes chain (C×F, C×F, F×C) and the weights are finite.
    pub fn validate(&self, op: &'static str) -> Result<()> {
        let (c, f) = self.w_gate.shape();
        if c == 0 || f == 0 {
            return Err(shape_error(op, "w_gate", "C×F with C, F ≥ 1", shape_of(&self.w_gate)));
        }
        if self.w_up.shape() != (c, f) {
            return Err(shape_error(op, "w_up", format!("{c}×{f}"), shape_of(&self.w_up)));
        }
        if self.w_down.shape() != (f, c) {
            return Err(shape_error(op, "w_down", format!("{f}×{c}"), shape_of(&self.w_down)));
        }
        ensure_finite(op, "w_gate", &self.w_gate)?;
        ensure_finite(op, "w_up", &self.w_up)?;
        ensure_finite(op, "w_down", &self.w_down)
    }

    /// Its parameter count, 3·C·F.
    pub fn parameter_count(&self) -> usize {
        self.w_gate.len() + self.w_up.len() + self.w_down.len()
    }
}

/// What [`glu_backward`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct GluCache<T: Float> {
    /// X, N×C.
    pub x: DMatrix<T>,
    /// A = X W_gate, N×F.
    pub a: DMatrix<T>,
    /// B = X W_up, N×F.
    pub b: DMatrix<T>,
    /// H = φ(A) ⊙ B, N×F.
    pub h: DMatrix<T>,
}

/// Gradients of a gated MLP.
#[derive(Clone, Debug, PartialEq)]
pub struct GluGrads<T: Float> {
    /// ∂L/∂X, N×C.
    pub d_x: DMatrix<T>,
    /// ∂L/∂W_gate, C×F.
    pub d_w_gate: DMatrix<T>,
    /// ∂L/∂W_up, C×F.
    pub d_w_up: DMatrix<T>,
    /// ∂L/∂W_down, F×C.
    pub d_w_down: DMatrix<T>,
}

/// The gated MLP: Y = (φ(X W_gate) ⊙ X W_up) W_down. x is N×C, Y is N×C. Errors on shapes that
/// do not chain and non-finite input.
pub fn glu_forward<T: Float>(p: &GatedMlp<T>, x: &DMatrix<T>) -> Result<(DMatrix<T>, GluCache<T>)> {
    const OP: &str = "glu_forward";
    p.validate(OP)?;
    if x.ncols() != p.w_gate.nrows() {
        return Err(shape_error(
            OP,
            "x and w_gate",
            format!("x with {} columns", p.w_gate.nrows()),
            shape_of(x),
        ));
    }
    ensure_finite(OP, "x", x)?;
    let a = matmul(x, &p.w_gate)?; //                                        A = X W_gate
    let b = matmul(x, &p.w_up)?; //                                          B = X W_up
    let h = a.zip_map(&b, |a, b| T::of(p.gate.apply(a.as_f64())) * b); //   H = φ(A) ⊙ B
    let y = matmul(&h, &p.w_down)?; //                                       Y = H W_down
    Ok((y, GluCache { x: x.clone(), a, b, h }))
}

/// Backward of [`glu_forward`]:
///
/// ```text
/// Y = H W_down      ⇒ ∂L/∂W_down = Hᵀ ∂L/∂Y,   ∂L/∂H = ∂L/∂Y W_downᵀ
/// H = φ(A) ⊙ B      ⇒ ∂L/∂A = ∂L/∂H ⊙ B ⊙ φ′(A),   ∂L/∂B = ∂L/∂H ⊙ φ(A)
/// A = X W_gate      ⇒ ∂L/∂W_gate = Xᵀ ∂L/∂A
/// B = X W_up        ⇒ ∂L/∂W_up = Xᵀ ∂L/∂B
///                     ∂L/∂X = ∂L/∂A W_gateᵀ + ∂L/∂B W_upᵀ
/// ```
pub fn glu_backward<T: Float>(
    p: &GatedMlp<T>,
    cache: &GluCache<T>,
    d_y: &DMatrix<T>,
) -> Result<GluGrads<T>> {
    const OP: &str = "glu_backward";
    p.validate(OP)?;
    let want = (cache.h.nrows(), p.w_down.ncols());
    if d_y.shape() != want {
        return Err(shape_error(OP, "d_y", format!("{}×{}", want.0, want.1), shape_of(d_y)));
    }
    ensure_finite(OP, "d_y", d_y)?;
    // Y = H W_down
    let d_w_down = matmul_tn(&cache.h, d_y)?;
    let d_h = matmul_nt(d_y, &p.w_down)?;
    // H = φ(A) ⊙ B
    let gate = p.gate;
    let d_a = DMatrix::from_fn(d_h.nrows(), d_h.ncols(), |r, c| {
        d_h[(r, c)] * cache.b[(r, c)] * T::of(gate.derivative(cache.a[(r, c)].as_f64()))
    });
    let d_b = d_h.zip_map(&cache.a, |d, a| d * T::of(gate.apply(a.as_f64())));
    // A = X W_gate, B = X W_up
    let d_w_gate = matmul_tn(&cache.x, &d_a)?;
    let d_w_up = matmul_tn(&cache.x, &d_b)?;
    let d_x = matmul_nt(&d_a, &p.w_gate)? + matmul_nt(&d_b, &p.w_up)?;
    Ok(GluGrads { d_x, d_w_gate, d_w_up, d_w_down })
}
