//! What a product runs with and what it did: the blocking, and the evidence of what ran. Which
//! kernel runs is the dispatcher's choice ([`crate::simd::active_kernel`]).
//!
//! A product run with explicit settings ([`super::gemm_with`]) returns what it did in a
//! [`ProductStats`], and every product adds its micro-kernel calls to a process-wide counter per
//! kernel (`kernel_calls`), so a test can show that a forced kernel really ran.

use crate::simd::Kernel;
use std::sync::atomic::{AtomicU64, Ordering};

/// The cache blocking of the five loops around the micro-kernel (see the chapter for the sweep
/// that chose the defaults). MR and NR belong to the micro-kernel and are not listed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocking {
    /// Rows of A packed per block (loop 3): the MC×KC block of Ã is meant to stay in L2.
    pub mc: usize,
    /// Depth of one rank-KC update (loop 4): a KC×NR sliver of B̃ is meant to stay in L1.
    pub kc: usize,
    /// Columns of B packed per panel (loop 5): the KC×NC panel B̃ is meant to stay in L3.
    pub nc: usize,
}

/// What one product did: the evidence tests use to show which kernel ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProductStats {
    /// The micro-kernel family that computed the tiles.
    pub kernel: Kernel,
    /// Rows of the register tile.
    pub mr: usize,
    /// Columns of the register tile.
    pub nr: usize,
    /// The cache blocking used.
    pub blocking: Blocking,
    /// Threads that computed tiles (1 for small products).
    pub threads: usize,
    /// Register tiles computed, one per MR×NR tile position and rank-KC update, however many
    /// narrower micro-kernel calls cover an edge tile (0 when m, n or k is 0 or α = 0: nothing to
    /// multiply).
    pub tiles: u64,
}

static CALLS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

pub(super) fn record(stats: ProductStats) {
    CALLS[stats.kernel as usize].fetch_add(stats.tiles, Ordering::Relaxed);
}

/// Micro-kernel calls made so far by `kernel`, summed over the whole process (the evidence that a
/// forced kernel ran).
#[cfg(test)]
pub(crate) fn kernel_calls(kernel: Kernel) -> u64 {
    CALLS[kernel as usize].load(Ordering::Relaxed)
}
