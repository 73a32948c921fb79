//! Backpropagation by the chain rule, as D0 derives it: a chain of one-neuron sigmoid
//! layers, the three factors of ∂C₀/∂w⁽ᴸ⁾, the error carried one layer back, and the sum over
//! the neurons of a wider layer against the matrix form the MLP uses.

use super::activations::Activation;
use super::dense::mse_backward;
use super::mlp::{Layer, Mlp};
use crate::error::{Error, Result, shape_error};
use nalgebra::DMatrix;

// ───────────────── the document's chain of one-neuron layers ─────────────────

/// A chain of one-neuron sigmoid layers: a⁽ˡ⁾ = σ(z⁽ˡ⁾), z⁽ˡ⁾ = w⁽ˡ⁾a⁽ˡ⁻¹⁾ + b⁽ˡ⁾ for l = 1 … L,
/// a⁽⁰⁾ the input. `w[l − 1]` and `b[l − 1]` hold w⁽ˡ⁾ and b⁽ˡ⁾.
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    /// w⁽¹⁾ … w⁽ᴸ⁾.
    pub w: Vec<f64>,
    /// b⁽¹⁾ … b⁽ᴸ⁾.
    pub b: Vec<f64>,
}

/// Every z⁽ˡ⁾ and a⁽ˡ⁾ of one pass through a [`Chain`]; `a[0]` is the input.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainTrace {
    /// z⁽¹⁾ … z⁽ᴸ⁾ (index l − 1).
    pub z: Vec<f64>,
    /// a⁽⁰⁾ … a⁽ᴸ⁾ (index l).
    pub a: Vec<f64>,
}

/// The gradient of C₀ with respect to every weight and bias of a chain, and to its input.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainGrads {
    /// ∂C₀/∂w⁽ˡ⁾ for l = 1 … L.
    pub d_w: Vec<f64>,
    /// ∂C₀/∂b⁽ˡ⁾ for l = 1 … L.
    pub d_b: Vec<f64>,
    /// ∂C₀/∂a⁽⁰⁾.
    pub d_input: f64,
}

impl Chain {
    /// A chain from its weights and biases; errors when the lengths differ, are zero, or hold NaN.
    pub fn new(w: Vec<f64>, b: Vec<f64>) -> Result<Self> {
        if w.is_empty() {
            return Err(Error::Empty { op: "Chain::new", arg: "w" });
        }
        if w.len() != b.len() {
            return Err(shape_error(
                "Chain::new",
                "w and b",
                format!("{} biases (one per weight)", w.len()),
                format!("{}", b.len()),
            ));
        }
        crate::float::ensure_finite_slice("Chain::new", "w", &w)?;
        crate::float::ensure_finite_slice("Chain::new", "b", &b)?;
        Ok(Chain { w, b })
    }

    /// L, the number of layers after the input.
    pub fn depth(&self) -> usize {
        self.w.len()
    }

    /// The forward pass from a⁽⁰⁾ = `input`.
    pub fn forward(&self, input: f64) -> ChainTrace {
        let mut a = vec![input];
        let mut z = Vec::with_capacity(self.depth());
        for (w, b) in self.w.iter().zip(&self.b) {
            let zl = w * a[a.len() - 1] + b;
            z.push(zl);
            a.push(crate::ch01_logistic::sigmoid(zl));
        }
        ChainTrace { z, a }
    }

    /// C₀ = (a⁽ᴸ⁾ − y)² for one training example.
    pub fn cost(&self, input: f64, y: f64) -> f64 {
        let out = self.forward(input).a[self.depth()];
        (out - y) * (out - y)
    }

