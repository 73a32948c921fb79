//! Weight matrices kept in bf16 for generation: 2-byte patterns (chapter 11's rounding),
//! widened to f32 by the dot product that reads them, so a token reads half of f32's bytes and no
//! f32 copy of the matrix exists. The stored step of `quant_step.rs` reads them.

use super::format::{bf16_to_f32, f32_to_bf16};
use crate::error::{Result, shape_error};
use crate::threads::share_pieces;
use nalgebra::DMatrix;
use std::ops::Range;

/// Lanes of [`bf16_column_dot`]'s partial sums (one AVX2 register of f32, as the quantized
/// dots' lanes).
pub const DOT_LANES: usize = 8;

/// The columns 0 … `cols` cut into one run per thread (`threads`, the caller's included), each
/// run's outputs by `run`, joined in order: every column is one thread's work whatever the
/// count, so any count gives the same bits.
pub(crate) fn by_column_runs(
    cols: usize,
    threads: usize,
    run: impl Fn(Range<usize>) -> Vec<f32> + Sync,
) -> Vec<f32> {
    let parts = threads.clamp(1, cols.max(1));
    let per_part = cols.div_ceil(parts);
    let runs: Vec<Range<usize>> = (0..parts)
        .map(|p| p * per_part..((p + 1) * per_part).min(cols))
        .filter(|r| !r.is_empty())
        .collect();
    let sums = share_pieces(&mut vec![(); runs.len().max(1)], runs, |(), r| run(r));
    sums.into_iter().flatten().collect()
}

/// Bytes of a bf16 weight.
const BF16_BYTES: usize = 2;

/// A weight matrix W (d_in×d_out) kept as bf16 bit patterns (chapter 11's rounding,
/// [`f32_to_bf16`]), column after column as W is stored: column j, the weights output j reads,
/// at j·d_in … (j + 1)·d_in. Two bytes a weight; a dot product widens each pattern to f32 as it
/// reads it ([`bf16_column_dot`]), so no f32 copy of the matrix exists.
#[derive(Clone, Debug, PartialEq)]
pub struct Bf16Matrix {
    /// d_in.
    pub rows: usize,
    /// d_out.
    pub cols: usize,
    /// The patterns, column-major (d_in·d_out).
    pub bits: Vec<u16>,
}

impl Bf16Matrix {
    /// Every weight of `w` rounded to bf16 (to nearest, ties to even).
    pub fn round(w: &DMatrix<f32>) -> Bf16Matrix {
        let bits = w.iter().map(|&x| f32_to_bf16(x)).collect();
        Bf16Matrix { rows: w.nrows(), cols: w.ncols(), bits }
    }

    /// The matrix in f32 (each pattern widened exactly): the values the dots read.
    pub fn widen(&self) -> DMatrix<f32> {
        DMatrix::from_iterator(self.rows, self.cols, self.bits.iter().map(|&b| bf16_to_f32(b)))
    }

    /// Bytes the matrix occupies: 2 a weight.
    pub fn bytes(&self) -> usize {
        BF16_BYTES * self.bits.len()
    }
}

/// x · w for one column of bf16 patterns, each widened to f32 (exact) as it is read: in lane l
/// (0 … 7) a_l ← a_l + x_i·w_i for i ≡ l (mod 8), each product and sum rounded to f32, then
/// ((a₀ + a₁) + (a₂ + a₃)) + ((a₄ + a₅) + (a₆ + a₇)). Each product of a bf16 weight (8
/// significant bits) and an f32 activation (24) is rounded once, so the sum keeps the bound of any
/// f32 dot product of length k: |ŝ − s| ≤ γ_k·Σ|x_i ŵ_i| against the exact sum of the same ŵ
/// (k u/(1 − k u), u = 2⁻²⁴). Callers pass matching lengths.
pub fn bf16_column_dot(x: &[f32], column: &[u16]) -> f32 {
    let mut acc = [0.0f32; DOT_LANES];
    let (xs, ws) = (x.chunks_exact(DOT_LANES), column.chunks_exact(DOT_LANES));
    let (x_tail, w_tail) = (xs.remainder(), ws.remainder());
    for (x, w) in xs.zip(ws) {
        for l in 0..DOT_LANES {
            acc[l] += x[l] * widen_bf16(w[l]);
        }
    }
    for (l, (x, &w)) in x_tail.iter().zip(w_tail).enumerate() {
        acc[l] += x * widen_bf16(w);
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

/// The f32 of a bf16 pattern: the pattern followed by 16 zero bits, in one shift the compiler
/// vectorizes. It is [`bf16_to_f32`]'s value for every pattern but the NaNs, which that one makes
/// quiet (a test holds all 65 536); a stored matrix holds no NaN (the loader refuses one, and
/// rounding a finite weight gives none).
#[inline]
pub fn widen_bf16(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// y = x·W for one row x (length d_in) and W in bf16 (d_in×d_out): y_j = [`bf16_column_dot`]
/// of x and column j, the columns cut into one run per thread. Errors when x's length is not
/// d_in.
pub fn bf16_row_product(x: &[f32], w: &Bf16Matrix, threads: usize) -> Result<Vec<f32>> {
    if x.len() != w.rows {
        return Err(shape_error(
            "bf16_row_product",
            "x and W (x's length must equal W's rows)",
            format!("x of length {}", w.rows),
            format!("{}", x.len()),
        ));
    }
    Ok(by_column_runs(w.cols, threads, |r| {
        r.map(|j| bf16_column_dot(x, &w.bits[j * w.rows..][..w.rows])).collect()
    }))
}
