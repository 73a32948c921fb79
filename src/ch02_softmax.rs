//! Chapter 2: softmax, temperature and cross-entropy, from one example to multiclass training.
//!
//! K logits z = (z₁, …, z_K) become a probability distribution by the softmax
//! ŷᵢ = e^{zᵢ} / Σⱼ e^{zⱼ}; a temperature T divides the logits first, ŷᵢ = e^{zᵢ/T} / Σⱼ e^{zⱼ/T};
//! the cross-entropy L = −Σᵢ yᵢ ln ŷᵢ scores ŷ against the truth y, and its gradient with respect
//! to the logits is the famous ŷ − y. Multinomial (softmax) regression, Z = XW + b trained on the
//! mean cross-entropy, closes the chapter. The prose is
//! [`chapters/ch02_softmax.md`](../../chapters/ch02_softmax.md); the tests are `tests/ch02_softmax.rs`.
//!
//! Conventions: a batch of logits is an N×K matrix with one row per sample (or per token, in
//! chapters 6 and 9, which reuse [`softmax_rows_forward`], [`log_softmax_rows`] and
//! [`cross_entropy_from_logits`] in `f32`); every row-wise function treats each row as its own
//! distribution. A single example is a [`DVector`]. Targets are class indices `0..K`.
//!
//! Stable by construction: every softmax subtracts its row's maximum before exponentiating, so the
//! largest exponential is e⁰ = 1 and nothing overflows; logarithms of probabilities are formed by
//! log-sum-exp, never as ln of a rounded probability. A logit of −∞ is a mask and gets probability
//! exactly 0; a row whose every logit is −∞ is an error (there is nothing to normalise). NaN and
//! +∞ are always errors.

