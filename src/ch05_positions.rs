//! Chapter 5: sinusoidal position encodings.
//!
//! Attention treats its input as a set: permute the tokens and the outputs permute with them. Word
//! order enters only through a matrix added to the token embeddings, one row per position. The
//! sinusoidal encoding of the original transformer fills that row with sines and cosines of the
//! position at d/2 geometrically spaced frequencies:
//!
//! ```text
//! ωᵢ = 1 / 10000^(2i/d)            i = 0 … d/2 − 1
//! PE(pos, 2i)   = sin(pos · ωᵢ)
//! PE(pos, 2i+1) = cos(pos · ωᵢ)
//! ```
//!
//! Both members of a pair share the frequency ωᵢ, which is what makes PE(pos + k) a rotation of
//! PE(pos) ([`shift_operator`]) and the dot product of two encodings a function of their offset
//! alone ([`dot_at_offset`]).
//!
//! Document 003 prints encodings for d = 4 that follow a different exponent from the one it states;
//! [`Reading`] names both, and [`with_exponents`] evaluates any exponent list so every printed
//! variant can be reproduced. The prose is `chapters/ch05_positions.md`; the tests are
//! `tests/ch05_positions.rs`.
//!
//! Conventions: one row per position (or per token), a batch of B sequences of length T stacked as
//! a (B·T)×d matrix.

use crate::errata::Erratum;
use crate::error::{Error, Result, invalid, shape_error};
use crate::float::{Float, ensure_finite, ensure_finite_slice};
use crate::plot::{Figure, Heatmap, LineChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::sources::D3;
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

/// The base of the geometric progression of wavelengths, 10000 in the original transformer.
pub const BASE: f64 = 10_000.0;

// ───────────────────────────── input checks ─────────────────────────────

fn check_width(op: &'static str, d_model: usize) -> Result<()> {
    if d_model == 0 {
        return Err(Error::Empty { op, arg: "d_model" });
    }
    if !d_model.is_multiple_of(2) {
        return Err(invalid(
            op,
            "d_model",
            format!(
                "sinusoidal encodings pair a sine with a cosine, so d_model must be even; got {d_model}"
            ),
        ));
    }
    Ok(())
}

// ───────────────────────────── the encoding ─────────────────────────────

/// ωᵢ = 1/10000^(2i/d): the angular frequency of pair i (columns 2i and 2i + 1).
/// Pair 0 turns one radian per position; the last pair almost never turns.
pub fn frequency(i: usize, d_model: usize) -> f64 {
    BASE.powf(-(2.0 * i as f64) / d_model as f64)
}

/// Which exponent e_j a column j is given in PE(pos, j) = sin or cos of pos/10000^(e_j).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// The formula as stated: e_j = 2⌊j/2⌋/d, so a sine and the cosine next to it share a frequency.
    Standard,
    /// What document 003's numbers follow: e_j = 2j/d, the column index j put where the pair index
    /// i belongs, so every column gets its own frequency.
    ColumnIndex,
}

/// The exponent list e_0 … e_(d−1) of a reading, for an even d.
pub fn exponents(reading: Reading, d_model: usize) -> Result<Vec<f64>> {
    check_width("exponents", d_model)?;
    let d = d_model as f64;
    Ok((0..d_model)
        .map(|j| match reading {
            Reading::Standard => 2.0 * (j / 2) as f64 / d,
            Reading::ColumnIndex => 2.0 * j as f64 / d,
        })
        .collect())
}

/// The exponents written inside document 003's symbolic matrix PE_input for d = 4:
/// sin(pos/10000⁰), cos(pos/10000^0.5), sin(pos/10000²), cos(pos/10000^2.5).
pub const DOC_SYMBOLIC_EXPONENTS: [f64; 4] = [0.0, 0.5, 2.0, 2.5];

/// The exponents of document 003's term-by-term breakdown at pos = 0, where the cosine of pair i
/// is written with 2(i + 1)/d: 0, 0.5, 0.5, 1.
pub const DOC_BREAKDOWN_EXPONENTS: [f64; 4] = [0.0, 0.5, 0.5, 1.0];

