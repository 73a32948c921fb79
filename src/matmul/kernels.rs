//! The table of micro-kernels: for each element type and kernel family, the tile shape, the
//! function, and the cache blocking chosen for it.
//!
//! # The blocking constants and the caches they target
//!
//! The AVX2 constants were swept on an AMD EPYC Zen 3 (per core: 32 KiB L1d, 512 KiB L2; 32 MiB
//! L3 shared), the AVX-512 ones on a Zen 4 (the same but 1 MiB L2), by
//! `cargo bench --features peers --bench ch10_matmul -- sweep` (which sweeps the best kernel of
//! the machine it runs on); the chapter shows the sweep. The rules the sweeps confirmed:
//!
//! - **MR×NR** (registers): a tile whose MR/LANES·NR accumulator vectors fit in the 16 ymm (32
//!   zmm) registers beside the MR/LANES vectors of Ã and one broadcast of B̃, with enough
//!   independent accumulators (12 ymm, 16 zmm) to keep both FMA units busy through their latency.
//!   The AVX-512 tiles are 8 columns wide rather than the 12 the registers would allow: on the
//!   Zen 4 a 24-accumulator 32×12 tile was no faster on squares, and 8 divides the GPT's widths
//!   (32, 64, 128, 384, 512), so those products need no edge tiles.
//! - **KC** (L1): one KC×NR sliver of B̃ is reused by every micro-kernel call of loop 1, so it
//!   must stay in L1 next to the MR×KC sliver of Ã streaming past it.
//! - **MC** (L2): the MC×KC block Ã is re-read once per NR columns (loop 2), so it must stay in
//!   L2.
//! - **NC** (L3): the KC×NC panel B̃ is re-read once per MC rows (loop 3), so it must stay in L3
//!   (shared by both cores and, on this machine, by other jobs: the sweep preferred panels of 1 to
//!   2 MiB).

use super::Element;
use super::caches::machine_blocking;
use super::scalar;
use super::stats::Blocking;
use crate::simd::Kernel;
#[cfg(target_arch = "x86_64")]
use crate::simd::{self, SimdKernel};

/// The largest register tile of any kernel (AVX-512 f32, 32×8): the size of the scratch tile
/// edge tiles are computed into.
pub const MAX_TILE: usize = 32 * 8;
/// The most columns of any kernel's tile (the 6 of AVX2, the 8 of AVX-512, the portable 4).
pub const MAX_NR: usize = 8;

/// The code of a micro-kernel: the portable one, or a SIMD one (which only a CPU-feature token
/// can build, so holding it proves the CPU runs it).
#[derive(Clone, Copy)]
enum Code<T: 'static> {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Simd(SimdKernel<T>),
}

/// One micro-kernel: [`MicroKernel::run`] computes C ← α·Ã·B̃ + β·C on the `mr`×`nr` tile made
/// of rows `row..row+mr` of the first `nr` column slices (β = 0: C not read).
#[derive(Clone, Copy)]
pub struct MicroKernel<T: 'static> {
    /// The family, reported in [`super::ProductStats`].
    pub kind: Kernel,
    /// Tile rows.
    pub mr: usize,
    /// Tile columns.
    pub nr: usize,
    /// The cache blocking of this kernel on this machine (KC tuned, MC and NC from the caches).
    pub blocking: Blocking,
    code: Code<T>,
}

impl<T: Element> MicroKernel<T> {
    /// Whether the kernel can read a B sliver where it is, any step and lane (the SIMD kernels;
    /// the portable kernel, the specification, always works on packed slivers).
    pub fn reads_b_in_place(&self) -> bool {
        !matches!(self.code, Code::Scalar)
    }

    /// The height of the shorter tile the kernel has for the last rows of C, if any (the SIMD
    /// kernels: MR/2, so that a remainder of up to MR/2 rows computes half a tile, not a whole
    /// one; the portable kernel: none).
    pub fn half_height(&self) -> Option<usize> {
        match self.code {
            Code::Scalar => None,
            #[cfg(target_arch = "x86_64")]
            Code::Simd(_) => Some(self.mr / 2),
        }
    }

