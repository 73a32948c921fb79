//! Chapter 2: softmax and cross-entropy —
//! [chapters/ch02_softmax.md](../../chapters/ch02_softmax.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch02_softmax`.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value, `Err(llm_workbook::Error::Empty { op: "op", arg: "arg" })` for an
//! empty input and `Err(llm_workbook::error::shape_error("op", "arg", expected, got))` for shapes
//! that disagree (`llm_workbook::error::shape_of(&m)` writes a matrix's shape as `rows×cols`).

use llm_workbook::Result;
use nalgebra::DMatrix;

/// **Softmax of every row**: ŷ_rk = e^{z_rk} / Σ_c e^{z_rc}, each row of Z (N×K) turned into a
/// probability distribution over its K entries. The result is N×K and each row sums to 1.
///
/// Subtract each row's maximum before exponentiating (the result is unchanged, and e^{1000} no
/// longer overflows). Return an error on an empty Z.
///
/// Chapter: [2. Stable by construction](../../chapters/ch02_softmax.md#2-stable-by-construction).
pub fn softmax_rows_forward(z: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch02_softmax::softmax_rows_forward(z);
    todo!()
}

/// **The mean cross-entropy from logits**: L = (1/N) Σ_r −ln softmax(z_r)_{t_r}, with
/// −ln softmax(z)_t = ln Σ_c e^{z_c} − z_t evaluated by log-sum-exp (so it never takes ln 0).
///
/// Shapes: logits N×K, targets N class indices in 0..K. Return an error (not a panic) for empty
/// logits, a number of targets other than N, or a target outside 0..K.
///
/// Chapter: [4. Cross-entropy](../../chapters/ch02_softmax.md#4-cross-entropy).
pub fn cross_entropy_from_logits(logits: &DMatrix<f64>, targets: &[usize]) -> Result<f64> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch02_softmax::cross_entropy_from_logits(logits, targets);
    todo!()
}

/// **The gradient of the mean cross-entropy in the logits**: ∂L/∂Z = (P − Y)/N, with P the
/// softmax of each row of Z and Y the one-hot rows of the targets. Shapes: logits N×K, targets N
/// class indices; the result N×K. Return an error (not a panic) for empty logits, a number of
/// targets other than N, or a target outside 0..K. Take each row's softmax with that row's
/// maximum subtracted: logits of ±900, or rows thousands apart, must not overflow.
///
/// Chapter: [5. The gradient: ŷ − y](../../chapters/ch02_softmax.md#5-the-gradient-ŷ--y).
pub fn cross_entropy_from_logits_backward(
    logits: &DMatrix<f64>,
    targets: &[usize],
) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch02_softmax::cross_entropy_from_logits_backward(logits, targets);
    todo!()
}

/// **Softmax backward**: from the forward output Y = softmax rows of Z and ∂L/∂Y, return
/// ∂L/∂Z = Y ⊙ (∂L/∂Y − rowsum(∂L/∂Y ⊙ Y)), i.e. per row Jᵀ ∂L/∂y with the Jacobian
/// J_ij = y_i(δ_ij − y_j), without forming J. Shapes: y and d_y N×K, the result N×K.
///
/// Chapter: [5. The gradient: ŷ − y](../../chapters/ch02_softmax.md#5-the-gradient-ŷ--y).
pub fn softmax_rows_backward(y: &DMatrix<f64>, d_y: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch02_softmax::softmax_rows_backward(y, d_y);
    todo!()
}

/// **Log-softmax backward**: from the forward output ln Y (ln Y_rc = Z_rc − ln Σ_c′ e^{Z_rc′}, the
/// log-sum-exp form) and ∂L/∂(ln Y), return ∂L/∂Z = ∂L/∂(ln Y) − Y ⊙ rowsum(∂L/∂(ln Y)), with
/// Y = e^{ln Y}: every entry of a row of ln Y depends on every logit of that row through the
/// shared log-sum-exp. Shapes: log_y and d N×K, the result N×K. ln Y may hold −∞ (a masked
/// entry, whose Y is 0).
///
/// Chapter: [2. Stable by construction](../../chapters/ch02_softmax.md#2-stable-by-construction).
pub fn log_softmax_rows_backward(log_y: &DMatrix<f64>, d: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch02_softmax::log_softmax_rows_backward(log_y, d);
    todo!()
}

/// **Softmax regression, backward through the logits**: the forward is Z = XW + 1bᵀ (x N×D,
/// w D×K, b 1×K, Z N×K). From ∂L/∂Z (N×K) return (∂L/∂X, ∂L/∂W, ∂L/∂b) =
/// (∂L/∂Z · Wᵀ, Xᵀ · ∂L/∂Z, the column sums of ∂L/∂Z), shaped N×D, D×K and 1×K.
///
/// Chapter: [8. Softmax regression](../../chapters/ch02_softmax.md#8-softmax-regression).
pub fn regression_logits_backward(
    w: &DMatrix<f64>,
    x: &DMatrix<f64>,
    d_z: &DMatrix<f64>,
) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch02_softmax::regression_logits_backward(w, x, d_z);
    todo!()
}