/// PE(pos, j) = sin(pos/10000^(e_j)) for even j, cos(pos/10000^(e_j)) for odd j, for every
/// position given (one row each) and every exponent given (one column each).
///
/// This is the one evaluator behind every reading; [`sinusoidal`] passes the standard exponents.
pub fn with_exponents<T: Float>(positions: &[f64], exponents: &[f64]) -> Result<DMatrix<T>> {
    const OP: &str = "with_exponents";
    if positions.is_empty() {
        return Err(Error::Empty { op: OP, arg: "positions" });
    }
    if exponents.is_empty() {
        return Err(Error::Empty { op: OP, arg: "exponents" });
    }
    ensure_finite_slice(OP, "positions", positions)?;
    ensure_finite_slice(OP, "exponents", exponents)?;
    Ok(DMatrix::from_fn(positions.len(), exponents.len(), |r, j| {
        let angle = positions[r] / BASE.powf(exponents[j]);
        T::of(if j.is_multiple_of(2) { angle.sin() } else { angle.cos() })
    }))
}

/// The standard encoding at arbitrary (even fractional or negative) positions: a
/// `positions.len()`×d matrix. Errors for an odd or zero d and for non-finite positions.
pub fn sinusoidal_at<T: Float>(positions: &[f64], d_model: usize) -> Result<DMatrix<T>> {
    check_width("sinusoidal_at", d_model)?;
    with_exponents(positions, &exponents(Reading::Standard, d_model)?)
}

/// The standard encoding of positions 0 … n − 1: an n×d matrix, row `pos` = PE(pos, ·).
pub fn sinusoidal<T: Float>(n_positions: usize, d_model: usize) -> Result<DMatrix<T>> {
    check_width("sinusoidal", d_model)?;
    if n_positions == 0 {
        return Err(Error::Empty { op: "sinusoidal", arg: "n_positions" });
    }
    let positions: Vec<f64> = (0..n_positions).map(|p| p as f64).collect();
    sinusoidal_at(&positions, d_model)
}

/// X + PE for a batch: x is (B·T)×d with B sequences of length `seq_len` stacked; row r gets
/// PE(r mod T). The gradient of this step with respect to x is the identity, so it has no backward.
pub fn add_positions<T: Float>(x: &DMatrix<T>, seq_len: usize) -> Result<DMatrix<T>> {
    const OP: &str = "add_positions";
    if seq_len == 0 {
        return Err(invalid(OP, "seq_len", "the sequence length must be at least 1"));
    }
    if x.nrows() == 0 {
        return Err(Error::Empty { op: OP, arg: "x" });
    }
    if !x.nrows().is_multiple_of(seq_len) {
        return Err(shape_error(
            OP,
            "x and seq_len",
            format!("a multiple of {seq_len} rows (B sequences of length {seq_len})"),
            format!("x {}×{}", x.nrows(), x.ncols()),
        ));
    }
    check_width(OP, x.ncols())?;
    ensure_finite(OP, "x", x)?;
    let pe: DMatrix<T> = sinusoidal(seq_len, x.ncols())?;
    Ok(DMatrix::from_fn(x.nrows(), x.ncols(), |r, c| x[(r, c)] + pe[(r % seq_len, c)]))
}

// ───────────────────────────── properties ─────────────────────────────

