//! The laboratory of the product: the names chapter 10 teaches and tunes with, and the
//! benchmarks measure with — the blocking constants and the caches they came from, the tile
//! shapes, the packed blocks and one call of the portable micro-kernel to look at, and the bf16
//! product of chapter 11. What a chapter needs to multiply is in [`crate::matmul`] itself; nothing
//! here is needed for that.

use super::{Element, Op, pack, scalar, unavailable};
use crate::error::{Result, invalid, shape_error};
use crate::simd::{Kernel, active_kernel};
use nalgebra::DMatrix;

pub use super::bf16::{
    Bf16Method, Bf16Path, available_bf16_paths, best_bf16_path, gemm_bf16, widen_bf16,
};
pub use super::blocked::{IN_PLACE_MAX_STEP, PARALLEL_MIN_FLOPS, PIECE_MIN_FLOPS};
pub use super::caches::{CacheLevel, Caches, ModelBlocking, machine_caches, model_blocking};
pub use super::kernels::{
    AVX2_F32_BLOCKING, AVX2_F64_BLOCKING, AVX512_F32_BLOCKING, AVX512_F64_BLOCKING, SCALAR_BLOCKING,
};
pub use super::stats::Blocking;

/// The register tile (MR, NR) of `kernel` for element type `T`, whether or not this CPU runs it
/// (a fact of the kernel's code, so tables of every kernel read the same on any machine); an
/// error only for a SIMD kernel on another architecture.
pub fn tile_shape<T: Element>(kernel: Kernel) -> Result<(usize, usize)> {
    super::kernels::tile_of(kernel, size_of::<T>()).ok_or_else(|| unavailable("tile_shape", kernel))
}

/// The cache blocking of `kernel` for element type `T` on this machine: the kernel's tuned KC,
/// the MC that the caches the machine reports give ([`model_blocking`]), and the smaller of their
/// NC and the tuned one; the tuned blocking where the caches cannot be read. An error if the CPU
/// lacks the kernel.
pub fn default_blocking<T: Element>(kernel: Kernel) -> Result<Blocking> {
    Ok(T::micro_kernel(kernel).ok_or_else(|| unavailable("default_blocking", kernel))?.blocking)
}

fn check_range(
    op: &'static str,
    arg: &'static str,
    r: &std::ops::Range<usize>,
    len: usize,
) -> Result<()> {
    if r.start > r.end || r.end > len {
        return Err(invalid(
            op,
            arg,
            format!("range {}..{} must lie within 0..{len}", r.start, r.end),
        ));
    }
    Ok(())
}

/// The packed form Ã of rows `rows` and columns `depth` of op(A): ⌈rows/mr⌉ slivers one after the
/// other, each `depth.len()` columns of `mr` values, zero-padded past the last row. This is what
/// the micro-kernel reads; exposed so the chapter can print it.
pub fn pack_a_block<T: Element>(
    a: &DMatrix<T>,
    ta: Op,
    rows: std::ops::Range<usize>,
    depth: std::ops::Range<usize>,
    mr: usize,
) -> Result<Vec<T>> {
    let view = pack::Operand::new(a.as_slice(), a.nrows(), ta == Op::T);
    packed_slivers("pack_a_block", view, ta.shape(a), ("rows", rows), depth, ("mr", mr))
}

/// The packed form B̃ of rows `depth` and columns `cols` of op(B): ⌈cols/nr⌉ slivers, each
/// `depth.len()` rows of `nr` values, zero-padded past the last column. It is Ã of op(B)ᵀ (see
/// [`pack_a_block`]): the same slivers, cut along the columns instead of the rows.
pub fn pack_b_panel<T: Element>(
    b: &DMatrix<T>,
    tb: Op,
    depth: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    nr: usize,
) -> Result<Vec<T>> {
    let view = pack::Operand::new(b.as_slice(), b.nrows(), tb == Op::T).transposed();
    let (k, n) = tb.shape(b);
    packed_slivers("pack_b_panel", view, (n, k), ("cols", cols), depth, ("nr", nr))
}

/// Checks the ranges and packs rows `outer` and columns `depth` of `x` (an `shape.0`×`shape.1`
/// view) into slivers of `width` rows: the shared body of [`pack_a_block`] and [`pack_b_panel`].
fn packed_slivers<T: Element>(
    op: &'static str,
    x: pack::Operand<T>,
    (outer_len, depth_len): (usize, usize),
    (outer_name, outer): (&'static str, std::ops::Range<usize>),
    depth: std::ops::Range<usize>,
    (width_name, width): (&'static str, usize),
) -> Result<Vec<T>> {
    check_range(op, outer_name, &outer, outer_len)?;
    check_range(op, "depth", &depth, depth_len)?;
    if width == 0 {
        return Err(invalid(op, width_name, "at least 1 line per sliver"));
    }
    let (len, kc) = (outer.len(), depth.len());
    let mut out = vec![T::zero(); len.div_ceil(width) * width * kc];
    if kc > 0 {
        pack::pack_a(
            &mut out,
            x,
            outer.start,
            len,
            depth.start,
            kc,
            width,
            active_kernel() != Kernel::Scalar,
        );
    }
    Ok(out)
}

/// One call of the portable micro-kernel on an MR×NR tile C ([`SCALAR_TILE`]): C ← α·Ã·B̃ + β·C
/// over depth `kc`, from the first kc·MR values of the packed A sliver and the first kc·NR of
/// the packed B sliver (longer slivers are read no further). With β = 0, C is not read (it may
/// hold NaN). An error if a sliver is shorter or C is not MR×NR.
pub fn scalar_update<T: Element>(
    kc: usize,
    a_sliver: &[T],
    b_sliver: &[T],
    alpha: T,
    beta: T,
    c: &mut DMatrix<T>,
) -> Result<()> {
    let (mr, nr) = (scalar::MR, scalar::NR);
    for (arg, sliver, width) in [("a_sliver", a_sliver, mr), ("b_sliver", b_sliver, nr)] {
        if sliver.len() < kc * width {
            let got = format!("{}", sliver.len());
            return Err(shape_error("scalar_update", arg, format!("≥ {} values", kc * width), got));
        }
    }
    if c.shape() != (mr, nr) {
        let got = format!("{}×{}", c.nrows(), c.ncols());
        return Err(shape_error("scalar_update", "c", format!("{mr}×{nr}"), got));
    }
    let mut columns: Vec<&mut [T]> = c.as_mut_slice().chunks_exact_mut(mr).collect();
    scalar::kernel(kc, a_sliver, b_sliver, alpha, beta, &mut columns, 0);
    Ok(())
}

/// Rows and columns of the portable kernel's register tile.
pub const SCALAR_TILE: (usize, usize) = (scalar::MR, scalar::NR);
