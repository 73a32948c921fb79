//! From logits to probabilities: the softmax of every row of a matrix and of one vector, its
//! backward pass and Jacobian, log-softmax and log-sum-exp, temperature, entropy.

use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::{Float, ensure_finite};
use nalgebra::{DMatrix, DVector};

/// How far Σp may stray from 1 (for `f64`; `f32` gets 4·K·ε when that is larger) before a vector
/// is refused as a probability distribution.
pub const DISTRIBUTION_TOLERANCE: f64 = 1e-6;

// ───────────────────────────── input checks ─────────────────────────────

/// Per-row maxima of a logit matrix, checking it on the way: not empty, no NaN, no +∞, and at
/// least one entry above −∞ in every row. One column-major pass (nalgebra's storage order).
fn row_maxima<T: Float>(op: &'static str, arg: &'static str, z: &DMatrix<T>) -> Result<Vec<T>> {
    let n = z.nrows();
    if n == 0 || z.ncols() == 0 {
        return Err(Error::Empty { op, arg });
    }
    let mut max = vec![T::neg_infinity(); n];
    for (c, column) in z.as_slice().chunks_exact(n).enumerate() {
        for (r, &v) in column.iter().enumerate() {
            if v.is_nan() || v == T::infinity() {
                return Err(Error::NonFinite { op, arg, at: format!("row {r}, column {c}") });
            }
            if v > max[r] {
                max[r] = v;
            }
        }
    }
    if let Some(r) = max.iter().position(|&m| m == T::neg_infinity()) {
        return Err(invalid(
            op,
            arg,
            format!(
                "row {r} of {} is −∞ everywhere (fully masked); softmax has nothing to normalise",
                shape_of(z)
            ),
        ));
    }
    Ok(max)
}

fn check_temperature<T: Float>(op: &'static str, temperature: T) -> Result<()> {
    if temperature.is_finite() && temperature > T::zero() {
        Ok(())
    } else {
        Err(invalid(
            op,
            "temperature T",
            format!(
                "must be finite and > 0 (T → 0 is the limit argmax, T = 0 divides by zero), \
                    got {temperature}"
            ),
        ))
    }
}

/// Checks that `p` is a probability distribution: not empty, finite, every entry in [0, 1], and
/// |Σp − 1| within [`DISTRIBUTION_TOLERANCE`] (or 4·K·ε for a low-precision float).
pub fn check_distribution<T: Float>(op: &'static str, arg: &'static str, p: &[T]) -> Result<()> {
    if p.is_empty() {
        return Err(Error::Empty { op, arg });
    }
    if let Some(i) = p.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite { op, arg, at: format!("index {i}") });
    }
    if let Some(i) = p.iter().position(|&v| v < T::zero() || v > T::one()) {
        return Err(invalid(
            op,
            arg,
            format!("probabilities lie in [0, 1]; {arg}[{i}] = {}", p[i]),
        ));
    }
    let sum: T = p.iter().copied().sum();
    let tolerance = DISTRIBUTION_TOLERANCE.max(4.0 * p.len() as f64 * T::epsilon().as_f64());
    if (sum.as_f64() - 1.0).abs() > tolerance {
        return Err(invalid(
            op,
            arg,
            format!("a distribution must sum to 1 (within {tolerance:e}); Σ{arg} = {sum}"),
        ));
    }
    Ok(())
}

/// One vector as a 1×K matrix, so the row-wise functions serve single examples too.
pub(super) fn row_of<T: Float>(v: &DVector<T>) -> DMatrix<T> {
    DMatrix::from_row_slice(1, v.len(), v.as_slice())
}

/// A 1×K matrix (or any matrix, row by row) as one vector.
pub(super) fn vector_of<T: Float>(m: &DMatrix<T>) -> DVector<T> {
    DVector::from_iterator(m.len(), m.transpose().iter().copied())
}

// ───────────────────────────── softmax, row-wise ─────────────────────────────

/// The shared kernel: for each row r, eᵣ꜀ = exp((z_rc − max_r)/T) and Sᵣ = Σ꜀ eᵣ꜀ (Sᵣ ≥ 1, since
/// the maximum contributes e⁰ = 1). Dividing the *shifted* logits keeps T → 0 finite: every
/// entry below the maximum goes to −∞, the maximum stays at 0.
/// Returns (e, max, S).
pub(super) fn shifted_exponentials<T: Float>(
    op: &'static str,
    arg: &'static str,
    z: &DMatrix<T>,
    temperature: T,
) -> Result<(DMatrix<T>, Vec<T>, Vec<T>)> {
    let max = row_maxima(op, arg, z)?;
    let n = z.nrows();
    let mut e = z.clone();
    let mut sums = vec![T::zero(); n];
    for column in e.as_mut_slice().chunks_exact_mut(n) {
        for (r, v) in column.iter_mut().enumerate() {
            *v = ((*v - max[r]) / temperature).exp();
            sums[r] += *v;
        }
    }
    Ok((e, max, sums))
}