/// The d×d matrix S_k with PE(pos + k) = PE(pos)·S_k for every pos (rows are row vectors).
///
/// It is block-diagonal with one 2×2 rotation per pair: from sin(a + b) = sin a cos b + cos a sin b
/// and cos(a + b) = cos a cos b − sin a sin b with a = pos·ωᵢ, b = k·ωᵢ,
/// `[sin, cos] ↦ [sin, cos]·[[cos kωᵢ, −sin kωᵢ], [sin kωᵢ, cos kωᵢ]]`. It depends on k, not on pos.
pub fn shift_operator<T: Float>(k: f64, d_model: usize) -> Result<DMatrix<T>> {
    check_width("shift_operator", d_model)?;
    if !k.is_finite() {
        return Err(Error::NonFinite { op: "shift_operator", arg: "k", at: "the offset".into() });
    }
    let mut s = DMatrix::zeros(d_model, d_model);
    for i in 0..d_model / 2 {
        let (sin, cos) = (k * frequency(i, d_model)).sin_cos();
        let j = 2 * i;
        s[(j, j)] = T::of(cos);
        s[(j, j + 1)] = T::of(-sin);
        s[(j + 1, j)] = T::of(sin);
        s[(j + 1, j + 1)] = T::of(cos);
    }
    Ok(s)
}

/// PE(pos)·PE(pos + k) = Σᵢ [sin(pos ωᵢ) sin((pos+k) ωᵢ) + cos(pos ωᵢ) cos((pos+k) ωᵢ)] = Σᵢ cos(k ωᵢ):
/// the same for every pos, and symmetric in k.
pub fn dot_at_offset(k: f64, d_model: usize) -> Result<f64> {
    check_width("dot_at_offset", d_model)?;
    Ok((0..d_model / 2).map(|i| (k * frequency(i, d_model)).cos()).sum())
}

// ───────────────────────── document 003's worked example ─────────────────────────

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

/// The position encoding document 003 prints for positions 0, 1, 2 (input and output alike).
pub const PRINTED_PE: &str = "0 1 0 1; 0.8415 0.99995 0.0001 1; 0.9093 0.9998 0.0002 1";

/// X + PE as document 003 prints it. Chapter 6 starts from exactly these numbers.
pub const PRINTED_X_PLUS_PE: &str =
    "0.1 1.2 -0.1 1.4; 0.5415 1.49995 0.1001 0.8; 1.3093 0.6998 0.2002 1.1";

/// Y + PE as document 003 prints it.
pub const PRINTED_Y_PLUS_PE: &str =
    "0.0 1.0 0.0 1.0; 0.6415 1.39995 0.3001 1.1; 1.4093 0.8998 -0.3998 1.3";

/// A 3×4 matrix from rows of a constant.
pub fn matrix3x4(rows: &[[f64; 4]; 3]) -> DMatrix<f64> {
    DMatrix::from_fn(3, 4, |r, c| rows[r][c])
}

/// A printed matrix (see [`crate::report::parse_printed`]) as numbers; the constants of this
/// module always parse, other text may not.
pub fn printed_matrix(printed: &str) -> Result<DMatrix<f64>> {
    let rows = crate::report::parse_printed(printed).ok_or_else(|| Error::Parse {
        file: "printed matrix".into(),
        line: None,
        reason: format!("not a matrix: {printed}"),
    })?;
    let values: Vec<f64> =
        rows.iter().flatten().map(|s| s.parse::<f64>().unwrap_or(f64::NAN)).collect();
    Ok(DMatrix::from_row_slice(rows.len(), rows[0].len(), &values))
}

/// The positions of the walk-through: 0, 1, 2.
fn walk_positions() -> Vec<f64> {
    (0..SEQ_LEN).map(|p| p as f64).collect()
}

