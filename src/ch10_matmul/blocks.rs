//! What the blocking asks of the machine: the caches each packed block is meant for, the
//! footprint of every block, the share of a register tile doing useful work, the micro-kernel
//! calls of a product, the accumulator registers of a tile, and the fused multiply-add the SIMD
//! kernels use.

use crate::error::{Result, invalid};
use crate::matmul::lab::{Blocking, CacheLevel, Caches};

/// L1 data cache per core of the machine the constants were tuned on (AMD EPYC, Zen 3).
pub const L1D_BYTES: usize = 32 << 10;
/// L2 cache per core of that machine.
pub const L2_BYTES: usize = 512 << 10;
/// L3 cache shared by the cores of that machine.
pub const L3_BYTES: usize = 32 << 20;

/// L2 cache per core of the machine the AVX-512 constants were swept on (AMD EPYC, Zen 4: the
/// same 32 KiB L1d and 32 MiB L3 as the Zen 3 machine, twice its L2).
pub const ZEN4_L2_BYTES: usize = 1 << 20;

/// Ways of each set of the L1d and of the L2 of those machines (8-way set associative).
pub const L1D_L2_WAYS: usize = 8;
/// Ways of each set of their L3.
pub const L3_WAYS: usize = 16;
/// Bytes per cache line on both.
pub const LINE_BYTES: usize = 64;
/// Cores the L3 is shared between, as the 2-core virtual machines report it.
pub const L3_SHARING: usize = 2;

/// The caches of the machine the AVX2 constants were tuned on, written out (what Linux reports
/// under `/sys/devices/system/cpu/cpu0/cache` there): the description the chapter's model table
/// is computed from, so the table reads the same on any machine.
pub const ZEN3_CACHES: Caches = Caches {
    l1d: CacheLevel { bytes: L1D_BYTES, ways: L1D_L2_WAYS, line: LINE_BYTES, sharing: 1 },
    l2: CacheLevel { bytes: L2_BYTES, ways: L1D_L2_WAYS, line: LINE_BYTES, sharing: 1 },
    l3: Some(CacheLevel { bytes: L3_BYTES, ways: L3_WAYS, line: LINE_BYTES, sharing: L3_SHARING }),
};

/// The same for the machine the AVX-512 constants were swept on: twice the L2.
pub const ZEN4_CACHES: Caches = Caches {
    l2: CacheLevel { bytes: ZEN4_L2_BYTES, ways: L1D_L2_WAYS, line: LINE_BYTES, sharing: 1 },
    ..ZEN3_CACHES
};

/// Vector registers of AVX2 (ymm0–ymm15); AVX-512 has 32 (zmm0–zmm31).
pub const AVX2_REGISTERS: usize = 16;

/// What each packed block of the five loops occupies, in bytes, for a kernel with an `mr`×`nr`
/// tile, blocking `b` and elements of `elem` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// One KC×NR sliver of B̃, reused by every micro-kernel call of loop 1: meant for L1.
    pub b_sliver: usize,
    /// One MR×KC sliver of Ã, streamed through L1 by one micro-kernel call.
    pub a_sliver: usize,
    /// The MC×KC block Ã, re-read for every NR columns: meant for L2.
    pub a_block: usize,
    /// The KC×NC panel B̃, re-read for every MC rows: meant for L3.
    pub b_panel: usize,
}

/// The footprint of every packed block.
pub fn footprint(mr: usize, nr: usize, b: Blocking, elem: usize) -> Footprint {
    Footprint {
        b_sliver: b.kc * nr * elem,
        a_sliver: mr * b.kc * elem,
        a_block: b.mc.next_multiple_of(mr) * b.kc * elem,
        b_panel: b.kc * b.nc.next_multiple_of(nr) * elem,
    }
}

/// The share of the register tiles' multiply-adds that land inside C for an m-row, n-column
/// product: m·n / (⌈m/MR⌉·MR · ⌈n/NR⌉·NR). The rest is computed on zero padding and thrown away.
pub fn tile_use(m: usize, n: usize, mr: usize, nr: usize) -> f64 {
    if m == 0 || n == 0 {
        return 1.0;
    }
    (m * n) as f64 / (m.next_multiple_of(mr) * n.next_multiple_of(nr)) as f64
}

/// Micro-kernel calls of a single-threaded product: ⌈m/MR⌉·⌈n/NR⌉ tiles, each once per rank-KC
/// update, when MC and NC do not split a tile (they are multiples of MR and NR).
pub fn tile_calls(m: usize, n: usize, k: usize, mr: usize, nr: usize, kc: usize) -> u64 {
    (m.div_ceil(mr) * n.div_ceil(nr) * k.div_ceil(kc.max(1))) as u64
}

/// Accumulator registers of an MR×NR tile held in vectors of `lanes` lanes: MR/lanes · NR.
pub fn accumulator_registers(mr: usize, nr: usize, lanes: usize) -> Result<usize> {
    if lanes == 0 || !mr.is_multiple_of(lanes) {
        return Err(invalid(
            "accumulator_registers",
            "mr",
            format!("{mr} rows are not a whole number of {lanes}-lane vectors"),
        ));
    }
    Ok(mr / lanes * nr)
}

/// (1 + x)·(1 + x) − 1 evaluated as −1·1 + x·x, once with the product rounded before the add and
/// once fused (one rounding): for x = 2⁻¹² in f32 they differ in the last place. Returns
/// (separate, fused) as f64.
pub fn fma_fingerprint_f32(x: f32) -> (f64, f64) {
    let y = 1.0 + x;
    let separate = -1.0f32 + y * y;
    let fused = y.mul_add(y, -1.0f32);
    (separate as f64, fused as f64)
}
