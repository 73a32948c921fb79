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
//! Loops 2 and 1 over the full tiles of a block are one call of the micro-kernel (a run of tiles:
//! every full sliver of B̃ against every full tile of Ã, its bounds checked once), so the cost of
//! calling a kernel (its checks, the indirect call, C's column slices) is paid per block, not per
//! tile; the last columns (narrower tiles) and the last rows (the scratch tile) are calls of their
//! own.
//!
//! A SIMD kernel skips packing B̃ when B's rows are close enough (`in_place_b`): it reads each
//! sliver of op(B) where it lies, a partial last sliver included (its narrower tiles read only the
//! columns that exist).
//!
//! With several threads, C is cut into blocks of rows and columns and each thread runs these
//! loops on the blocks it takes (see [`gemm`] and [`grid`]). Everything here is safe code; the
//! only `unsafe` lives behind the micro-kernel's safe signature.

use super::Element;
use super::kernels::{ATiles, BSlivers, MAX_NR, MAX_TILE, MicroKernel};
use super::pack::{Operand, pack_a, pack_b};
use super::stats::{Blocking, ProductStats};
use crate::simd::{Kernel, prefetch};

/// Products with fewer flops (2·m·n·k) than this run on one thread. Starting and joining a
/// scoped thread costs about 30 µs at best and 50–80 µs typically on the machines here (the
/// benchmark measures it), once per product, and each thread packs its own part of the
/// operands, so a second thread can only pay for products that take several times that on one
/// thread: 3·10⁷ flops is about 300 µs at 100 GFLOP/s (a 247³ product). The value comes from
/// `cargo bench --features peers --bench ch10_matmul -- threads` (1 thread against 2 forced;
/// chapter 10, section 7): in f32 every product measured up to 2.5·10⁷ flops gained at most 1.14×
/// from a second thread at its best, every one from 2.8·10⁷ up at least 1.23×, so a clear gain
/// starts between the two and 3·10⁷ is the round value above it. The former 2·10⁷ let the GPT's
/// 768×128·128×128 output projection (2.5·10⁷) run at 0.68× of one thread. In f64 the same flops
/// take twice as long and a second thread already pays from about 1.9·10⁷; one threshold in flops
/// leaves that unused.
///
/// The same measurement bounds every further thread: at the threshold each of two threads has
/// half of it, 1.5·10⁷ flops, the least work that pays for a thread's start and its packing. A
/// product of f flops therefore uses at most ⌊2f / `PARALLEL_MIN_FLOPS`⌋ threads, so a product
/// just past the threshold is not spread over 16 cores to wait for them (more threads than the
/// work pays for is how a step gets slower with more cores).
pub const PARALLEL_MIN_FLOPS: f64 = 3.0e7;

/// The fewest flops in a piece of a product cut into more than two pieces per thread (up to
/// four). With the pieces taken from a queue, a thread that runs slower than the others (a core
/// shared in a virtual machine, say) delays the product by at most about one piece, so more and
/// smaller pieces even out uneven cores, and each costs a repacking of its part of op(A). On the
/// 16-core virtual machine of 2026-11-27, whose cores ran one 2048³ product each at 63 to 120
/// GFLOP/s when all were busy, four pieces per thread (64 of 2.7·10⁸ flops on 16 threads) took
/// that product from a median 1,073 to 1,313 GFLOP/s in f32 and from 531 to 660 in f64 (four
/// alternating rounds); on two cores, eight pieces of 2.9·10⁷ flops made uncached generation
/// (products of up to 2.3·10⁸ flops) 3 % slower than four. 10⁸ is a round value between the two.
pub const PIECE_MIN_FLOPS: f64 = 1.0e8;

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
        (
            &mut self.a[oa..oa + a_len],
            &mut self.b[ob..ob + b_len],
            &mut self.tile[ot..ot + MAX_TILE],
        )
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

