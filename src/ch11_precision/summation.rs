//! Summation error: how the error of Σ xᵢ grows with n, and what pairwise and compensated (Kahan)
//! summation do about it, measured against an exact reference.
//!
//! Adding term k to a running sum sₖ₋₁ rounds once, with an error up to u·|sₖ|; over n terms the
//! bound is (n − 1)·u·Σ|xᵢ|, and for positive terms the running sum is large, so late terms lose
//! their low bits (in f32 the sum of ones stops at 2^24 = 16777216: 2^24 + 1 rounds back to
//! 2^24). Pairwise summation adds halves recursively, so each term passes through ⌈log₂ n⌉
//! additions: bound ⌈log₂ n⌉·u·Σ|xᵢ|. Kahan's compensated sum carries the rounding error of each
//! addition in a second variable and feeds it back: bound 2u·Σ|xᵢ| + O(n·u²), nearly free of n.
//!
//! The measurement ([`summation_errors`]) sums values kᵢ/2^24 with integer kᵢ < 2^24, every one
//! an f32 exactly and their sum Σkᵢ / 2^24 exact in integers, so the reference has no error of
//! its own.

use crate::error::{Error, Result, invalid};
use crate::float::{Float, lane_sum};
use crate::rng::Rng;

/// Pairwise summation adds blocks of at most this many terms one by one (as NumPy does, with a
/// larger block): below it the recursion costs more than it saves.
pub const PAIRWISE_BLOCK: usize = 8;

/// The most terms [`summation_errors`] accepts (its values take 4 bytes each, and the exact
/// integer sum must stay below 2^53).
pub const MAX_TERMS: usize = 1 << 26;

/// The grid of the measured values: each is kᵢ / 2^{24}, an integer over 2^{24}.
pub const GRID_BITS: u32 = 24;

/// Σ xᵢ from left to right, one rounding per addition: s ← s + xᵢ.
pub fn naive_sum<T: Float>(xs: impl IntoIterator<Item = T>) -> T {
    xs.into_iter().fold(T::zero(), |s, x| s + x)
}

/// Σ xᵢ as the sum of the two halves' sums, recursively, down to blocks of [`PAIRWISE_BLOCK`]
/// terms added one by one.
pub fn pairwise_sum<T: Float>(xs: &[T]) -> T {
    if xs.len() <= PAIRWISE_BLOCK {
        return naive_sum(xs.iter().copied());
    }
    let (left, right) = xs.split_at(xs.len() / 2);
    pairwise_sum(left) + pairwise_sum(right)
}

/// The most additions any one term passes through in [`pairwise_sum`] of n terms, each of them
/// one rounding: inside its block of m ≤ [`PAIRWISE_BLOCK`] terms, added one by one from 0 (the
/// first addition, 0 + x₁, is exact), m − 1; then one for every halving above the block. For
/// n > 8 that is at most ⌈log₂(n/8)⌉ + 7 = ⌈log₂ n⌉ + 4, with equality at n = 8·2ʲ, so the
/// error of the sum is at most (⌈log₂ n⌉ + 4)·u·Σ|xᵢ| to first order in the unit roundoff u.
pub fn pairwise_roundings(n: usize) -> usize {
    if n <= PAIRWISE_BLOCK {
        return n.saturating_sub(1);
    }
    // pairwise_sum(left) + pairwise_sum(right): one more rounding for the terms of both halves.
    1 + pairwise_roundings(n / 2).max(pairwise_roundings(n - n / 2))
}

/// Σ xᵢ with Kahan's compensation: c holds what the last addition lost,
/// y = xᵢ − c, t = s + y, c = (t − s) − y, s = t. (Rust never reassociates float arithmetic,
/// so (t − s) − y is computed as written and is exactly the rounding error of s + y whenever
/// |s| ≥ |y|.)
pub fn kahan_sum<T: Float>(xs: impl IntoIterator<Item = T>) -> T {
    let (mut s, mut c) = (T::zero(), T::zero());
    for x in xs {
        let y = x - c;
        let t = s + y;
        c = (t - s) - y;
        s = t;
    }
    s
}

/// The ways of summing the chapter measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// [`naive_sum`].
    Naive,
    /// The crate's own reduction, [`crate::float::lane_sum`]: 16 running sums side by side,
    /// then added, so each holds about n/16 terms.
    Lanes,
    /// [`pairwise_sum`].
    Pairwise,
    /// [`kahan_sum`].
    Kahan,
}

/// All four, in the order of the figure.
pub const METHODS: [Method; 4] = [Method::Naive, Method::Lanes, Method::Pairwise, Method::Kahan];

impl Method {
    /// Its name in tables and legends.
    pub fn name(self) -> &'static str {
        match self {
            Method::Naive => "left to right",
            Method::Lanes => "16 lanes (lane_sum)",
            Method::Pairwise => "pairwise",
            Method::Kahan => "Kahan",
        }
    }

    /// Σ xᵢ by this method.
    pub fn sum<T: Float>(self, xs: &[T]) -> T {
        match self {
            Method::Naive => naive_sum(xs.iter().copied()),
            Method::Lanes => lane_sum(xs),
            Method::Pairwise => pairwise_sum(xs),
            Method::Kahan => kahan_sum(xs.iter().copied()),
        }
    }
}

/// n values kᵢ/2^{24} with kᵢ drawn uniformly below 2^{24} from `seed` (so uniform on [0, 1),
/// mean ½), and their exact sum Σkᵢ/2^{24}. Errors when n is 0 or above [`MAX_TERMS`].
pub fn grid_values(n: usize, seed: u64) -> Result<(Vec<f32>, f64)> {
    if n == 0 {
        return Err(Error::Empty { op: "grid_values", arg: "n" });
    }
    if n > MAX_TERMS {
        return Err(invalid("grid_values", "n", format!("{n} is above the limit {MAX_TERMS}")));
    }
    let mut rng = Rng::new(seed);
    let scale = (1u64 << GRID_BITS) as f64;
    let ks: Vec<u64> = (0..n).map(|_| rng.next_u64() >> (64 - GRID_BITS)).collect();
    // Σkᵢ < 2^{26 + 24} < 2^{53}: exact as an integer and as an f64.
    let exact = ks.iter().sum::<u64>() as f64 / scale;
    Ok((ks.into_iter().map(|k| (k as f64 / scale) as f32).collect(), exact))
}

/// The relative error |ŝ − s| / s of each of [`METHODS`] in f32 on n values of
/// [`grid_values`], as the root mean square over `trials` draws (seeds `seed`, `seed + 1`, …):
/// one row per method, in that order. Errors as [`grid_values`], and when `trials` is 0.
pub fn summation_errors(n: usize, trials: usize, seed: u64) -> Result<[f64; 4]> {
    if trials == 0 {
        return Err(invalid("summation_errors", "trials", "give at least 1"));
    }
    let mut squares = [0.0; 4];
    for t in 0..trials {
        let (xs, exact) = grid_values(n, seed.wrapping_add(t as u64))?;
        for (sq, method) in squares.iter_mut().zip(METHODS) {
            let e = (f64::from(method.sum(&xs)) - exact) / exact;
            *sq += e * e;
        }
    }
    Ok(squares.map(|s| (s / trials as f64).sqrt()))
}
