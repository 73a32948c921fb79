//! D3's worked example: the embeddings of "You are welcome" and "`<start>` de nada",
//! the exponents the document writes, and the X + PE and Y + PE it prints, which chapter 6 starts
//! from.

use super::encoding::{Reading, exponents, with_exponents};
use crate::error::{Error, Result};
use nalgebra::DMatrix;

/// The embeddings of "You are welcome": 'You', 'are', 'welcome', 4 dimensions each.
pub const X_EMBEDDINGS: [[f64; 4]; 3] =
    [[0.1, 0.2, -0.1, 0.4], [-0.3, 0.5, 0.1, -0.2], [0.4, -0.3, 0.2, 0.1]];

/// The embeddings of "`<start>` de nada".
pub const Y_EMBEDDINGS: [[f64; 4]; 3] =
    [[0.0, 0.0, 0.0, 0.0], [-0.2, 0.4, 0.3, 0.1], [0.5, -0.1, -0.4, 0.3]];

/// The width of the walk-through's embeddings.
pub const D_MODEL: usize = 4;

/// Its sequence length (three tokens in each sentence).
pub const SEQ_LEN: usize = 3;

/// A 3×4 matrix from rows of a constant.
pub fn matrix3x4(rows: &[[f64; 4]; 3]) -> DMatrix<f64> {
    DMatrix::from_fn(3, 4, |r, c| rows[r][c])
}

// ───────────────────────── the exponents the document writes ─────────────────────────

/// The exponents written inside D3's symbolic matrix PE_input for d = 4:
/// sin(pos/10000⁰), cos(pos/10000^0.5), sin(pos/10000²), cos(pos/10000^2.5).
pub const DOC_SYMBOLIC_EXPONENTS: [f64; 4] = [0.0, 0.5, 2.0, 2.5];

/// The exponents of D3's term-by-term breakdown at pos = 0, where the cosine of pair i
/// is written with 2(i + 1)/d: 0, 0.5, 0.5, 1.
pub const DOC_BREAKDOWN_EXPONENTS: [f64; 4] = [0.0, 0.5, 0.5, 1.0];

/// The positions of the walk-through: 0, 1, 2.
pub(super) fn walk_positions() -> Vec<f64> {
    (0..SEQ_LEN).map(|p| p as f64).collect()
}

/// PE for positions 0, 1, 2 and d = 4 under a reading.
pub fn walkthrough_pe(reading: Reading) -> Result<DMatrix<f64>> {
    with_exponents(&walk_positions(), &exponents(reading, D_MODEL)?)
}

// ───────────────────────── the sums the document prints ─────────────────────────

/// X + PE as D3 prints it. Chapter 6 starts from exactly these numbers.
pub const PRINTED_X_PLUS_PE: &str =
    "0.1 1.2 -0.1 1.4; 0.5415 1.49995 0.1001 0.8; 1.3093 0.6998 0.2002 1.1";

/// Y + PE as D3 prints it.
pub const PRINTED_Y_PLUS_PE: &str =
    "0.0 1.0 0.0 1.0; 0.6415 1.39995 0.3001 1.1; 1.4093 0.8998 -0.3998 1.3";

/// A printed matrix (see [`crate::snapshot::parse_printed`]) as numbers; the constants of this
/// module always parse, other text may not.
pub fn printed_matrix(printed: &str) -> Result<DMatrix<f64>> {
    let rows = crate::snapshot::parse_printed(printed).ok_or_else(|| Error::Parse {
        file: "printed matrix".into(),
        line: None,
        reason: format!("not a matrix: {printed}"),
    })?;
    let values: Vec<f64> =
        rows.iter().flatten().map(|s| s.parse::<f64>().unwrap_or(f64::NAN)).collect();
    Ok(DMatrix::from_row_slice(rows.len(), rows[0].len(), &values))
}
