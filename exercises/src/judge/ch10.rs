//! Judges of chapter 10's exercises.

use super::{Section, Verdict, attempt, compare, random};
use crate::ch10_matmul::{MR, NR, solution};
use nalgebra::DMatrix;

const KERNEL: Section =
    Section { chapter: "ch10_matmul", anchor: "5-the-micro-kernel-and-its-register-tile" };

/// Random slivers of depth 1, 3 and 7 against the product of the unpacked matrices, with β = 0
/// over a NaN-filled C, and with α = 2, β = 0.5 over a random C.
pub fn micro_kernel(f: impl Fn(usize, &[f64], &[f64], f64, f64, &mut DMatrix<f64>)) -> Verdict {
    for (seed, kc) in [(150, 1), (151, 3), (152, 7)] {
        let (a, b) = (random(seed, MR * kc, 1), random(seed + 10, kc * NR, 1));
        for (alpha, beta) in [(1.0, 0.0), (2.0, 0.5)] {
            let start = if beta == 0.0 {
                DMatrix::from_element(MR, NR, f64::NAN)
            } else {
                random(seed + 20, MR, NR)
            };
            let mut c = start.clone();
            attempt(KERNEL, "micro_kernel", || {
                f(kc, a.as_slice(), b.as_slice(), alpha, beta, &mut c)
            })?;
            let mut want = start.clone();
            solution::micro_kernel(kc, a.as_slice(), b.as_slice(), alpha, beta, &mut want);
            if beta == 0.0 && c.iter().any(|v| v.is_nan()) {
                return Err(KERNEL.fail("with β = 0 your C holds NaN: C may be uninitialised, do not read it when β = 0"));
            }
            let mut row_major = start.clone();
            // Ã misread as A stored row by row (A[i, p] = Ã[i·kc + p]), repacked for the reference.
            let a_packed: Vec<f64> =
                (0..kc * MR).map(|n| a.as_slice()[(n % MR) * kc + n / MR]).collect();
            solution::micro_kernel(kc, &a_packed, b.as_slice(), alpha, beta, &mut row_major);
            let what = format!("kc = {kc}, α = {alpha}, β = {beta}: C");
            compare(KERNEL, &what, &c, &want, 1e-12, &[]).map_err(|m| {
                if kc > 1 && c.shape() == row_major.shape() && (&c - &row_major).abs().max() < 1e-12
                {
                    KERNEL.fail(format!(
                        "{what}: you read Ã row by row; the packed sliver stores kc columns of MR \
                         values: A[i, p] = Ã[p·MR + i]"
                    ))
                } else {
                    m
                }
            })?;
        }
    }
    Ok(())
}
