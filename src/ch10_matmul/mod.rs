//! Chapter 10: a packed, blocked, SIMD matrix product.
//!
//! The product itself lives in [`crate::matmul`] (every chapter calls it); this module holds what
//! the chapter computes *about* it, in the order the chapter reasons:
//! - [`traffic`]: the flops of C = A·B (2·m·n·k), the bytes the naive loop and the blocked product
//!   move between memory and the caches, and their ratio, the arithmetic intensity;
//! - [`blocks`]: the cache footprint of every packed block (B̃ sliver KC×NR for L1, Ã block MC×KC
//!   for L2, B̃ panel KC×NC for L3), the share of a register tile doing useful work
//!   (m·n / (⌈m/MR⌉·MR · ⌈n/NR⌉·NR)), the micro-kernel calls of a product, the accumulator
//!   registers of a tile, and the rounding a fused multiply-add saves;
//! - [`roofline`]: the roofline with a roof per level of the memory hierarchy, drawn from the
//!   benchmark's committed measurements, each product under the roof of the level holding it.
//!
//! [`book`] holds the worked table, the walk-through of one tiny packed product and the
//! measurement-free figures. The prose is
//! [`chapters/ch10_matmul.md`](../../chapters/ch10_matmul.md); the tests are
//! `tests/ch10_matmul.rs`; the speed measurements come from the benchmark
//! `benches/ch10_matmul.rs` (`cargo bench --features peers --bench ch10_matmul`).
//!
//! Nothing here measures: every number follows from the shapes, the blocking constants and
//! the cache sizes, so the worked table is exact and reproducible on any machine.

pub mod blocks;
pub mod book;
pub mod roofline;
pub mod traffic;

pub use blocks::{
    AVX2_REGISTERS, Footprint, L1D_BYTES, L1D_L2_WAYS, L2_BYTES, L3_BYTES, L3_SHARING, L3_WAYS,
    LINE_BYTES, ZEN3_CACHES, ZEN4_CACHES, ZEN4_L2_BYTES, accumulator_registers,
    fma_fingerprint_f32, footprint, tile_calls, tile_use,
};
pub use traffic::{blocked_traffic_bytes, flops, intensity, naive_traffic_bytes};
