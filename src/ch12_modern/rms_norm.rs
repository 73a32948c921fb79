//! RMSNorm: rescale every row by its root mean square, then by γ.
//!
//! ```text
//! r = √((1/C) Σ_c x_c² + ε)      (ε inside the root)
//! x̂ = x / r,                      y = γ ⊙ x̂
//! ```
//!
//! Beside chapter 6's LayerNorm (`crate::ch06_attention::layer_norm`) two things are dropped: the
//! mean μ (the row is not centred, so r is the root mean square of x itself, not its standard
//! deviation) and the shift β. The backward loses the matching terms: LayerNorm's
//! ∂L/∂x = (g − mean(g) − x̂·mean(g ⊙ x̂))/s has a −mean(g) from the centring; RMSNorm's is
//! (g − x̂·mean(g ⊙ x̂))/r, and there is no ∂L/∂β.

use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::{Float, ensure_finite};
use nalgebra::DMatrix;

/// The ε Llama 3 and Qwen 3 use (`rms_norm_eps` in their `config.json`).
pub const RMS_NORM_EPS: f64 = 1e-6;

/// RMSNorm over the columns of each row: y = γ ⊙ x / √(mean(x²) + ε).
#[derive(Clone, Debug, PartialEq)]
pub struct RmsNorm<T: Float> {
    /// γ, 1×C.
    pub gamma: DMatrix<T>,
    /// ε > 0, added to the mean square inside the root.
    pub eps: f64,
}

impl<T: Float> RmsNorm<T> {
    /// γ = 1 over `width` columns. Errors on a zero width or ε that is not finite and > 0.
    pub fn new(width: usize, eps: f64) -> Result<Self> {
        let n = RmsNorm { gamma: DMatrix::from_element(1, width, T::one()), eps };
        n.validate("RmsNorm::new")?;
        Ok(n)
    }

    /// Checks γ (1×C, C ≥ 1, finite) and ε (finite, > 0).
    pub fn validate(&self, op: &'static str) -> Result<()> {
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(invalid(op, "eps", format!("ε must be finite and > 0; got {}", self.eps)));
        }
        if self.gamma.ncols() == 0 {
            return Err(Error::Empty { op, arg: "gamma" });
        }
        if self.gamma.nrows() != 1 {
            return Err(shape_error(
                op,
                "gamma",
                format!("1×{}", self.gamma.ncols()),
                shape_of(&self.gamma),
            ));
        }
        ensure_finite(op, "gamma", &self.gamma)
    }
}

/// What [`rms_norm_backward`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct RmsCache<T: Float> {
    /// x̂ = x / r, N×C.
    pub x_hat: DMatrix<T>,
    /// r = √(mean(x²) + ε), one per row.
    pub rms: Vec<T>,
}

/// Gradients of RMSNorm.
#[derive(Clone, Debug, PartialEq)]
pub struct RmsGrads<T: Float> {
    /// ∂L/∂x, N×C.
    pub d_x: DMatrix<T>,
    /// ∂L/∂γ, 1×C.
    pub d_gamma: DMatrix<T>,
}

/// RMSNorm of every row of x (N×C → N×C). Errors on a width that differs from γ's, no rows,
/// non-finite input, an invalid γ or ε. A zero row stays zero (r = √ε > 0).
pub fn rms_norm_forward<T: Float>(
    norm: &RmsNorm<T>,
    x: &DMatrix<T>,
) -> Result<(DMatrix<T>, RmsCache<T>)> {
    const OP: &str = "rms_norm_forward";
    norm.validate(OP)?;
    if x.ncols() != norm.gamma.ncols() {
        return Err(shape_error(
            OP,
            "x and gamma (row width)",
            format!("x with {} columns", norm.gamma.ncols()),
            shape_of(x),
        ));
    }
    if x.nrows() == 0 {
        return Err(Error::Empty { op: OP, arg: "x" });
    }
    ensure_finite(OP, "x", x)?;
    let (n, cols) = x.shape();
    let c = T::of(cols as f64);
    let eps = T::of(norm.eps);
    let mut rms = vec![T::zero(); n];
    for (r, out) in rms.iter_mut().enumerate() {
        let mean_square = x.row(r).iter().map(|&v| v * v).sum::<T>() / c; // (1/C) Σ x²
        *out = (mean_square + eps).sqrt(); //                                r = √(… + ε)
    }
    let x_hat = DMatrix::from_fn(n, cols, |r, j| x[(r, j)] / rms[r]); //    x̂ = x / r
    let y = DMatrix::from_fn(n, cols, |r, j| norm.gamma[(0, j)] * x_hat[(r, j)]); // y = γ x̂
    Ok((y, RmsCache { x_hat, rms }))
}

/// Backward of [`rms_norm_forward`]. With g = γ ⊙ ∂L/∂y, per row:
///
/// ```text
/// ∂L/∂x = (g − x̂ · mean(g ⊙ x̂)) / r
/// ∂L/∂γ = Σ_rows ∂L/∂y ⊙ x̂
/// ```
///
/// (∂r/∂x_c = x_c/(C r) = x̂_c/C, so ∂x̂_j/∂x_c = (δ_jc − x̂_j x̂_c / C)/r.)
pub fn rms_norm_backward<T: Float>(
    norm: &RmsNorm<T>,
    cache: &RmsCache<T>,
    d_y: &DMatrix<T>,
) -> Result<RmsGrads<T>> {
    const OP: &str = "rms_norm_backward";
    norm.validate(OP)?;
    if d_y.shape() != cache.x_hat.shape() {
        return Err(shape_error(
            OP,
            "d_y (shape of the forward output)",
            shape_of(&cache.x_hat),
            shape_of(d_y),
        ));
    }
    if cache.rms.len() != d_y.nrows() {
        return Err(shape_error(
            OP,
            "cache (one r per row)",
            format!("{} values", d_y.nrows()),
            format!("{} values", cache.rms.len()),
        ));
    }
    ensure_finite(OP, "d_y", d_y)?;
    let (n, cols) = d_y.shape();
    let c = T::of(cols as f64);
    // y = γ x̂  ⇒  ∂L/∂γ = Σ_rows ∂L/∂y ⊙ x̂,  g = ∂L/∂x̂ = γ ⊙ ∂L/∂y
    let d_gamma = DMatrix::from_fn(1, cols, |_, j| {
        (0..n).map(|r| d_y[(r, j)] * cache.x_hat[(r, j)]).sum::<T>()
    });
    let g = DMatrix::from_fn(n, cols, |r, j| norm.gamma[(0, j)] * d_y[(r, j)]);
    // x̂ = x / r with r = √(mean(x²) + ε)  ⇒  ∂L/∂x = (g − x̂ mean(g ⊙ x̂)) / r
    let mut d_x = DMatrix::zeros(n, cols);
    for r in 0..n {
        let mean_gx = (0..cols).map(|j| g[(r, j)] * cache.x_hat[(r, j)]).sum::<T>() / c;
        for j in 0..cols {
            d_x[(r, j)] = (g[(r, j)] - cache.x_hat[(r, j)] * mean_gx) / cache.rms[r];
        }
    }
    Ok(RmsGrads { d_x, d_gamma })
}
