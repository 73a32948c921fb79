//! An element-wise loop compiled for the widest registers the CPU has: [`map_f32`], which
//! chapter 3's GELU (and chapter 9's training step through it) runs in.
//!
//! The crate is compiled for the baseline x86-64 (SSE2, four f32 lanes). [`map_f32`] runs the
//! same plain loop compiled for AVX2 or AVX-512 instead, on the process's kernel
//! ([`crate::simd::active_kernel`], as a product whose settings name none) or the one
//! [`map_f32_with`] is given, through the same dispatcher ([`crate::simd`]); the
//! compiled loops live with the other SIMD code in `src/simd/x86.rs` (the only file allowed
//! `unsafe`), behind safe functions that take a CPU-feature token.

use crate::error::{Result, shape_error};
use crate::simd::{Kernel, active_kernel, unavailable};

/// yᵢ ← f(xᵢ, yᵢ) for every i, in f32, compiled for the registers of the active kernel
/// ([`active_kernel`]: AVX-512, AVX2 or the portable baseline). The crate is compiled for the
/// baseline x86-64 (SSE2, four f32 lanes), so a loop like GELU's rational function runs four lanes
/// at a time there; here the very same loop runs with the wider registers the CPU has, chosen at
/// run time as the micro-kernels are. Each element is computed by the same operations whatever
/// the registers (no reordering, no fused multiply-add the scalar code does not have), so the
/// results are bit-for-bit those of the plain loop. Errors when the lengths differ.
pub fn map_f32(x: &[f32], y: &mut [f32], f: impl Fn(f32, f32) -> f32) -> Result<()> {
    map_f32_with(active_kernel(), x, y, f)
}

/// [`map_f32`] compiled for the registers of `kernel`: the same bits whichever kernel. Errors when
/// the lengths differ or the CPU lacks the kernel.
pub fn map_f32_with(
    kernel: Kernel,
    x: &[f32],
    y: &mut [f32],
    f: impl Fn(f32, f32) -> f32,
) -> Result<()> {
    if !kernel.is_available() {
        return Err(unavailable("map_f32_with", kernel));
    }
    if x.len() != y.len() {
        return Err(shape_error(
            "map_f32",
            "x and y",
            format!("{} values", x.len()),
            format!("{}", y.len()),
        ));
    }
    // The dispatcher runs the SIMD loop where the kernel has one, and leaves the portable one
    // below otherwise, which gives the same bits.
    if crate::simd::map_f32(kernel, x, y, &f) {
        return Ok(());
    }
    for (y_i, &x_i) in y.iter_mut().zip(x) {
        *y_i = f(x_i, *y_i);
    }
    Ok(())
}
