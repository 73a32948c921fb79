//! Chapter 4: XOR — [chapters/ch04_xor.md](../../chapters/ch04_xor.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch04_xor`.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value, `Err(llm_workbook::Error::Empty { op: "op", arg: "arg" })` for an
//! empty input and `Err(llm_workbook::error::shape_error("op", "arg", expected, got))` for shapes
//! that disagree (`llm_workbook::error::shape_of(&m)` writes a matrix's shape as `rows×cols`).

use llm_workbook::Result;
use llm_workbook::ch04_xor::{LinearFit, PrintedNet};
use nalgebra::DMatrix;

/// **XOR by hand, with sigmoids**: choose the weights of a 2-2-1 network
/// h = σ(W x + c) (one row of W per hidden neuron), ŷ = σ(w·h + b) whose output is within 0.01 of
/// XOR on all four inputs (0,0), (0,1), (1,0), (1,1). Fill in a [`PrintedNet`] with
/// `activation: Activation::Sigmoid` (from `llm_workbook::ch03_mlp`).
///
/// Idea: one hidden neuron computes OR, the other NAND, the output their AND; large weights make
/// the sigmoids saturate.
///
/// Chapter: [The document's sigmoid network][ch].
///
/// [ch]: ../../chapters/ch04_xor.md#the-documents-sigmoid-network
pub fn xor_sigmoid_net() -> PrintedNet {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch04_xor::SIGMOID_NET;
    todo!()
}

/// **XOR by hand, with ReLUs**: the same 2-2-1 shape with `activation: Activation::Relu` in both
/// layers, read with the threshold 0.5 (class 1 when ŷ ≥ 0.5). Every input must land on the
/// right side of 0.5.
///
/// Chapter: [The document's ReLU network](../../chapters/ch04_xor.md#the-documents-relu-network).
pub fn xor_relu_net() -> PrintedNet {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch04_xor::RELU_NET;
    todo!()
}

/// **The best straight line**: the least-squares fit ŷ = x·w + b of y, from the normal equations
/// AᵀA θ = Aᵀy with A = [x 1] (θ = (w, b)). Shapes: x N×D, y N×1; w D×1; `predictions` N×1.
/// On XOR it predicts 0.5 for all four points: no line separates XOR.
///
/// Chapter: [No straight line](../../chapters/ch04_xor.md#no-straight-line).
pub fn least_squares_fit(x: &DMatrix<f64>, y: &DMatrix<f64>) -> Result<LinearFit> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch04_xor::least_squares_fit(x, y);
    todo!()
}