/// C ← α·op(A)·op(B) + β·C with op(A) m×k, op(B) k×n, C column-major m×n in `c` with leading
/// dimension `ldc` ≥ m (column j is `c[j·ldc .. j·ldc + m]`; shapes checked by the caller). Returns
/// what was done.
///
/// With more than one thread, C is cut into pieces (whole register tiles, two per thread when
/// there are enough tiles along the longer side), blocks of rows and of columns in the proportion
/// [`grid`] finds reads the least, and every thread, the caller included, takes the next piece
/// from a shared queue and runs the five loops on it alone: a piece needs only its rows of op(A)
/// and its columns of op(B). Each thread packs what its piece needs into its own buffers, so
/// threads share nothing they write, never wait for each other inside a product, and are started
/// once per product. No piece is assigned in advance, so if the machine is busy and a helper
/// thread starts late, the caller simply does more of the pieces instead of waiting.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm<T: Element>(
    plan: Plan<T>,
    alpha: T,
    a: Operand<T>,
    b: Operand<T>,
    beta: T,
    c: &mut [T],
    ldc: usize,
    (m, n, k): (usize, usize, usize),
) -> ProductStats {
    let mk = plan.kernel;
    let mut stats = ProductStats {
        kernel: mk.kind,
        mr: mk.mr,
        nr: mk.nr,
        blocking: plan.blocking,
        threads: 1,
        tiles: 0,
    };
    if m == 0 || n == 0 {
        return stats;
    }
    // Column j of C: the m values from j·ldc on (the rows between m and ldc belong to someone
    // else).
    let mut columns: Vec<&mut [T]> =
        c.chunks_mut(ldc.max(1)).take(n).map(|column| &mut column[..m]).collect();
    if k == 0 || alpha == T::zero() {
        // Nothing to multiply (BLAS convention: α = 0 does not read A or B): C ← β·C.
        columns.iter_mut().for_each(|column| scale(column, beta));
        return stats;
    }
    let (mr, nr) = (mk.mr, mk.nr);
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    let wanted = threads_by_work(flops, plan.threads, plan.min_parallel_flops);
    // At most one thread per register tile along the longer side (as many as a cut of that side
    // alone could keep busy), and two to four pieces per thread when there are enough tiles, so a
    // late or slow thread can be covered for (see `PIECE_MIN_FLOPS`).
    let (tiles_m, tiles_n) = (m.div_ceil(mr), n.div_ceil(nr));
    let tiles_along = tiles_m.max(tiles_n);
    let threads = wanted.min(tiles_along);
    let pieces = piece_count(flops, threads, tiles_along);
    let (cuts_m, cuts_n) = grid(pieces, (m, tiles_m), (n, tiles_n));
    let (piece_rows, piece_cols) =
        (m.div_ceil(cuts_m).next_multiple_of(mr), n.div_ceil(cuts_n).next_multiple_of(nr));
    stats.threads = threads;
    let job = Job { plan, alpha, a, b, beta, k };
    stats.tiles = T::with_workspaces(threads, |workspaces| {
        if threads == 1 {
            return job
                .run(&mut workspaces[0], Piece { i0: 0, rows: m, j0: 0, columns: &mut columns });
        }
        // Each piece owns its block of C: the same rows of a run of whole columns.
        let mut parts: Vec<(usize, usize, Vec<&mut [T]>)> = Vec::with_capacity(pieces);
        let mut rest = columns.into_iter();
        for j0 in (0..n).step_by(piece_cols) {
            let first = parts.len();
            parts.extend((0..m).step_by(piece_rows).map(|i0| (i0, j0, Vec::new())));
            for column in rest.by_ref().take(piece_cols) {
                for (part, rows) in parts[first..].iter_mut().zip(column.chunks_mut(piece_rows)) {
                    part.2.push(rows);
                }
            }
        }
        // The crate's scheduler hands the pieces out; each thread packs into its own workspace.
        crate::threads::share_pieces(
            &mut workspaces[..threads],
            parts,
            |ws, (i0, j0, mut columns)| {
                let rows = columns.first().map_or(0, |c| c.len());
                job.run(ws, Piece { i0, rows, j0, columns: &mut columns })
            },
        )
        .into_iter()
        .sum()
    });
    stats
}

