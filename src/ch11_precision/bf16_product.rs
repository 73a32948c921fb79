//! A product of matrices stored in bf16: what each way of computing it promises.
//!
//! Chapter 10's product, given bf16 operands ([`crate::matmul::lab::gemm_bf16`]), either widens
//! them to f32 while packing and runs the f32 micro-kernel, or, where the CPU has AVX512-BF16,
//! multiplies pairs of k at once with VDPBF16PS ([`crate::matmul::lab::Bf16Path`]). This module
//! rounds matrices to bf16 with the chapter's own conversion, computes the exact product of the
//! rounded inputs in f64 and states the bound each path keeps against it.
//!
//! With â_p, b̂_p the bf16 inputs of one entry, S = Σ_p |â_p b̂_p| and u = 2⁻²⁴ (f32):
//!
//! - **widened**: each â_p b̂_p is exact in f32 (8 + 8 significant bits ≤ 24), so the only
//!   errors are the k − 1 roundings of the sum, in whatever order the kernel adds:
//!   |ŝ − s| ≤ γ_k S with γ_k = k u/(1 − k u), plus at most 2⁻¹⁴⁹ per step where a product or a
//!   sum falls below f32's normal range (rounding there is absolute, not relative).
//! - **pairs** (VDPBF16PS): the same γ_k S, whatever order the instruction adds a pair in, plus
//!   what it flushes: an input below 2⁻¹²⁶ (a bf16 subnormal) is read as zero, which drops its
//!   term, F = Σ of |â_p b̂_p| over those p; and a result below 2⁻¹²⁶ is written as zero, at most
//!   2⁻¹²⁶ for each of the k + 1 multiply-adds (k rounded up to whole pairs):
//!   |ŝ − s| ≤ γ_k S + F + (k + 1)·2⁻¹²⁶.
//!
//! Against the f32 numbers before rounding, (2u_bf16 + u_bf16²) Σ|a_p b_p| more (section 7's
//! bound, u_bf16 = 2⁻⁸).

use super::format::{bf16_to_f32, f32_to_bf16};
use crate::error::{Result, shape_error};
use crate::matmul::Op;
use nalgebra::DMatrix;

/// f32's unit roundoff, 2⁻²⁴.
const F32_UNIT_ROUNDOFF: f64 = 1.0 / 16_777_216.0;
/// The smallest normal f32 (and bf16), 2⁻¹²⁶: below it VDPBF16PS reads and writes zero.
const MIN_NORMAL: f64 = f32::MIN_POSITIVE as f64;
/// The smallest f32 subnormal, 2⁻¹⁴⁹: twice the most one rounding below the normal range can
/// lose (half a subnormal step), so a bound for a step's product and its sum.
const SUBNORMAL_STEP: f64 = f32::from_bits(1) as f64;

/// Every entry of `m` rounded to bf16 (to nearest, ties to even: [`f32_to_bf16`]).
pub fn to_bf16(m: &DMatrix<f32>) -> DMatrix<u16> {
    m.map(f32_to_bf16)
}

/// The exact product of bf16 inputs, entry by entry, in f64: `sum` = Σ_p â_p b̂_p, `size` = S =
/// Σ_p |â_p b̂_p|, `flushed` = F = the part of S whose â_p or b̂_p is a bf16 subnormal. Each
/// â_p b̂_p is exact in f64; the sum's own rounding is below 10⁻¹⁵ S, nine orders under the
/// bounds it is compared with.
#[derive(Clone, Debug, PartialEq)]
pub struct ExactProduct {
    /// Σ_p â_p b̂_p, m×n.
    pub sum: DMatrix<f64>,
    /// Σ_p |â_p b̂_p|, m×n.
    pub size: DMatrix<f64>,
    /// Σ_p |â_p b̂_p| over the p where â_p or b̂_p is subnormal, m×n.
    pub flushed: DMatrix<f64>,
}

