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
//! With several threads, loop 3's blocks are shared out (see [`gemm`]). Everything here is safe
//! code; the only `unsafe` lives behind the micro-kernel's safe signature.

use super::Element;
use super::dispatch::{Blocking, ProductStats};
use super::kernels::MicroKernel;
use super::pack::{Operand, pack_a, pack_b};
use std::sync::Mutex;

/// Products with fewer flops (2·m·n·k) than this run on one thread. Starting and joining a
/// scoped thread costs about 30 µs at best and 50–80 µs typically on this machine, so a second
/// thread can only pay for products that take several times that on one thread: 2·10⁷ flops is
/// about 270 µs at 75 GFLOP/s (a 215³ product). The chapter's crossover table, forcing two threads,
/// found them losing up to 192³ and winning from 256³.
pub const PARALLEL_MIN_FLOPS: f64 = 2.0e7;

/// The largest register tile of any kernel (AVX-512 f32, 32×12): the size of the scratch tile
/// edge tiles are computed into.
pub const MAX_TILE: usize = 32 * 12;
/// The most columns of any kernel's tile.
pub const MAX_NR: usize = 12;

/// Packing buffers of one thread, kept between products so they are allocated once.
pub struct Workspace<T> {
    a: Vec<T>,
    b: Vec<T>,
    /// Where edge tiles are computed before their part inside C is kept.
    tile: Vec<T>,
}

impl<T> Default for Workspace<T> {
    fn default() -> Self {
        Workspace { a: Vec::new(), b: Vec::new(), tile: Vec::new() }
    }
}

/// The number of elements to skip so a buffer starts on a 64-byte cache line.
fn line_offset<T>(v: &[T]) -> usize {
    let off = v.as_ptr().align_offset(64);
    if off == usize::MAX || off * size_of::<T>() >= 64 { 0 } else { off }
}

impl<T: Element> Workspace<T> {
    /// Cache-line-aligned buffers of at least `a_len` and `b_len` elements for Ã and B̃, and the
    /// scratch tile.
    fn buffers(&mut self, a_len: usize, b_len: usize) -> (&mut [T], &mut [T], &mut [T]) {
        let slack = 64 / size_of::<T>();
        for (v, len) in [(&mut self.a, a_len), (&mut self.b, b_len), (&mut self.tile, MAX_TILE)] {
            if v.len() < len + slack {
                *v = vec![T::zero(); len + slack];
            }
        }
        let (oa, ob, ot) = (line_offset(&self.a), line_offset(&self.b), line_offset(&self.tile));
        (&mut self.a[oa..oa + a_len], &mut self.b[ob..ob + b_len], &mut self.tile[ot..ot + MAX_TILE])
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
///
/// With more than one thread, each (jc, pc) step packs B̃ once, on the calling thread, and then
/// hands out the MC-row blocks of loop 3 from a shared queue: every thread (the caller included)
/// takes the next block, packs its Ã into its own buffer and writes those rows of C. No block is
/// assigned in advance, so if the machine is busy and a helper thread starts late, the caller
/// simply does more of the blocks instead of waiting.
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
    let (mr, nr) = (mk.mr, mk.nr);
    // Loops 4 and 5 cut k and n into equal pieces no larger than KC and NC (rounded up to whole
    // slivers), so no step is left with a thin remainder: k = 300 with KC = 256 is two updates of
    // 150, not 256 + 44.
    let kc_max = balanced(k, plan.blocking.kc, 1);
    let nc_max = balanced(n, plan.blocking.nc, nr);
    let tuned_mc = plan.blocking.mc.clamp(1, m).next_multiple_of(mr);
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    let wanted = if flops < plan.min_parallel_flops { 1 } else { plan.threads.max(1) };
    // With several threads, cut the rows finer when the tuned MC would leave fewer than two
    // blocks per thread (so a late thread can be covered for), but never below one tile.
    let parallel_mc = tuned_mc.min(m.div_ceil(2 * wanted).next_multiple_of(mr));
    let threads = wanted.min(m.div_ceil(parallel_mc));
    let mc = if threads > 1 { parallel_mc } else { tuned_mc };
    stats.threads = threads;
    stats.tiles = T::with_workspaces(threads, |workspaces| {
        let (main, helpers) = workspaces.split_first_mut().expect("at least one workspace");
        let mut tiles = 0;
        for jc in (0..n).step_by(nc_max) {
            let nc = nc_max.min(n - jc);
            for pc in (0..k).step_by(kc_max) {
                let kc = kc_max.min(k - pc);
                let (a_buf, b_buf, tile) = main.buffers(mc * kc_max, kc_max * nc_max);
                pack_b(b_buf, b, pc, kc, jc, nc, nr);
                let step = Step {
                    kernel: mk,
                    alpha,
                    // The first rank-kc update applies β; later ones add onto what it wrote.
                    beta: if pc == 0 { beta } else { T::one() },
                    a,
                    pc,
                    kc,
                    nc,
                    b_panel: b_buf,
                };
                let blocks = row_blocks(&mut c[jc * m..(jc + nc) * m], m, mc);
                if threads == 1 {
                    for mut block in blocks {
                        tiles += step.run(a_buf, tile, &mut block);
                    }
                } else {
                    let queue = Mutex::new(blocks.into_iter());
                    tiles += std::thread::scope(|s| {
                        let (step, queue) = (&step, &queue);
                        let spawned: Vec<_> = helpers
                            .iter_mut()
                            .take(threads - 1)
                            .map(|ws| {
                                s.spawn(move || {
                                    let (a_buf, _, tile) = ws.buffers(mc * kc_max, 0);
                                    step.drain(queue, a_buf, tile)
                                })
                            })
                            .collect();
                        let mut t = step.drain(queue, a_buf, tile);
                        // The queue is empty; helpers may still be finishing a block. Yield rather
                        // than block while they do: a blocked thread's core may go to sleep, and
                        // waking it (in a virtual machine especially) can take milliseconds.
                        while !spawned.iter().all(|h| h.is_finished()) {
                            std::thread::yield_now();
                        }
                        for h in spawned {
                            // A helper can only panic on an internal bug; re-raise it here.
                            t += h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
                        }
                        t
                    });
                }
            }
        }
        tiles
    });
    stats
}

/// The size of each of the ⌈len/limit⌉ equal pieces that cover `len`, rounded up to a multiple of
/// `unit` (the last piece may be smaller).
fn balanced(len: usize, limit: usize, unit: usize) -> usize {
    let pieces = len.div_ceil(limit.max(1));
    len.div_ceil(pieces).next_multiple_of(unit)
}

/// C ← β·C, with β = 0 writing zeros (so NaN in C does not survive).
fn scale<T: Element>(c: &mut [T], beta: T) {
    if beta == T::zero() {
        c.fill(T::zero());
    } else if beta != T::one() {
        c.iter_mut().for_each(|x| *x *= beta);
    }
}

/// Rows `ic..ic+rows` of every column of the current panel of C: the unit of work of loop 3.
struct RowBlock<'c, T> {
    ic: usize,
    rows: usize,
    columns: Vec<&'c mut [T]>,
}