/// Threads by the work: a second thread pays from `min_parallel_flops` on, when each of the two
/// has half of it; every further thread is held to the same share, so a product of f flops uses
/// at most ⌊2f / min_parallel_flops⌋ of the `allowed` threads (see [`PARALLEL_MIN_FLOPS`]); one
/// below the threshold.
pub(super) fn threads_by_work(flops: f64, allowed: usize, min_parallel_flops: f64) -> usize {
    if flops < min_parallel_flops {
        return 1;
    }
    let by_work = (2.0 * flops / min_parallel_flops).floor();
    allowed.max(1).min(by_work as usize).max(1)
}

/// How many pieces a product of `flops` is cut into for `threads` threads, with `tiles` register
/// tiles along the longer side of C: one for one thread; else two per thread, or up to four while
/// each keeps [`PIECE_MIN_FLOPS`], and never more than the tiles.
fn piece_count(flops: f64, threads: usize, tiles: usize) -> usize {
    if threads <= 1 {
        return 1;
    }
    let by_size = (flops / PIECE_MIN_FLOPS) as usize;
    by_size.clamp(2 * threads, 4 * threads).min(tiles)
}

/// How many blocks of rows and of columns C is cut into for `pieces` pieces, given (m, tiles
/// along m) and (n, tiles along n): of the ways to write `pieces` as rows × columns with no more
/// cuts along a side than it has tiles, the one that reads the least of the operands. A piece of
/// r rows and c columns reads r·k values of op(A) and c·k of op(B), so the pieces together read
/// op(A) once per block of columns and op(B) once per block of rows: (column blocks)·m +
/// (row blocks)·n, times k. Near-square blocks minimise it. Cutting only the longer side (the
/// former rule) made every one of 32 pieces of a 2048³ product on 16 threads pack the whole of
/// op(A), 32 times what one thread packs; 8 × 4 blocks read it 4 times and op(B) 8 times. On a
/// tie, more blocks of rows: re-reading op(B) (often in place) is cheaper than packing op(A)
/// again.
fn grid(
    pieces: usize,
    (m, tiles_m): (usize, usize),
    (n, tiles_n): (usize, usize),
) -> (usize, usize) {
    // `pieces` is at most the tiles along the longer side, so cutting that side alone always fits.
    let rows = (1..=pieces)
        .filter(|&r| pieces.is_multiple_of(r) && r <= tiles_m && pieces / r <= tiles_n)
        .min_by_key(|&r| ((pieces / r) * m + r * n, std::cmp::Reverse(r)))
        .unwrap_or(if tiles_m >= tiles_n { pieces } else { 1 });
    (rows, pieces / rows)
}

/// The size of each of the ⌈len/limit⌉ equal pieces that cover `len`, rounded up to a multiple of
/// `unit` (the last piece may be smaller).
pub(super) fn balanced(len: usize, limit: usize, unit: usize) -> usize {
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

/// A piece of C: rows `i0..i0+rows` of columns `j0..j0+columns.len()`, each column given as the
/// slice of just those rows.
struct Piece<'p, 'c, T> {
    i0: usize,
    rows: usize,
    j0: usize,
    columns: &'p mut [&'c mut [T]],
}

/// What every piece of one product shares, read-only.
struct Job<'s, T: 'static> {
    plan: Plan<T>,
    alpha: T,
    a: Operand<'s, T>,
    b: Operand<'s, T>,
    beta: T,
    k: usize,
}