/// Row-wise softmax: Y_rc = e^{Z_rc} / Σ꜀′ e^{Z_rc′}, computed as
/// e^{Z_rc − max_r} / Σ꜀′ e^{Z_rc′ − max_r}.
///
/// Shapes: z is N×K (one row per sample or token), the result N×K with every row summing to 1.
/// Entries of −∞ (masks) get exactly 0. Errors: empty z, NaN or +∞ anywhere, a row of only −∞.
pub fn softmax_rows_forward<T: Float>(z: &DMatrix<T>) -> Result<DMatrix<T>> {
    let (mut y, _, sums) = shifted_exponentials("softmax_rows_forward", "z", z, T::one())?;
    divide_rows(&mut y, &sums);
    Ok(y)
}

/// Divides every row r of m by by[r].
pub(super) fn divide_rows<T: Float>(m: &mut DMatrix<T>, by: &[T]) {
    let n = m.nrows();
    for column in m.as_mut_slice().chunks_exact_mut(n) {
        for (r, v) in column.iter_mut().enumerate() {
            *v /= by[r];
        }
    }
}

/// Σ꜀ a_rc·b_rc for every row r (a and b of equal shape).
fn row_dots<T: Float>(a: &DMatrix<T>, b: &DMatrix<T>) -> Vec<T> {
    let n = a.nrows();
    let mut s = vec![T::zero(); n];
    for (ca, cb) in a.as_slice().chunks_exact(n).zip(b.as_slice().chunks_exact(n)) {
        for (r, (&x, &y)) in ca.iter().zip(cb).enumerate() {
            s[r] += x * y;
        }
    }
    s
}

/// Backward of [`softmax_rows_forward`]: from the forward output Y and ∂L/∂Y to
/// ∂L/∂Z = Y ⊙ (∂L/∂Y − rowsum(∂L/∂Y ⊙ Y)), i.e. per row, Jᵀ·∂L/∂y with the Jacobian
/// J_ij = y_i(δ_ij − y_j) (see [`softmax_jacobian`]) applied without forming it.
///
/// Shapes: y and d_y N×K, the result N×K. Errors: shapes differ, either is empty or non-finite.
pub fn softmax_rows_backward<T: Float>(y: &DMatrix<T>, d_y: &DMatrix<T>) -> Result<DMatrix<T>> {
    const OP: &str = "softmax_rows_backward";
    same_shape_nonempty(OP, "y and d_y", ("y", y), d_y)?;
    ensure_finite(OP, "y", y)?;
    ensure_finite(OP, "d_y", d_y)?;
    // y_rc = e_rc / S_r  ⇒  ∂L/∂z_rc = y_rc (∂L/∂y_rc − Σ꜀′ ∂L/∂y_rc′ · y_rc′)
    let s = row_dots(d_y, y);
    Ok(zip_with_row(d_y, y, |r, d, yv| yv * (d - s[r])))
}