use crate::errata::Erratum;
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::{Float, ensure_finite};
use crate::plot::{Figure, LineChart, Regions, ScatterChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::rng::Rng;
use crate::snapshot::fixed;
use crate::sources::{D0, D1, D2, D3, THIS_CRATE};
use nalgebra::{DMatrix, DVector};
use std::path::{Path, PathBuf};

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
                "must be finite and > 0 (T → 0 is the limit argmax, T = 0 divides by zero), got {temperature}"
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

fn check_same_length<T>(
    op: &'static str,
    arg: &'static str,
    a: &DVector<T>,
    b: &DVector<T>,
) -> Result<()> {
    if a.len() == b.len() {
        Ok(())
    } else {
        Err(shape_error(
            op,
            arg,
            format!("equal lengths (got {} first)", a.len()),
            format!("{} and {}", a.len(), b.len()),
        ))
    }
}

fn check_targets(op: &'static str, targets: &[usize], rows: usize, classes: usize) -> Result<()> {
    if targets.len() != rows {
        return Err(shape_error(
            op,
            "logits and targets",
            format!("{rows} targets (one per row of the logits)"),
            format!("{} targets for {rows} rows", targets.len()),
        ));
    }
    if let Some(i) = targets.iter().position(|&t| t >= classes) {
        return Err(invalid(
            op,
            "targets",
            format!(
                "targets[{i}] = {} but there are only {classes} classes (0..{classes})",
                targets[i]
            ),
        ));
    }
    Ok(())
}

fn row_of<T: Float>(v: &DVector<T>) -> DMatrix<T> {
    DMatrix::from_row_slice(1, v.len(), v.as_slice())
}

fn vector_of<T: Float>(m: &DMatrix<T>) -> DVector<T> {
    DVector::from_iterator(m.len(), m.transpose().iter().copied())
}

// ───────────────────────────── softmax, row-wise ─────────────────────────────

/// The shared kernel: for each row r, eᵣ꜀ = exp((z_rc − max_r)/T) and Sᵣ = Σ꜀ eᵣ꜀ (Sᵣ ≥ 1, since the
/// maximum contributes e⁰ = 1). Dividing the *shifted* logits keeps T → 0 finite: every entry
/// below the maximum goes to −∞, the maximum stays at 0.
/// Returns (e, max, S).
fn shifted_exponentials<T: Float>(
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

/// Row-wise softmax: Y_rc = e^{Z_rc} / Σ꜀′ e^{Z_rc′}, computed as e^{Z_rc − max_r} / Σ꜀′ e^{Z_rc′ − max_r}.
///
/// Shapes: z is N×K (one row per sample or token), the result N×K with every row summing to 1.
/// Entries of −∞ (masks) get exactly 0. Errors: empty z, NaN or +∞ anywhere, a row of only −∞.
pub fn softmax_rows_forward<T: Float>(z: &DMatrix<T>) -> Result<DMatrix<T>> {
    let (mut y, _, sums) = shifted_exponentials("softmax_rows_forward", "z", z, T::one())?;
    divide_rows(&mut y, &sums);
    Ok(y)
}

fn divide_rows<T: Float>(m: &mut DMatrix<T>, by: &[T]) {
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
/// T = 10⁻³⁰⁰ gives a finite one-hot row. Errors: as [`softmax_rows_forward`], and T ≤ 0 or non-finite.
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

/// σ(z)ᵢ = e^{zᵢ} / Σⱼ e^{zⱼ} for one vector of K logits (max-subtracted; see [`softmax_rows_forward`]).
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

// ───────────────────────────── cross-entropy from probabilities ─────────────────────────────

/// The one-hot vector of length `classes` with a 1 at `class`.
pub fn one_hot<T: Float>(classes: usize, class: usize) -> Result<DVector<T>> {
    if classes == 0 {
        return Err(Error::Empty { op: "one_hot", arg: "classes" });
    }
    if class >= classes {
        return Err(invalid(
            "one_hot",
            "class",
            format!("{class} is not below the number of classes {classes}"),
        ));
    }
    Ok(DVector::from_fn(classes, |i, _| if i == class { T::one() } else { T::zero() }))
}

/// L(y, ŷ) = −Σᵢ yᵢ ln ŷᵢ, with 0·ln 0 = 0. For a one-hot y this is −ln ŷ_true.
///
/// Both arguments must be distributions of equal length. Where ŷᵢ = 0 but yᵢ > 0 the loss is +∞
/// (the truth was declared impossible); [`cross_entropy_from_logits`] never meets that case.
pub fn cross_entropy<T: Float>(y: &DVector<T>, y_hat: &DVector<T>) -> Result<T> {
    const OP: &str = "cross_entropy";
    check_same_length(OP, "y and y_hat", y, y_hat)?;
    check_distribution(OP, "y", y.as_slice())?;
    check_distribution(OP, "y_hat", y_hat.as_slice())?;
    Ok(y.iter()
        .zip(y_hat.iter())
        .filter(|&(&yi, _)| yi > T::zero())
        .map(|(&yi, &pi)| -yi * pi.ln())
        .sum())
}

/// ∂L/∂ŷᵢ = −yᵢ/ŷᵢ, the derivative of [`cross_entropy`] with respect to the probabilities
/// (document 000 prints yᵢ − ŷᵢ here; see the errata). Errors where ŷᵢ = 0 < yᵢ (infinite slope).
pub fn d_cross_entropy_d_probabilities<T: Float>(
    y: &DVector<T>,
    y_hat: &DVector<T>,
) -> Result<DVector<T>> {
    const OP: &str = "d_cross_entropy_d_probabilities";
    check_same_length(OP, "y and y_hat", y, y_hat)?;
    check_distribution(OP, "y", y.as_slice())?;
    check_distribution(OP, "y_hat", y_hat.as_slice())?;
    if let Some(i) = (0..y.len()).find(|&i| y[i] > T::zero() && y_hat[i] == T::zero()) {
        return Err(invalid(
            OP,
            "y_hat",
            format!("y_hat[{i}] = 0 where y[{i}] > 0: the slope −y/ŷ is infinite there"),
        ));
    }
    Ok(DVector::from_fn(
        y.len(),
        |i, _| if y[i] > T::zero() { -y[i] / y_hat[i] } else { T::zero() },
    ))
}

/// ∂L/∂z = ŷ − y: the gradient of the cross-entropy with respect to the logits that produced ŷ by
/// softmax. Both arguments distributions of equal length.
pub fn d_cross_entropy_d_logits<T: Float>(
    y: &DVector<T>,
    y_hat: &DVector<T>,
) -> Result<DVector<T>> {
    const OP: &str = "d_cross_entropy_d_logits";
    check_same_length(OP, "y and y_hat", y, y_hat)?;
    check_distribution(OP, "y", y.as_slice())?;
    check_distribution(OP, "y_hat", y_hat.as_slice())?;
    Ok(y_hat - y)
}

/// The same gradient the long way, by the chain rule: ∂L/∂z = Jᵀ·∂L/∂ŷ with J from
/// [`softmax_jacobian`] and ∂L/∂ŷ from [`d_cross_entropy_d_probabilities`]. Algebraically
/// Σᵢ (−yᵢ/ŷᵢ)·ŷᵢ(δᵢⱼ − ŷⱼ) = −yⱼ + ŷⱼ Σᵢ yᵢ = ŷⱼ − yⱼ.
pub fn d_logits_by_chain_rule<T: Float>(y: &DVector<T>, y_hat: &DVector<T>) -> Result<DVector<T>> {
    let d_y_hat = d_cross_entropy_d_probabilities(y, y_hat)?;
    let jacobian = softmax_jacobian(y_hat)?;
    let d_col = DMatrix::from_column_slice(d_y_hat.len(), 1, d_y_hat.as_slice());
    let d_z = crate::matmul::matmul_tn(&jacobian, &d_col)?;
    Ok(DVector::from_column_slice(d_z.as_slice()))
}

/// (1 − α)·ŷ + α·y = ŷ − α(ŷ − y): the gradient step applied to the *probabilities*, which is what
/// document 003 computes by hand. It is not a gradient-descent step (that moves the logits; see
/// [`logit_step`]); it mixes ŷ towards y and, since Σ(ŷ − y) = 0, keeps the sum at exactly 1.
pub fn mix_towards_target<T: Float>(
    y_hat: &DVector<T>,
    y: &DVector<T>,
    alpha: T,
) -> Result<DVector<T>> {
    const OP: &str = "mix_towards_target";
    check_same_length(OP, "y_hat and y", y_hat, y)?;
    check_distribution(OP, "y_hat", y_hat.as_slice())?;
    check_distribution(OP, "y", y.as_slice())?;
    if !(alpha.is_finite() && alpha >= T::zero() && alpha <= T::one()) {
        return Err(invalid(OP, "alpha", format!("a mixing weight lies in [0, 1], got {alpha}")));
    }
    Ok(y_hat - (y_hat - y) * alpha)
}

// ───────────────────────────── cross-entropy from logits ─────────────────────────────

/// The mean cross-entropy of N rows of logits against integer targets, and (P − Y)/N.
fn cross_entropy_core<T: Float>(
    op: &'static str,
    logits: &DMatrix<T>,
    targets: &[usize],
    want_gradient: bool,
) -> Result<(T, Option<DMatrix<T>>)> {
    if logits.is_empty() {
        return Err(Error::Empty { op, arg: "logits" });
    }
    check_targets(op, targets, logits.nrows(), logits.ncols())?;
    if let Some(r) = (0..targets.len()).find(|&r| logits[(r, targets[r])] == T::neg_infinity()) {
        return Err(invalid(
            op,
            "targets",
            format!(
                "row {r}'s target class {} is masked (logit −∞): its loss is infinite",
                targets[r]
            ),
        ));
    }
    let (e, max, sums) = shifted_exponentials(op, "logits", logits, T::one())?;
    let n = T::of(logits.nrows() as f64);
    // ℓ_r = −ln ŷ_r,t = ln Σ꜀ e^{z_rc − max_r} − (z_rt − max_r)
    let loss =
        (0..targets.len()).map(|r| sums[r].ln() - (logits[(r, targets[r])] - max[r])).sum::<T>()
            / n;
    if !want_gradient {
        return Ok((loss, None));
    }
    // L = (1/N) Σ_r ℓ_r  ⇒  ∂L/∂z_rc = (ŷ_rc − y_rc)/N
    let mut d = e;
    divide_rows(&mut d, &sums);
    for (r, &t) in targets.iter().enumerate() {
        d[(r, t)] -= T::one();
    }
    d /= n;
    Ok((loss, Some(d)))
}

/// The mean cross-entropy from logits: L = (1/N) Σ_r −ln softmax(z_r)_{t_r}, with
/// −ln softmax(z)_t = ln Σ꜀ e^{z_c} − z_t evaluated by log-sum-exp.
///
/// Shapes: logits N×K, targets N class indices in 0..K. Masked (−∞) logits are allowed except at a
/// target. Errors: empty logits, NaN or +∞, a fully masked row, a target out of range or masked,
/// N ≠ number of targets.
pub fn cross_entropy_from_logits<T: Float>(logits: &DMatrix<T>, targets: &[usize]) -> Result<T> {
    Ok(cross_entropy_core("cross_entropy_from_logits", logits, targets, false)?.0)
}

/// Backward of [`cross_entropy_from_logits`]: ∂L/∂Z = (P − Y)/N, with P = softmax rows of Z and Y
/// the one-hot rows of the targets. Shapes: as the forward; the result N×K.
pub fn cross_entropy_from_logits_backward<T: Float>(
    logits: &DMatrix<T>,
    targets: &[usize],
) -> Result<DMatrix<T>> {
    let (_, d) = cross_entropy_core("cross_entropy_from_logits_backward", logits, targets, true)?;
    d.ok_or_else(|| {
        invalid("cross_entropy_from_logits_backward", "logits", "gradient not computed")
    })
}

/// The loss and its gradient in one pass (one softmax instead of two), for training loops.
pub fn cross_entropy_from_logits_with_gradient<T: Float>(
    logits: &DMatrix<T>,
    targets: &[usize],
) -> Result<(T, DMatrix<T>)> {
    let (loss, d) =
        cross_entropy_core("cross_entropy_from_logits_with_gradient", logits, targets, true)?;
    Ok((
        loss,
        d.ok_or_else(|| {
            invalid("cross_entropy_from_logits_with_gradient", "logits", "gradient not computed")
        })?,
    ))
}

/// −ln softmax(z)_target for one vector of logits.
pub fn cross_entropy_from_logit_vector<T: Float>(z: &DVector<T>, target: usize) -> Result<T> {
    cross_entropy_from_logits(&row_of(z), &[target])
}

/// One gradient-descent step on the logits of one example: z ← z − α(softmax(z) − y).
pub fn logit_step<T: Float>(
    z: &DVector<T>,
    target: usize,
    learning_rate: f64,
) -> Result<DVector<T>> {
    crate::optim::check_learning_rate("logit_step", learning_rate)?;
    let d = cross_entropy_from_logits_backward(&row_of(z), &[target])?;
    Ok(z - vector_of(&d) * T::of(learning_rate))
}

// ───────────────────────────── the document's 2000-step script ─────────────────────────────

/// The script's starting logits (it calls them weights): the four numbers the text uses as
/// *probabilities* of mat, hat, bat, rat.
pub const SCRIPT_START: [f64; 4] = [0.1, 0.1, 0.1, 0.7];
/// The true class of the script: mat.
pub const SCRIPT_TRUE_CLASS: usize = 0;
/// The script's learning rate (the text's hand calculation uses 0.1).
pub const SCRIPT_LEARNING_RATE: f64 = 0.01;
/// The script's number of updates.
pub const SCRIPT_ITERATIONS: usize = 2000;
/// It prints on every iteration i with i mod 10 = 0.
pub const SCRIPT_PRINT_EVERY: usize = 10;
/// The four words, in the order of the logits.
pub const WORDS: [&str; 4] = ["mat", "hat", "bat", "rat"];

/// One pair of printed lines of the script: at iteration i it prints the weights *after* the
/// i-th update next to the probabilities computed *before* it, from the old weights.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptLine {
    /// i.
    pub iteration: usize,
    /// The logits after update i (i + 1 updates done).
    pub weights_after_update: DVector<f64>,
    /// softmax of the logits before update i (i updates done).
    pub probabilities_before_update: DVector<f64>,
}

/// A replay of the script.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// Every line pair it prints (i = 0, 10, …, 1990).
    pub lines: Vec<ScriptLine>,
    /// softmax of the logits after s updates, for s = 0 … iterations.
    pub probabilities: Vec<DVector<f64>>,
    /// What it prints last: softmax of the logits after all updates.
    pub final_probabilities: DVector<f64>,
}

impl Replay {
    /// The printed line pair of iteration i, if the script prints one.
    pub fn line(&self, iteration: usize) -> Option<&ScriptLine> {
        self.lines.iter().find(|l| l.iteration == iteration)
    }
}

/// Replays the gradient-descent script: for i in 0..iterations, P = softmax(z), g = P − y,
/// z ← z − α·g, and on every `print_every`-th i record (z after the update, P before it).
pub fn replay_script(
    start: &[f64],
    target: usize,
    learning_rate: f64,
    iterations: usize,
    print_every: usize,
) -> Result<Replay> {
    if print_every == 0 {
        return Err(invalid("replay_script", "print_every", "must be at least 1"));
    }
    let mut z = DVector::from_column_slice(start);
    let mut lines = Vec::new();
    let mut probabilities = Vec::with_capacity(iterations + 1);
    for i in 0..iterations {
        let p = softmax(&z)?;
        z = logit_step(&z, target, learning_rate)?;
        if i % print_every == 0 {
            lines.push(ScriptLine {
                iteration: i,
                weights_after_update: z.clone(),
                probabilities_before_update: p.clone(),
            });
        }
        probabilities.push(p);
    }
    let final_probabilities = softmax(&z)?;
    probabilities.push(final_probabilities.clone());
    Ok(Replay { lines, probabilities, final_probabilities })
}

/// The replay with the script's own settings.
pub fn document_replay() -> Result<Replay> {
    replay_script(
        &SCRIPT_START,
        SCRIPT_TRUE_CLASS,
        SCRIPT_LEARNING_RATE,
        SCRIPT_ITERATIONS,
        SCRIPT_PRINT_EVERY,
    )
}

// ───────────────────────────── multinomial (softmax) regression ─────────────────────────────

fn check_regression<T: Float>(
    op: &'static str,
    w: &DMatrix<T>,
    b: &DMatrix<T>,
    x: &DMatrix<T>,
) -> Result<()> {
    if x.nrows() == 0 {
        return Err(Error::Empty { op, arg: "x (the batch)" });
    }
    if w.nrows() != x.ncols() || w.ncols() == 0 {
        return Err(shape_error(
            op,
            "w and x",
            format!("w with {} rows (one per column of x) and ≥ 1 column", x.ncols()),
            format!("w {}, x {}", shape_of(w), shape_of(x)),
        ));
    }
    if b.nrows() != 1 || b.ncols() != w.ncols() {
        return Err(shape_error(
            op,
            "b",
            format!("1×{} (one bias per class)", w.ncols()),
            shape_of(b),
        ));
    }
    ensure_finite(op, "x", x)?;
    ensure_finite(op, "w", w)?;
    ensure_finite(op, "b", b)
}

/// Z = XW + 1bᵀ: one row of K class logits per sample. Shapes: x N×D, w D×K, b 1×K, Z N×K.
/// (Document 000 writes the weights as K×D, one row per class: our W is its transpose.)
pub fn regression_logits<T: Float>(
    w: &DMatrix<T>,
    b: &DMatrix<T>,
    x: &DMatrix<T>,
) -> Result<DMatrix<T>> {
    check_regression("regression_logits", w, b, x)?;
    let mut z = crate::matmul::matmul(x, w)?;
    for c in 0..z.ncols() {
        let bc = b[(0, c)];
        z.column_mut(c).iter_mut().for_each(|v| *v += bc);
    }
    Ok(z)
}

/// Backward of [`regression_logits`]: from ∂L/∂Z (N×K) to (∂L/∂X = ∂L/∂Z·Wᵀ, N×D;
/// ∂L/∂W = Xᵀ·∂L/∂Z, D×K; ∂L/∂b = column sums of ∂L/∂Z, 1×K).
pub fn regression_logits_backward<T: Float>(
    w: &DMatrix<T>,
    x: &DMatrix<T>,
    d_z: &DMatrix<T>,
) -> Result<(DMatrix<T>, DMatrix<T>, DMatrix<T>)> {
    const OP: &str = "regression_logits_backward";
    if d_z.nrows() != x.nrows() || d_z.ncols() != w.ncols() {
        return Err(shape_error(
            OP,
            "d_z",
            format!("{}×{} (rows of x × columns of w)", x.nrows(), w.ncols()),
            shape_of(d_z),
        ));
    }
    if w.nrows() != x.ncols() {
        return Err(shape_error(
            OP,
            "w and x",
            format!("w with {} rows", x.ncols()),
            format!("w {}, x {}", shape_of(w), shape_of(x)),
        ));
    }
    let d_x = crate::matmul::matmul_nt(d_z, w)?; // Z = XW       ⇒ ∂L/∂X = ∂L/∂Z Wᵀ
    let d_w = crate::matmul::matmul_tn(x, d_z)?; // Z = XW       ⇒ ∂L/∂W = Xᵀ ∂L/∂Z
    let d_b = DMatrix::from_fn(1, d_z.ncols(), |_, c| d_z.column(c).sum()); // Z = … + 1bᵀ ⇒ ∂L/∂b = 1ᵀ ∂L/∂Z
    Ok((d_x, d_w, d_b))
}

/// The mean cross-entropy of the model and its gradients:
/// L = (1/N) Σᵢ −ln softmax(xᵢᵀW + bᵀ)_{tᵢ}, ∂L/∂W = (1/N) Σᵢ xᵢ(ŷᵢ − yᵢ)ᵀ, ∂L/∂b = (1/N) Σᵢ (ŷᵢ − yᵢ)ᵀ.
pub fn regression_loss_and_gradient<T: Float>(
    w: &DMatrix<T>,
    b: &DMatrix<T>,
    x: &DMatrix<T>,
    targets: &[usize],
) -> Result<(T, DMatrix<T>, DMatrix<T>)> {
    let z = regression_logits(w, b, x)?;
    let (loss, d_z) = cross_entropy_from_logits_with_gradient(&z, targets)?;
    let (_, d_w, d_b) = regression_logits_backward(w, x, &d_z)?;
    Ok((loss, d_w, d_b))
}

/// Document 000's form of the weight gradient, written as it is printed: the gradient of the
/// *summed* loss, Σᵢ (ŷᵢ − yᵢ)xᵢᵀ, one row per class (K×D), accumulated sample by sample. It is
/// N·(∂L/∂W)ᵀ of [`regression_loss_and_gradient`].
pub fn summed_weight_gradient(
    w: &DMatrix<f64>,
    b: &DMatrix<f64>,
    x: &DMatrix<f64>,
    targets: &[usize],
) -> Result<DMatrix<f64>> {
    let z = regression_logits(w, b, x)?;
    check_targets("summed_weight_gradient", targets, x.nrows(), w.ncols())?;
    let p = softmax_rows_forward(&z)?;
    let mut g = DMatrix::zeros(w.ncols(), x.ncols());
    for (i, &t) in targets.iter().enumerate() {
        let residual =
            DVector::from_fn(w.ncols(), |k, _| p[(i, k)] - if k == t { 1.0 } else { 0.0 });
        let xi = x.row(i).transpose();
        g += residual * xi.transpose();
    }
    Ok(g)
}

/// How to train.
#[derive(Clone, Copy, Debug)]
pub struct TrainConfig {
    /// The learning rate α (finite, > 0).
    pub learning_rate: f64,
    /// Full-batch steps.
    pub steps: usize,
}

/// What training produced.
#[derive(Clone, Debug)]
pub struct Trained {
    /// Learned weights, D×K.
    pub w: DMatrix<f64>,
    /// Learned biases, 1×K.
    pub b: DMatrix<f64>,
    /// The loss before each step, then after the last: `steps + 1` values.
    pub losses: Vec<f64>,
}

impl Trained {
    /// The predicted class of every row of x: the argmax of its logits (= of its probabilities).
    pub fn predict(&self, x: &DMatrix<f64>) -> Result<Vec<usize>> {
        Ok(argmax_rows(&regression_logits(&self.w, &self.b, x)?))
    }

    /// The fraction of rows whose predicted class is the target.
    pub fn accuracy(&self, x: &DMatrix<f64>, targets: &[usize]) -> Result<f64> {
        check_targets("Trained::accuracy", targets, x.nrows(), self.w.ncols())?;
        let predicted = self.predict(x)?;
        Ok(predicted.iter().zip(targets).filter(|(p, t)| p == t).count() as f64 / x.nrows() as f64)
    }
}

/// Full-batch gradient descent from W = 0, b = 0: W ← W − α ∂L/∂W, b ← b − α ∂L/∂b.
pub fn train(
    x: &DMatrix<f64>,
    targets: &[usize],
    classes: usize,
    config: TrainConfig,
) -> Result<Trained> {
    let sgd = crate::optim::Sgd::new(config.learning_rate)?;
    if classes == 0 {
        return Err(Error::Empty { op: "train", arg: "classes" });
    }
    let mut w = DMatrix::zeros(x.ncols(), classes);
    let mut b = DMatrix::zeros(1, classes);
    let mut losses = Vec::with_capacity(config.steps + 1);
    for _ in 0..config.steps {
        let (loss, d_w, d_b) = regression_loss_and_gradient(&w, &b, x, targets)?;
        losses.push(loss);
        sgd.step(&mut [&mut w, &mut b], &[&d_w, &d_b])?;
    }
    losses.push(regression_loss_and_gradient(&w, &b, x, targets)?.0);
    Ok(Trained { w, b, losses })
}

/// The smoothness constant of the mean softmax cross-entropy in (W, b):
/// L = λmax([X 1]ᵀ[X 1])/(2N), because the softmax's Hessian diag(ŷ) − ŷŷᵀ has no eigenvalue
/// above 1/2. Gradient descent with α ≤ 1/L never increases the (convex) loss.
pub fn smoothness_bound(x: &DMatrix<f64>) -> f64 {
    crate::ch01_logistic::augmented_gram_lambda_max(x) / (2.0 * x.nrows() as f64)
}

/// Radius of the circle the class centres sit on.
pub const CENTRE_RADIUS: f64 = 3.0;

/// Three Gaussian clouds in the plane, `per_class` points each, standard deviation 1, centred on
/// a circle of radius [`CENTRE_RADIUS`] at 90°, 210° and 330°; rows cycle through classes 0, 1, 2.
pub fn three_clouds(per_class: usize, seed: u64) -> (DMatrix<f64>, Vec<usize>) {
    let mut rng = Rng::new(seed);
    let centres: Vec<(f64, f64)> = [90.0_f64, 210.0, 330.0]
        .iter()
        .map(|deg| (CENTRE_RADIUS * deg.to_radians().cos(), CENTRE_RADIUS * deg.to_radians().sin()))
        .collect();
    let mut rows = Vec::with_capacity(3 * per_class * 2);
    let mut targets = Vec::with_capacity(3 * per_class);
    for _ in 0..per_class {
        for (k, (cx, cy)) in centres.iter().enumerate() {
            rows.push(cx + rng.normal());
            rows.push(cy + rng.normal());
            targets.push(k);
        }
    }
    (DMatrix::from_row_slice(targets.len(), 2, &rows), targets)
}

/// The data set's seed.
pub const DATA_SEED: u64 = 2;
/// Points per class.
pub const PER_CLASS: usize = 100;
/// The number of classes.
pub const CLASSES: usize = 3;
/// Steps of full-batch gradient descent.
pub const STEPS: usize = 300;
/// α, checked against 1/L by a test.
pub const LEARNING_RATE: f64 = 0.2;

/// Trains the chapter's model on its data set.
pub fn chapter_model() -> Result<(DMatrix<f64>, Vec<usize>, Trained)> {
    let (x, t) = three_clouds(PER_CLASS, DATA_SEED);
    let trained =
        train(&x, &t, CLASSES, TrainConfig { learning_rate: LEARNING_RATE, steps: STEPS })?;
    Ok((x, t, trained))
}

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D0,
        section: "Deriving ∇ for multiclass classification, 2. Computing the gradient",
        printed: "∂ℒ/∂ŷ_ik = y_ik − ŷ_ik",
        correct: "∂L/∂ŷ_ik = −y_ik/ŷ_ik for L = −Σᵢ Σₖ y_ik ln ŷ_ik",
        why: "The slope of −y ln ŷ in ŷ is −y/ŷ. The printed y − ŷ is (minus) the slope with respect to the logit z, which already contains the softmax Jacobian. At y = (1, 0, 0, 0), ŷ = (0.7, 0.1, 0.1, 0.1) the printed form gives 0.3 for mat; the slope is −1/0.7 = −1.4286 (a finite difference agrees).",
        test: "tests/ch02_softmax.rs::d_loss_d_probabilities_is_minus_y_over_y_hat",
    },
    Erratum {
        document: D0,
        section: "Deriving ∇ for multiclass classification, 2. Computing the gradient",
        printed: "∂ℒ/∂w = Σᵢ Σₖ (ŷ_ik − y_ik) ∂ŷ_ik/∂w",
        correct: "∂L/∂w = Σᵢ Σₖ (−y_ik/ŷ_ik) ∂ŷ_ik/∂w, which through ∂ŷ_ik/∂z_ij = ŷ_ik(δ_jk − ŷ_ij) becomes Σᵢ (ŷᵢ − yᵢ)xᵢᵀ",
        why: "The chain rule multiplies ∂ŷ_ik/∂w by ∂L/∂ŷ_ik = −y_ik/ŷ_ik; a factor (ŷ_ik − y_ik) belongs to the squared error ½Σ(ŷ − y)². Through the Jacobian the printed sum gives −0.084 for the mat logit at ŷ = (0.7, 0.1, 0.1, 0.1), y = mat; the correct chain gives ŷ − y = −0.3. The final line Σ(ŷᵢ − yᵢ)xᵢ is right.",
        test: "tests/ch02_softmax.rs::jacobian_chain_gives_y_hat_minus_y",
    },
    Erratum {
        document: D0,
        section: "Deriving ∇ for multiclass classification, 1. Negative log-likelihood ③",
        printed: "−ℒ(w̄) = −Σᵢ Σₖ y_ik log(ŷ_ik)",
        correct: "−log ℒ(w̄) = −Σᵢ Σₖ y_ik log(ŷ_ik)",
        why: "ℒ is the likelihood Πᵢ ŷ_{i,kᵢ} of step ①, a number in (0, 1]; the double sum of step ② is its logarithm, so negating it gives −log ℒ, the summed cross-entropy in [0, ∞), not −ℒ.",
        test: "tests/ch02_softmax.rs::negative_log_likelihood_is_the_summed_cross_entropy",
    },
    Erratum {
        document: D3,
        section: "Loss Function and Back-Propagation, the update with α = 0.1",
        printed: "P_mat = 0.1 + 0.1 × 0.9 = 0.19, P_hat = P_bat = 0.09, P_rat = 0.63",
        correct: "a step on the logits, z ← z − 0.1(ŷ − y), then softmax: P = (0.1140, 0.1031, 0.1031, 0.6798)",
        why: "The update rule Wᵢ ← Wᵢ − α ∂L/∂Zᵢ moves logits, but the text subtracts α(ŷ − y) from the probabilities. From logits ln(0.1, 0.1, 0.1, 0.7) (any common shift gives the same answer) the true step multiplies each ŷᵢ by e^{−α(ŷᵢ − yᵢ)} and renormalises.",
        test: "tests/ch02_softmax.rs::one_logit_step_from_p_gives_0_114_0_103_0_103_0_680",
    },
    Erratum {
        document: D3,
        section: "Loss Function and Back-Propagation, after the first update",
        printed: "re-normalize: they won't sum up to 1 after the update",
        correct: "0.19 + 0.09 + 0.09 + 0.63 = 1: the probability step stays normalised",
        why: "Σᵢ(ŷᵢ − yᵢ) = 1 − 1 = 0, so ŷ − α(ŷ − y) = (1 − α)ŷ + αy sums to 1 for every α. A softmax is needed after a step on the logits, which is the step gradient descent actually takes.",
        test: "tests/ch02_softmax.rs::probability_step_keeps_the_sum_at_one",
    },
    Erratum {
        document: D3,
        section: "Loss Function and Back-Propagation, the Python script",
        printed: "the script performs the work just described (P = (0.1, 0.1, 0.1, 0.7), α = 0.1)",
        correct: "it starts from logits (0.1, 0.1, 0.1, 0.7), i.e. P = (0.2074, 0.2074, 0.2074, 0.3779), with α = 0.01",
        why: "The script's array of weights holds logits and goes through a softmax, so the text's probabilities became its logits, and its learning rate is 0.01. Its printed output is right for what it computes (replayed to 8 decimals).",
        test: "tests/ch02_softmax.rs::script_starts_from_logits_not_from_the_texts_probabilities",
    },
];