impl<T: Element> Job<'_, T> {
    /// The five loops on one piece of C; returns the micro-kernel calls made.
    fn run(&self, ws: &mut Workspace<T>, piece: Piece<T>) -> u64 {
        let (mk, k) = (self.plan.kernel, self.k);
        let (mr, nr) = (mk.mr, mk.nr);
        let (m, n) = (piece.rows, piece.columns.len());
        if m == 0 || n == 0 {
            return 0;
        }
        // Loops 4 and 5 cut k and n into equal pieces no larger than KC and NC (rounded up to
        // whole slivers), so no step is left with a thin remainder: k = 300 with KC = 256 is two
        // updates of 150, not 256 + 44.
        let kc_max = balanced(k, self.plan.blocking.kc, 1);
        let nc_max = balanced(n, self.plan.blocking.nc, nr);
        let mc_max = self.plan.blocking.mc.clamp(1, m).next_multiple_of(mr);
        let (a_buf, b_buf, scratch) = ws.buffers(mc_max * kc_max, kc_max * nc_max);
        // Packing transposes with the SIMD instructions of the kernel it feeds (the portable
        // kernel's products stay portable end to end).
        let simd = mk.kind != Kernel::Scalar;
        // Whether the kernel reads op(B) where it is ([`in_place_b`]); then only its partial
        // sliver, if any, is packed.
        let b_in_place = in_place_b(mk, self.b);
        let mut tiles = 0;
        // loop 5: a KC×NC panel of op(B) at a time.
        for jc in (0..n).step_by(nc_max) {
            let nc = nc_max.min(n - jc);
            // loop 4: one rank-KC update of the panel.
            for pc in (0..k).step_by(kc_max) {
                let kc = kc_max.min(k - pc);
                // Packed B̃: the whole panel, or nothing when it is read in place (a partial last
                // sliver too: the narrower tiles read only the columns that exist).
                let b_packed_from = if b_in_place { nc } else { 0 };
                if b_packed_from < nc {
                    pack_b(
                        b_buf,
                        self.b,
                        pc,
                        kc,
                        piece.j0 + jc + b_packed_from,
                        nc - b_packed_from,
                        nr,
                        simd,
                    );
                }
                // The first rank-kc update applies β; later ones add onto what it wrote.
                let beta = if pc == 0 { self.beta } else { T::one() };
                // loop 3: an MC×KC block of op(A), packed into Ã.
                for ic in (0..m).step_by(mc_max) {
                    let mc = mc_max.min(m - ic);
                    // Ã: the whole block packed, or only its partial last sliver when the full
                    // slivers are read where they are (`in_place_a`).
                    let a_in_place = in_place_a(mk, self.a, nc, kc);
                    let a_packed_from = if a_in_place { mc / mr * mr } else { 0 };
                    if a_packed_from < mc {
                        let (i, rows) = (piece.i0 + ic + a_packed_from, mc - a_packed_from);
                        pack_a(a_buf, self.a, i, rows, pc, kc, mr, simd);
                    }
                    // Ã's full tiles (read in place or packed) and its partial last one (packed).
                    let (full, edge_rows) = (mc / mr, mc % mr);
                    let a_full = if a_in_place {
                        let a = self.a;
                        let data = &a.data[piece.i0 + ic + pc * a.cs..];
                        ATiles { data, step: a.cs, next: mr, count: full, rows: mr }
                    } else {
                        ATiles { data: a_buf, step: mr, next: mr * kc, count: full, rows: mr }
                    };
                    // B̃'s slivers from column jr on: op(B) where it is, or the packed panel.
                    let b_from = |jr: usize, count: usize| {
                        let b = self.b;
                        let (data, step, lane, next) = if b_in_place {
                            let data = &b.data[pc * b.rs + (piece.j0 + jc + jr) * b.cs..];
                            (data, b.rs, b.cs, nr * b.cs)
                        } else {
                            (&b_buf[jr * kc..], nr, 1, nr * kc)
                        };
                        // One tile of rows uses each sliver once, straight from memory: the
                        // next sliver's NR column runs are asked for while this one is used
                        // (packing used to fetch them this way). With more tiles the sliver is
                        // reused from L1 and the requests only cost issue slots (3 % of a 64³
                        // product).
                        let prefetch_next = b_in_place && b.rs == 1 && mc <= mr;
                        BSlivers { data, step, lane, next, count, prefetch_next }
                    };
                    let (mut full_slivers, mut edge_cols) = (nc / nr, nc % nr);
                    let (alpha, narrow) = (self.alpha, !mk.narrow_widths().is_empty());
                    // The last full sliver and a remainder of fewer than 4 columns as 4-column
                    // tiles, when they are a whole number of them (NR = 6 with 2 columns left:
                    // 4 + 4, not 6 + 2). A 2-column tile holds half the accumulators the FMA
                    // latency needs in flight; a 4-column one, as many as a full tile's two
                    // thirds. Only op(B) in place has one lane between all its columns.
                    let fours = (nr + edge_cols) / 4;
                    let split_in_fours = mk.narrow_widths().contains(&4)
                        && b_in_place
                        && full > 0
                        && full_slivers > 0
                        && (1..4).contains(&edge_cols)
                        && (nr + edge_cols).is_multiple_of(4);
                    if split_in_fours {
                        full_slivers -= 1;
                        edge_cols = 0;
                    }
                    // Loops 2 and 1 over the full tiles: one run of the micro-kernel for every
                    // full sliver of B̃ against every full tile of Ã, its bounds checked once.
                    if full > 0 && full_slivers > 0 {
                        let b_run = b_from(0, full_slivers);
                        let c_run = &mut piece.columns[jc..jc + full_slivers * nr];
                        mk.run(kc, nr, a_full, b_run, alpha, beta, c_run, ic);
                    }
                    let jr = full_slivers * nr;
                    if split_in_fours {
                        let b4 = b_from(jr, fours);
                        let b_run = BSlivers { next: 4 * b4.lane, ..b4 };
                        let c_run = &mut piece.columns[jc + jr..jc + nc];
                        mk.run(kc, 4, a_full, b_run, alpha, beta, c_run, ic);
                    }
                    // The last columns: the kernel's narrower widths straight into C, or (the
                    // portable kernel) a whole tile through the scratch tile.
                    let c_edge = &mut piece.columns[jc + jr..jc + nc];
                    if full > 0 && edge_cols > 0 && narrow {
                        narrow_rows(mk, kc, a_full, b_from(jr, 1), alpha, beta, c_edge, ic);
                    } else if edge_cols > 0 {
                        for t in 0..full {
                            let a_t = ATiles {
                                data: &a_full.data[t * a_full.next..],
                                count: 1,
                                ..a_full
                            };
                            let (b_s, row) = (b_from(jr, 1), ic + t * mr);
                            edge_tile(mk, kc, a_t, b_s, alpha, beta, scratch, c_edge, row, mr);
                        }
                    }
                    // The last rows (packed after the full tiles or alone), each sliver through
                    // the scratch tile.
                    if edge_rows > 0 {
                        let q = full * mr - a_packed_from;
                        let data = &a_buf[q * kc..(q + mr) * kc];
                        // Up to MR/2 rows left: a tile of half the height (half the work
                        // thrown away: 65 rows are 4 tiles of 16 and one of 8, not 5 of 16).
                        let height = match mk.half_height() {
                            Some(h) if edge_rows <= h => h,
                            _ => mr,
                        };
                        let a_edge = ATiles { data, step: mr, next: 0, count: 1, rows: height };
                        let row = ic + full * mr;
                        for jr in (0..nc).step_by(nr) {
                            let b_s = b_from(jr, 1);
                            if b_s.prefetch_next && jr + 2 * nr <= nc {
                                let b = self.b;
                                for j in jr + nr..jr + 2 * nr {
                                    prefetch(&b.data[pc + (piece.j0 + jc + j) * b.cs..][..kc]);
                                }
                            }
                            let c_s = &mut piece.columns[jc + jr..jc + nc.min(jr + nr)];
                            let rows = edge_rows;
                            edge_tile(mk, kc, a_edge, b_s, alpha, beta, scratch, c_s, row, rows);
                        }
                    }
                    tiles += (mc.div_ceil(mr) * nc.div_ceil(nr)) as u64;
                }
            }
        }
        tiles
    }
}

