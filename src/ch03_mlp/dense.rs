//! The dense layer y = xW + b with its backward pass, and the squared-error cost with its
//! derivative: the two forward/backward pairs every network of this chapter is made of.

use crate::error::{Error, Result, shape_error, shape_of};
use crate::float::{Float, ensure_finite};
use nalgebra::DMatrix;

// ───────────────────────────── the dense layer ─────────────────────────────

/// y = xW + b, the dense (fully connected) layer.
///
/// Shapes: x N×in (one sample per row), w in×out, b 1×out (added to every row) → N×out.
/// In the document's column notation this is z = Wa + b with W = wᵀ. Errors on an empty batch,
/// widths that do not chain, a bias of the wrong shape, and NaN or infinite entries.
pub fn dense_forward<T: Float>(
    x: &DMatrix<T>,
    w: &DMatrix<T>,
    b: &DMatrix<T>,
) -> Result<DMatrix<T>> {
    const OP: &str = "dense_forward";
    if x.nrows() == 0 {
        return Err(Error::Empty { op: OP, arg: "x (the batch)" });
    }
    if w.nrows() == 0 || w.ncols() == 0 {
        return Err(Error::Empty { op: OP, arg: "w" });
    }
    if x.ncols() != w.nrows() {
        return Err(shape_error(
            OP,
            "x and w (x's width must equal w's rows)",
            format!("x N×{} for w {}", w.nrows(), shape_of(w)),
            format!("x {}, w {}", shape_of(x), shape_of(w)),
        ));
    }
    if b.nrows() != 1 || b.ncols() != w.ncols() {
        return Err(shape_error(
            OP,
            "b",
            format!("1×{} (one bias per output)", w.ncols()),
            shape_of(b),
        ));
    }
    ensure_finite(OP, "x", x)?;
    ensure_finite(OP, "w", w)?;
    ensure_finite(OP, "b", b)?;
    let mut y = crate::matmul::matmul(x, w)?;
    // Every row gets b; walked column by column, the order y is stored in.
    for (mut column, &bias) in y.column_iter_mut().zip(b.iter()) {
        column.iter_mut().for_each(|v| *v += bias);
    }
    Ok(y)
}

/// The gradients of the cost with respect to the three arguments of [`dense_forward`].
#[derive(Clone, Debug, PartialEq)]
pub struct DenseGrads<T: Float> {
    /// ∂C/∂x = d_y Wᵀ, N×in.
    pub d_x: DMatrix<T>,
    /// ∂C/∂W = xᵀ d_y, in×out.
    pub d_w: DMatrix<T>,
    /// ∂C/∂b = the column sums of d_y, 1×out.
    pub d_b: DMatrix<T>,
}

/// Backward of [`dense_forward`]: from d_y = ∂C/∂y (N×out) to the gradients of x, W and b.
/// Errors when x, w and d_y do not chain or d_y holds NaN.
pub fn dense_backward<T: Float>(
    x: &DMatrix<T>,
    w: &DMatrix<T>,
    d_y: &DMatrix<T>,
) -> Result<DenseGrads<T>> {
    const OP: &str = "dense_backward";
    if x.ncols() != w.nrows() {
        return Err(shape_error(
            OP,
            "x and w",
            format!("x N×{}", w.nrows()),
            format!("x {}, w {}", shape_of(x), shape_of(w)),
        ));
    }
    if d_y.nrows() != x.nrows() || d_y.ncols() != w.ncols() {
        return Err(shape_error(
            OP,
            "d_y",
            format!("{}×{} (rows of x × columns of w)", x.nrows(), w.ncols()),
            shape_of(d_y),
        ));
    }
    ensure_finite(OP, "d_y", d_y)?;
    let d_w = crate::matmul::matmul_tn(x, d_y)?; // y = xW     ⇒ ∂C/∂W = xᵀ ∂C/∂y
    let d_x = crate::matmul::matmul_nt(d_y, w)?; // y = xW     ⇒ ∂C/∂x = ∂C/∂y Wᵀ
    // y = … + b (every row) ⇒ ∂C/∂b = Σ_rows ∂C/∂y
    let d_b = DMatrix::from_fn(1, d_y.ncols(), |_, c| d_y.column(c).iter().copied().sum());
    Ok(DenseGrads { d_x, d_w, d_b })
}

// ───────────────────────────── the cost ─────────────────────────────

fn check_same_shape<T: Float>(op: &'static str, a: &DMatrix<T>, y: &DMatrix<T>) -> Result<()> {
    if a.nrows() == 0 || a.ncols() == 0 {
        return Err(Error::Empty { op, arg: "a (the predictions)" });
    }
    if a.shape() != y.shape() {
        return Err(shape_error(
            op,
            "a and y",
            format!("y {} like a", shape_of(a)),
            format!("a {}, y {}", shape_of(a), shape_of(y)),
        ));
    }
    ensure_finite(op, "a", a)?;
    ensure_finite(op, "y", y)
}

/// The squared-error cost of the document: C = (1/N) Σₖ Cₖ with Cₖ = Σⱼ (aⱼ − yⱼ)², the sum of
/// squared differences of one sample averaged over the N samples (rows). For one output column
/// this is the usual mean squared error. Shapes: a and y both N×K.
pub fn mse<T: Float>(a: &DMatrix<T>, y: &DMatrix<T>) -> Result<T> {
    check_same_shape("mse", a, y)?;
    let n = T::of(a.nrows() as f64);
    Ok(a.zip_map(y, |ai, yi| (ai - yi) * (ai - yi)).sum() / n)
}

/// Backward of [`mse`]: ∂C/∂a = 2(a − y)/N, N×K.
pub fn mse_backward<T: Float>(a: &DMatrix<T>, y: &DMatrix<T>) -> Result<DMatrix<T>> {
    check_same_shape("mse_backward", a, y)?;
    let scale = T::of(2.0 / a.nrows() as f64);
    Ok(a.zip_map(y, |ai, yi| scale * (ai - yi))) // C = (1/N) Σ (a − y)²  ⇒  ∂C/∂a = 2(a − y)/N
}
