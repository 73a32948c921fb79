//! The five loops around the micro-kernel (the BLIS structure), and the split over threads.
//!
//! ```text
//! loop 5  for jc in 0..n step NC       a KC×NC panel of op(B) ....................... L3
//! loop 4    for pc in 0..k step KC       pack B̃ ← op(B)[pc.., jc..]   (KC×NC)
//! loop 3      for ic in 0..m step MC       pack Ã ← op(A)[ic.., pc..]  (MC×KC) ...... L2
//! loop 2        for jr in 0..NC step NR      one KC×NR sliver of B̃ ..................... L1
//! loop 1          for ir in 0..MC step MR      one MR×KC sliver of Ã, streamed from L2
//!                   micro-kernel: C[ic+ir.., jc+jr..] (MR×NR) ← α·Ã·B̃ + β·C  ...... registers
//! ```
//!
//! Everything here is safe code; the only `unsafe` lives behind the micro-kernel's safe signature.

use super::dispatch::{Blocking, ProductStats};
use super::pack::{Operand, pack_a, pack_b};
use super::Element;
use super::kernels::MicroKernel;

/// Products with fewer flops (2·m·n·k) than this run on one thread: below it, starting a second
/// thread (tens of microseconds) costs more than it saves. Chosen from the benchmark's
/// 1-versus-2-thread comparison (see the chapter).
pub const PARALLEL_MIN_FLOPS: f64 = 4.0e6;

/// The largest register tile of any kernel (AVX-512 f32, 32×12): the size of the scratch tile
/// edge tiles are computed into.
pub const MAX_TILE: usize = 32 * 12;

/// Packing buffers of one thread, kept between products so they are allocated once.
pub struct Workspace<T> {
    a: Vec<T>,
    b: Vec<T>,
}

impl<T> Default for Workspace<T> {
    fn default() -> Self {
        Workspace { a: Vec::new(), b: Vec::new() }
    }
}

/// The number of elements to skip so a buffer starts on a 64-byte cache line.
fn line_offset<T>(v: &[T]) -> usize {
    let off = v.as_ptr().align_offset(64);
    if off == usize::MAX || off * size_of::<T>() >= 64 { 0 } else { off }
}

impl<T: Element> Workspace<T> {
    /// Two cache-line-aligned buffers of at least `a_len` and `b_len` elements.
    fn buffers(&mut self, a_len: usize, b_len: usize) -> (&mut [T], &mut [T]) {
        let slack = 64 / size_of::<T>();
        for (v, len) in [(&mut self.a, a_len), (&mut self.b, b_len)] {
            if v.len() < len + slack {
                *v = vec![T::zero(); len + slack];
            }
        }
        let (oa, ob) = (line_offset(&self.a), line_offset(&self.b));
        (&mut self.a[oa..oa + a_len], &mut self.b[ob..ob + b_len])
    }
}

/// Everything one product needs besides its operands.
#[derive(Clone, Copy)]
pub(crate) struct Plan<T: 'static> {
    pub kernel: MicroKernel<T>,
    pub blocking: Blocking,
    pub threads: usize,
    pub min_parallel_flops: f64,
}

/// C ← α·op(A)·op(B) + β·C with op(A) m×k, op(B) k×n, C column-major m×n in `c` (shapes checked
/// by the caller). Returns what was done.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm<T: Element>(
    plan: Plan<T>,
    alpha: T,
    a: Operand<T>,
    b: Operand<T>,
    beta: T,
    c: &mut [T],
    (m, n, k): (usize, usize, usize),
) -> ProductStats {
    let mk = plan.kernel;
    let mut stats = ProductStats { kernel: mk.kind, mr: mk.mr, nr: mk.nr, blocking: plan.blocking, threads: 1, tiles: 0 };
    if m == 0 || n == 0 {
        return stats;
    }
    if k == 0 || alpha == T::zero() {
        // Nothing to multiply (BLAS convention: α = 0 does not read A or B): C ← β·C.
        scale(c, beta);
        return stats;
    }
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    let panels = n.div_ceil(mk.nr);
    let threads = if flops < plan.min_parallel_flops { 1 } else { plan.threads.clamp(1, panels) };
    stats.threads = threads;
    stats.tiles = T::with_workspaces(threads, |workspaces| {
        if threads == 1 {
            return serial(&mut workspaces[0], mk, plan.blocking, alpha, a, b, 0, beta, c, (m, n, k));
        }
        // Split C's columns into `threads` contiguous ranges of whole NR-panels; each thread packs
        // its own Ã and B̃ and writes only its own columns, so no two threads share a mutable byte.
        let mut jobs = Vec::with_capacity(threads);
        let mut rest = c;
        let mut j0 = 0;
        for (t, ws) in workspaces.iter_mut().enumerate().take(threads) {
            let take = (panels * (t + 1) / threads) * mk.nr;
            let j1 = take.min(n);
            let (mine, others) = rest.split_at_mut((j1 - j0) * m);
            jobs.push((ws, j0, j1 - j0, mine));
            rest = others;
            j0 = j1;
        }
        std::thread::scope(|s| {
            let mut jobs = jobs.into_iter();
            let first = jobs.next();
            let handles: Vec<_> = jobs
                .map(|(ws, j0, nj, cj)| s.spawn(move || serial(ws, mk, plan.blocking, alpha, a, b, j0, beta, cj, (m, nj, k))))
                .collect();
            let mut tiles = first.map_or(0, |(ws, j0, nj, cj)| serial(ws, mk, plan.blocking, alpha, a, b, j0, beta, cj, (m, nj, k)));
            for h in handles {
                // A worker can only panic on an internal bug; re-raise it on the caller's thread.
                tiles += h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
            }
            tiles
        })
    });
    stats
}

