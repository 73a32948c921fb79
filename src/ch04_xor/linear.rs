//! Why no straight line draws XOR: the least-squares linear fit predicts 0.5 for all four points.

use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::ensure_finite;
use nalgebra::DMatrix;

/// A least-squares linear fit ŷ = x·w + b.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearFit {
    /// w, one weight per input column (D×1).
    pub w: DMatrix<f64>,
    /// b.
    pub b: f64,
    /// ŷ for every row (N×1).
    pub predictions: DMatrix<f64>,
}

/// The least-squares fit of y by x·w + b, from the normal equations AᵀA θ = Aᵀy with A = [x 1].
/// Errors on shape mismatches, an empty batch, NaN, or a singular AᵀA (too few distinct points).
pub fn least_squares_fit(x: &DMatrix<f64>, y: &DMatrix<f64>) -> Result<LinearFit> {
    const OP: &str = "least_squares_fit";
    if x.nrows() == 0 {
        return Err(Error::Empty { op: OP, arg: "x" });
    }
    if y.shape() != (x.nrows(), 1) {
        return Err(shape_error(
            OP,
            "y",
            format!("{}×1 (one target per row of x)", x.nrows()),
            shape_of(y),
        ));
    }
    ensure_finite(OP, "x", x)?;
    ensure_finite(OP, "y", y)?;
    let d = x.ncols();
    let a = DMatrix::from_fn(x.nrows(), d + 1, |r, c| if c < d { x[(r, c)] } else { 1.0 });
    let ata = crate::matmul::matmul_tn(&a, &a)?;
    let aty = crate::matmul::matmul_tn(&a, y)?;
    let theta = ata
        .cholesky()
        .ok_or_else(|| {
            invalid(OP, "x", "AᵀA is singular: the points do not determine a unique fit")
        })?
        .solve(&aty);
    let predictions = crate::matmul::matmul(&a, &theta)?;
    Ok(LinearFit { w: theta.rows(0, d).into_owned(), b: theta[(d, 0)], predictions })
}