/// Checks that a backward pass's two same-shaped inputs agree in shape and are not empty.
/// `names` is how the error names the pair ("y and d_y"), `a_name` the first alone.
fn same_shape_nonempty<T: Float>(
    op: &'static str,
    names: &'static str,
    (a_name, a): (&'static str, &DMatrix<T>),
    b: &DMatrix<T>,
) -> Result<()> {
    if a.shape() != b.shape() {
        return Err(shape_error(op, names, shape_of(a), shape_of(b)));
    }
    if a.is_empty() {
        return Err(Error::Empty { op, arg: a_name });
    }
    Ok(())
}

/// The element-wise map out_rc = f(r, d_rc, o_rc) over two same-shaped matrices, where f may
/// also read a per-row quantity (a row sum or dot product) through the row index r.
fn zip_with_row<T: Float>(
    d: &DMatrix<T>,
    o: &DMatrix<T>,
    f: impl Fn(usize, T, T) -> T,
) -> DMatrix<T> {
    let n = d.nrows();
    let mut out = d.clone();
    for (cd, co) in out.as_mut_slice().chunks_exact_mut(n).zip(o.as_slice().chunks_exact(n)) {
        for (r, (v, &ov)) in cd.iter_mut().zip(co).enumerate() {
            *v = f(r, *v, ov);
        }
    }
    out
}

/// Row-wise log-softmax by log-sum-exp: ln Y_rc = (Z_rc − max_r) − ln Σ꜀′ e^{Z_rc′ − max_r}.
///
/// Never forms ln of a rounded probability, so a logit 1000 below its row's maximum gives
/// −1000 exactly instead of ln 0 = −∞. Masked (−∞) entries give −∞. Shapes: N×K → N×K.
pub fn log_softmax_rows<T: Float>(z: &DMatrix<T>) -> Result<DMatrix<T>> {
    const OP: &str = "log_softmax_rows";
    let (_, max, sums) = shifted_exponentials(OP, "z", z, T::one())?;
    let n = z.nrows();
    let mut out = z.clone();
    for column in out.as_mut_slice().chunks_exact_mut(n) {
        for (r, v) in column.iter_mut().enumerate() {
            *v = (*v - max[r]) - sums[r].ln();
        }
    }
    Ok(out)
}

/// Backward of [`log_softmax_rows`]: from its output ln Y and ∂L/∂(ln Y) to
/// ∂L/∂Z = ∂L/∂(ln Y) − Y ⊙ rowsum(∂L/∂(ln Y)), with Y = e^{ln Y}.
///
/// Shapes: log_y and d N×K. ln Y may hold −∞ (masked entries, whose Y is 0); NaN or +∞ is an error.
pub fn log_softmax_rows_backward<T: Float>(
    log_y: &DMatrix<T>,
    d: &DMatrix<T>,
) -> Result<DMatrix<T>> {
    const OP: &str = "log_softmax_rows_backward";
    same_shape_nonempty(OP, "log_y and d", ("log_y", log_y), d)?;
    if let Some(i) = log_y.iter().position(|v| v.is_nan() || *v == T::infinity()) {
        return Err(Error::NonFinite {
            op: OP,
            arg: "log_y",
            at: format!("row {}, column {}", i % log_y.nrows(), i / log_y.nrows()),
        });
    }
    ensure_finite(OP, "d", d)?;
    let n = d.nrows();
    let mut sums = vec![T::zero(); n];
    for column in d.as_slice().chunks_exact(n) {
        for (r, &v) in column.iter().enumerate() {
            sums[r] += v;
        }
    }
    // ln y_rc = z_rc − ln Σ꜀′ e^{z_rc′}  ⇒  ∂L/∂z_rc = d_rc − y_rc Σ꜀′ d_rc′
    Ok(zip_with_row(d, log_y, |r, v, l| v - l.exp() * sums[r]))
}

/// ln Σ꜀ e^{Z_rc} for every row, as max_r + ln Σ꜀ e^{Z_rc − max_r}. Shapes: N×K → N.
pub fn log_sum_exp_rows<T: Float>(z: &DMatrix<T>) -> Result<DVector<T>> {
    const OP: &str = "log_sum_exp_rows";
    let (_, max, sums) = shifted_exponentials(OP, "z", z, T::one())?;
    Ok(DVector::from_iterator(max.len(), max.iter().zip(&sums).map(|(&m, &s)| m + s.ln())))
}

/// Row-wise softmax at temperature T: Y_rc = e^{Z_rc/T} / Σ꜀′ e^{Z_rc′/T}.
///
/// T = 1 is the plain softmax; T → 0⁺ tends to all weight on each row's maximum (shared equally
/// among ties); T → ∞ tends to the uniform 1/K. Computed as exp((Z_rc − max_r)/T), so even
/// T = 10⁻³⁰⁰ gives a finite one-hot row. Errors: as [`softmax_rows_forward`], and T ≤ 0 or
/// non-finite.
pub fn softmax_rows_with_temperature<T: Float>(
    z: &DMatrix<T>,
    temperature: T,
) -> Result<DMatrix<T>> {
    const OP: &str = "softmax_rows_with_temperature";
    check_temperature(OP, temperature)?;
    let (mut y, _, sums) = shifted_exponentials(OP, "z", z, temperature)?;
    divide_rows(&mut y, &sums);
    Ok(y)
}

// ───────────────────────────── softmax of one vector ─────────────────────────────

/// σ(z)ᵢ = e^{zᵢ} / Σⱼ e^{zⱼ} for one vector of K logits (max-subtracted; see
/// [`softmax_rows_forward`]).
pub fn softmax<T: Float>(z: &DVector<T>) -> Result<DVector<T>> {
    Ok(vector_of(&softmax_rows_forward(&row_of(z))?))
}

/// ln σ(z)ᵢ = zᵢ − ln Σⱼ e^{zⱼ} for one vector, by log-sum-exp (see [`log_softmax_rows`]).
pub fn log_softmax<T: Float>(z: &DVector<T>) -> Result<DVector<T>> {
    Ok(vector_of(&log_softmax_rows(&row_of(z))?))
}

/// ln Σⱼ e^{zⱼ} = max z + ln Σⱼ e^{zⱼ − max z} for one vector.
pub fn log_sum_exp<T: Float>(z: &DVector<T>) -> Result<T> {
    Ok(log_sum_exp_rows(&row_of(z))?[0])
}

/// e^{zᵢ/T} / Σⱼ e^{zⱼ/T} for one vector (see [`softmax_rows_with_temperature`]).
pub fn softmax_with_temperature<T: Float>(z: &DVector<T>, temperature: T) -> Result<DVector<T>> {
    Ok(vector_of(&softmax_rows_with_temperature(&row_of(z), temperature)?))
}

/// The softmax with base b instead of e: b^{zᵢ} / Σⱼ b^{zⱼ}. Writing b = e^B makes it the ordinary
/// softmax of B·z, i.e. temperature T = 1/B for b > 1; b = 1 (B = 0) gives the uniform
/// distribution and 0 < b < 1 (B < 0) reverses the order. Errors: b ≤ 0 or non-finite, and what
/// [`softmax`] refuses in B·z (with b = 1 a masked −∞ logit is refused, as 1^{−∞} has no value).
pub fn softmax_with_base<T: Float>(z: &DVector<T>, base: T) -> Result<DVector<T>> {
    const OP: &str = "softmax_with_base";
    if !(base.is_finite() && base > T::zero()) {
        return Err(invalid(OP, "base b", format!("must be finite and > 0, got {base}")));
    }
    let big_b = base.ln();
    let scaled = row_of(z).map(|v| v * big_b);
    let (mut y, _, sums) =
        shifted_exponentials(OP, "B·z (the logits times ln b)", &scaled, T::one())?;
    divide_rows(&mut y, &sums);
    Ok(vector_of(&y))
}

/// H(p) = −Σᵢ pᵢ ln pᵢ in nats (0 ln 0 = 0): 0 for a one-hot p, ln K for the uniform one.
/// Errors unless p is a distribution.
pub fn entropy<T: Float>(p: &DVector<T>) -> Result<T> {
    check_distribution("entropy", "p", p.as_slice())?;
    Ok(p.iter().filter(|&&v| v > T::zero()).map(|&v| -v * v.ln()).sum())
}

/// The index of the largest entry of every row (the first one on ties). Empty for a matrix with
/// no rows. NaN is never the largest: a NaN entry loses to any number wherever it stands (a row
/// that is all NaN, or has no columns, gives 0).
pub fn argmax_rows<T: Float>(z: &DMatrix<T>) -> Vec<usize> {
    let better = |r: usize, c: usize, best: usize| {
        !z[(r, c)].is_nan() && (z[(r, best)].is_nan() || z[(r, c)] > z[(r, best)])
    };
    (0..z.nrows())
        .map(|r| (0..z.ncols()).fold(0, |best, c| if better(r, c, best) { c } else { best }))
        .collect()
}

// ───────────────────────────── the Jacobian ─────────────────────────────

/// The softmax Jacobian at its output ŷ: J_ij = ∂ŷᵢ/∂zⱼ = ŷᵢ(δᵢⱼ − ŷⱼ), i.e. diag(ŷ) − ŷŷᵀ.
/// Shapes: ŷ of length K, J K×K (symmetric). Errors unless ŷ is a distribution.
pub fn softmax_jacobian<T: Float>(y_hat: &DVector<T>) -> Result<DMatrix<T>> {
    check_distribution("softmax_jacobian", "y_hat", y_hat.as_slice())?;
    let k = y_hat.len();
    Ok(DMatrix::from_fn(k, k, |i, j| {
        y_hat[i] * (if i == j { T::one() } else { T::zero() } - y_hat[j])
    }))
}

// ───────────────────────────── back from probabilities to logits ─────────────────────────────

/// The logits ln ŷ whose softmax is ŷ (every ŷᵢ > 0): softmax(ln ŷ)ᵢ = ŷᵢ / Σⱼ ŷⱼ = ŷᵢ, and any
/// common shift of them gives the same softmax.
pub fn logits_of(y_hat: &DVector<f64>) -> Result<DVector<f64>> {
    check_distribution("logits_of", "y_hat", y_hat.as_slice())?;
    if let Some(i) = y_hat.iter().position(|&v| v == 0.0) {
        return Err(invalid(
            "logits_of",
            "y_hat",
            format!("y_hat[{i}] = 0 has logit −∞; a finite logit needs ŷ > 0"),
        ));
    }
    Ok(y_hat.map(f64::ln))
}