/// PE for positions 0, 1, 2 and d = 4 under a reading.
pub fn walkthrough_pe(reading: Reading) -> Result<DMatrix<f64>> {
    with_exponents(&walk_positions(), &exponents(reading, D_MODEL)?)
}

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D3,
        section: "1.5 Position Encoding, PE_input and PE_output",
        printed: "PE rows 1, 2 = (0.8415, 0.99995, 0.0001, 1), (0.9093, 0.9998, 0.0002, 1)",
        correct: "(0.8415, 0.5403, 0.0100, 0.99995), (0.9093, −0.4161, 0.0200, 0.9998)",
        why: "The stated formula gives both columns of pair i the exponent 2i/d (0, 0, 0.5, 0.5 for d = 4). The printed numbers follow 2j/d with the column index j (0, 0.5, 1, 1.5): cos(1/100) = 0.99995 in column 1 and sin(1/10000) = 0.0001 in column 2. With that reading every printed entry is reproduced.",
        test: "tests/ch05_positions.rs::printed_pe_follows_the_column_index_exponent",
    },
    Erratum {
        document: D3,
        section: "1.5 Position Encoding, symbolic PE_input",
        printed: "column 2 = sin(pos/10000²) = 0.0001, 0.0002 (exponents 0, 0.5, 2, 2.5)",
        correct: "sin(1/10000²) = 1.0e−8, sin(2/10000²) = 2.0e−8; standard: sin(pos/100) = 0.0100, 0.0200",
        why: "The symbolic matrix writes a third set of exponents (0, 0.5, 2, 2.5) whose column 2 is a hundred-millionth, not the 0.0001 printed beside it; the first Python cell of the supplement evaluates this symbolic form, which is why its Q row 1 reads 1.59995001 and 0.64147099 where the printed X + PE gives 1.60005 and 0.6416 (chapter 6).",
        test: "tests/ch05_positions.rs::symbolic_pe_contradicts_its_own_numbers",
    },
    Erratum {
        document: D3,
        section: "1.5 Position Encoding, breakdown at pos = 0",
        printed: "PE(0, 2i+1) = cos(0/10000^(2(i+1)/d))",
        correct: "PE(pos, 2i+1) = cos(pos/10000^(2i/d))",
        why: "The cosine of pair i uses the same exponent 2i/d as its sine; 2(i+1)/d would give each cosine the next pair's frequency. At pos = 0 every cosine is 1 whatever the exponent, so the values 0, 1, 0, 1 are right, but the expression is not the formula.",
        test: "tests/ch05_positions.rs::breakdown_at_position_0_is_0_1_0_1",
    },
    Erratum {
        document: D3,
        section: "1.5 Position Encoding, the bullet under the formula",
        printed: "sin for even positions, cos for odd positions",
        correct: "sin fills the even dimensions (columns 2i) and cos the odd dimensions (2i + 1), at every position",
        why: "Every position gets both sines and cosines; the parity that chooses between them is that of the column index.",
        test: "tests/ch05_positions.rs::every_position_mixes_sines_and_cosines",
    },
    Erratum {
        document: D3,
        section: "1.5 Position Encoding, Adding Them Together",
        printed: "X + PE row 1 = (0.5415, 1.49995, 0.1001, 0.8); Y + PE row 2 = (1.4093, 0.8998, −0.3998, 1.3)",
        correct: "standard: X + PE row 1 = (0.5415, 1.0403, 0.1100, 0.79995); Y + PE row 2 = (1.4093, −0.5161, −0.3800, 1.2998)",
        why: "The sums are right for the printed PE, which follows the column-index exponent (first row of this table). Chapter 6 starts from the printed X + PE, as the document's later numbers do.",
        test: "tests/ch05_positions.rs::standard_x_plus_pe_differs_from_the_printed_one",
    },
];

fn xm() -> DMatrix<f64> {
    matrix3x4(&X_EMBEDDINGS)
}

