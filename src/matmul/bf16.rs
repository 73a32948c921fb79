//! The bf16 product: C ← α·op(A)·op(B) + β·C with A and B stored as bf16 (16-bit patterns,
//! `u16`) and C, and every sum, in f32. Chapter 11 teaches it
//! ([`chapters/ch11_precision.md`](../../chapters/ch11_precision.md), section 7).
//!
//! A bf16 value is the upper half of an f32, so widening it is exact: `f32::from_bits(h << 16)`
//! ([`widen_bf16`]). Two ways to multiply, the same five loops around each ([`Bf16Method`]):
//!
//! - **Widened** (every CPU): packing widens the bf16 values of each block to f32, and chapter
//!   10's f32 micro-kernel multiplies the packed blocks with the f32 product's blocking. For
//!   α = 1 the result is, bit for bit, the f32 product of the widened matrices (the same packed
//!   values, the same kernel, the same cut of k); only the operands in memory are half as large.
//! - **Pairs** (AVX512-BF16, where the CPU has it): VDPBF16PS multiplies *pairs* of bf16 values,
//!   so packing interleaves k in pairs: for pair q of a sliver, Ã holds row i's values at
//!   k = 2q and 2q + 1 side by side, B̃ column j's. Each f32 lane then takes both products of a
//!   pair in one instruction, twice the multiply-adds of an f32 FMA. The instruction adds the
//!   pair's second product to the accumulator first, then the first ([`pair_step`]), treats
//!   subnormal inputs as zero and flushes subnormal results to zero, so it cannot match the
//!   widened path bit for bit; chapter 11 derives the bound both paths keep against the exact
//!   product of the bf16 inputs. [`Bf16Path::PAIRS_PORTABLE`] runs the same packing with the
//!   instruction written out in scalar Rust (the specification, slow), so the pair layout and the
//!   bound are tested on every CPU.
//!
//! Threads as for the f32 product: from [`PARALLEL_MIN_FLOPS`] on, C is cut into runs of whole
//! NR-column slivers, two per thread, on at most ⌊2f/`PARALLEL_MIN_FLOPS`⌋ threads for f flops;
//! every entry is computed the same way whichever thread takes its run, so the bits do not depend
//! on the thread count.

use super::blocked::{PARALLEL_MIN_FLOPS, balanced, threads_by_work};
use super::kernels::{ATiles, BSlivers, MicroKernel, f32_kernel};
use super::pack::{Operand, pack_a};
use super::stats::Blocking;
use super::{Op, check_shapes, unavailable};
use crate::error::{Result, invalid};
use crate::simd::{Kernel, active_kernel};
use nalgebra::DMatrix;

/// Rows of the pair tile (two vectors of 16 f32 lanes).
const PAIR_MR: usize = 32;
/// Columns of the pair tile.
const PAIR_NR: usize = 8;
// The SIMD kernel's tile is this one.
#[cfg(target_arch = "x86_64")]
const _: () = assert!(
    PAIR_MR == crate::simd::BF16_PAIR_MR && PAIR_NR == crate::simd::BF16_PAIR_NR,
    "the packing and the SIMD pair kernel share one tile"
);

/// The blocking of the pair paths. KC = 512 values of k (256 pairs): a B̃ sliver is
/// 512·8·2 B = 8 KiB and an Ã sliver 32 KiB, the bytes of the AVX-512 f32 kernel's KC = 256
/// (`AVX512_F32_BLOCKING`); MC = 192 rows: Ã is 192 KiB; NC = 1032: B̃ about 1 MiB. Not swept:
/// no CPU with AVX512-BF16 has been measured. KC decides the order of the sum, so the portable and
/// the SIMD pair paths share it.
const PAIR_BLOCKING: Blocking = Blocking { mc: 192, kc: 512, nc: 1032 };

/// How a bf16 product multiplies (see the module documentation); the instruction set is the
/// [`Kernel`] of a [`Bf16Path`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bf16Method {
    /// bf16 widened to f32 in packing, then the f32 micro-kernel of the path's kernel.
    Widened,
    /// Pairs of k per multiply: VDPBF16PS under [`Kernel::Avx512`] (CPUs with AVX512-BF16: AMD
    /// Zen 4 and later, Intel Cooper Lake and Sapphire Rapids and later), the instruction written
    /// out in scalar Rust under [`Kernel::Scalar`] (every CPU, slow: the specification the SIMD
    /// pair tile is tested beside).
    Pairs,
}

