//! Chapter 10: a fast matrix product — [chapters/ch10_matmul.md](../../chapters/ch10_matmul.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch10_matmul`.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value, `Err(llm_workbook::Error::Empty { op: "op", arg: "arg" })` for an
//! empty input and `Err(llm_workbook::error::shape_error("op", "arg", expected, got))` for shapes
//! that disagree (`llm_workbook::error::shape_of(&m)` writes a matrix's shape as `rows×cols`).

use llm_workbook::Result;
use llm_workbook::matmul::Op;
use nalgebra::DMatrix;
use std::ops::Range;

/// The rows (MR) and columns (NR) of the register tile, 4 × 4 like the main crate's scalar
/// tile (the judge builds its slivers with them; your answers may use them).
#[allow(unused_imports)]
pub use llm_workbook_exercises::solutions::ch10_matmul::{MR, NR};

/// **Packing the slivers of A**: copy rows `rows` (i0 … i0 + mc − 1) and columns `depth`
/// (p0 … p0 + kc − 1) of op(A) (A itself for `Op::N`, Aᵀ for `Op::T`, without copying the
/// transpose: element (i, j) of Aᵀ is A[j, i]) into the order the micro-kernel reads them:
/// ⌈mc/mr⌉ slivers one after the other, each kc columns of mr values, so that
/// Ã[q·kc·mr + p·mr + i] = op(A)[i0 + q·mr + i, p0 + p], and 0 where q·mr + i ≥ mc (the last
/// sliver is zero-padded past the block's last row). The result has ⌈mc/mr⌉·mr·kc values. Error
/// when a range does not lie inside op(A) or mr = 0.
///
/// Chapter: [4. Packing](../../chapters/ch10_matmul.md#4-packing).
pub fn pack_a_block(
    a: &DMatrix<f64>,
    ta: Op,
    rows: Range<usize>,
    depth: Range<usize>,
    mr: usize,
) -> Result<Vec<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::matmul::lab::pack_a_block(a, ta, rows, depth, mr);
    todo!()
}

/// **Packing the slivers of B**: copy rows `depth` (p0 … p0 + kc − 1) and columns `cols`
/// (j0 … j0 + nc − 1) of op(B) into ⌈nc/nr⌉ slivers, each kc rows of nr values:
/// B̃[q·kc·nr + p·nr + j] = op(B)[p0 + p, j0 + q·nr + j], and 0 where q·nr + j ≥ nc. (It is Ã of
/// op(B)ᵀ, cut along the columns.) The result has ⌈nc/nr⌉·nr·kc values. Error when a range does
/// not lie inside op(B) or nr = 0.
///
/// Chapter: [4. Packing](../../chapters/ch10_matmul.md#4-packing).
pub fn pack_b_panel(
    b: &DMatrix<f64>,
    tb: Op,
    depth: Range<usize>,
    cols: Range<usize>,
    nr: usize,
) -> Result<Vec<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::matmul::lab::pack_b_panel(b, tb, depth, cols, nr);
    todo!()
}

/// **The scalar micro-kernel**: one packed sliver of A (MR rows × kc, stored as kc columns of MR
/// values: Ã[p·MR + i] is A[i, p]) times one packed sliver of B (kc × NR, stored as kc rows of
/// NR values: B̃[p·NR + j] is B[p, j]) updates the MR×NR tile C:
/// C[i, j] = α·Σ_{p<kc} Ã[p·MR + i]·B̃[p·NR + j] + β·C[i, j]. When β = 0, C is not read (it may
/// hold NaN from an uninitialised buffer): C[i, j] = α·acc.
///
/// Chapter: [5. The micro-kernel and its register tile][ch].
///
/// [ch]: ../../chapters/ch10_matmul.md#5-the-micro-kernel-and-its-register-tile
pub fn micro_kernel(kc: usize, a: &[f64], b: &[f64], alpha: f64, beta: f64, c: &mut DMatrix<f64>) {
    #[cfg(feature = "solutions")]
    return solution::micro_kernel(kc, a, b, alpha, beta, c);
    todo!()
}

// The `solutions` feature's adapters (src/solutions.rs).
#[cfg(feature = "solutions")]
use llm_workbook_exercises::solutions::ch10_matmul as solution;