fn ym() -> DMatrix<f64> {
    matrix3x4(&Y_EMBEDDINGS)
}

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let doc_pe = walkthrough_pe(Reading::ColumnIndex)?;
    let std_pe = walkthrough_pe(Reading::Standard)?;
    let sym_pe: DMatrix<f64> = with_exponents(&walk_positions(), &DOC_SYMBOLIC_EXPONENTS)?;
    let breakdown: DMatrix<f64> = with_exponents(&[0.0], &DOC_BREAKDOWN_EXPONENTS)?;
    let parity = every_position_mixes(&sinusoidal::<f64>(SEQ_LEN, D_MODEL)?);
    Ok(vec![
        Worked::matrix(
            "breakdown_at_position_0_is_0_1_0_1",
            D3,
            "PE(0, ·), any exponents",
            "0 1 0 1",
            0,
            &breakdown,
        ),
        Worked::matrix(
            "printed_pe_follows_the_column_index_exponent",
            D3,
            "PE for pos 0, 1, 2, exponent 2j/d (column index)",
            PRINTED_PE,
            4,
            &doc_pe,
        ),
        Worked::erratum(
            "printed_pe_follows_the_column_index_exponent",
            D3,
            "PE for pos 0, 1, 2, the stated formula (exponent 2i/d, pair index)",
            PRINTED_PE,
            crate::report::matrix_like(PRINTED_PE, 5, &std_pe),
        ),
        Worked::erratum(
            "symbolic_pe_contradicts_its_own_numbers",
            D3,
            "PE column 2 as written symbolically, sin(pos/10000²), pos = 1, 2",
            "0.0001 0.0002",
            format!("{:.1e} {:.1e}", sym_pe[(1, 2)], sym_pe[(2, 2)]),
        ),
        Worked::text(
            "every_position_mixes_sines_and_cosines",
            D3,
            "which function fills column j",
            "sin for even j, cos for odd j",
            if parity { "sin for even j, cos for odd j" } else { "no" },
        ),
        Worked::matrix(
            "x_plus_pe_reproduces_the_printed_matrix",
            D3,
            "X + PE (printed PE)",
            PRINTED_X_PLUS_PE,
            4,
            &(xm() + &doc_pe),
        ),
        Worked::matrix(
            "y_plus_pe_reproduces_the_printed_matrix",
            D3,
            "Y + PE (printed PE)",
            PRINTED_Y_PLUS_PE,
            4,
            &(ym() + &doc_pe),
        ),
        Worked::erratum(
            "standard_x_plus_pe_differs_from_the_printed_one",
            D3,
            "X + PE, standard PE",
            PRINTED_X_PLUS_PE,
            crate::report::matrix_like(PRINTED_X_PLUS_PE, 5, &(xm() + &std_pe)),
        ),
        Worked::erratum(
            "standard_x_plus_pe_differs_from_the_printed_one",
            D3,
            "Y + PE, standard PE",
            PRINTED_Y_PLUS_PE,
            crate::report::matrix_like(PRINTED_Y_PLUS_PE, 5, &(ym() + &std_pe)),
        ),
    ])
}