    /// Backpropagation down the chain, one layer at a time:
    /// ∂C₀/∂w⁽ˡ⁾ = a⁽ˡ⁻¹⁾ σ′(z⁽ˡ⁾) ∂C₀/∂a⁽ˡ⁾, ∂C₀/∂b⁽ˡ⁾ = σ′(z⁽ˡ⁾) ∂C₀/∂a⁽ˡ⁾,
    /// ∂C₀/∂a⁽ˡ⁻¹⁾ = w⁽ˡ⁾ σ′(z⁽ˡ⁾) ∂C₀/∂a⁽ˡ⁾, starting from ∂C₀/∂a⁽ᴸ⁾ = 2(a⁽ᴸ⁾ − y).
    pub fn gradients(&self, input: f64, y: f64) -> ChainGrads {
        let t = self.forward(input);
        let l_max = self.depth();
        let mut d_a = d_c0_d_a_last(t.a[l_max], y);
        let (mut d_w, mut d_b) = (vec![0.0; l_max], vec![0.0; l_max]);
        for l in (1..=l_max).rev() {
            let s = crate::ch01_logistic::sigmoid_derivative(t.z[l - 1]);
            d_w[l - 1] = t.a[l - 1] * s * d_a; // z⁽ˡ⁾ = w⁽ˡ⁾a⁽ˡ⁻¹⁾ + b⁽ˡ⁾ ⇒ ∂z/∂w = a⁽ˡ⁻¹⁾
            d_b[l - 1] = s * d_a; //                                  ∂z/∂b = 1
            d_a *= self.w[l - 1] * s; //                              ∂z/∂a⁽ˡ⁻¹⁾ = w⁽ˡ⁾
        }
        ChainGrads { d_w, d_b, d_input: d_a }
    }

    /// The cost over several training examples, C = (1/n) Σₖ Cₖ, and its gradient
    /// ∂C/∂w⁽ˡ⁾ = (1/n) Σₖ ∂Cₖ/∂w⁽ˡ⁾ (likewise for b). Errors on no examples or mismatched lengths.
    pub fn average_gradients(&self, inputs: &[f64], ys: &[f64]) -> Result<ChainAverage> {
        if inputs.is_empty() {
            return Err(Error::Empty { op: "Chain::average_gradients", arg: "inputs" });
        }
        if inputs.len() != ys.len() {
            return Err(shape_error(
                "Chain::average_gradients",
                "inputs and ys",
                format!("{} targets", inputs.len()),
                format!("{}", ys.len()),
            ));
        }
        crate::float::ensure_finite_slice("Chain::average_gradients", "inputs", inputs)?;
        crate::float::ensure_finite_slice("Chain::average_gradients", "ys", ys)?;
        let n = inputs.len() as f64;
        let mut avg =
            ChainAverage { cost: 0.0, d_w: vec![0.0; self.depth()], d_b: vec![0.0; self.depth()] };
        for (&x, &y) in inputs.iter().zip(ys) {
            let g = self.gradients(x, y);
            avg.cost += self.cost(x, y) / n;
            for l in 0..self.depth() {
                avg.d_w[l] += g.d_w[l] / n;
                avg.d_b[l] += g.d_b[l] / n;
            }
        }
        Ok(avg)
    }
}

/// The cost of a [`Chain`] averaged over training examples, and its gradient.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainAverage {
    /// C = (1/n) Σₖ Cₖ.
    pub cost: f64,
    /// ∂C/∂w⁽ˡ⁾ = (1/n) Σₖ ∂Cₖ/∂w⁽ˡ⁾ for l = 1 … L.
    pub d_w: Vec<f64>,
    /// ∂C/∂b⁽ˡ⁾ = (1/n) Σₖ ∂Cₖ/∂b⁽ˡ⁾ for l = 1 … L.
    pub d_b: Vec<f64>,
}

/// ∂C₀/∂a⁽ᴸ⁾ = 2(a⁽ᴸ⁾ − y), the derivative of C₀ = (a⁽ᴸ⁾ − y)² (the document prints a z where the
/// 2 belongs).
pub fn d_c0_d_a_last(a_last: f64, y: f64) -> f64 {
    2.0 * (a_last - y)
}

/// ∂C₀/∂w⁽ᴸ⁾ = a⁽ᴸ⁻¹⁾ · σ′(z⁽ᴸ⁾) · 2(a⁽ᴸ⁾ − y), the three chain-rule factors of the last layer.
pub fn d_c0_d_w_last(trace: &ChainTrace, y: f64) -> f64 {
    let l = trace.z.len();
    trace.a[l - 1]
        * crate::ch01_logistic::sigmoid_derivative(trace.z[l - 1])
        * d_c0_d_a_last(trace.a[l], y)
}

/// ∂C₀/∂b⁽ᴸ⁾ = 1 · σ′(z⁽ᴸ⁾) · 2(a⁽ᴸ⁾ − y).
pub fn d_c0_d_b_last(trace: &ChainTrace, y: f64) -> f64 {
    let l = trace.z.len();
    crate::ch01_logistic::sigmoid_derivative(trace.z[l - 1]) * d_c0_d_a_last(trace.a[l], y)
}