/// A bf16 product's way of multiplying, the kernel it runs on and the threads it may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bf16Path {
    /// Widened to f32, or pairs of k.
    pub method: Bf16Method,
    /// The instruction set ([`crate::simd`] says which this CPU runs).
    pub kernel: Kernel,
    /// The most threads a large product may use (`None`: the process's,
    /// [`crate::threads::default_threads`]). Any count gives the same bits.
    pub threads: Option<usize>,
}

impl Bf16Path {
    /// The pairs, VDPBF16PS written out in scalar Rust: every CPU.
    pub const PAIRS_PORTABLE: Bf16Path =
        Bf16Path { method: Bf16Method::Pairs, kernel: Kernel::Scalar, threads: None };
    /// The pairs with VDPBF16PS: CPUs with AVX512-BF16.
    pub const PAIRS_AVX512: Bf16Path =
        Bf16Path { method: Bf16Method::Pairs, kernel: Kernel::Avx512, threads: None };

    /// Widened to f32, then the f32 micro-kernel `kernel`.
    pub fn widened(kernel: Kernel) -> Bf16Path {
        Bf16Path { method: Bf16Method::Widened, kernel, threads: None }
    }

    /// This path on at most `threads` threads (at least 1).
    pub fn on_threads(self, threads: usize) -> Bf16Path {
        Bf16Path { threads: Some(threads.max(1)), ..self }
    }

    /// The name tables print: `widened` (`widened-avx2` … when the kernel is not the active
    /// one), `pairs-portable`, `pairs-avx512bf16`.
    pub fn name(self) -> String {
        match (self.method, self.kernel) {
            (Bf16Method::Widened, k) if k == active_kernel() => "widened".into(),
            (Bf16Method::Widened, k) => format!("widened-{k}"),
            (Bf16Method::Pairs, Kernel::Scalar) => "pairs-portable".into(),
            (Bf16Method::Pairs, Kernel::Avx512) => "pairs-avx512bf16".into(),
            (Bf16Method::Pairs, k) => format!("pairs-{k}"),
        }
    }

    /// Whether this CPU runs the path: the widened one wherever its kernel runs, the pairs
    /// portably everywhere and with VDPBF16PS where the CPU has AVX512-BF16 ([`crate::simd::cpu`]);
    /// the pairs have no AVX2 tile.
    pub fn is_available(self) -> bool {
        match (self.method, self.kernel) {
            (Bf16Method::Widened, k) => k.is_available(),
            (Bf16Method::Pairs, Kernel::Scalar) => true,
            (Bf16Method::Pairs, Kernel::Avx512) => crate::simd::cpu().avx512_bf16,
            (Bf16Method::Pairs, Kernel::Avx2) => false,
        }
    }
}

/// The paths this CPU runs: widened on the active kernel, the portable pairs, and the AVX512-BF16
/// pairs where the CPU has them.
pub fn available_bf16_paths() -> Vec<Bf16Path> {
    [Bf16Path::widened(active_kernel()), Bf16Path::PAIRS_PORTABLE, Bf16Path::PAIRS_AVX512]
        .into_iter()
        .filter(|p| p.is_available())
        .collect()
}

/// The fastest path for [`gemm_bf16`] here: the AVX512-BF16 pairs where the CPU has them and
/// the active f32 kernel is the AVX-512 one (forcing another kernel, e.g.
/// `LLM_WORKBOOK_KERNEL=avx2`, forces the widened path too), else widened on the active kernel.
pub fn best_bf16_path() -> Bf16Path {
    let kernel = active_kernel();
    let pairs = Bf16Path { method: Bf16Method::Pairs, kernel, threads: None };
    if kernel == Kernel::Avx512 && pairs.is_available() { pairs } else { Bf16Path::widened(kernel) }
}