    /// The narrower widths the kernel also computes directly into C, widest first (the SIMD
    /// kernels: 4, 2 and 1 columns; none for the portable one, whose edge tiles go through a
    /// scratch tile).
    pub fn narrow_widths(&self) -> &'static [usize] {
        match self.code {
            Code::Scalar => &[],
            #[cfg(target_arch = "x86_64")]
            Code::Simd(_) => &simd::NARROW,
        }
    }

    /// One run of tile updates: for each of `b.count` slivers of `cols` columns (NR, or one of
    /// [`MicroKernel::narrow_widths`]), each of `a.count` tiles of `a.rows` rows (MR, or
    /// [`MicroKernel::half_height`]), C ← α·Ã·B̃ + β·C on rows `row + t·a.rows ..` of the
    /// columns `s·cols ..` of `c` (see [`ATiles`] and [`BSlivers`]
    /// for where tile t and sliver s are read). Slivers outside, tiles inside: each sliver of B̃
    /// is used by every tile before the next is read. Each tile's k-sum is the same whether it
    /// runs alone or in a run. The portable kernel takes only packed slivers (A: step MR, B: step
    /// NR and lane 1) and whole tiles. Panics (an internal bug, never reachable from the public
    /// API) if a slice is too short, if the width is not one of the kernel's, or if the portable
    /// kernel is given a sliver that is not packed.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn run(
        &self,
        kc: usize,
        cols: usize,
        a: ATiles<T>,
        b: BSlivers<T>,
        alpha: T,
        beta: T,
        c: &mut [&mut [T]],
        row: usize,
    ) {
        match self.code {
            Code::Scalar => {
                assert_eq!((b.step, b.lane), (self.nr, 1), "the portable kernel reads packed B");
                assert_eq!(cols, self.nr, "the portable kernel computes whole tiles");
                assert_eq!(a.step, self.mr, "the portable kernel reads packed A slivers");
                assert_eq!(a.rows, self.mr, "the portable kernel computes whole tiles");
                assert!(c.len() >= b.count * cols, "fewer columns of C than the run's slivers");
                for (s, c_s) in c.chunks_exact_mut(cols).take(b.count).enumerate() {
                    for t in 0..a.count {
                        let (a_t, b_s) = (&a.data[t * a.next..], &b.data[s * b.next..]);
                        scalar::kernel(kc, a_t, b_s, alpha, beta, c_s, row + t * self.mr);
                    }
                }
            }
            #[cfg(target_arch = "x86_64")]
            Code::Simd(k) => k.run(
                kc,
                (a.rows, cols),
                (a.data, a.step, a.next, a.count),
                (b.data, b.step, b.lane, b.next, b.count),
                b.prefetch_next,
                alpha,
                beta,
                c,
                row,
            ),
        }
    }
}

/// The Ã side of a run of micro-kernel tiles: element (i, p) of tile t is
/// `data[t·next + p·step + i]`, i < `rows`. Packed: step MR, tiles MR·kc apart; MR rows of a
/// column-major op(A) read where they are: step its leading dimension, tiles MR apart.
#[derive(Clone, Copy)]
pub struct ATiles<'s, T> {
    /// Where tile 0 starts.
    pub data: &'s [T],
    /// From one k to the next.
    pub step: usize,
    /// From one tile to the next.
    pub next: usize,
    /// How many tiles.
    pub count: usize,
    /// Rows of each tile: MR, or (SIMD kernels, [`MicroKernel::half_height`]) MR/2 for the last
    /// rows of C.
    pub rows: usize,
}