fn vec_of(xs: &[f64]) -> DVector<f64> {
    DVector::from_column_slice(xs)
}

/// The example of document 003: y = mat, the good and the bad prediction.
fn mat_example() -> Result<(DVector<f64>, DVector<f64>, DVector<f64>)> {
    Ok((one_hot(4, 0)?, vec_of(&[0.7, 0.1, 0.1, 0.1]), vec_of(&[0.1, 0.1, 0.1, 0.7])))
}

/// The logits ln ŷ whose softmax is ŷ (every ŷᵢ > 0).
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

/// The text's chain Σₖ(ŷₖ − yₖ)·∂ŷₖ/∂zⱼ, as document 000 prints it, for the erratum row.
pub fn printed_chain(y: &DVector<f64>, y_hat: &DVector<f64>) -> Result<DVector<f64>> {
    let jacobian = softmax_jacobian(y_hat)?;
    check_same_length("printed_chain", "y and y_hat", y, y_hat)?;
    Ok(jacobian.transpose() * (y_hat - y))
}

fn tuple_text(v: &DVector<f64>, decimals: usize) -> String {
    format!("({})", v.iter().map(|&x| fixed(x, decimals)).collect::<Vec<_>>().join(", "))
}

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let mut rows = Vec::new();

    // Document 000: softmax((1, 2, 8)), the base remark, temperature.
    let p = softmax(&vec_of(&[1.0, 2.0, 8.0]))?;
    for (i, printed) in ["0.001", "0.002", "0.997"].into_iter().enumerate() {
        rows.push(Worked::number(
            "softmax_of_1_2_8_is_0_001_0_002_0_997",
            D0,
            format!("softmax((1, 2, 8)), entry {}", i + 1),
            printed,
            p[i],
        ));
    }
    rows.push(Worked::illustrative(
        D0,
        "probabilities after the softmax in the next-token figure (logits not given)",
        "0.1, 0.2, 0.7",
    ));
    let z = vec_of(&[2.0, 1.0, 0.2]);
    let base_ok = [2.0, 10.0, 0.5].iter().try_fold(true, |ok, &b: &f64| -> Result<bool> {
        let direct = DVector::from_iterator(3, z.iter().map(|&v| b.powf(v)));
        let direct = &direct / direct.sum();
        let by_base = softmax_with_base(&z, b)?;
        let by_b = softmax(&z.map(|v| v * b.ln()))?;
        Ok(ok && (by_base - &direct).amax() < 1e-15 && (by_b - direct).amax() < 1e-15)
    })?;
    rows.push(Worked::text(
        "softmax_with_base_b_is_softmax_of_ln_b_times_z",
        D0,
        "b^{zᵢ}/Σ b^{zⱼ} against softmax(B·z), B = ln b, for b = 2, 10, 0.5",
        "any b > 0, written b = e^B",
        if base_ok { "any b > 0, written b = e^B" } else { "differs" },
    ));
    let temps = [0.1, 0.5, 1.0, 2.0, 10.0, 100.0];
    let entropies: Vec<f64> = temps
        .iter()
        .map(|&t| softmax_with_temperature(&z, t).and_then(|p| entropy(&p)))
        .collect::<Result<_>>()?;
    let softer = entropies.windows(2).all(|w| w[1] > w[0]);
    let softer_text = if softer { "softer" } else { "not softer" };
    rows.push(Worked::text(
        "higher_temperature_flattens_the_distribution",
        D0,
        "entropy of softmax((2.0, 1.0, 0.2)/T) rises with T = 0.1 … 100",
        "softer",
        softer_text,
    ));

    // Document 001: the temperature limits.
    let cold = softmax_with_temperature(&z, 1e-3)?;
    rows.push(Worked::text(
        "temperature_to_zero_tends_to_argmax",
        D1,
        "softmax((2.0, 1.0, 0.2)/T) at T = 0.001 (T = 0 itself divides by zero and is refused)",
        "(1, 0, 0)",
        format!("({})", cold.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")),
    ));
    let hot = softmax_with_temperature(&z, 1e4)?;
    let near_uniform = hot.iter().all(|&v| (v - 1.0 / 3.0).abs() < 1e-4);
    rows.push(Worked::text(
        "temperature_to_infinity_tends_to_uniform",
        D1,
        "softmax((2.0, 1.0, 0.2)/T) at T = 10⁴, each entry within 10⁻⁴ of 1/3",
        "more uniform",
        if near_uniform { "more uniform" } else { "not uniform" },
    ));
    rows.push(Worked::text(
        "higher_temperature_flattens_the_distribution",
        D1,
        "larger T gives more weight to the lower logits (entropy rises with T)",
        "softer",
        softer_text,
    ));
    rows.push(Worked::illustrative(
        D1,
        "largest temperature a text-generation tool allows (a product limit, not a property of softmax)",
        "2",
    ));

    // Document 002: stability and the log-loss.
    let big = softmax(&vec_of(&[1000.0, 1001.0, 1002.0]))?;
    let small = softmax(&vec_of(&[0.0, 1.0, 2.0]))?;
    rows.push(Worked::text(
        "softmax_of_1000_1001_1002_equals_softmax_of_0_1_2",
        D2,
        "softmax((1000, 1001, 1002)) with the max subtracted, against softmax((0, 1, 2))",
        "subtracting the max keeps it finite",
        if big == small && big.iter().all(|v| v.is_finite()) {
            "subtracting the max keeps it finite"
        } else {
            "overflow"
        },
    ));
    let (y, good, bad) = mat_example()?;
    let batch: DMatrix<f64> =
        DMatrix::from_row_slice(2, 4, &[0.7, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.7]);
    let summed: f64 = cross_entropy(&y, &good)? + cross_entropy(&y, &bad)?;
    let neg_log_joint = -(batch[(0, 0)] * batch[(1, 0)]).ln();
    rows.push(Worked::text(
        "negative_log_likelihood_is_the_summed_cross_entropy",
        D2,
        "Σ −log P_v over two predictions of mat against −log of their joint probability",
        "log-loss = −log P(x)",
        if (summed - neg_log_joint).abs() < 1e-12 { "log-loss = −log P(x)" } else { "differs" },
    ));

    // Document 003: the supplemental softmax example.
    let p = softmax(&z)?;
    for (i, (name, printed)) in
        [("A", "0.65"), ("B", "0.24"), ("C", "0.11")].into_iter().enumerate()
    {
        rows.push(Worked::number(
            "softmax_of_2_1_0_2_is_0_65_0_24_0_11",
            D3,
            format!("softmax((2.0, 1.0, 0.2)), category {name}"),
            printed,
            p[i],
        ));
    }

    // Document 003: the cross-entropy example and its gradient.
    rows.push(Worked::number(
        "cross_entropy_of_mat_at_0_7_is_0_357",
        D3,
        "L = −ln 0.7, P = (0.7, 0.1, 0.1, 0.1), y = mat (text and script)",
        "0.357",
        cross_entropy(&y, &good)?,
    ));
    rows.push(Worked::number(
        "cross_entropy_of_mat_at_0_1_is_2_303",
        D3,
        "L = −ln 0.1, P = (0.1, 0.1, 0.1, 0.7), y = mat (text and script)",
        "2.303",
        cross_entropy(&y, &bad)?,
    ));
    let g = d_cross_entropy_d_logits(&y, &bad)?;
    for (i, printed) in ["-0.9", "0.1", "0.1", "0.7"].into_iter().enumerate() {
        rows.push(Worked::number(
            "gradient_at_0_1_0_1_0_1_0_7_is_minus_0_9_0_1_0_1_0_7",
            D3,
            format!("∂L/∂Z_{} = P − y", WORDS[i]),
            printed,
            g[i],
        ));
    }
    let mixed = mix_towards_target(&bad, &y, 0.1)?;
    let stepped = softmax(&logit_step(&logits_of(&bad)?, 0, 0.1)?)?;
    for (i, printed) in ["0.19", "0.09", "0.09", "0.63"].into_iter().enumerate() {
        rows.push(Worked::number(
            "text_probability_step_gives_0_19_0_09_0_09_0_63",
            D3,
            format!("the text's arithmetic P − 0.1·(P − y), {}", WORDS[i]),
            printed,
            mixed[i],
        ));
    }
    for (i, printed) in ["0.19", "0.09", "0.09", "0.63"].into_iter().enumerate() {
        rows.push(Worked::erratum(
            "one_logit_step_from_p_gives_0_114_0_103_0_103_0_680",
            D3,
            format!("P_{} after one gradient step on the logits, α = 0.1", WORDS[i]),
            printed,
            fixed(stepped[i], 2),
        ));
    }
    rows.push(Worked::erratum(
        "probability_step_keeps_the_sum_at_one",
        D3,
        "Σ of the text's updated probabilities",
        "≠ 1, needs re-normalising",
        fixed(mixed.sum(), 2),
    ));

    // Document 003: the 2000-iteration script, replayed.
    let replay = document_replay()?;
    rows.push(Worked::erratum(
        "script_starts_from_logits_not_from_the_texts_probabilities",
        D3,
        "P_mat where the script starts (the text's P_mat is 0.1)",
        "0.1",
        fixed(replay.probabilities[0][0], 4),
    ));
    let first =
        replay.line(0).ok_or_else(|| invalid("worked", "replay", "no line for iteration 0"))?;
    let late = replay
        .line(1990)
        .ok_or_else(|| invalid("worked", "replay", "no line for iteration 1990"))?;
    let printed_lines: [(&'static str, &str, [&str; 4], &DVector<f64>); 5] = [
        (
            "replay_iteration_0_weights_are_after_the_first_update",
            "iteration 0 weights (after update 1)",
            ["0.10792622", "0.09792622", "0.09792622", "0.69622133"],
            &first.weights_after_update,
        ),
        (
            "replay_iteration_0_probabilities_are_before_the_first_update",
            "iteration 0 probabilities (before update 1)",
            ["0.20737772", "0.20737772", "0.20737772", "0.37786684"],
            &first.probabilities_before_update,
        ),
        (
            "replay_iteration_1990_weights_match_to_8_decimals",
            "iteration 1990 weights (after update 1991)",
            ["3.41207767", "-0.86673008", "-0.86673008", "-0.67861750"],
            &late.weights_after_update,
        ),
        (
            "replay_iteration_1990_probabilities_match_to_8_decimals",
            "iteration 1990 probabilities (before update 1991)",
            ["0.95742224", "0.01327650", "0.01327650", "0.01602477"],
            &late.probabilities_before_update,
        ),
        (
            "replay_final_probabilities_match_to_8_decimals",
            "final probabilities (after 2000 updates)",
            ["0.95765298", "0.01320591", "0.01320591", "0.01593520"],
            &replay.final_probabilities,
        ),
    ];
    for (test, what, printed, ours) in printed_lines {
        for (i, p) in printed.into_iter().enumerate() {
            rows.push(Worked::number(
                test,
                D3,
                format!("script, {what}, {}", WORDS[i]),
                p,
                ours[i],
            ));
        }
    }

    // Document 000: the multiclass gradient.
    let y_hat = &good;
    rows.push(Worked::erratum(
        "d_loss_d_probabilities_is_minus_y_over_y_hat",
        D0,
        "∂L/∂ŷ_mat at ŷ = (0.7, 0.1, 0.1, 0.1), y = mat: y − ŷ as printed vs −y/ŷ",
        "0.3",
        fixed(d_cross_entropy_d_probabilities(&y, y_hat)?[0], 4),
    ));
    rows.push(Worked::erratum(
        "jacobian_chain_gives_y_hat_minus_y",
        D0,
        "∂L/∂z_mat at the same point: Σₖ(ŷₖ − yₖ)∂ŷₖ/∂z as printed vs Jᵀ(−y/ŷ)",
        &fixed(printed_chain(&y, y_hat)?[0], 3),
        fixed(d_logits_by_chain_rule(&y, y_hat)?[0], 3),
    ));
    let (x, t, trained) = chapter_model()?;
    let n = x.nrows() as f64;
    let (_, d_w, _) = regression_loss_and_gradient(&trained.w, &trained.b, &x, &t)?;
    let summed_gradient = summed_weight_gradient(&trained.w, &trained.b, &x, &t)?;
    let same = (summed_gradient - d_w.transpose() * n).amax() < 1e-9;
    rows.push(Worked::text(
        "summed_weight_gradient_is_n_times_the_mean_gradient",
        D0,
        "Σᵢ(ŷᵢ − yᵢ)xᵢᵀ summed sample by sample against N·(∂L/∂W)ᵀ = N·(Xᵀ(P − Y)/N)ᵀ",
        "Σᵢ (ŷᵢ − yᵢ)xᵢ",
        if same { "Σᵢ (ŷᵢ − yᵢ)xᵢ" } else { "differs" },
    ));
    rows.push(Worked::number(
        "softmax_regression_reaches_95_percent",
        THIS_CRATE,
        format!("training accuracy on three clouds after {STEPS} steps, α = {LEARNING_RATE} (test: ≥ 0.95)"),
        "0.99",
        trained.accuracy(&x, &t)?,
    ));
    Ok(rows)
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The chapter in the order the documents derive it.
pub fn walk(out: &mut Walk) -> Result<()> {
    out.step("1. Softmax of (1, 2, 8): exponentiate, then divide by the sum")?;
    let z = vec_of(&[1.0, 2.0, 8.0]);
    out.matrix("e^z", &row_of(&z.map(f64::exp)))?;
    out.scalar("Σ e^z", z.map(f64::exp).sum())?;
    out.matrix("softmax(z)", &row_of(&softmax(&z)?))?;

    out.step("2. Softmax of (2.0, 1.0, 0.2)")?;
    let z = vec_of(&[2.0, 1.0, 0.2]);
    out.matrix("softmax(z)", &row_of(&softmax(&z)?))?;
    out.matrix("log-softmax(z) = z − log-sum-exp(z)", &row_of(&log_softmax(&z)?))?;
    out.scalar("log-sum-exp(z)", log_sum_exp(&z)?)?;

    out.step("3. Stability: subtract the maximum before exponentiating")?;
    let huge = vec_of(&[1000.0, 1001.0, 1002.0]);
    out.say(&format!(
        "unshifted e^1000 in f64 = {} (overflow), so e^z/Σe^z would be ∞/∞",
        1000.0_f64.exp()
    ))?;
    out.matrix("softmax((1000, 1001, 1002)) via e^{z − 1002}", &row_of(&softmax(&huge)?))?;
    out.matrix(
        "log-softmax((−1000, 0, 1000))",
        &row_of(&log_softmax(&vec_of(&[-1000.0, 0.0, 1000.0]))?),
    )?;

    out.step("4. Temperature: softmax(z/T) for z = (2.0, 1.0, 0.2)")?;
    for t in [0.1, 0.5, 1.0, 2.0, 10.0] {
        let p = softmax_with_temperature(&z, t)?;
        out.say(&format!(
            "T = {t:>4}: p = {}, entropy = {} nats",
            tuple_text(&p, 4),
            fixed(entropy(&p)?, 4)
        ))?;
    }
    out.say(&format!("uniform limit: entropy ln 3 = {}", fixed(3f64.ln(), 4)))?;

    out.step("5. Any base b = e^B: b^z/Σb^z = softmax(B·z)")?;
    for b in [2.0, std::f64::consts::E, 10.0] {
        out.say(&format!("b = {b:.4}: {}", tuple_text(&softmax_with_base(&z, b)?, 4)))?;
    }

    out.step("6. Cross-entropy of the mat/hat/bat/rat example, y = mat")?;
    let (y, good, bad) = mat_example()?;
    out.scalar("L for P = (0.7, 0.1, 0.1, 0.1)", cross_entropy(&y, &good)?)?;
    out.scalar("L for P = (0.1, 0.1, 0.1, 0.7)", cross_entropy(&y, &bad)?)?;
    out.scalar(
        "the same from the logits ln P",
        cross_entropy_from_logit_vector(&logits_of(&bad)?, 0)?,
    )?;

    out.step("7. The gradient with respect to the logits, two ways")?;
    out.matrix("∂L/∂ŷ = −y/ŷ", &row_of(&d_cross_entropy_d_probabilities(&y, &bad)?))?;
    out.matrix("J = diag(ŷ) − ŷŷᵀ", &softmax_jacobian(&bad)?)?;
    out.matrix("Jᵀ·∂L/∂ŷ", &row_of(&d_logits_by_chain_rule(&y, &bad)?))?;
    out.matrix("ŷ − y", &row_of(&d_cross_entropy_d_logits(&y, &bad)?))?;

    out.step("8. One step with α = 0.1")?;
    out.matrix(
        "the text's P − α(P − y) (already sums to 1)",
        &row_of(&mix_towards_target(&bad, &y, 0.1)?),
    )?;
    out.matrix(
        "softmax(ln P − α(P − y)), the real step",
        &row_of(&softmax(&logit_step(&logits_of(&bad)?, 0, 0.1)?)?),
    )?;

    out.step("9. The 2000-iteration script, replayed (8 decimals)")?;
    let replay = document_replay()?;
    let saved = out.decimals;
    out.decimals = 8;
    for i in [0, 1990] {
        if let Some(line) = replay.line(i) {
            out.matrix(
                &format!("iteration {i}: weights after update {}", i + 1),
                &row_of(&line.weights_after_update),
            )?;
            out.matrix(
                &format!("iteration {i}: probabilities before update {}", i + 1),
                &row_of(&line.probabilities_before_update),
            )?;
        }
    }
    out.matrix("final probabilities", &row_of(&replay.final_probabilities))?;
    out.decimals = saved;

    out.step("10. Softmax regression on three clouds of points")?;
    let (x, t, trained) = chapter_model()?;
    out.scalar("smoothness L of the mean cross-entropy", smoothness_bound(&x))?;
    out.scalar("α (must be ≤ 1/L)", LEARNING_RATE)?;
    out.scalar("loss before training (ln 3)", trained.losses[0])?;
    out.scalar("loss after training", *trained.losses.last().unwrap_or(&f64::NAN))?;
    out.matrix("learned W (D×K)", &trained.w)?;
    out.matrix("learned b (1×K)", &trained.b)?;
    out.scalar("training accuracy", trained.accuracy(&x, &t)?)?;
    Ok(())
}

/// The temperatures the temperature figure shows.
pub const FIGURE_TEMPERATURES: [f64; 5] = [0.25, 0.5, 1.0, 2.0, 5.0];

/// The chapter's figures as data: (file stem, figure).
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let z = vec_of(&[2.0, 1.0, 0.2]);
    let mut temperature_series = Vec::new();
    for t in FIGURE_TEMPERATURES {
        let p = softmax_with_temperature(&z, t)?;
        temperature_series.push(Series::new(
            format!("T = {t}"),
            p.iter().enumerate().map(|(i, &v)| ((i + 1) as f64, v)).collect(),
        ));
    }
    let temperature = Figure::Line(LineChart {
        title: "softmax((2.0, 1.0, 0.2)/T) at five temperatures".into(),
        x_label: "class (1 = logit 2.0, 2 = logit 1.0, 3 = logit 0.2)".into(),
        y_label: "probability".into(),
        series: temperature_series,
        markers: true,
    });

    let replay = document_replay()?;
    let replay_fig = Figure::Line(LineChart {
        title: format!(
            "The script replayed: softmax of the logits, α = {SCRIPT_LEARNING_RATE}, true word mat"
        ),
        x_label: "updates done".into(),
        y_label: "probability".into(),
        series: WORDS
            .iter()
            .enumerate()
            .map(|(k, w)| {
                Series::new(
                    if k == 1 {
                        "hat (hidden under bat: equal)".to_string()
                    } else {
                        w.to_string()
                    },
                    replay
                        .probabilities
                        .iter()
                        .enumerate()
                        .map(|(s, p)| (s as f64, p[k]))
                        .collect(),
                )
            })
            .collect(),
        markers: false,
    });

    let (x, t, trained) = chapter_model()?;
    let loss = Figure::Line(LineChart {
        title: format!("Training loss, full-batch gradient descent, α = {LEARNING_RATE}"),
        x_label: "step".into(),
        y_label: "mean cross-entropy (nats)".into(),
        series: vec![Series::new(
            "training loss",
            trained.losses.iter().enumerate().map(|(i, &l)| (i as f64, l)).collect(),
        )],
        markers: false,
    });
    let mut classes: Vec<Series> =
        (0..CLASSES).map(|k| Series::new(format!("class {k}"), vec![])).collect();
    for (r, &k) in t.iter().enumerate() {
        classes[k].points.push((x[(r, 0)], x[(r, 1)]));
    }
    let (w, b) = (&trained.w, &trained.b);
    let predict = |px: f64, py: f64| {
        argmax_rows(&DMatrix::from_fn(1, CLASSES, |_, k| {
            w[(0, k)] * px + w[(1, k)] * py + b[(0, k)]
        }))[0]
    };
    let regions = Figure::Scatter(ScatterChart {
        title: "Three classes and the regions where each wins the argmax".into(),
        x_label: "x₁".into(),
        y_label: "x₂".into(),
        classes,
        regions: Some(Regions::evaluate((-7.0, 7.0), (-6.0, 7.0), 140, 130, predict)),
        lines: vec![],
    });
    Ok(vec![
        ("ch02_temperature".into(), temperature),
        ("ch02_replay".into(), replay_fig),
        ("ch02_regions".into(), regions),
        ("ch02_loss".into(), loss),
    ])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 2,
    stem: "ch02_softmax",
    title: "Softmax, temperature and cross-entropy",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