/// Cuts the panel (whole columns of length m, one after the other) into blocks of `mc` rows:
/// disjoint mutable pieces, so blocks can go to different threads.
fn row_blocks<T>(panel: &mut [T], m: usize, mc: usize) -> Vec<RowBlock<'_, T>> {
    let ncols = panel.len() / m;
    let mut blocks: Vec<RowBlock<T>> =
        (0..m.div_ceil(mc)).map(|q| RowBlock { ic: q * mc, rows: mc.min(m - q * mc), columns: Vec::with_capacity(ncols) }).collect();
    for column in panel.chunks_exact_mut(m) {
        for (block, piece) in blocks.iter_mut().zip(column.chunks_mut(mc)) {
            block.columns.push(piece);
        }
    }
    blocks
}

/// Everything loops 3 to 1 need for one (jc, pc) step, shared read-only by the threads.
struct Step<'s, T: 'static> {
    kernel: MicroKernel<T>,
    alpha: T,
    beta: T,
    a: Operand<'s, T>,
    pc: usize,
    kc: usize,
    nc: usize,
    b_panel: &'s [T],
}

impl<T: Element> Step<'_, T> {
    /// Takes blocks from the queue until it is empty; returns the micro-kernel calls made.
    fn drain(&self, queue: &Mutex<std::vec::IntoIter<RowBlock<T>>>, a_buf: &mut [T], tile: &mut [T]) -> u64 {
        let mut tiles = 0;
        loop {
            // The lock is held only to take the next block; a poisoned lock still holds a valid
            // iterator.
            let next = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next();
            match next {
                Some(mut block) => tiles += self.run(a_buf, tile, &mut block),
                None => return tiles,
            }
        }
    }

    /// Loop 3's body for one block: pack its Ã, then loops 2 and 1 over the micro-kernel.
    fn run(&self, a_buf: &mut [T], scratch: &mut [T], block: &mut RowBlock<T>) -> u64 {
        let (mk, kc) = (self.kernel, self.kc);
        let (mr, nr) = (mk.mr, mk.nr);
        pack_a(a_buf, self.a, block.ic, block.rows, self.pc, kc, mr);
        let mut tiles = 0;
        for jr in (0..self.nc).step_by(nr) {
            let cols = nr.min(self.nc - jr);
            let b_sliver = &self.b_panel[jr * kc..(jr + nr) * kc];
            for ir in (0..block.rows).step_by(mr) {
                let rows = mr.min(block.rows - ir);
                let a_sliver = &a_buf[ir * kc..(ir + mr) * kc];
                if rows == mr && cols == nr {
                    (mk.run)(kc, a_sliver, b_sliver, self.alpha, self.beta, &mut block.columns[jr..jr + nr], ir);
                } else {
                    // An edge tile: compute the full tile into scratch, keep the part inside C.
                    let mut pieces = scratch.chunks_exact_mut(mr);
                    let mut tile: [&mut [T]; MAX_NR] = std::array::from_fn(|_| pieces.next().unwrap_or_default());
                    (mk.run)(kc, a_sliver, b_sliver, T::one(), T::zero(), &mut tile[..nr], 0);
                    for (c_col, t_col) in block.columns[jr..jr + cols].iter_mut().zip(&tile) {
                        for (c_ij, &t) in c_col[ir..ir + rows].iter_mut().zip(t_col.iter()) {
                            *c_ij = if self.beta == T::zero() { self.alpha * t } else { self.alpha * t + self.beta * *c_ij };
                        }
                    }
                }
                tiles += 1;
            }
        }
        tiles
    }
}