/// op(A)·op(B) of bf16 patterns, exactly (see [`ExactProduct`]), widened by the chapter's own
/// [`bf16_to_f32`], not the product's. op(A) m×k, op(B) k×n. Errors when the shapes do not chain.
pub fn exact_product(a: &DMatrix<u16>, ta: Op, b: &DMatrix<u16>, tb: Op) -> Result<ExactProduct> {
    let at = |x: &DMatrix<u16>, op: Op, i: usize, j: usize| match op {
        Op::N => x[(i, j)],
        Op::T => x[(j, i)],
    };
    let shape = |x: &DMatrix<u16>, op: Op| match op {
        Op::N => x.shape(),
        Op::T => (x.ncols(), x.nrows()),
    };
    let ((m, k), (k2, n)) = (shape(a, ta), shape(b, tb));
    if k != k2 {
        let got = format!("op(A) {m}×{k}, op(B) {k2}×{n}");
        return Err(shape_error("exact_product", "b", format!("{k} rows in op(B)"), got));
    }
    let (mut sum, mut size, mut flushed) =
        (DMatrix::zeros(m, n), DMatrix::zeros(m, n), DMatrix::zeros(m, n));
    for i in 0..m {
        for j in 0..n {
            for p in 0..k {
                let (x, y) = (bf16_to_f32(at(a, ta, i, p)), bf16_to_f32(at(b, tb, p, j)));
                let term = f64::from(x) * f64::from(y);
                sum[(i, j)] += term;
                size[(i, j)] += term.abs();
                if x.is_subnormal() || y.is_subnormal() {
                    flushed[(i, j)] += term.abs();
                }
            }
        }
    }
    Ok(ExactProduct { sum, size, flushed })
}

/// γ_k = k u/(1 − k u) for f32's u = 2⁻²⁴ (∞ once k u ≥ 1).
pub fn gamma(k: usize) -> f64 {
    let ku = k as f64 * F32_UNIT_ROUNDOFF;
    if ku < 1.0 { ku / (1.0 - ku) } else { f64::INFINITY }
}

/// The widened path's bound on |ŝ − s| for one entry over depth `k` with S = `size`:
/// γ_k S + k·2⁻¹⁴⁹.
pub fn widened_bound(k: usize, size: f64) -> f64 {
    gamma(k) * size + k as f64 * SUBNORMAL_STEP
}

/// The pair path's (VDPBF16PS) bound on |ŝ − s| for one entry over depth `k` with S = `size` and
/// F = `flushed`: γ_k S + F + (k + 1)·2⁻¹²⁶.
pub fn pair_bound(k: usize, size: f64, flushed: f64) -> f64 {
    gamma(k) * size + flushed + (k + 1) as f64 * MIN_NORMAL
}

/// One row of A times a column of ones, four terms: 1, 0, 2⁻²⁴ and 2⁻²⁴(1 + 2⁻⁷) (all exact in
/// bf16). The widened path adds them in order: 1 + 2⁻²⁴ is a tie and stays 1, then the last term
/// (just over half an ulp of 1) lifts it to 1 + 2⁻²³. The pair instruction adds each pair's second
/// term first: 1 + 2⁻²⁴(1 + 2⁻⁷) gives 1 + 2⁻²³, then + 2⁻²⁴ is a tie between 1 + 2⁻²³ (odd) and
/// 1 + 2⁻²² (even): 1 + 2⁻²². The exact sum is 1 + 2⁻²³ + 2⁻³¹. Returns the four terms as bf16.
pub fn pair_order_row() -> [u16; 4] {
    let tiny = 2f32.powi(-24);
    [1.0, 0.0, tiny, tiny * (1.0 + 2f32.powi(-7))].map(f32_to_bf16)
}

/// 2⁻¹³⁰ (a bf16 subnormal: below 2⁻¹²⁶) times 2¹⁰⁰ is 2⁻³⁰, a plain normal number; the widened
/// path keeps it, VDPBF16PS reads the subnormal input as zero and gives 0. Returns (a, b) as bf16.
pub fn flushed_pair() -> (u16, u16) {
    (f32_to_bf16(2f32.powi(-130)), f32_to_bf16(2f32.powi(100)))
}
