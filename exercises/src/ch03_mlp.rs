//! Chapter 3: the multilayer perceptron — [chapters/ch03_mlp.md](../../chapters/ch03_mlp.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch03_mlp`.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value, `Err(llm_workbook::Error::Empty { op: "op", arg: "arg" })` for an
//! empty input and `Err(llm_workbook::error::shape_error("op", "arg", expected, got))` for shapes
//! that disagree (`llm_workbook::error::shape_of(&m)` writes a matrix's shape as `rows×cols`).

use llm_workbook::Result;
use llm_workbook::ch03_mlp::{LayerGrads, Mlp, Trace};
use nalgebra::DMatrix;

/// **A dense layer**: y = xW + b. Shapes: x N×in (one sample per row), w in×out, b 1×out (added
/// to every row); the result N×out. Return an error when the widths do not chain.
///
/// Chapter: [1. A layer](../../chapters/ch03_mlp.md#1-a-layer).
pub fn dense_forward(x: &DMatrix<f64>, w: &DMatrix<f64>, b: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch03_mlp::dense_forward(x, w, b);
    todo!()
}

/// **A dense layer's backward**: from y = xW + b and ∂C/∂y (N×out), return
/// (∂C/∂x, ∂C/∂W, ∂C/∂b) = (∂C/∂y · Wᵀ, xᵀ · ∂C/∂y, the column sums of ∂C/∂y), shaped N×in,
/// in×out and 1×out.
///
/// Chapter: [4. Many neurons per layer](../../chapters/ch03_mlp.md#4-many-neurons-per-layer).
pub fn dense_backward(
    x: &DMatrix<f64>,
    w: &DMatrix<f64>,
    d_y: &DMatrix<f64>,
) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch03_mlp::dense_backward(x, w, d_y).map(|g| (g.d_x, g.d_w, g.d_b));
    todo!()
}

/// **ReLU backward**: a = max(0, z) elementwise, so ∂C/∂z = f′(z) ⊙ ∂C/∂a with f′(z) = 1 for
/// z > 0 and 0 for z ≤ 0. Shapes: z and d_a both N×C; the result N×C.
///
/// Chapter: [Activations](../../chapters/ch03_mlp.md#activations).
pub fn relu_backward(z: &DMatrix<f64>, d_a: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch03_mlp::activation_backward(
        llm_workbook::ch03_mlp::Activation::Relu,
        z,
        d_a,
    );
    todo!()
}

/// **GELU backward**: GELU(z) = z Φ(z) (Φ the standard normal CDF), so
/// ∂C/∂z = (Φ(z) + z φ(z)) ⊙ ∂C/∂a with φ the normal density. `llm_workbook::ch03_mlp` has
/// `normal_cdf` and `normal_pdf`. Shapes: z and d_a both N×C.
///
/// Chapter: [Activations](../../chapters/ch03_mlp.md#activations).
pub fn gelu_backward(z: &DMatrix<f64>, d_a: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch03_mlp::activation_backward(
        llm_workbook::ch03_mlp::Activation::GeluErf,
        z,
        d_a,
    );
    todo!()
}

/// **The squared-error cost's gradient**: C = (1/N) Σ_rows Σ_j (a_j − y_j)², so
/// ∂C/∂a = 2(a − y)/N. Shapes: a and y both N×K.
///
/// Chapter: [2. The cost and gradient descent][ch].
///
/// [ch]: ../../chapters/ch03_mlp.md#2-the-cost-and-gradient-descent
pub fn mse_backward(a: &DMatrix<f64>, y: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch03_mlp::mse_backward(a, y);
    todo!()
}

/// **Backpropagation through a whole MLP**: from the forward pass's `trace` (each layer's input
/// a⁽ˡ⁻¹⁾ in `trace.inputs[l]` and pre-activation z⁽ˡ⁾ in `trace.pre[l]`) and ∂C/∂a⁽ᴸ⁾ (N×out),
/// return every layer's (∂C/∂W⁽ˡ⁾, ∂C/∂b⁽ˡ⁾), first layer first, and ∂C/∂x (N×in). Walk the layers
/// from the last to the first: ∂C/∂z⁽ˡ⁾ = f′(z⁽ˡ⁾) ⊙ ∂C/∂a⁽ˡ⁾ (or ∂C/∂a⁽ˡ⁾ itself when
/// `layer.activation` is `None`), then the dense layer's backward gives
/// ∂C/∂W⁽ˡ⁾ = a⁽ˡ⁻¹⁾ᵀ ∂C/∂z⁽ˡ⁾, ∂C/∂b⁽ˡ⁾ = the column sums of ∂C/∂z⁽ˡ⁾ and
/// ∂C/∂a⁽ˡ⁻¹⁾ = ∂C/∂z⁽ˡ⁾ W⁽ˡ⁾ᵀ, the next step's input.
/// `mlp.layers()` gives the layers; `llm_workbook::ch03_mlp`'s `activation_backward` and
/// `dense_backward` (or your answers above) are yours to use.
///
/// Chapter: [4. Many neurons per layer](../../chapters/ch03_mlp.md#4-many-neurons-per-layer).
pub fn mlp_backward(
    mlp: &Mlp<f64>,
    trace: &Trace<f64>,
    d_out: &DMatrix<f64>,
) -> Result<(Vec<LayerGrads<f64>>, DMatrix<f64>)> {
    #[cfg(feature = "solutions")]
    return mlp.backward(trace, d_out);
    todo!()
}