/// The largest step between consecutive k of op(B) read in place, in elements: a 4 KiB page of
/// f32. A B sliver read as kc runs of NR values (op(B) = Bᵀ) touches a new cache line at every
/// step; up to a page apart, the kc steps of a sliver stay within a few hundred pages the TLB
/// holds. Beyond it (chapter 10's n = 2048 benchmarks), B is packed as before.
pub const IN_PLACE_MAX_STEP: usize = 1024;

/// Whether the kernel reads slivers of op(B) where they are: a SIMD kernel, whatever the layout
/// (the kernel broadcasts one value of B at a time, so any strides do), if consecutive k are at
/// most [`IN_PLACE_MAX_STEP`] apart. Packing B̃ costs one copy of B per panel, and a sliver read in
/// place is as compact for the kernel: NR runs of kc values (op(B) = B column-major) or kc runs of
/// NR values (op(B) = Bᵀ), where the packed sliver is one run of kc·NR. On chapter 9's training
/// step this took 2 to 4 % off the step (two sets of alternating runs). Reading A in place as
/// well (it is column-major in A·B and A·Bᵀ) measured no better than packing it: a column of
/// MR = 32 f32 that does not start on a cache line spans three lines instead of two, and the
/// kernel re-reads the A sliver for every sliver of B.
fn in_place_b<T: Element>(mk: MicroKernel<T>, b: Operand<T>) -> bool {
    mk.reads_b_in_place() && !mk.narrow_widths().is_empty() && b.rs <= IN_PLACE_MAX_STEP
}