/// C ← β·C, with β = 0 writing zeros (so NaN in C does not survive).
fn scale<T: Element>(c: &mut [T], beta: T) {
    if beta == T::zero() {
        c.fill(T::zero());
    } else if beta != T::one() {
        c.iter_mut().for_each(|x| *x *= beta);
    }
}

/// One thread's share: columns `jb..jb+n` of op(B) and all of `c` (m×n, column-major, ld = m).
/// Returns the number of micro-kernel calls.
#[allow(clippy::too_many_arguments)]
fn serial<T: Element>(
    ws: &mut Workspace<T>,
    mk: MicroKernel<T>,
    blocking: Blocking,
    alpha: T,
    a: Operand<T>,
    b: Operand<T>,
    jb: usize,
    beta: T,
    c: &mut [T],
    (m, n, k): (usize, usize, usize),
) -> u64 {
    let (mr, nr, ldc) = (mk.mr, mk.nr, m);
    let kc_max = blocking.kc.clamp(1, k);
    let mc_max = blocking.mc.clamp(1, m).next_multiple_of(mr);
    let nc_max = blocking.nc.clamp(1, n).next_multiple_of(nr);
    let (a_buf, b_buf) = ws.buffers(mc_max * kc_max, kc_max * nc_max);
    let mut scratch = [T::zero(); MAX_TILE];
    let mut tiles = 0u64;
    for jc in (0..n).step_by(nc_max) {
        let nc = nc_max.min(n - jc);
        for pc in (0..k).step_by(kc_max) {
            let kc = kc_max.min(k - pc);
            pack_b(b_buf, b, pc, kc, jb + jc, nc, nr);
            // The first rank-kc update applies β; later ones add onto what it wrote.
            let beta_pc = if pc == 0 { beta } else { T::one() };
            for ic in (0..m).step_by(mc_max) {
                let mc = mc_max.min(m - ic);
                pack_a(a_buf, a, ic, mc, pc, kc, mr);
                for jr in (0..nc).step_by(nr) {
                    let cols = nr.min(nc - jr);
                    let b_sliver = &b_buf[jr * kc..(jr + nr) * kc];
                    for ir in (0..mc).step_by(mr) {
                        let rows = mr.min(mc - ir);
                        let a_sliver = &a_buf[ir * kc..(ir + mr) * kc];
                        let corner = (jc + jr) * ldc + ic + ir;
                        if rows == mr && cols == nr {
                            (mk.run)(kc, a_sliver, b_sliver, alpha, beta_pc, &mut c[corner..], ldc);
                        } else {
                            // An edge tile: compute the full tile into scratch, keep the part inside C.
                            let tile = &mut scratch[..mr * nr];
                            (mk.run)(kc, a_sliver, b_sliver, T::one(), T::zero(), tile, mr);
                            for (j, t_col) in tile.chunks_exact(mr).take(cols).enumerate() {
                                let c_col = &mut c[corner + j * ldc..corner + j * ldc + rows];
                                for (c_ij, &t) in c_col.iter_mut().zip(t_col) {
                                    *c_ij = if beta_pc == T::zero() { alpha * t } else { alpha * t + beta_pc * *c_ij };
                                }
                            }
                        }
                        tiles += 1;
                    }
                }
            }
        }
    }
    tiles
}
