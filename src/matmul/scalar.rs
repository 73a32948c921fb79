//! The portable micro-kernel: plain Rust, no intrinsics, the specification the SIMD kernels follow.
//!
//! A micro-kernel multiplies one packed sliver of A (MR rows × kc, stored as kc columns of MR
//! values) by one packed sliver of B (kc × NR, stored as kc rows of NR values) and updates one
//! MR×NR tile of C:
//!
//! ```text
//! acc[i][j] = Σ_{p<kc} Ã[p·MR + i] · B̃[p·NR + j]            (MR·NR accumulators)
//! C[i, j]   = α·acc[i][j] + β·C[i, j]     (β = 0: C[i, j] = α·acc[i][j], C is not read)
//! ```
//!
//! C arrives as NR column slices: element (i, j) of the tile is `c[j][row + i]`.

use super::Element;

/// Rows of the portable register tile.
pub const MR: usize = 4;
/// Columns of the portable register tile.
pub const NR: usize = 4;

/// One MR×NR tile: `c ← α·Ã·B̃ + β·c` over depth `kc` (see the module documentation).
///
/// Panics (an internal bug, never reachable from the public API) if a slice is too short.
pub fn kernel<T: Element>(
    kc: usize,
    a: &[T],
    b: &[T],
    alpha: T,
    beta: T,
    c: &mut [&mut [T]],
    row: usize,
) {
    let mut acc = [[T::zero(); MR]; NR];
    for (a_p, b_p) in a[..kc * MR].chunks_exact(MR).zip(b[..kc * NR].chunks_exact(NR)) {
        for (acc_j, &b_pj) in acc.iter_mut().zip(b_p) {
            for (acc_ij, &a_ip) in acc_j.iter_mut().zip(a_p) {
                // A separate multiply and add, each rounded: no fused multiply-add here.
                *acc_ij += a_ip * b_pj;
            }
        }
    }
    for (column, acc_j) in c[..NR].iter_mut().zip(&acc) {
        for (c_ij, &s) in column[row..row + MR].iter_mut().zip(acc_j) {
            *c_ij = if beta == T::zero() { alpha * s } else { alpha * s + beta * *c_ij };
        }
    }
}