/// The most slivers of B̃ in a panel for which full slivers of a column-major op(A) are read where
/// they are instead of packed into Ã, when a sliver's kc columns span at most
/// [`A_IN_PLACE_MAX_SPAN`] bytes. Packing copies each value of the block once and pays for itself
/// by the NC/NR times the kernel reads it again: many for a wide panel, few for small and skinny
/// products (64³: 8 slivers; an attention block of 32 columns: 4), where the copy was a sixth of
/// the product's time.
const A_IN_PLACE_MAX_SLIVERS: usize = 16;

/// The widest span (16 pages of 4 KiB) of a sliver of A read in place. Each step of the kernel
/// reads MR values a leading dimension apart. With the GPT's 768-row activations (a 3 KiB step)
/// in place measured 10 % faster than packed in a lone 768×32·32×32 product but 5 to 10 % slower
/// at 65 and 128 columns, and reading the attention blocks of chapter 9's training step in place
/// (views into 768-row buffers) made the step about 3 % slower in CPU time: the strided block is
/// re-read from caches that hold it less well than the packed copy.
const A_IN_PLACE_MAX_SPAN: usize = 64 * 1024;

/// Whether the kernel reads full slivers of op(A) where they are: a SIMD kernel, op(A)
/// column-major, a panel of `nc` columns narrow enough ([`A_IN_PLACE_MAX_SLIVERS`]) and a sliver
/// of depth `kc` compact enough ([`A_IN_PLACE_MAX_SPAN`]).
fn in_place_a<T: Element>(mk: MicroKernel<T>, a: Operand<T>, nc: usize, kc: usize) -> bool {
    let span = (kc.saturating_sub(1) * a.cs + mk.mr) * size_of::<T>();
    mk.reads_b_in_place()
        && a.rs == 1
        && nc.div_ceil(mk.nr) <= A_IN_PLACE_MAX_SLIVERS
        && span <= A_IN_PLACE_MAX_SPAN
}

/// The last `c.len()` < NR columns of C on the full tiles `a`: one run of each narrower width
/// of the kernel in the binary digits of the count (a SIMD kernel's 4, 2 and 1), straight into
/// C. Only the columns that exist are computed: the 65 columns of the GPT's vocabulary are 8
/// tiles of 8 and one of 1, where a full tile through the scratch tile computed 72.
#[allow(clippy::too_many_arguments)]
fn narrow_rows<T: Element>(
    mk: MicroKernel<T>,
    kc: usize,
    a: ATiles<T>,
    b: BSlivers<T>,
    alpha: T,
    beta: T,
    c: &mut [&mut [T]],
    row: usize,
) {
    let cols = c.len();
    let mut j = 0;
    for &width in mk.narrow_widths() {
        while cols - j >= width {
            let b_j = BSlivers { data: &b.data[j * b.lane..], count: 1, ..b };
            mk.run(kc, width, a, b_j, alpha, beta, &mut c[j..j + width], row);
            j += width;
        }
    }
    assert_eq!(j, cols, "the narrow widths end with 1, so they cover every remainder");
}

