//! The machine's peak: an FMA throughput probe, the ceiling chapter 10's benchmark compares every
//! product with.
//!
//! [`fma_probe`] runs 12 independent chains of full-width fused multiply-adds in the registers of
//! one kernel family (separate multiply and add for the portable one); timed, its flops per second
//! are the peak of one core. The SIMD loops live with the other SIMD code in
//! `src/simd/x86.rs`, reached through the dispatcher ([`crate::simd`]).

use crate::error::Result;
use crate::matmul::Element;
use crate::simd::Kernel;
use std::any::TypeId;

/// Runs `iterations` rounds of the multiply-add throughput loop of `kernel` in type `T` (12
/// independent chains of full-width fused multiply-adds; separate multiply and add for the
/// portable kernel) and returns (flops done, a checksum). Timed by the benchmark, it measures the
/// machine's peak, the ceiling every product is compared with. An error if the CPU lacks it.
pub fn fma_probe<T: Element>(kernel: Kernel, iterations: u64) -> Result<(u64, f64)> {
    // `Element` is sealed: T is f32 or f64.
    let f64_ = TypeId::of::<T>() == TypeId::of::<f64>();
    match kernel {
        Kernel::Scalar if f64_ => Ok(scalar_probe::<f64>(iterations)),
        Kernel::Scalar => Ok(scalar_probe::<f32>(iterations)),
        _ => crate::simd::fma_probe(kernel, f64_, iterations)
            .ok_or_else(|| crate::simd::unavailable("fma_probe", kernel)),
    }
}

/// The portable throughput probe: 12 independent multiply-then-add chains (not fused).
fn scalar_probe<T: num_traits::Float>(iterations: u64) -> (u64, f64) {
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