/// True when, in every row, even columns hold sines and odd columns cosines: checked by
/// sin² + cos² = 1 across each pair and by the value at pos 0 (sin 0 = 0, cos 0 = 1).
pub fn every_position_mixes(pe: &DMatrix<f64>) -> bool {
    let first_row_ok = (0..pe.ncols())
        .all(|j| (pe[(0, j)] - if j.is_multiple_of(2) { 0.0 } else { 1.0 }).abs() < 1e-15);
    let pairs_ok = (0..pe.nrows()).all(|r| {
        (0..pe.ncols() / 2)
            .all(|i| (pe[(r, 2 * i)].powi(2) + pe[(r, 2 * i + 1)].powi(2) - 1.0).abs() < 1e-12)
    });
    first_row_ok && pairs_ok
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The chapter in the order the document derives it.
pub fn walk(out: &mut Walk) -> Result<()> {
    out.step("1. Frequencies ωᵢ = 1/10000^(2i/d) for d = 4")?;
    for i in 0..D_MODEL / 2 {
        out.scalar(&format!("ω_{i}"), frequency(i, D_MODEL))?;
    }
    out.step("2. Token embeddings of the walk-through")?;
    out.matrix("X ('You', 'are', 'welcome')", &xm())?;
    out.matrix("Y ('<start>', 'de', 'nada')", &ym())?;
    out.step("3. PE for positions 0, 1, 2 under each reading")?;
    out.decimals = 8;
    out.matrix("standard (exponents 0, 0, 0.5, 0.5)", &walkthrough_pe(Reading::Standard)?)?;
    out.matrix(
        "document's numbers (column index: 0, 0.5, 1, 1.5)",
        &walkthrough_pe(Reading::ColumnIndex)?,
    )?;
    out.matrix(
        "document's symbolic matrix (0, 0.5, 2, 2.5)",
        &with_exponents::<f64>(&walk_positions(), &DOC_SYMBOLIC_EXPONENTS)?,
    )?;
    out.step("4. Adding positions")?;
    out.decimals = 5;
    out.matrix(
        "X + PE (document's reading, as printed)",
        &(xm() + walkthrough_pe(Reading::ColumnIndex)?),
    )?;
    out.matrix(
        "Y + PE (document's reading, as printed)",
        &(ym() + walkthrough_pe(Reading::ColumnIndex)?),
    )?;
    out.matrix("X + PE (standard)", &(xm() + walkthrough_pe(Reading::Standard)?))?;
    out.matrix("Y + PE (standard)", &(ym() + walkthrough_pe(Reading::Standard)?))?;
    out.step("5. A shift by k is a rotation: PE(pos + k) = PE(pos)·S_k")?;
    out.decimals = 4;
    out.matrix("S_3 for d = 4", &shift_operator::<f64>(3.0, D_MODEL)?)?;
    let pe = sinusoidal::<f64>(10, D_MODEL)?;
    let shifted =
        crate::matmul::matmul(&pe.rows(0, 7).into_owned(), &shift_operator(3.0, D_MODEL)?)?;
    out.scalar(
        "max |PE(pos)·S_3 − PE(pos + 3)| over pos 0…6",
        (shifted - pe.rows(3, 7)).abs().max(),
    )?;
    out.step("6. The dot product depends only on the offset (d = 64)")?;
    for k in [0.0, 1.0, 2.0, 5.0, 20.0] {
        out.scalar(&format!("PE(p)·PE(p + {k})"), dot_at_offset(k, 64)?)?;
    }
    Ok(())
}

/// The chapter's figures as data: (file stem, figure).
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let n = 64;
    let d = 64;
    let pe = sinusoidal::<f64>(n, d)?;
    let heat = Figure::Heatmap(Heatmap {
        title: "Sinusoidal position encoding, 64 positions × 64 dimensions".into(),
        x_label: "dimension j (even: sin, odd: cos)".into(),
        y_label: "position".into(),
        values: (0..n).map(|r| (0..d).map(|c| pe[(r, c)]).collect()).collect(),
        col_names: vec![],
        row_names: vec![],
        annotate: false,
    });
    // Sampled four times per position so the fast columns show as curves; a model only ever
    // evaluates them at whole positions.
    let grid: Vec<f64> = (0..=400).map(|k| k as f64 * 0.25).collect();
    let long = sinusoidal_at::<f64>(&grid, d)?;
    let dims = [0usize, 1, 10, 20, 40];
    let curves = Figure::Line(LineChart {
        title: "PE(pos, j) over position for a few dimensions j (d = 64)".into(),
        x_label: "position".into(),
        y_label: "PE(pos, j)".into(),
        series: dims
            .iter()
            .map(|&j| {
                let f = if j.is_multiple_of(2) { "sin" } else { "cos" };
                Series::new(
                    format!("j = {j} ({f}, ω = {:.3})", frequency(j / 2, d)),
                    grid.iter().enumerate().map(|(k, &p)| (p, long[(k, j)])).collect(),
                )
            })
            .collect(),
        markers: false,
    });
    let offsets: Vec<f64> = (-50..=50).map(|k| k as f64).collect();
    let dots = Figure::Line(LineChart {
        title: "PE(p)·PE(p + k) depends only on the offset k (d = 64)".into(),
        x_label: "offset k".into(),
        y_label: "dot product".into(),
        series: vec![Series::new(
            "Σᵢ cos(k ωᵢ)",
            offsets.iter().map(|&k| (k, dot_at_offset(k, d).unwrap_or(f64::NAN))).collect(),
        )],
        markers: false,
    });
    Ok(vec![
        ("ch05_pe_heatmap".into(), heat),
        ("ch05_pe_curves".into(), curves),
        ("ch05_pe_dot_offset".into(), dots),
    ])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 5,
    stem: "ch05_positions",
    title: "Sinusoidal position encodings",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