/// The B̃ side of a run: element (p, j) of sliver s is `data[s·next + p·step + j·lane]`. Packed:
/// step NR, lane 1, slivers NR·kc apart; op(B) read where it is: its strides, slivers NR lanes
/// apart.
#[derive(Clone, Copy)]
pub struct BSlivers<'s, T> {
    /// Where sliver 0 starts.
    pub data: &'s [T],
    /// From one k to the next.
    pub step: usize,
    /// From one column to the next.
    pub lane: usize,
    /// From one sliver to the next.
    pub next: usize,
    /// How many slivers.
    pub count: usize,
    /// Whether the kernel asks for each next sliver while it uses one (read in place by columns,
    /// step 1, and used by one tile only: the sliver comes from memory once).
    pub prefetch_next: bool,
}

/// Portable kernel, both types: 4×4 tiles, sized by the same cache rules but not swept: it is the
/// specification and the fallback, not the fast path.
pub const SCALAR_BLOCKING: Blocking = Blocking { mc: 128, kc: 256, nc: 1032 };

/// AVX2 f32 (16×6 tile). KC = 384: the reused B̃ sliver is 384·6·4 B = 9 KiB, under half the
/// 32 KiB L1d, with the 24 KiB Ã sliver streaming past it (the sweep's plateau runs from 192 to
/// 768 and 384 was a few per cent ahead of 256 in each run). MC = 96: Ã is 96·384·4 B = 144 KiB
/// of the 512 KiB L2 (24 to 144 rows are within a few per cent of each other; beyond, it falls
/// off). NC = 1032: B̃ is 384·1032·4 B ≈ 1.5 MiB of the shared 32 MiB L3; at n = 2048 panels of
/// 1 to 1.5 MiB beat a single 3 MiB one.
pub const AVX2_F32_BLOCKING: Blocking = Blocking { mc: 96, kc: 384, nc: 1032 };

/// AVX2 f64 (8×6 tile). KC = 256: the B̃ sliver is 256·6·8 B = 12 KiB, under half of L1d, Ã
/// sliver 16 KiB (deeper KC was at most 4 % faster in the sweep but would break that rule).
/// MC = 72: Ã is 72·256·8 B = 144 KiB of L2 (the sweep is flat from 48 to 576 rows). NC = 1032:
/// B̃ is 256·1032·8 B ≈ 2 MiB of L3 (1020 and 2040 were the sweep's best at n = 2048, a single
/// 4 MiB panel clearly worse), and A is packed only once for n up to 1032.
pub const AVX2_F64_BLOCKING: Blocking = Blocking { mc: 72, kc: 256, nc: 1032 };

/// AVX-512 f32 (32×8 tile), swept on an AMD EPYC Zen 4 (32 KiB L1d, 1 MiB L2, which runs each
/// 512-bit FMA as two 256-bit halves, so its peak equals AVX2's). KC = 256: the B̃ sliver is
/// 256·8·4 B = 8 KiB, the Ã sliver 32 KiB streams past it from L2 (192 to 768 were within 5 % of
/// the best at n = 1024, 384 a few per cent ahead in one run and behind in another). MC = 192: Ã is
/// 192 KiB of the 1 MiB L2 (24 to 576 rows within 7 %: no cliff in this L2). NC = 1032: B̃ ≈ 1 MiB
/// of L3 (a single 2048-column panel lost 11 %).
pub const AVX512_F32_BLOCKING: Blocking = Blocking { mc: 192, kc: 256, nc: 1032 };

/// AVX-512 f64 (16×8 tile), by the same cache rules on the same Zen 4. KC = 256: B̃ sliver
/// 16 KiB, Ã sliver 32 KiB. MC = 96: Ã 192 KiB. NC = 1032: B̃ ≈ 2 MiB.
pub const AVX512_F64_BLOCKING: Blocking = Blocking { mc: 96, kc: 256, nc: 1032 };

fn scalar_kernel<T: Element>() -> MicroKernel<T> {
    let tile = (scalar::MR, scalar::NR);
    MicroKernel {
        kind: Kernel::Scalar,
        mr: tile.0,
        nr: tile.1,
        blocking: machine_blocking(Kernel::Scalar, SCALAR_BLOCKING, tile, size_of::<T>()),
        code: Code::Scalar,
    }
}

