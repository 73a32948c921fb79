//! Counting work and traffic: the flops of a product, the bytes the naive loop and the blocked
//! product move between memory and the caches, and their ratio, the arithmetic intensity.

use crate::matmul::lab::Blocking;

/// Flops of C = A·B with A m×k and B k×n: one multiply and one add per (i, j, p), 2·m·n·k.
pub fn flops(m: usize, n: usize, k: usize) -> u64 {
    2 * (m as u64) * (n as u64) * (k as u64)
}

/// Bytes the naive triple loop moves if no operand is ever found in cache: every multiply-add
/// reads aᵢₚ and bₚⱼ afresh, so 2·`elem` bytes per 2 flops, plus C written once.
pub fn naive_traffic_bytes(m: usize, n: usize, k: usize, elem: usize) -> u64 {
    (2 * m * n * k + m * n) as u64 * elem as u64
}

/// Bytes the blocked product moves between memory and the caches: A is read once per NC-panel
/// of B (⌈n/NC⌉ times), B once, and C read and written once per rank-KC update (⌈k/KC⌉ times).
/// Packing copies stay in cache and are not counted.
pub fn blocked_traffic_bytes(m: usize, n: usize, k: usize, elem: usize, b: Blocking) -> u64 {
    let a = m * k * n.div_ceil(b.nc.max(1));
    let bb = k * n;
    let c = 2 * m * n * k.div_ceil(b.kc.max(1));
    (a + bb + c) as u64 * elem as u64
}

/// Arithmetic intensity: flops per byte moved.
pub fn intensity(flops: u64, bytes: u64) -> f64 {
    flops as f64 / bytes.max(1) as f64
}