/// ∂C₀/∂a⁽ᴸ⁻¹⁾ = w⁽ᴸ⁾ · σ′(z⁽ᴸ⁾) · 2(a⁽ᴸ⁾ − y): how the last weight carries the error one layer
/// back.
pub fn d_c0_d_a_prev(chain: &Chain, trace: &ChainTrace, y: f64) -> f64 {
    let l = trace.z.len();
    chain.w[l - 1]
        * crate::ch01_logistic::sigmoid_derivative(trace.z[l - 1])
        * d_c0_d_a_last(trace.a[l], y)
}

/// The multi-neuron form, written as the document's sum over the neurons j of layer L:
/// ∂C₀/∂aₖ⁽ᴸ⁻¹⁾ = Σⱼ₌₀^{n_L − 1} wⱼₖ⁽ᴸ⁾ σ′(zⱼ⁽ᴸ⁾) 2(aⱼ⁽ᴸ⁾ − yⱼ), for a sigmoid layer
/// a⁽ᴸ⁾ = σ(W a⁽ᴸ⁻¹⁾ + b) with W of n_L rows (document orientation: one row per neuron of layer L).
/// Shapes: `w_rows` n_L×n_{L−1}, `b` and `y` length n_L, `a_prev` length n_{L−1}; returns length
/// n_{L−1}.
pub fn d_c0_d_a_prev_sum(
    w_rows: &DMatrix<f64>,
    b: &[f64],
    a_prev: &[f64],
    y: &[f64],
) -> Result<Vec<f64>> {
    const OP: &str = "d_c0_d_a_prev_sum";
    let (n_l, n_prev) = w_rows.shape();
    if a_prev.len() != n_prev || b.len() != n_l || y.len() != n_l {
        return Err(shape_error(
            OP,
            "w_rows, b, a_prev, y",
            format!("b and y of length {n_l}, a_prev of length {n_prev} for W {n_l}×{n_prev}"),
            format!("b {}, a_prev {}, y {}", b.len(), a_prev.len(), y.len()),
        ));
    }
    let mut out = vec![0.0; n_prev];
    for (k, o) in out.iter_mut().enumerate() {
        for j in 0..n_l {
            let zj: f64 = (0..n_prev).map(|i| w_rows[(j, i)] * a_prev[i]).sum::<f64>() + b[j];
            let aj = crate::ch01_logistic::sigmoid(zj);
            *o += w_rows[(j, k)] * crate::ch01_logistic::sigmoid_derivative(zj) * 2.0 * (aj - y[j]);
        }
    }
    Ok(out)
}

/// The chapter's four-layer chain (the document's "4 layers with one neuron": a⁽⁰⁾ and three
/// sigmoid layers), its input and its target.
pub fn chapter_chain() -> (Chain, f64, f64) {
    (Chain { w: vec![1.5, -2.0, 0.8], b: vec![0.1, 0.3, -0.2] }, 0.6, 0.2)
}

/// ∂C₀/∂a⁽ᴸ⁻¹⁾ for one sigmoid layer by the matrix route of [`Mlp::backward`]: the layer as a
/// dense layer (our orientation, W transposed), C₀ = Σⱼ (aⱼ − yⱼ)², [`mse_backward`] with N = 1,
/// [`activation_backward`](super::activation_backward), [`dense_backward`](super::dense_backward).
/// The same shapes as [`d_c0_d_a_prev_sum`].
pub fn multi_neuron_matrix_form(
    w_rows: &DMatrix<f64>,
    b: &[f64],
    a_prev: &[f64],
    y: &[f64],
) -> Result<Vec<f64>> {
    let x = DMatrix::from_row_slice(1, a_prev.len(), a_prev);
    let layer = Mlp::from_layers(vec![Layer {
        w: w_rows.transpose(),
        b: DMatrix::from_row_slice(1, b.len(), b),
        activation: Some(Activation::Sigmoid),
    }])?;
    let trace = layer.forward(&x)?;
    let target = DMatrix::from_row_slice(1, y.len(), y);
    let (_, d_x) = layer.backward(&trace, &mse_backward(&trace.output, &target)?)?;
    Ok(d_x.iter().copied().collect())
}
