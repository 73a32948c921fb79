//! The table of micro-kernels: for each element type and kernel family, the tile shape, the
//! function, and the cache blocking chosen for it.
//!
//! # The blocking constants and the caches they target
//!
//! This machine (AMD EPYC, Zen 3, per core: 32 KiB L1d, 512 KiB L2; 32 MiB L3 shared) was swept
//! by `cargo run --release --bin bench_matmul -- sweep`; the chapter shows the sweep. The rules
//! the sweep confirmed:
//!
//! - **MR×NR** (registers): a tile whose MR/LANES·NR accumulator vectors fit in the 16 ymm (32
//!   zmm) registers beside the MR/LANES vectors of Ã and one broadcast of B̃, with enough
//!   independent accumulators (12, 24) to keep both FMA units busy through their latency.
//! - **KC** (L1): one KC×NR sliver of B̃ is reused by every micro-kernel call of loop 1, so it
//!   must stay in L1 next to the MR×KC sliver of Ã streaming past it.
//! - **MC** (L2): the MC×KC block Ã is re-read once per NR columns (loop 2), so it must stay in
//!   L2.
//! - **NC** (L3): the KC×NC panel B̃ is re-read once per MC rows (loop 3), so it must stay in L3
//!   (shared by both cores and, on this machine, by other jobs: the sweep preferred panels of 1 to
//!   2 MiB).

use super::Element;
use super::dispatch::{Blocking, Kernel};
use super::scalar;

/// The signature every micro-kernel has: `(kc, Ã sliver, B̃ sliver, α, β, columns of C, row)`.
pub type TileFn<T> = fn(usize, &[T], &[T], T, T, &mut [&mut [T]], usize);

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

/// AVX-512 f32 (32×12 tile). Not measurable on this machine (no AVX-512): scaled from the AVX2
/// choice by the same cache rules for a Zen 5 core (48 KiB L1d, 1 MiB L2). KC = 256: B̃ sliver
/// 12 KiB, Ã sliver 32 KiB. MC = 192: Ã 192 KiB. NC = 1032: B̃ ≈ 1 MiB.
pub const AVX512_F32_BLOCKING: Blocking = Blocking { mc: 192, kc: 256, nc: 1032 };

/// AVX-512 f64 (16×12 tile), unmeasured here like the f32 one. KC = 256: B̃ sliver 24 KiB,
/// Ã sliver 32 KiB. MC = 96: Ã 192 KiB. NC = 1032: B̃ ≈ 2 MiB.
pub const AVX512_F64_BLOCKING: Blocking = Blocking { mc: 96, kc: 256, nc: 1032 };

fn scalar_kernel<T: Element>() -> MicroKernel<T> {
    MicroKernel { kind: Kernel::Scalar, mr: scalar::MR, nr: scalar::NR, blocking: SCALAR_BLOCKING, run: scalar::kernel::<T> }
}

/// The f32 kernel of family `kind`, if this CPU can run it.
pub fn f32_kernel(kind: Kernel) -> Option<MicroKernel<f32>> {
    if !kind.is_available() {
        return None;
    }
    match kind {
        Kernel::Scalar => Some(scalar_kernel()),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => {
            use super::simd::{AVX2_F32_MR, AVX2_F32_NR, avx2_f32};
            Some(MicroKernel { kind, mr: AVX2_F32_MR, nr: AVX2_F32_NR, blocking: AVX2_F32_BLOCKING, run: avx2_f32 })
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => {
            use super::simd::{AVX512_F32_MR, AVX512_F32_NR, avx512_f32};
            Some(MicroKernel { kind, mr: AVX512_F32_MR, nr: AVX512_F32_NR, blocking: AVX512_F32_BLOCKING, run: avx512_f32 })
        }
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    }
}

/// The f64 kernel of family `kind`, if this CPU can run it.
pub fn f64_kernel(kind: Kernel) -> Option<MicroKernel<f64>> {
    if !kind.is_available() {
        return None;
    }
    match kind {
        Kernel::Scalar => Some(scalar_kernel()),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => {
            use super::simd::{AVX2_F64_MR, AVX2_F64_NR, avx2_f64};
            Some(MicroKernel { kind, mr: AVX2_F64_MR, nr: AVX2_F64_NR, blocking: AVX2_F64_BLOCKING, run: avx2_f64 })
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => {
            use super::simd::{AVX512_F64_MR, AVX512_F64_NR, avx512_f64};
            Some(MicroKernel { kind, mr: AVX512_F64_MR, nr: AVX512_F64_NR, blocking: AVX512_F64_BLOCKING, run: avx512_f64 })
        }
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    }
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

/// Runs the multiply-add throughput loop of family `kind` in f32: (flops, checksum).
pub fn f32_probe(kind: Kernel, iterations: u64) -> Option<(u64, f64)> {
    match kind {
        Kernel::Scalar => Some(scalar_probe::<f32>(iterations)),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => super::simd::probe_avx2_f32(iterations),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => super::simd::probe_avx512_f32(iterations),
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    }
}

/// Runs the multiply-add throughput loop of family `kind` in f64: (flops, checksum).
pub fn f64_probe(kind: Kernel, iterations: u64) -> Option<(u64, f64)> {
    match kind {
        Kernel::Scalar => Some(scalar_probe::<f64>(iterations)),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => super::simd::probe_avx2_f64(iterations),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => super::simd::probe_avx512_f64(iterations),
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    }
}