/// An edge tile: the `rows` ≤ MR rows from `row` on of the columns `c_cols` (at most NR), for
/// the last rows of C (or, for the portable kernel, its last columns). The tile is computed into
/// `scratch` and only its part inside C is kept, so the micro-kernel never needs a slow path.
#[allow(clippy::too_many_arguments)]
fn edge_tile<T: Element>(
    mk: MicroKernel<T>,
    kc: usize,
    a: ATiles<T>,
    b: BSlivers<T>,
    alpha: T,
    beta: T,
    scratch: &mut [T],
    c_cols: &mut [&mut [T]],
    row: usize,
    rows: usize,
) {
    let mut pieces = scratch.chunks_exact_mut(mk.mr);
    let mut full: [&mut [T]; MAX_NR] = std::array::from_fn(|_| pieces.next().unwrap_or_default());
    // Only C's columns when the kernel has narrower tiles (a B sliver read in place has no more);
    // the portable kernel computes the whole tile from its packed, zero-padded sliver.
    let (a, b) = (ATiles { count: 1, ..a }, BSlivers { count: 1, ..b });
    let width = c_cols.len();
    if width == mk.nr || mk.narrow_widths().is_empty() {
        mk.run(kc, mk.nr, a, b, T::one(), T::zero(), &mut full[..mk.nr], 0);
    } else {
        narrow_rows(mk, kc, a, b, T::one(), T::zero(), &mut full[..width], 0);
    }
    for (c_col, t_col) in c_cols.iter_mut().zip(&full) {
        for (c_ij, &t) in c_col[row..row + rows].iter_mut().zip(t_col.iter()) {
            *c_ij = if beta == T::zero() { alpha * t } else { alpha * t + beta * *c_ij };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{grid, piece_count};

    /// Four pieces per thread for the 2048³ product (1.7·10¹⁰ flops) on 16 threads, two for a
    /// window of generation (2.3·10⁸ flops) on two, three per thread where only that many keep
    /// 10⁸ flops each, never more than the tiles, one on one thread.
    #[test]
    fn pieces_are_two_to_four_per_thread_and_large_enough() {
        let cube = 2.0 * 2048f64.powi(3);
        assert_eq!(piece_count(cube, 16, 256), 64);
        assert_eq!(piece_count(cube, 16, 40), 40);
        assert_eq!(piece_count(2.3e8, 2, 48), 4);
        assert_eq!(piece_count(6.0e8, 2, 48), 6);
        assert_eq!(piece_count(cube, 1, 256), 1);
    }

    /// The cut that reads the least: the 2048³ product's 32 pieces on 16 threads (64 × 256 tiles
    /// of 32×8) as 8 × 4 blocks, not 32 blocks of columns that each pack all of op(A); a tie
    /// between rows and a square goes to rows; a side with too few tiles is not cut past them.
    #[test]
    fn the_grid_cuts_c_into_the_blocks_that_read_the_least() {
        assert_eq!(grid(32, (2048, 64), (2048, 256)), (8, 4));
        // 768×384 in 4 pieces: 2·768 + 2·384 = 4·384 + 768 = 2304 < 4·768 + 384; rows win the tie.
        assert_eq!(grid(4, (768, 24), (384, 48)), (4, 1));
        // The vocabulary's 65 columns are 9 tiles: 16 pieces of a 768-row product.
        assert_eq!(grid(16, (768, 24), (65, 9)), (16, 1));
        // One tile of rows: every piece is a block of columns, whatever the cost says.
        assert_eq!(grid(6, (32, 1), (4000, 500)), (1, 6));
        assert_eq!(grid(1, (5, 1), (5, 1)), (1, 1));
    }
}
