//! Chapter 10: a fast matrix product — [chapters/ch10_matmul.md](../../chapters/ch10_matmul.md).
//!
//! Replace the `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch10_matmul`.

use nalgebra::DMatrix;

/// The rows of the register tile.
pub const MR: usize = 4;
/// The columns of the register tile.
pub const NR: usize = 4;

/// **The scalar micro-kernel**: one packed sliver of A (MR rows × kc, stored as kc columns of MR
/// values: Ã[p·MR + i] is A[i, p]) times one packed sliver of B (kc × NR, stored as kc rows of
/// NR values: B̃[p·NR + j] is B[p, j]) updates the MR×NR tile C:
/// C[i, j] = α·Σ_{p<kc} Ã[p·MR + i]·B̃[p·NR + j] + β·C[i, j]. When β = 0, C is not read (it may
/// hold NaN from an uninitialised buffer): C[i, j] = α·acc.
///
/// Chapter: [5. The micro-kernel and its register tile](../../chapters/ch10_matmul.md#5-the-micro-kernel-and-its-register-tile).
pub fn micro_kernel(kc: usize, a: &[f64], b: &[f64], alpha: f64, beta: f64, c: &mut DMatrix<f64>) {
    #[cfg(feature = "solutions")]
    return solution::micro_kernel(kc, a, b, alpha, beta, c);
    todo!()
}

/// The main crate's product in this chapter's signature.
pub mod solution {
    use super::*;

    /// [`super::micro_kernel`] by unpacking the slivers and `llm_workbook::matmul::matmul`.
    pub fn micro_kernel(
        kc: usize,
        a: &[f64],
        b: &[f64],
        alpha: f64,
        beta: f64,
        c: &mut DMatrix<f64>,
    ) {
        let a = DMatrix::from_column_slice(MR, kc, &a[..kc * MR]);
        let b = DMatrix::from_row_slice(kc, NR, &b[..kc * NR]);
        let Ok(ab) = llm_workbook::matmul::matmul(&a, &b) else { return };
        *c = if beta == 0.0 { ab * alpha } else { ab * alpha + &*c * beta };
    }
}
