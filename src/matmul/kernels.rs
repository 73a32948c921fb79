//! The table of micro-kernels: for each element type and kernel family, the tile shape, the
//! function, and the cache blocking chosen for it.
//!
//! # The blocking constants and the caches they target
//!
//! The AVX2 constants were swept on an AMD EPYC Zen 3 (per core: 32 KiB L1d, 512 KiB L2; 32 MiB
//! L3 shared), the AVX-512 ones on a Zen 4 (the same but 1 MiB L2), by
//! `cargo bench --bench ch10_matmul -- sweep` (which sweeps the best kernel of the machine
//! it runs on); the chapter shows the sweep. The rules the sweeps confirmed:
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
#[cfg(target_arch = "x86_64")]
use super::blocked::{MAX_NR, MAX_TILE};
use super::dispatch::{Blocking, Kernel};
use super::scalar;

/// The signature every micro-kernel has: `(kc, Ã sliver, B̃ sliver, α, β, columns of C, row)`.
pub type TileFn<T> = fn(usize, &[T], &[T], T, T, &mut [&mut [T]], usize);

/// The variant of a SIMD micro-kernel that reads B where it is: `(kc, packed Ã sliver, B, B step,
/// B lane, α, β, columns of C, row)`, element (p, j) of the B sliver being `b[p·b_step +
/// j·b_lane]`,
/// so B needs no packing whatever its layout.
pub type InPlaceFn<T> = fn(usize, &[T], &[T], usize, usize, T, T, &mut [&mut [T]], usize);

/// One micro-kernel: `run(kc, Ã sliver, B̃ sliver, α, β, columns, row)` computes
/// C ← α·Ã·B̃ + β·C on the `mr`×`nr` tile made of rows `row..row+mr` of the first `nr` column
/// slices (β = 0: C not read). `run` is a safe function that checks its slices and the CPU itself.
pub struct MicroKernel<T: 'static> {
    /// The family, reported in [`super::ProductStats`].
    pub kind: Kernel,
    /// Tile rows.
    pub mr: usize,
    /// Tile columns.
    pub nr: usize,
    /// The cache blocking chosen for this kernel.
    pub blocking: Blocking,
    /// The tile update.
    pub run: TileFn<T>,
    /// The tile update with B read in place (the SIMD kernels; the portable kernel, the
    /// specification, always works on packed slivers).
    pub in_place: Option<InPlaceFn<T>>,
}

impl<T> Clone for MicroKernel<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for MicroKernel<T> {}

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
    MicroKernel {
        kind: Kernel::Scalar,
        mr: scalar::MR,
        nr: scalar::NR,
        blocking: SCALAR_BLOCKING,
        run: scalar::kernel::<T>,
        in_place: None,
    }
}

/// Writes the lookup of one element type: `$kernel(kind)`, its micro-kernel of family `kind` if
/// this CPU can run it, and `$probe(kind, iterations)`, its multiply-add throughput loop. The two
/// types differ only in the names filled in here.
macro_rules! kernel_table {
    (
        $t:ty, kernel = $kernel:ident, probe = $probe:ident,
        avx2 = ($a2_mr:ident, $a2_nr:ident, $a2_run:ident, $a2_in_place:ident, $a2_blocking:ident,
            $a2_probe:ident),
        avx512 = ($a5_mr:ident, $a5_nr:ident, $a5_run:ident, $a5_in_place:ident,
            $a5_blocking:ident, $a5_probe:ident) $(,)?
    ) => {
        #[doc = concat!("The ", stringify!($t),
                                    " micro-kernel of family `kind`, if this CPU can run it.")]
        pub fn $kernel(kind: Kernel) -> Option<MicroKernel<$t>> {
            if !kind.is_available() {
                return None;
            }
            match kind {
                Kernel::Scalar => Some(scalar_kernel()),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => {
                    use super::simd::{$a2_in_place, $a2_mr, $a2_nr, $a2_run};
                    const {
                        assert!(
                            $a2_nr <= MAX_NR && $a2_mr * $a2_nr <= MAX_TILE,
                            "edge tiles need room in the scratch tile"
                        )
                    };
                    Some(MicroKernel {
                        kind,
                        mr: $a2_mr,
                        nr: $a2_nr,
                        blocking: $a2_blocking,
                        run: $a2_run,
                        in_place: Some($a2_in_place),
                    })
                }
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512 => {
                    use super::simd::{$a5_in_place, $a5_mr, $a5_nr, $a5_run};
                    const {
                        assert!(
                            $a5_nr <= MAX_NR && $a5_mr * $a5_nr <= MAX_TILE,
                            "edge tiles need room in the scratch tile"
                        )
                    };
                    Some(MicroKernel {
                        kind,
                        mr: $a5_mr,
                        nr: $a5_nr,
                        blocking: $a5_blocking,
                        run: $a5_run,
                        in_place: Some($a5_in_place),
                    })
                }
                #[cfg(not(target_arch = "x86_64"))]
                _ => None,
            }
        }

        #[doc = concat!("Runs the multiply-add throughput loop of family `kind` in ",
                                    stringify!($t), ": (flops, checksum).")]
        pub fn $probe(kind: Kernel, iterations: u64) -> Option<(u64, f64)> {
            match kind {
                Kernel::Scalar => Some(scalar_probe::<$t>(iterations)),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => super::simd::$a2_probe(iterations),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512 => super::simd::$a5_probe(iterations),
                #[cfg(not(target_arch = "x86_64"))]
                _ => None,
            }
        }
    };
}

kernel_table! {
    f32, kernel = f32_kernel, probe = f32_probe,
    avx2 = (AVX2_F32_MR, AVX2_F32_NR, avx2_f32, avx2_f32_in_place, AVX2_F32_BLOCKING,
        probe_avx2_f32),
    avx512 = (AVX512_F32_MR, AVX512_F32_NR, avx512_f32, avx512_f32_in_place, AVX512_F32_BLOCKING,
        probe_avx512_f32),
}

kernel_table! {
    f64, kernel = f64_kernel, probe = f64_probe,
    avx2 = (AVX2_F64_MR, AVX2_F64_NR, avx2_f64, avx2_f64_in_place, AVX2_F64_BLOCKING,
        probe_avx2_f64),
    avx512 = (AVX512_F64_MR, AVX512_F64_NR, avx512_f64, avx512_f64_in_place, AVX512_F64_BLOCKING,
        probe_avx512_f64),
}

/// The portable throughput probe: 12 independent multiply-then-add chains (not fused).
fn scalar_probe<T: Element + num_traits::Float>(iterations: u64) -> (u64, f64) {
    let x = std::hint::black_box(T::from(0.999_99).unwrap_or_else(T::one));
    let y = std::hint::black_box(T::from(1.0e-4).unwrap_or_else(T::zero));
    let mut acc = [std::hint::black_box(T::one()); 12];
    for _ in 0..iterations {
        for a in acc.iter_mut() {
            *a = *a * x + y;
        }
    }
    let sum = acc.iter().fold(T::zero(), |s, &a| s + a);
    (iterations * 12 * 2, sum.to_f64().unwrap_or(f64::NAN))
}
