//! The product of one row with a matrix, read where it is: what a model computes for one token.

use super::{Element, MatMut, MatRef, Op, unavailable};
use crate::error::{Result, invalid, shape_error};
use crate::simd::{Kernel, active_kernel};

/// Lanes of independent partial sums in [`dot`]: enough for the compiler to keep a vector
/// register's worth of multiply-adds in flight (the order of the additions is then fixed by this
/// number, not by the hardware, so results are reproducible).
const DOT_LANES: usize = 16;

/// Σᵢ aᵢbᵢ over the common length of the two slices, summed in [`DOT_LANES`] interleaved partial
/// sums, then the lanes in order, then the remainder.
fn dot<T: Element>(a: &[T], b: &[T]) -> T {
    let len = a.len().min(b.len());
    let (a, b) = (&a[..len], &b[..len]);
    let mut lanes = [T::zero(); DOT_LANES];
    let (ca, cb) = (a.chunks_exact(DOT_LANES), b.chunks_exact(DOT_LANES));
    let tail: T = ca.remainder().iter().zip(cb.remainder()).map(|(&x, &y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..DOT_LANES {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().copied().sum::<T>() + tail
}

/// c ← α·a·op(B) + β·c for one row a (a 1×k view) and c (a 1×n view): the product of one token
/// with a weight matrix, or of one query with the cached keys.
///
/// - op(B) = B (k×n, column-major): c_j = α (a · B\[:, j\]) + β c_j, one dot product with each
///   column, which column-major storage keeps contiguous (summed in 16 interleaved lanes when a
///   is contiguous, left to right otherwise).
/// - op(B) = Bᵀ (B n×k, for QKᵀ and h W_Uᵀ): c = α Σ_p a_p B\[:, p\], column by column (needs
///   β = 0).
///
/// A row is a [`MatRef`] of one row whose leading dimension is the stride between its entries
/// (1 when they are contiguous). Every weight is read once, where it is. The blocked product
/// ([`gemm`](super::gemm)) first copies B into packed panels and computes whole
/// register tiles (32 rows with AVX-512 f32) of which one row is used. Measured with chapter 9's
/// generation benchmark (`cargo bench --bench ch09_gpt --features peers`, child
/// `--child-generate`: 6 layers, width 384, context 256, f32, cached tokens/s on one thread of a
/// 2-core AVX-512 Xeon, two alternating rounds): every product of the step by this function 534
/// and 532; its attention through [`gemm`](super::gemm) instead 470 and 464; every
/// product through it 186 and 185. A test holds this function to the blocked product.
///
/// With op(B) = B each column's lines are asked for (prefetched) while the column before it is
/// summed; the values are the same. On the 2-core AMD EPYC (Zen 3) of chapter 10, whose 32 MB L3
/// does not hold the benchmark model's 42.6 MB of f32 weights, one core summed a 384×27,648
/// column-major matrix (the 6 blocks' weights) with this dot product at 6.3 to 6.8 GB/s, and at
/// 8.4 to 9.5 GB/s with the next column prefetched (a plain sum of the same bytes: 12.6 to
/// 13.2 GB/s); cached generation, five alternating rounds on one pinned core: 141 to 159 tokens/s
/// (median 147) with the prefetch, 124 to 143 (median 134) without. With the SIMD loops below,
/// on a 2-core Intel Xeon with AVX-512 (`cargo bench --bench ch09_gpt -- --memory-speed`, one
/// pinned thread, three rotating rounds, load 2.4 to 2.6), the cached step of that model read its
/// weights at 18.5 GB/s (434 tokens/s), 87 % of a plain sum of the same bytes in the same run.
///
/// The process's kernel runs it ([`active_kernel`]: [`crate::simd::set_kernel`], else
/// `LLM_WORKBOOK_KERNEL`, else the best the CPU runs; the main job sets the portable one):
/// in f32, AVX2 and AVX-512 sum each column's dot in vectors of partial sums with fused
/// multiply-adds, and each output of a·Bᵀ over p in order with fused multiply-adds (the
/// dispatcher's [`crate::simd`] loops), which changes the last bits against the portable loops
/// described above (a test holds every kernel to them within the rounding bound). f64, and the
/// portable kernel, run the loops above.
///
/// Errors when a or c is not one row, when the shapes do not chain (1×k · k×n = 1×n), and on
/// β ≠ 0 with op(B) = Bᵀ.
pub fn row_product<T: Element>(
    alpha: T,
    a: MatRef<T>,
    b: MatRef<T>,
    tb: Op,
    beta: T,
    c: MatMut<T>,
) -> Result<()> {
    row_product_with(active_kernel(), alpha, a, b, tb, beta, c)
}

/// [`row_product`] run by `kernel` (the caller's settings; [`Kernel::Scalar`] for the portable
/// loops, the same bits on every CPU). Errors as [`row_product`] does, and on a kernel this CPU
/// lacks.
pub(crate) fn row_product_with<T: Element>(
    kernel: Kernel,
    alpha: T,
    a: MatRef<T>,
    b: MatRef<T>,
    tb: Op,
    beta: T,
    c: MatMut<T>,
) -> Result<()> {
    const OP: &str = "row_product";
    let k = a.cols;
    let (bk, n) = b.shape(tb);
    if a.rows != 1 || c.rows != 1 || bk != k || c.cols != n {
        return Err(shape_error(
            OP,
            "a, op(b) and c (a row times a matrix)",
            format!("1×{k} · {k}×n = 1×n"),
            format!("a {}×{k}, op(b) {bk}×{n}, c {}×{}", a.rows, c.rows, c.cols),
        ));
    }
    if tb == Op::T && beta != T::zero() {
        return Err(invalid(OP, "beta", "with op(B) = Bᵀ, β must be 0"));
    }
    if !kernel.is_available() {
        return Err(unavailable(OP, kernel));
    }
    if n == 0 {
        return Ok(());
    }
    let mut c = c;
    if T::row_simd(kernel) && simd_row_product(kernel, alpha, &a, &b, tb, beta, &mut c) {
        return Ok(());
    }
    let x = |p: usize| a.data[p * a.ld];
    match tb {
        Op::N => {
            for (j, out) in c.data.iter_mut().step_by(c.ld).take(n).enumerate() {
                // The next column is asked for while this one is summed: the columns are a whole
                // leading dimension apart, and the row product does little work per weight, so
                // it waits on memory unless the next weights are already on their way (measured
                // in this function's doc).
                if j + 1 < n {
                    crate::simd::prefetch(&b.data[(j + 1) * b.ld..][..k]);
                }
                let column = &b.data[j * b.ld..][..k];
                let s = if a.ld == 1 {
                    dot(&a.data[..k], column)
                } else {
                    column.iter().enumerate().map(|(p, &w)| x(p) * w).sum()
                };
                *out = if beta == T::zero() { alpha * s } else { alpha * s + beta * *out };
            }
        }
        Op::T => {
            // c += a_p B[:, p] for p = 0 … k − 1, then c *= α: contiguous, or every ld-th entry.
            if c.ld == 1 {
                let out = &mut c.data[..n];
                out.fill(T::zero());
                for p in 0..k {
                    let (xp, column) = (x(p), &b.data[p * b.ld..][..n]);
                    for (o, &w) in out.iter_mut().zip(column) {
                        *o += xp * w;
                    }
                }
                out.iter_mut().for_each(|o| *o *= alpha);
                return Ok(());
            }
            let mut out: Vec<&mut T> = c.data.iter_mut().step_by(c.ld).take(n).collect();
            out.iter_mut().for_each(|o| **o = T::zero());
            for p in 0..k {
                let (xp, column) = (x(p), &b.data[p * b.ld..][..n]);
                for (o, &w) in out.iter_mut().zip(column) {
                    **o += xp * w;
                }
            }
            out.iter_mut().for_each(|o| **o *= alpha);
        }
    }
    Ok(())
}

/// The SIMD body of [`row_product_with`] (shapes checked, n ≥ 1): the row gathered when its
/// entries are not contiguous, the n sums by the dispatcher ([`crate::simd::row_dots`] for
/// op(B) = B, [`crate::simd::row_sums`] for Bᵀ), then c_j = α·s_j (+ β·c_j). `false`, c
/// untouched, when the dispatcher has no body for `kernel`.
fn simd_row_product<T: Element>(
    kernel: Kernel,
    alpha: T,
    a: &MatRef<T>,
    b: &MatRef<T>,
    tb: Op,
    beta: T,
    c: &mut MatMut<T>,
) -> bool {
    let (k, n) = (a.cols, c.cols);
    let gathered: Vec<T>;
    let x: &[T] = if a.ld == 1 {
        &a.data[..k]
    } else {
        gathered = (0..k).map(|p| a.data[p * a.ld]).collect();
        &gathered
    };
    let mut sums = vec![T::zero(); n];
    let done = match tb {
        Op::N => T::row_dots(kernel, x, b.data, b.ld, &mut sums),
        Op::T => T::row_sums(kernel, x, b.data, b.ld, &mut sums),
    };
    if !done {
        return false;
    }
    for (out, s) in c.data.iter_mut().step_by(c.ld).take(n).zip(sums) {
        *out = if beta == T::zero() { alpha * s } else { alpha * s + beta * *out };
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::gemm;
    use crate::rng::Rng;
    use nalgebra::DMatrix;

    #[test]
    fn the_one_row_product_equals_the_blocked_product() {
        // 37 inputs: two full runs of the dot product's 16 lanes and a remainder of 5; every
        // operand inside a longer buffer (leading dimensions past the rows), as the cache's views
        // are.
        let (k, n) = (37, 21);
        let mut rng = Rng::new(9);
        let x: DMatrix<f64> = rng.normal_matrix(3, k, 1.0);
        for (tb, (rows, cols)) in [(Op::N, (k, n)), (Op::T, (n, k))] {
            let b: DMatrix<f64> = rng.normal_matrix(rows + 4, cols, 1.0);
            let start: DMatrix<f64> = rng.normal_matrix(2, n, 1.0);
            // β = 1 adds onto c (a residual); Bᵀ is only ever used with β = 0 (scores, logits).
            let betas: &[f64] = if tb == Op::N { &[0.0, 1.0] } else { &[0.0] };
            for &beta in betas {
                let mut out = [start.clone(), start.clone()];
                for (one_row, c) in [false, true].into_iter().zip(&mut out) {
                    let a = MatRef::new(&x.as_slice()[1..], 1, k, 3).unwrap();
                    let b = MatRef::new(b.as_slice(), rows, cols, rows + 4).unwrap();
                    let c = MatMut::new(&mut c.as_mut_slice()[1..], 1, n, 2).unwrap();
                    if one_row {
                        row_product(0.5, a, b, tb, beta, c).unwrap();
                    } else {
                        gemm(0.5, a, Op::N, b, tb, beta, c).unwrap();
                    }
                }
                let err = (&out[1] - &out[0]).abs().max();
                assert!(err < 1e-12, "{tb:?}, β = {beta}: off by {err:e}");
                // Row 0 of c is not part of the product and stays as it was.
                assert_eq!(out[1].row(0), start.row(0), "row 0");
            }
        }
        // c contiguous (ld = 1), as the cached step's rows and logits are: both layouts of B.
        for (tb, (rows, cols)) in [(Op::N, (k, n)), (Op::T, (n, k))] {
            let b: DMatrix<f64> = rng.normal_matrix(rows, cols, 1.0);
            let a = MatRef::new(&x.as_slice()[1..], 1, k, 3).unwrap();
            let w = MatRef::new(b.as_slice(), rows, cols, rows).unwrap();
            let (mut one, mut blocked) = (vec![0.0; n], vec![0.0; n]);
            row_product(0.5, a, w, tb, 0.0, MatMut::new(&mut one, 1, n, 1).unwrap()).unwrap();
            let c = MatMut::new(&mut blocked, 1, n, 1).unwrap();
            gemm(0.5, a, Op::N, w, tb, 0.0, c).unwrap();
            let err = one.iter().zip(&blocked).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max);
            assert!(err < 1e-12, "{tb:?}, c contiguous: off by {err:e}");
        }
        // The contiguous row (16 lanes) and a strided one (left to right) agree to rounding.
        let b: DMatrix<f64> = rng.normal_matrix(k, n, 1.0);
        let mut out = [DMatrix::zeros(1, n), DMatrix::zeros(1, n)];
        let contiguous: Vec<f64> = x.row(0).iter().copied().collect();
        for ((row, ld), c) in [(x.as_slice(), 3), (&contiguous[..], 1)].into_iter().zip(&mut out) {
            let a = MatRef::new(row, 1, k, ld).unwrap();
            let w = MatRef::new(b.as_slice(), k, n, k).unwrap();
            row_product(1.0, a, w, Op::N, 0.0, MatMut::new(c.as_mut_slice(), 1, n, 1).unwrap())
                .unwrap();
        }
        assert!((&out[1] - &out[0]).abs().max() < 1e-12);
    }

    /// (c by `kernel`, c by the portable loops, Σ_p |α·x_p·w_pj| for each j): 1×k · op(B) with
    /// every operand inside a longer buffer (a strided row when `strided`, B's leading dimension
    /// past its rows, c every other entry of its buffer), c starting at `start` (β = 1 adds to it).
    fn both_ways(
        kernel: Kernel,
        (k, n, tb): (usize, usize, Op),
        (strided, beta): (bool, f32),
        rng: &mut Rng,
    ) -> [Vec<f32>; 3] {
        let (a_ld, pad) = (if strided { 3 } else { 1 }, 5);
        let a: Vec<f32> =
            rng.normal_matrix::<f32>(1, a_ld * k.max(1), 1.0).iter().copied().collect();
        let (rows, cols) = if tb == Op::N { (k, n) } else { (n, k) };
        let ld = rows + pad;
        let w: Vec<f32> = rng.normal_matrix::<f32>(ld, cols.max(1), 1.0).iter().copied().collect();
        let start: Vec<f32> =
            rng.normal_matrix::<f32>(1, 2 * n.max(1), 1.0).iter().copied().collect();
        let alpha = 0.5f32;
        let run = |kernel: Kernel| {
            let mut c = start.clone();
            let a = MatRef::new(&a, 1, k, a_ld).unwrap();
            let b = MatRef::new(&w, rows, cols, ld).unwrap();
            row_product_with(kernel, alpha, a, b, tb, beta, MatMut::new(&mut c, 1, n, 2).unwrap())
                .unwrap();
            c
        };
        let size = (0..n)
            .map(|j| {
                let weight = |p: usize| if tb == Op::N { w[j * ld + p] } else { w[p * ld + j] };
                (0..k).map(|p| (alpha * a[p * a_ld] * weight(p)).abs()).sum::<f32>()
            })
            .collect();
        [run(kernel), run(Kernel::Scalar), size]
    }

    #[test]
    fn every_kernel_gives_the_portable_row_product_to_rounding_on_awkward_lengths() {
        // Lengths around the vectors of 8 and 16 lanes and the 4 vectors of partial sums (32,
        // 64), B's columns (and rows) a leading dimension past their values, strided rows and c.
        let lengths = [0, 1, 15, 16, 17, 31, 33, 37, 63, 64, 65, 100, 129];
        let kernels = crate::simd::available_kernels();
        eprintln!("kernels on this CPU: {kernels:?}");
        let mut rng = Rng::new(49);
        let u = f32::EPSILON / 2.0;
        for &kernel in &kernels {
            for &k in &lengths {
                for n in [1, 2, 15, 17, 33, 70] {
                    for (tb, beta, strided) in [
                        (Op::N, 0.0, false),
                        (Op::N, 1.0, true),
                        (Op::T, 0.0, false),
                        (Op::T, 0.0, true),
                    ] {
                        let [got, portable, size] =
                            both_ways(kernel, (k, n, tb), (strided, beta), &mut rng);
                        // Each way is within γ_k·Σ|α x w| of the exact sum (k roundings at most),
                        // plus the rounding of β·c + α·s; so the two differ by at most twice that.
                        for j in 0..n {
                            let (g, p) = (got[2 * j], portable[2 * j]);
                            let bound = 2.0 * (k as f32 + 2.0) * u * (size[j] + p.abs());
                            assert!(
                                (g - p).abs() <= bound,
                                "{kernel} {tb:?} k {k} n {n} β {beta} column {j}: {g} vs {p}"
                            );
                            // The entries between c's are not c's and are left alone.
                            assert_eq!(got[2 * j + 1].to_bits(), portable[2 * j + 1].to_bits());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_kernels_row_product_gives_a_run_of_columns_the_whole_products_bits() {
        // The cached step shares a product's columns between threads: each column's sum must not
        // depend on the columns computed with it.
        let (k, n) = (100, 37);
        let mut rng = Rng::new(50);
        let x: Vec<f32> = rng.normal_matrix::<f32>(1, k, 1.0).iter().copied().collect();
        let w: Vec<f32> = rng.normal_matrix::<f32>(k, n, 1.0).iter().copied().collect();
        for kernel in crate::simd::available_kernels() {
            let product = |first: usize, last: usize| {
                let mut c = vec![0.0f32; last - first];
                let b = MatRef::new(&w[first * k..], k, last - first, k).unwrap();
                let a = MatRef::new(&x, 1, k, 1).unwrap();
                let out = MatMut::new(&mut c, 1, last - first, 1).unwrap();
                row_product_with(kernel, 1.0, a, b, Op::N, 0.0, out).unwrap();
                c.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            let whole = product(0, n);
            for (first, last) in [(0, 1), (3, 20), (20, n), (n - 1, n)] {
                assert_eq!(product(first, last), whole[first..last], "{kernel} {first}..{last}");
            }
        }
        // A kernel this CPU lacks is refused in one line naming it.
        for kernel in Kernel::ALL.into_iter().filter(|k| !k.is_available()) {
            let (a, b, mut c) = ([1.0f32; 2], [1.0f32; 2], [0.0f32; 1]);
            let e = row_product_with(
                kernel,
                1.0,
                MatRef::new(&a, 1, 2, 1).unwrap(),
                MatRef::new(&b, 2, 1, 2).unwrap(),
                Op::N,
                0.0,
                MatMut::new(&mut c, 1, 1, 1).unwrap(),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("not available") && !e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_row_product_that_does_not_chain_is_refused_with_the_shapes() {
        let w = [1.0f32; 12];
        let a = [1.0f32; 4];
        let mut c = [0.0f32; 3];
        let row = MatRef::new(&a[..3], 1, 3, 1).unwrap();
        let b = MatRef::new(&w, 4, 3, 4).unwrap();
        let e = row_product(1.0, row, b, Op::N, 0.0, MatMut::new(&mut c, 1, 3, 1).unwrap());
        assert!(e.unwrap_err().to_string().contains("1×3 · 3×n"));
        let a = MatRef::new(&a, 1, 4, 1).unwrap();
        let e = row_product(1.0, a, b, Op::T, 1.0, MatMut::new(&mut c[..1], 1, 1, 1).unwrap());
        assert!(e.is_err());
        let b_t = MatRef::new(&w, 3, 4, 3).unwrap();
        let e = row_product(1.0, a, b_t, Op::T, 1.0, MatMut::new(&mut c, 1, 3, 1).unwrap());
        assert!(e.unwrap_err().to_string().contains("β must be 0"), "Bᵀ with β = 1");
        row_product(2.0, a, b, Op::N, 0.0, MatMut::new(&mut c, 1, 3, 1).unwrap()).unwrap();
        assert_eq!(c, [8.0; 3]);
    }
}