// Edge tiles need room in the scratch tile: every SIMD tile fits in MAX_NR columns and MAX_TILE
// values (checked when compiling).
#[cfg(target_arch = "x86_64")]
const _: () = {
    use simd::*;
    let tiles = [
        (AVX2_F32_MR, AVX2_F32_NR),
        (AVX2_F64_MR, AVX2_F64_NR),
        (AVX512_F32_MR, AVX512_F32_NR),
        (AVX512_F64_MR, AVX512_F64_NR),
    ];
    let mut i = 0;
    while i < tiles.len() {
        let (mr, nr) = tiles[i];
        assert!(nr <= MAX_NR && mr * nr <= MAX_TILE, "edge tiles need room in the scratch tile");
        i += 1;
    }
};

/// A SIMD micro-kernel's entry in the table: its tuned KC, and MC and NC from this machine's
/// caches where they can be read (else the tuned ones; see `caches`).
#[cfg(target_arch = "x86_64")]
fn simd_kernel<T>(
    kind: Kernel,
    (mr, nr): (usize, usize),
    tuned: Blocking,
    code: SimdKernel<T>,
) -> MicroKernel<T> {
    let blocking = machine_blocking(kind, tuned, (mr, nr), size_of::<T>());
    MicroKernel { kind, mr, nr, blocking, code: Code::Simd(code) }
}

/// The register tile (MR, NR) of family `kind` for elements of `elem` bytes (4 or 8), whether or
/// not this CPU runs it; `None` for a SIMD family on another architecture or another size.
pub fn tile_of(kind: Kernel, elem: usize) -> Option<(usize, usize)> {
    match (kind, elem) {
        (Kernel::Scalar, _) => Some((scalar::MR, scalar::NR)),
        #[cfg(target_arch = "x86_64")]
        (Kernel::Avx2, 4) => Some((simd::AVX2_F32_MR, simd::AVX2_F32_NR)),
        #[cfg(target_arch = "x86_64")]
        (Kernel::Avx2, 8) => Some((simd::AVX2_F64_MR, simd::AVX2_F64_NR)),
        #[cfg(target_arch = "x86_64")]
        (Kernel::Avx512, 4) => Some((simd::AVX512_F32_MR, simd::AVX512_F32_NR)),
        #[cfg(target_arch = "x86_64")]
        (Kernel::Avx512, 8) => Some((simd::AVX512_F64_MR, simd::AVX512_F64_NR)),
        _ => None,
    }
}

/// The f32 micro-kernel of family `kind`, if this CPU can run it (the SIMD ones are built from
/// the token the CPU detection returns).
pub fn f32_kernel(kind: Kernel) -> Option<MicroKernel<f32>> {
    match kind {
        Kernel::Scalar => Some(scalar_kernel()),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => simd::f32_micro_kernel(kind).map(|code| {
            let tile = (simd::AVX2_F32_MR, simd::AVX2_F32_NR);
            simd_kernel(kind, tile, AVX2_F32_BLOCKING, code)
        }),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => simd::f32_micro_kernel(kind).map(|code| {
            let tile = (simd::AVX512_F32_MR, simd::AVX512_F32_NR);
            simd_kernel(kind, tile, AVX512_F32_BLOCKING, code)
        }),
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    }
}

/// The f64 micro-kernel of family `kind`, if this CPU can run it.
pub fn f64_kernel(kind: Kernel) -> Option<MicroKernel<f64>> {
    match kind {
        Kernel::Scalar => Some(scalar_kernel()),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => simd::f64_micro_kernel(kind).map(|code| {
            let tile = (simd::AVX2_F64_MR, simd::AVX2_F64_NR);
            simd_kernel(kind, tile, AVX2_F64_BLOCKING, code)
        }),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => simd::f64_micro_kernel(kind).map(|code| {
            let tile = (simd::AVX512_F64_MR, simd::AVX512_F64_NR);
            simd_kernel(kind, tile, AVX512_F64_BLOCKING, code)
        }),
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    }
}
