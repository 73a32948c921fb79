//! LayerNorm: standardise every row, then rescale it with γ and shift it with β.
//!
//! ```text
//! μ = (1/C) Σ_c x_c,   σ² = (1/C) Σ_c (x_c − μ)²,   s = √(σ² + ε)  (or σ + ε)
//! x̂ = (x − μ)/s,       y = γ ⊙ x̂ + β
//! ```
//!
//! The checked pair [`layer_norm_forward`] / [`layer_norm_backward`] validates and allocates,
//! then calls the one implementation, [`layer_norm_forward_into`] / [`layer_norm_backward_into`],
//! which chapter 9's fused training step calls directly with buffers it keeps.

use super::same_shape;
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::{Float, ensure_finite, lane_dot, lane_sum};
use nalgebra::DMatrix;

// ───────────────────────────── LayerNorm ─────────────────────────────

/// Where the stability constant ε enters LayerNorm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epsilon {
    /// (x − μ)/√(σ² + ε): the formula of D2 and D3 and of PyTorch and GPT-2.
    InsideSqrt,
    /// (x − μ)/(σ + ε): what D3's first printed LayerNorm (and its decoder cell)
    /// computes.
    AddedToStd,
}

/// LayerNorm over the columns of each row: y = γ ⊙ (x − μ)/s + β with μ and σ² the mean and
/// population variance (divide by C) of the row, and s = √(σ² + ε) or σ + ε.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNorm<T: Float> {
    /// γ, 1×C.
    pub gamma: DMatrix<T>,
    /// β, 1×C.
    pub beta: DMatrix<T>,
    /// ε > 0.
    pub eps: f64,
    /// Where ε enters.
    pub placement: Epsilon,
}

/// A LayerNorm's γ and β borrowed from wherever they are held, with ε and where it enters: what
/// the in-place passes ([`layer_norm_forward_view`], [`layer_norm_backward_view`]) read.
#[derive(Clone, Copy, Debug)]
pub struct LnView<'a, T: Float> {
    /// γ, 1×C.
    pub gamma: &'a DMatrix<T>,
    /// β, 1×C.
    pub beta: &'a DMatrix<T>,
    /// ε > 0.
    pub eps: f64,
    /// Where ε enters.
    pub placement: Epsilon,
}

/// The ε D3 uses, and a common default.
pub const LAYER_NORM_EPS: f64 = 1e-6;

impl<T: Float> LayerNorm<T> {
    /// γ = 1, β = 0, ε inside the square root.
    pub fn new(width: usize, eps: f64) -> Result<Self> {
        let ln = LayerNorm {
            gamma: DMatrix::from_element(1, width, T::one()),
            beta: DMatrix::zeros(1, width),
            eps,
            placement: Epsilon::InsideSqrt,
        };
        ln.validate("LayerNorm::new")?;
        Ok(ln)
    }

    /// γ, β, ε and its placement, borrowed.
    pub fn view(&self) -> LnView<'_, T> {
        LnView { gamma: &self.gamma, beta: &self.beta, eps: self.eps, placement: self.placement }
    }

    /// The same with ε placed as given.
    pub fn with_placement(mut self, placement: Epsilon) -> Self {
        self.placement = placement;
        self
    }

    fn validate(&self, op: &'static str) -> Result<()> {
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
        if self.beta.shape() != self.gamma.shape() {
            return Err(shape_error(
                op,
                "beta (same shape as gamma)",
                shape_of(&self.gamma),
                shape_of(&self.beta),
            ));
        }
        ensure_finite(op, "gamma", &self.gamma)?;
        ensure_finite(op, "beta", &self.beta)
    }
}

/// What [`layer_norm_backward`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct LnCache<T: Float> {
    /// x̂ = (x − μ)/s, the normalised rows.
    pub x_hat: DMatrix<T>,
    /// s per row: √(σ² + ε) or σ + ε.
    pub denom: Vec<T>,
    /// σ per row (population standard deviation).
    pub sigma: Vec<T>,
}

/// LayerNorm of every row of x (N×C). Errors on a width that differs from γ's, ε ≤ 0, non-finite
/// input. A constant row has σ = 0 and comes out as β, finite.
pub fn layer_norm_forward<T: Float>(
    ln: &LayerNorm<T>,
    x: &DMatrix<T>,
) -> Result<(DMatrix<T>, LnCache<T>)> {
    const OP: &str = "layer_norm_forward";
    ln.validate(OP)?;
    if x.ncols() != ln.gamma.ncols() {
        return Err(shape_error(
            OP,
            "x and gamma (row width)",
            format!("x with {} columns", ln.gamma.ncols()),
            shape_of(x),
        ));
    }
    if x.nrows() == 0 {
        return Err(Error::Empty { op: OP, arg: "x" });
    }
    ensure_finite(OP, "x", x)?;
    let (n, cols) = x.shape();
    let mut cache = LnCache {
        x_hat: DMatrix::zeros(n, cols),
        denom: vec![T::zero(); n],
        sigma: vec![T::zero(); n],
    };
    let mut y = DMatrix::zeros(n, cols);
    layer_norm_forward_into(ln, x, &mut cache, &mut y);
    Ok((y, cache))
}

