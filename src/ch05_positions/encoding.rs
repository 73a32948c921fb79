//! The sinusoidal encoding: the frequencies ωᵢ, the exponent each column gets under a reading of
//! the formula, the matrix PE and its addition to a batch of embeddings.

use crate::error::{Error, Result, invalid, shape_error};
use crate::float::{Float, ensure_finite, ensure_finite_slice};
use nalgebra::DMatrix;

/// The base of the geometric progression of wavelengths, 10000 in the original transformer.
pub const BASE: f64 = 10_000.0;

// ───────────────────────────── input checks ─────────────────────────────

/// Checks a model width: not zero, and even (a sine and a cosine per pair).
pub(super) fn check_width(op: &'static str, d_model: usize) -> Result<()> {
    if d_model == 0 {
        return Err(Error::Empty { op, arg: "d_model" });
    }
    if !d_model.is_multiple_of(2) {
        return Err(invalid(
            op,
            "d_model",
            format!(
                "sinusoidal encodings pair a sine with a cosine, so d_model must be even; \
                    got {d_model}"
            ),
        ));
    }
    Ok(())
}

// ───────────────────────────── the encoding ─────────────────────────────

/// ωᵢ = 1/10000^(2i/d): the angular frequency of pair i (columns 2i and 2i + 1).
/// Pair 0 turns one radian per position; the last pair almost never turns.
pub fn frequency(i: usize, d_model: usize) -> f64 {
    BASE.powf(-(2.0 * i as f64) / d_model as f64)
}

/// Which exponent e_j a column j is given in PE(pos, j) = sin or cos of pos/10000^(e_j).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// The formula as stated: e_j = 2⌊j/2⌋/d, so a sine and the cosine next to it share a
    /// frequency.
    Standard,
    /// What D3's numbers follow: e_j = 2j/d, the column index j put where the pair index
    /// i belongs, so every column gets its own frequency.
    ColumnIndex,
}

/// The exponent list e_0 … e_(d−1) of a reading, for an even d.
pub fn exponents(reading: Reading, d_model: usize) -> Result<Vec<f64>> {
    check_width("exponents", d_model)?;
    let d = d_model as f64;
    Ok((0..d_model)
        .map(|j| match reading {
            Reading::Standard => 2.0 * (j / 2) as f64 / d,
            Reading::ColumnIndex => 2.0 * j as f64 / d,
        })
        .collect())
}

/// PE(pos, j) = sin(pos/10000^(e_j)) for even j, cos(pos/10000^(e_j)) for odd j, for every
/// position given (one row each) and every exponent given (one column each).
///
/// This is the one evaluator behind every reading; [`sinusoidal`] passes the standard exponents.
pub fn with_exponents<T: Float>(positions: &[f64], exponents: &[f64]) -> Result<DMatrix<T>> {
    const OP: &str = "with_exponents";
    if positions.is_empty() {
        return Err(Error::Empty { op: OP, arg: "positions" });
    }
    if exponents.is_empty() {
        return Err(Error::Empty { op: OP, arg: "exponents" });
    }
    ensure_finite_slice(OP, "positions", positions)?;
    ensure_finite_slice(OP, "exponents", exponents)?;
    Ok(DMatrix::from_fn(positions.len(), exponents.len(), |r, j| {
        let angle = positions[r] / BASE.powf(exponents[j]);
        T::of(if j.is_multiple_of(2) { angle.sin() } else { angle.cos() })
    }))
}

/// The standard encoding at arbitrary (even fractional or negative) positions: a
/// `positions.len()`×d matrix. Errors for an odd or zero d and for non-finite positions.
pub fn sinusoidal_at<T: Float>(positions: &[f64], d_model: usize) -> Result<DMatrix<T>> {
    check_width("sinusoidal_at", d_model)?;
    with_exponents(positions, &exponents(Reading::Standard, d_model)?)
}

/// The standard encoding of positions 0 … n − 1: an n×d matrix, row `pos` = PE(pos, ·).
pub fn sinusoidal<T: Float>(n_positions: usize, d_model: usize) -> Result<DMatrix<T>> {
    check_width("sinusoidal", d_model)?;
    if n_positions == 0 {
        return Err(Error::Empty { op: "sinusoidal", arg: "n_positions" });
    }
    let positions: Vec<f64> = (0..n_positions).map(|p| p as f64).collect();
    sinusoidal_at(&positions, d_model)
}

/// X + PE for a batch: x is (B·T)×d with B sequences of length `seq_len` stacked; row r gets
/// PE(r mod T). The gradient of this step with respect to x is the identity, so it has no backward.
pub fn add_positions<T: Float>(x: &DMatrix<T>, seq_len: usize) -> Result<DMatrix<T>> {
    const OP: &str = "add_positions";
    if seq_len == 0 {
        return Err(invalid(OP, "seq_len", "the sequence length must be at least 1"));
    }
    if x.nrows() == 0 {
        return Err(Error::Empty { op: OP, arg: "x" });
    }
    if !x.nrows().is_multiple_of(seq_len) {
        return Err(shape_error(
            OP,
            "x and seq_len",
            format!("a multiple of {seq_len} rows (B sequences of length {seq_len})"),
            format!("x {}×{}", x.nrows(), x.ncols()),
        ));
    }
    check_width(OP, x.ncols())?;
    ensure_finite(OP, "x", x)?;
    let pe: DMatrix<T> = sinusoidal(seq_len, x.ncols())?;
    Ok(DMatrix::from_fn(x.nrows(), x.ncols(), |r, c| x[(r, c)] + pe[(r % seq_len, c)]))
}