/// The f32 a bf16 pattern stands for: its 16 bits followed by 16 zeros. Exact.
#[inline]
pub fn widen_bf16(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// One lane of VDPBF16PS as Intel's manual states it: the accumulator plus the pair's second
/// product, then plus the first, each a fused multiply-add in f32 rounded to nearest even, with
/// subnormal inputs (the accumulator's too) read as zero and a subnormal result written as zero:
///
/// ```text
/// acc ← ftz(daz(a₁)·daz(b₁) + daz(acc));   acc ← ftz(daz(a₀)·daz(b₀) + acc)
/// ```
///
/// A product of two bf16 values (8 significant bits each) is exact in f32 unless it underflows,
/// so each step rounds once, at the addition.
fn pair_step(acc: f32, a: [u16; 2], b: [u16; 2]) -> f32 {
    let to_zero = |x: f32| if x.is_subnormal() { 0.0f32.copysign(x) } else { x };
    let input = |h: u16| to_zero(widen_bf16(h));
    let acc = to_zero(input(a[1]).mul_add(input(b[1]), to_zero(acc)));
    to_zero(input(a[0]).mul_add(input(b[0]), acc))
}

/// C ← α·op(A)·op(B) + β·C for A and B holding bf16 patterns, C in f32, by `path` (the fastest
/// this CPU runs: [`best_bf16_path`]). op(A) is m×k, op(B) k×n, C m×n; β = 0 overwrites C (NaN in
/// C is ignored). Errors, naming the argument, when the shapes do not chain or the CPU lacks the
/// path.
#[allow(clippy::too_many_arguments)]
pub fn gemm_bf16(
    path: Bf16Path,
    alpha: f32,
    a: &DMatrix<u16>,
    ta: Op,
    b: &DMatrix<u16>,
    tb: Op,
    beta: f32,
    c: &mut DMatrix<f32>,
) -> Result<()> {
    const OP: &str = "gemm_bf16";
    check_shapes(OP, a, ta, b, tb, c)?;
    let ((m, k), n) = (ta.shape(a), c.ncols());
    let a = Operand::new(a.as_slice(), a.nrows(), ta == Op::T);
    let b = Operand::new(b.as_slice(), b.nrows(), tb == Op::T);
    let c = c.as_mut_slice();
    let allowed = path.threads.unwrap_or_else(crate::threads::default_threads);
    match (path.method, path.kernel) {
        (Bf16Method::Widened, kind) => {
            let kernel = f32_kernel(kind).ok_or_else(|| unavailable(OP, kind))?;
            share_columns(
                (&Widened { kernel }, allowed),
                kernel.blocking,
                alpha,
                a,
                b,
                beta,
                c,
                (m, n, k),
            );
        }
        (Bf16Method::Pairs, Kernel::Scalar) => share_columns(
            (&Pairs { simd: None }, allowed),
            PAIR_BLOCKING,
            alpha,
            a,
            b,
            beta,
            c,
            (m, n, k),
        ),
        (Bf16Method::Pairs, kind) => {
            let simd = crate::simd::bf16_pair_tile(kind).ok_or_else(|| {
                invalid(OP, "path", format!("{} needs a CPU with AVX512-BF16", path.name()))
            })?;
            let pairs = Pairs { simd: Some(simd) };
            share_columns((&pairs, allowed), PAIR_BLOCKING, alpha, a, b, beta, c, (m, n, k));
        }
    }
    Ok(())
}

/// What the five loops need from a path: its tile, how it packs a sliver, how it multiplies one.
trait Tiles {
    /// What a packed sliver holds: f32 (widened) or bf16 patterns (pairs).
    type Packed: Copy + Default;
    /// The register tile, rows × columns.
    fn tile(&self) -> (usize, usize);
    /// Values of one packed sliver of `width` lines over depth `kc`.
    fn sliver_len(&self, width: usize, kc: usize) -> usize;
    /// Packs lines `i0..i0 + lines` of op(X), columns `p0..p0 + kc`, as slivers of `width`
    /// lines, zero past the last line (and, for pairs, past k).
    #[allow(clippy::too_many_arguments)]
    fn pack(
        &self,
        dst: &mut [Self::Packed],
        x: Operand<u16>,
        i0: usize,
        lines: usize,
        p0: usize,
        kc: usize,
        width: usize,
    );
    /// C ← α·Ã·B̃ + β·C on the whole tile at rows `row..` of the first NR slices of `c`.
    #[allow(clippy::too_many_arguments)]
    fn multiply(
        &self,
        kc: usize,
        a: &[Self::Packed],
        b: &[Self::Packed],
        alpha: f32,
        beta: f32,
        c: &mut [&mut [f32]],
        row: usize,
    );
}

/// The widened path: f32 slivers (the layout of chapter 10's packing) and the f32 kernel.
struct Widened {
    kernel: MicroKernel<f32>,
}

impl Tiles for Widened {
    type Packed = f32;
    fn tile(&self) -> (usize, usize) {
        (self.kernel.mr, self.kernel.nr)
    }
    fn sliver_len(&self, width: usize, kc: usize) -> usize {
        width * kc
    }
    fn pack(
        &self,
        dst: &mut [f32],
        x: Operand<u16>,
        i0: usize,
        lines: usize,
        p0: usize,
        kc: usize,
        width: usize,
    ) {
        // Lines widened row-major before the transposing pack (one buffer for every sliver).
        let mut block = Vec::new();
        // Sliver s, step p, line i: dst[s·kc·width + p·width + i] = op(X)[i0 + s·width + i,
        // p0 + p].
        for (s, sliver) in dst.chunks_exact_mut(kc * width).take(lines.div_ceil(width)).enumerate()
        {
            let first = i0 + s * width;
            let here = width.min(i0 + lines - first);
            if x.rs == 1 {
                // Column p of op(X) holds the sliver's lines side by side: one run per step.
                for (p, step) in sliver.chunks_exact_mut(width).enumerate() {
                    let run = &x.data[first + (p0 + p) * x.cs..][..here];
                    for (v, &h) in step.iter_mut().zip(run) {
                        *v = widen_bf16(h);
                    }
                    step[here..].fill(0.0);
                }
            } else {
                // Line i of op(X) holds its kc values side by side (an operand has one stride 1):
                // widened line by line into a row-major block, which chapter 10's packing then
                // transposes into the sliver (with the kernel's SIMD transposes).
                block.clear();
                for i in 0..here {
                    let line = &x.data[(first + i) * x.rs + p0..][..kc];
                    block.extend(line.iter().map(|&h| widen_bf16(h)));
                }
                let rows = Operand { data: &block[..], rs: kc, cs: 1 };
                let simd = self.kernel.kind != Kernel::Scalar;
                pack_a(sliver, rows, 0, here, 0, kc, width, simd);
            }
        }
    }
    fn multiply(
        &self,
        kc: usize,
        a: &[f32],
        b: &[f32],
        alpha: f32,
        beta: f32,
        c: &mut [&mut [f32]],
        row: usize,
    ) {
        let (mr, nr) = self.tile();
        // One packed tile: one A sliver, one B sliver.
        let a = ATiles { data: a, step: mr, next: 0, count: 1, rows: mr };
        let b = BSlivers { data: b, step: nr, lane: 1, next: 0, count: 1, prefetch_next: false };
        self.kernel.run(kc, nr, a, b, alpha, beta, c, row);
    }
}

/// The pair paths: slivers of pairs of k (bf16 patterns), the SIMD tile where `simd` is given.
struct Pairs {
    simd: Option<crate::simd::PairTile>,
}

impl Tiles for Pairs {
    type Packed = u16;
    fn tile(&self) -> (usize, usize) {
        (PAIR_MR, PAIR_NR)
    }
    fn sliver_len(&self, width: usize, kc: usize) -> usize {
        kc.div_ceil(2) * 2 * width
    }
    fn pack(
        &self,
        dst: &mut [u16],
        x: Operand<u16>,
        i0: usize,
        lines: usize,
        p0: usize,
        kc: usize,
        width: usize,
    ) {
        // Sliver s, pair q, line i, half e: dst[s·len + q·2·width + 2i + e] = op(X)[i0 + s·width
        // + i, p0 + 2q + e], zero past the lines and past k (a zero adds an exact 0).
        let len = self.sliver_len(width, kc);
        for (s, sliver) in dst.chunks_exact_mut(len).take(lines.div_ceil(width)).enumerate() {
            let first = i0 + s * width;
            let here = width.min(i0 + lines - first);
            if here < width || kc % 2 == 1 {
                sliver.fill(0);
            }
            if x.rs == 1 {
                // Column p of op(X) holds the sliver's lines side by side.
                for p in 0..kc {
                    let run = &x.data[first + (p0 + p) * x.cs..][..here];
                    let pair = &mut sliver[(p / 2) * 2 * width..][..2 * width];
                    for (halves, &h) in pair.chunks_exact_mut(2).zip(run) {
                        halves[p % 2] = h;
                    }
                }
            } else {
                // Line i of op(X) holds its kc values side by side (an operand has one stride 1).
                for i in 0..here {
                    let line = &x.data[(first + i) * x.rs + p0..][..kc];
                    for (pair, values) in sliver.chunks_exact_mut(2 * width).zip(line.chunks(2)) {
                        pair[2 * i..2 * i + values.len()].copy_from_slice(values);
                    }
                }
            }
        }
    }
    fn multiply(
        &self,
        kc: usize,
        a: &[u16],
        b: &[u16],
        alpha: f32,
        beta: f32,
        c: &mut [&mut [f32]],
        row: usize,
    ) {
        let pairs = kc.div_ceil(2);
        #[cfg(target_arch = "x86_64")]
        if let Some(tile) = self.simd {
            return tile.run(pairs, a, b, alpha, beta, c, row);
        }
        pair_tile_portable(pairs, a, b, alpha, beta, c, row);
    }
}

/// The pair tile in scalar Rust, lane by lane as VDPBF16PS computes it ([`pair_step`]), and the
/// write-back of the SIMD tile: α·acc for β = 0, else α·acc + β·C with one rounding for the
/// multiply-add.
fn pair_tile_portable(
    pairs: usize,
    a: &[u16],
    b: &[u16],
    alpha: f32,
    beta: f32,
    c: &mut [&mut [f32]],
    row: usize,
) {
    let (a, b) = (&a[..pairs * 2 * PAIR_MR], &b[..pairs * 2 * PAIR_NR]);
    for (j, column) in c[..PAIR_NR].iter_mut().enumerate() {
        for (i, c_ij) in column[row..row + PAIR_MR].iter_mut().enumerate() {
            let acc = a.chunks_exact(2 * PAIR_MR).zip(b.chunks_exact(2 * PAIR_NR)).fold(
                0.0,
                |acc, (a_q, b_q)| {
                    pair_step(acc, [a_q[2 * i], a_q[2 * i + 1]], [b_q[2 * j], b_q[2 * j + 1]])
                },
            );
            *c_ij = if beta == 0.0 { alpha * acc } else { alpha.mul_add(acc, beta * *c_ij) };
        }
    }
}

/// [`five_loops`] on runs of C's columns shared between at most `allowed` threads (see the module
/// documentation); one thread below [`PARALLEL_MIN_FLOPS`], when there is nothing to multiply, or
/// for one sliver.
#[allow(clippy::too_many_arguments)]
fn share_columns<K: Tiles + Sync>(
    (path, allowed): (&K, usize),
    blocking: Blocking,
    alpha: f32,
    a: Operand<u16>,
    b: Operand<u16>,
    beta: f32,
    c: &mut [f32],
    (m, n, k): (usize, usize, usize),
) {
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    let slivers = n.div_ceil(path.tile().1);
    let threads = threads_by_work(flops, allowed, PARALLEL_MIN_FLOPS).min(slivers).max(1);
    if m == 0 || alpha == 0.0 || threads == 1 {
        return five_loops(path, blocking, alpha, a, b, beta, c, (m, n, k));
    }
    let columns_per_piece = slivers.div_ceil(2 * threads) * path.tile().1;
    let pieces: Vec<(usize, &mut [f32])> = c[..m * n]
        .chunks_mut(columns_per_piece * m)
        .enumerate()
        .map(|(q, run)| (q * columns_per_piece, run))
        .collect();
    crate::threads::share_pieces(&mut vec![(); threads], pieces, |(), (j0, run)| {
        // op(B)'s columns j0 … of this run: the same strides, the storage from column j0 on.
        let b_run = Operand { data: &b.data[j0 * b.cs..], rs: b.rs, cs: b.cs };
        five_loops(path, blocking, alpha, a, b_run, beta, run, (m, run.len() / m, k));
    });
}

/// The five loops of chapter 10 on one thread: NC columns of op(B) at a time, KC of k, MC rows
/// of op(A), then NR-column and MR-row slivers. A tile wholly inside C is multiplied in place; an
/// edge tile into a scratch tile with α = 1, β = 0, of which the part inside C is kept as
/// α·t + β·C (as the f32 product does). The first KC step applies β, the later ones add (β = 1).
#[allow(clippy::too_many_arguments)]
fn five_loops<K: Tiles>(
    path: &K,
    blocking: Blocking,
    alpha: f32,
    a: Operand<u16>,
    b: Operand<u16>,
    beta: f32,
    c: &mut [f32],
    (m, n, k): (usize, usize, usize),
) {
    if m == 0 || n == 0 {
        return;
    }
    let mut columns: Vec<&mut [f32]> = c.chunks_mut(m).take(n).collect();
    if k == 0 || alpha == 0.0 {
        for v in columns.iter_mut().flat_map(|c| c.iter_mut()) {
            *v = if beta == 0.0 { 0.0 } else { beta * *v };
        }
        return;
    }
    let (mr, nr) = path.tile();
    // The f32 product's cut of k (equal steps no larger than KC), so the widened path sums in its
    // order.
    let kc_max = balanced(k, blocking.kc, 1);
    let nc_max = balanced(n, blocking.nc, nr);
    let mc_max = blocking.mc.clamp(1, m).next_multiple_of(mr);
    let mut a_buf = vec![K::Packed::default(); path.sliver_len(mr, kc_max) * (mc_max / mr)];
    let mut b_buf = vec![K::Packed::default(); path.sliver_len(nr, kc_max) * nc_max.div_ceil(nr)];
    let mut scratch = vec![0.0f32; mr * nr];
    for jc in (0..n).step_by(nc_max) {
        let nc = nc_max.min(n - jc);
        for pc in (0..k).step_by(kc_max) {
            let kc = kc_max.min(k - pc);
            let beta_step = if pc == 0 { beta } else { 1.0 };
            let (a_len, b_len) = (path.sliver_len(mr, kc), path.sliver_len(nr, kc));
            path.pack(&mut b_buf, b.transposed(), jc, nc, pc, kc, nr);
            for ic in (0..m).step_by(mc_max) {
                let mc = mc_max.min(m - ic);
                path.pack(&mut a_buf, a, ic, mc, pc, kc, mr);
                for (s_b, b_sliver) in b_buf.chunks_exact(b_len).take(nc.div_ceil(nr)).enumerate() {
                    let j0 = jc + s_b * nr;
                    let cols = nr.min(n - j0);
                    let c_cols = &mut columns[j0..j0 + cols];
                    for (s_a, a_sliver) in
                        a_buf.chunks_exact(a_len).take(mc.div_ceil(mr)).enumerate()
                    {
                        let i0 = ic + s_a * mr;
                        let rows = mr.min(m - i0);
                        if rows == mr && cols == nr {
                            path.multiply(kc, a_sliver, b_sliver, alpha, beta_step, c_cols, i0);
                            continue;
                        }
                        let mut tile: Vec<&mut [f32]> = scratch.chunks_exact_mut(mr).collect();
                        path.multiply(kc, a_sliver, b_sliver, 1.0, 0.0, &mut tile, 0);
                        for (c_col, t_col) in c_cols.iter_mut().zip(&tile) {
                            for (c_ij, &t) in c_col[i0..i0 + rows].iter_mut().zip(t_col.iter()) {
                                *c_ij = if beta_step == 0.0 {
                                    alpha * t
                                } else {
                                    alpha * t + beta_step * *c_ij
                                };
                            }
                        }
                    }
                }
            }
        }
    }
}