/// [`layer_norm_forward`] into buffers the caller keeps (chapter 9's training step reuses them
/// from step to step): writes x̂, s and σ into `cache` (x̂ N×C, s and σ one per row) and y into `y`
/// (N×C). Nothing is checked here: the shapes must agree and γ, β, ε be valid
/// ([`layer_norm_forward`] checks them all and then calls this).
pub fn layer_norm_forward_into<T: Float>(
    ln: &LayerNorm<T>,
    x: &DMatrix<T>,
    cache: &mut LnCache<T>,
    y: &mut DMatrix<T>,
) {
    layer_norm_forward_view(ln.view(), x, cache, y);
}

/// [`layer_norm_forward_into`] for γ and β held elsewhere ([`LnView`]: chapter 9 keeps them in
/// its parameter store).
pub fn layer_norm_forward_view<T: Float>(
    ln: LnView<'_, T>,
    x: &DMatrix<T>,
    cache: &mut LnCache<T>,
    y: &mut DMatrix<T>,
) {
    // Column-major storage keeps a row's entries one column apart, so every row statistic is
    // accumulated column by column for all rows at once: the same sums in the same order as
    // walking each row on its own, read contiguously.
    let (n, cols) = x.shape();
    let c = T::of(cols as f64);
    let eps = T::of(ln.eps);
    let columns = || x.as_slice().chunks_exact(n);
    let mut mu = vec![T::neg_zero(); n];
    for column in columns() {
        for (m, &v) in mu.iter_mut().zip(column) {
            *m += v;
        }
    }
    mu.iter_mut().for_each(|m| *m /= c); //                                  μ = (1/C) Σ x
    let mut var = vec![T::neg_zero(); n];
    for column in columns() {
        for ((s, &v), &m) in var.iter_mut().zip(column).zip(&mu) {
            *s += (v - m) * (v - m);
        }
    }
    var.iter_mut().for_each(|s| *s /= c); //                                 σ² = (1/C) Σ (x − μ)²
    for ((sd, den), &v) in cache.sigma.iter_mut().zip(cache.denom.iter_mut()).zip(&var) {
        *sd = v.sqrt();
        *den = match ln.placement {
            Epsilon::InsideSqrt => (v + eps).sqrt(),
            Epsilon::AddedToStd => *sd + eps,
        };
    }
    let (x_hat, denom) = (&mut cache.x_hat, &cache.denom);
    for (j, ((column, hat), out)) in columns()
        .zip(x_hat.as_mut_slice().chunks_exact_mut(n))
        .zip(y.as_mut_slice().chunks_exact_mut(n))
        .enumerate()
    {
        let (g, b) = (ln.gamma[(0, j)], ln.beta[(0, j)]);
        for r in 0..n {
            hat[r] = (column[r] - mu[r]) / denom[r]; //                       x̂ = (x − μ)/s
            out[r] = g * hat[r] + b; //                                       y = γx̂ + β
        }
    }
}

/// Gradients of LayerNorm.
#[derive(Clone, Debug, PartialEq)]
pub struct LnGrads<T: Float> {
    /// ∂L/∂x.
    pub d_x: DMatrix<T>,
    /// ∂L/∂γ.
    pub d_gamma: DMatrix<T>,
    /// ∂L/∂β.
    pub d_beta: DMatrix<T>,
}

/// Backward of [`layer_norm_forward`]. With g = γ ⊙ ∂L/∂y, per row:
///
/// ```text
/// ε inside:  ∂L/∂x = (g − mean(g) − x̂ · mean(g ⊙ x̂)) / s
/// σ + ε:     ∂L/∂x = (g − mean(g) − x̂ · (s/σ) · mean(g ⊙ x̂)) / s
///            ((x − μ)/σ taken as 0 when σ = 0)
/// ∂L/∂γ = Σ_rows ∂L/∂y ⊙ x̂,   ∂L/∂β = Σ_rows ∂L/∂y
/// ```
pub fn layer_norm_backward<T: Float>(
    ln: &LayerNorm<T>,
    cache: &LnCache<T>,
    d_y: &DMatrix<T>,
) -> Result<LnGrads<T>> {
    const OP: &str = "layer_norm_backward";
    ln.validate(OP)?;
    same_shape(OP, "d_y (shape of the forward output)", &cache.x_hat, d_y)?;
    ensure_finite(OP, "d_y", d_y)?;
    let (n, cols) = d_y.shape();
    if cache.denom.len() != n || cache.sigma.len() != n {
        return Err(shape_error(
            OP,
            "cache (one s and one σ per row)",
            format!("{n} of each"),
            format!("{} and {}", cache.denom.len(), cache.sigma.len()),
        ));
    }
    let mut grads = LnGrads {
        d_x: DMatrix::zeros(n, cols),
        d_gamma: DMatrix::zeros(1, cols),
        d_beta: DMatrix::zeros(1, cols),
    };
    let LnGrads { d_x, d_gamma, d_beta } = &mut grads;
    layer_norm_backward_into(ln, cache, d_y, Store::Overwrite, d_x, d_gamma, d_beta);
    Ok(grads)
}

