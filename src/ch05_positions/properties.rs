//! What makes the encoding useful: a shift by k positions is a rotation, and the dot product of
//! two encodings depends on their offset alone.

use super::encoding::{check_width, frequency};
use crate::error::{Error, Result};
use crate::float::Float;
use nalgebra::DMatrix;

/// The d×d matrix S_k with PE(pos + k) = PE(pos)·S_k for every pos (rows are row vectors).
///
/// It is block-diagonal with one 2×2 rotation per pair: from sin(a + b) = sin a cos b + cos a sin b
/// and cos(a + b) = cos a cos b − sin a sin b with a = pos·ωᵢ, b = k·ωᵢ,
/// `[sin, cos] ↦ [sin, cos]·[[cos kωᵢ, −sin kωᵢ], [sin kωᵢ, cos kωᵢ]]`. It depends on k, not on
/// pos.
pub fn shift_operator<T: Float>(k: f64, d_model: usize) -> Result<DMatrix<T>> {
    check_width("shift_operator", d_model)?;
    if !k.is_finite() {
        return Err(Error::NonFinite { op: "shift_operator", arg: "k", at: "the offset".into() });
    }
    let mut s = DMatrix::zeros(d_model, d_model);
    for i in 0..d_model / 2 {
        let (sin, cos) = (k * frequency(i, d_model)).sin_cos();
        let j = 2 * i;
        s[(j, j)] = T::of(cos);
        s[(j, j + 1)] = T::of(-sin);
        s[(j + 1, j)] = T::of(sin);
        s[(j + 1, j + 1)] = T::of(cos);
    }
    Ok(s)
}

/// PE(pos)·PE(pos + k) = Σᵢ [sin(pos ωᵢ) sin((pos+k) ωᵢ) + cos(pos ωᵢ) cos((pos+k) ωᵢ)]
/// = Σᵢ cos(k ωᵢ): the same for every pos, and symmetric in k.
pub fn dot_at_offset(k: f64, d_model: usize) -> Result<f64> {
    check_width("dot_at_offset", d_model)?;
    Ok((0..d_model / 2).map(|i| (k * frequency(i, d_model)).cos()).sum())
}

/// True when, in every row, even columns hold sines and odd columns cosines: checked by
/// sin² + cos² = 1 across each pair and by the value at pos 0 (sin 0 = 0, cos 0 = 1).
pub fn every_position_mixes(pe: &DMatrix<f64>) -> bool {
    let first_row_ok = (0..pe.ncols())
        .all(|j| (pe[(0, j)] - if j.is_multiple_of(2) { 0.0 } else { 1.0 }).abs() < 1e-15);
    let pairs_ok = (0..pe.nrows()).all(|r| {
        (0..pe.ncols() / 2)
            .all(|i| (pe[(r, 2 * i)].powi(2) + pe[(r, 2 * i + 1)].powi(2) - 1.0).abs() < 1e-12)
    });
    first_row_ok && pairs_ok
}
