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
//! A SIMD kernel skips packing B̃ when B's rows are close enough (`in_place_b`): it reads each
//! sliver of op(B) where it lies, a partial last sliver included (its narrower tiles read only the
//! columns that exist).
//!
//! With several threads, C is cut into blocks of rows and columns and each thread runs these
//! loops on the blocks it takes (see [`gemm`] and [`grid`]). Everything here is safe code; the
//! only `unsafe` lives behind the micro-kernel's safe signature.

use super::Element;
use super::dispatch::{Blocking, Kernel, ProductStats};
use super::kernels::{MAX_NR, MAX_TILE, MicroKernel};
use super::pack::{Operand, pack_a, pack_b, prefetch};

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
    // Threads by the work: a second thread pays from `min_parallel_flops` on, when each of the
    // two has half of it; every further thread is held to the same share, so a product of f
    // flops uses at most ⌊2f / min_parallel_flops⌋ threads (see PARALLEL_MIN_FLOPS).
    let by_work = (2.0 * flops / plan.min_parallel_flops).floor();
    let wanted = if flops < plan.min_parallel_flops {
        1
    } else {
        plan.threads.max(1).min(by_work as usize).max(1)
    };
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
                    // loop 2: one KC×NR sliver of B̃, against every sliver of Ã.
                    for jr in (0..nc).step_by(nr) {
                        let cols = nr.min(nc - jr);
                        let b_sliver = if jr < b_packed_from {
                            let b = self.b;
                            if b.rs == 1 && mc <= mr && jr + 2 * nr <= b_packed_from {
                                // The next sliver's NR column runs, asked for while this one is
                                // used (packing used to fetch them this way): a product of one
                                // sliver of A, such as a cached generation step, streams B from
                                // memory once, faster with the fetch started early. With more
                                // slivers of A the sliver is reused from L1 and the requests
                                // only cost issue slots (3 % of a 64³ product).
                                for j in jr + nr..jr + 2 * nr {
                                    prefetch(&b.data[pc + (piece.j0 + jc + j) * b.cs..][..kc]);
                                }
                            }
                            Sliver {
                                data: &b.data[pc * b.rs + (piece.j0 + jc + jr) * b.cs..],
                                step: b.rs,
                                lane: b.cs,
                            }
                        } else {
                            let q = (jr - b_packed_from) / nr;
                            Sliver {
                                data: &b_buf[q * nr * kc..(q + 1) * nr * kc],
                                step: nr,
                                lane: 1,
                            }
                        };
                        let c_cols = &mut piece.columns[jc + jr..jc + jr + cols];
                        // loop 1: one MR×KC sliver of Ã, one micro-kernel call.
                        for ir in (0..mc).step_by(mr) {
                            let rows = mr.min(mc - ir);
                            let a_sliver = if ir < a_packed_from {
                                let a = self.a;
                                (&a.data[piece.i0 + ic + ir + pc * a.cs..], a.cs)
                            } else {
                                let q = ir - a_packed_from;
                                (&a_buf[q * kc..(q + mr) * kc], mr)
                            };
                            if rows == mr && (cols == nr || !mk.narrow_widths().is_empty()) {
                                let (alpha, row) = (self.alpha, ic + ir);
                                full_rows(mk, kc, a_sliver, b_sliver, alpha, beta, c_cols, row);
                            } else {
                                edge_tile(
                                    mk,
                                    kc,
                                    a_sliver,
                                    b_sliver,
                                    self.alpha,
                                    beta,
                                    scratch,
                                    c_cols,
                                    ic + ir,
                                    rows,
                                );
                            }
                            tiles += 1;
                        }
                    }
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

/// A B sliver as the micro-kernel reads it: element (p, j) is `data[p·step + j·lane]`. A packed
/// sliver has step NR and lane 1.
#[derive(Clone, Copy)]
struct Sliver<'s, T> {
    data: &'s [T],
    step: usize,
    lane: usize,
}

/// A tile of MR full rows and the columns of `c` (NR, or fewer at the last columns of C): one
/// micro-kernel call, or for fewer columns one call of each narrower width in the binary digits of
/// the count (a SIMD kernel's 4, 2 and 1), straight into C. Only the columns that exist are
/// computed: the 65 columns of the GPT's vocabulary are 8 tiles of 8 and one of 1, where a full
/// tile through the scratch tile computed 72.
#[allow(clippy::too_many_arguments)]
fn full_rows<T: Element>(
    mk: MicroKernel<T>,
    kc: usize,
    a: (&[T], usize),
    b: Sliver<T>,
    alpha: T,
    beta: T,
    c: &mut [&mut [T]],
    row: usize,
) {
    let cols = c.len();
    if cols == mk.nr {
        // A full tile: one call; the kernel picks the variant compiled for B's layout.
        return mk.run(kc, mk.nr, a, b.data, (b.step, b.lane), alpha, beta, c, row);
    }
    let mut j = 0;
    for &width in mk.narrow_widths() {
        while cols - j >= width {
            let b_j = &b.data[j * b.lane..];
            mk.run(kc, width, a, b_j, (b.step, b.lane), alpha, beta, &mut c[j..j + width], row);
            j += width;
        }
    }
    assert_eq!(j, cols, "the narrow widths end with 1, so they cover every remainder");
}

/// An edge tile with fewer than MR rows left in C (or, for the portable kernel, fewer than NR
/// columns): the tile is computed into `scratch` and only its part inside C is kept, so the
/// micro-kernel never needs a slow path.
#[allow(clippy::too_many_arguments)]
fn edge_tile<T: Element>(
    mk: MicroKernel<T>,
    kc: usize,
    a_sliver: (&[T], usize),
    b_sliver: Sliver<T>,
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
    let width = if mk.narrow_widths().is_empty() { mk.nr } else { c_cols.len() };
    full_rows(mk, kc, a_sliver, b_sliver, T::one(), T::zero(), &mut full[..width], 0);
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