/// What [`layer_norm_backward_into`] does with the input gradient it computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// Write it (what [`layer_norm_backward`] does into fresh zeros).
    Overwrite,
    /// Add it to what is there: the residual stream's gradient arrives twice, directly and
    /// through the LayerNorm, and chapter 9's training step keeps both in one buffer.
    Accumulate,
}

/// [`layer_norm_backward`] into buffers the caller keeps: ∂L/∂γ and ∂L/∂β into `d_gamma` and
/// `d_beta` (1×C, overwritten), ∂L/∂x into `d_x` (N×C), written or added as `store` says.
/// Nothing is checked here ([`layer_norm_backward`] checks and then calls this). The sums over
/// rows for ∂L/∂γ and ∂L/∂β run in [`crate::float::SUM_LANES`] lanes ([`lane_sum`] and its dot
/// product).
pub fn layer_norm_backward_into<T: Float>(
    ln: &LayerNorm<T>,
    cache: &LnCache<T>,
    d_y: &DMatrix<T>,
    store: Store,
    d_x: &mut DMatrix<T>,
    d_gamma: &mut DMatrix<T>,
    d_beta: &mut DMatrix<T>,
) {
    layer_norm_backward_view(ln.view(), cache, d_y, store, d_x, d_gamma, d_beta);
}

/// [`layer_norm_backward_into`] for γ and β held elsewhere ([`LnView`]).
pub fn layer_norm_backward_view<T: Float>(
    ln: LnView<'_, T>,
    cache: &LnCache<T>,
    d_y: &DMatrix<T>,
    store: Store,
    d_x: &mut DMatrix<T>,
    d_gamma: &mut DMatrix<T>,
    d_beta: &mut DMatrix<T>,
) {
    let (n, cols) = d_y.shape();
    let c = T::of(cols as f64);
    let x_hat_columns = || cache.x_hat.as_slice().chunks_exact(n);
    let d_y_columns = || d_y.as_slice().chunks_exact(n);
    for (j, (dy, xh)) in d_y_columns().zip(x_hat_columns()).enumerate() {
        d_beta[(0, j)] = lane_sum(dy); //                                      y = … + β
        d_gamma[(0, j)] = lane_dot(dy, xh); //                                 y = γ x̂ + …
    }
    // Row by row in the formula, column by column in memory (see the forward pass): the same
    // sums in the same order.
    let (mut sum_g, mut sum_gx) = (vec![T::neg_zero(); n], vec![T::neg_zero(); n]);
    for (j, (dy, xh)) in d_y_columns().zip(x_hat_columns()).enumerate() {
        let gamma = ln.gamma[(0, j)];
        for r in 0..n {
            let g = gamma * dy[r]; //                                         ∂L/∂x̂ = γ ⊙ ∂L/∂y
            sum_g[r] += g;
            sum_gx[r] += g * xh[r];
        }
    }
    let mean_g: Vec<T> = sum_g.iter().map(|&v| v / c).collect();
    let mean_gx: Vec<T> = sum_gx.iter().map(|&v| v / c).collect();
    let factor: Vec<T> = (0..n)
        .map(|r| match ln.placement {
            Epsilon::InsideSqrt => T::one(),
            Epsilon::AddedToStd if cache.sigma[r] > T::zero() => cache.denom[r] / cache.sigma[r],
            Epsilon::AddedToStd => T::zero(),
        })
        .collect();
    for (j, ((dy, xh), out)) in
        d_y_columns().zip(x_hat_columns()).zip(d_x.as_mut_slice().chunks_exact_mut(n)).enumerate()
    {
        let gamma = ln.gamma[(0, j)];
        for r in 0..n {
            // x̂ = (x − μ)/s
            let d = (gamma * dy[r] - mean_g[r] - xh[r] * factor[r] * mean_gx[r]) / cache.denom[r];
            match store {
                Store::Overwrite => out[r] = d,
                Store::Accumulate => out[r] += d,
            }
        }
    }
}
