//! Chapter 5: sinusoidal positions —
//! [chapters/ch05_positions.md](../../chapters/ch05_positions.md).
//!
//! Replace each `todo!()` with your answer, then run
//! `cargo test -p llm-workbook-exercises --test ch05_positions`.
//!
//! Where a doc comment asks for an error, return one of `llm_workbook::Error`'s variants, whose
//! message is one line naming the argument: `Err(llm_workbook::error::invalid("op", "arg",
//! "why"))` for a bad value, `Err(llm_workbook::Error::Empty { op: "op", arg: "arg" })` for an
//! empty input and `Err(llm_workbook::error::shape_error("op", "arg", expected, got))` for shapes
//! that disagree (`llm_workbook::error::shape_of(&m)` writes a matrix's shape as `rows×cols`).

use llm_workbook::Result;
use nalgebra::DMatrix;

/// **The frequency of pair i**: ωᵢ = 1 / 10000^(2i/d), the angular frequency of columns 2i and
/// 2i + 1 of a d-wide encoding.
///
/// Chapter: [The formula](../../chapters/ch05_positions.md#the-formula).
pub fn frequency(i: usize, d_model: usize) -> f64 {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch05_positions::frequency(i, d_model);
    todo!()
}

/// **The sinusoidal encoding**: an n×d matrix whose row pos is PE(pos, ·) with
/// PE(pos, 2i) = sin(pos·ωᵢ) and PE(pos, 2i+1) = cos(pos·ωᵢ). Return an error for an odd or
/// zero d.
///
/// Chapter: [The formula](../../chapters/ch05_positions.md#the-formula).
pub fn sinusoidal(n_positions: usize, d_model: usize) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch05_positions::sinusoidal(n_positions, d_model);
    todo!()
}

/// **X + PE for a batch**: x is (B·T)×d, B sequences of length T = `seq_len` stacked; row r gets
/// PE(r mod T) added. Return an error when the rows are not a multiple of T.
///
/// Chapter: [Why attention needs positions][ch].
///
/// [ch]: ../../chapters/ch05_positions.md#why-attention-needs-positions
pub fn add_positions(x: &DMatrix<f64>, seq_len: usize) -> Result<DMatrix<f64>> {
    #[cfg(feature = "solutions")]
    return llm_workbook::ch05_positions::add_positions(x, seq_len);
    todo!()
}
