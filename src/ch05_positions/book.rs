//! What the book shows of chapter 5: the document's printed PE, the errata, the worked numbers,
//! the walk-through and the figures, and the chapter's entry in the book.

use super::example::walk_positions;
use super::{
    D_MODEL, DOC_BREAKDOWN_EXPONENTS, DOC_SYMBOLIC_EXPONENTS, PRINTED_X_PLUS_PE, PRINTED_Y_PLUS_PE,
    Reading, SEQ_LEN, X_EMBEDDINGS, Y_EMBEDDINGS, dot_at_offset, every_position_mixes, frequency,
    matrix3x4, shift_operator, sinusoidal, sinusoidal_at, walkthrough_pe, with_exponents,
};
use crate::errata::{Erratum, Kind};
use crate::error::Result;
use crate::plot::{Figure, Heatmap, LineChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::sources::D3;
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

/// The position encoding D3 prints for positions 0, 1, 2 (input and output alike).
pub const PRINTED_PE: &str = "0 1 0 1; 0.8415 0.99995 0.0001 1; 0.9093 0.9998 0.0002 1";

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D3,
        section: "1.5 Position Encoding, PE_input and PE_output",
        printed: "PE rows 1, 2 = (0.8415, 0.99995, 0.0001, 1), (0.9093, 0.9998, 0.0002, 1)",
        correct: "(0.8415, 0.5403, 0.0100, 0.99995), (0.9093, −0.4161, 0.0200, 0.9998)",
        why: "The stated formula gives both columns of pair i the exponent 2i/d \
            (0, 0, 0.5, 0.5 for d = 4). The printed numbers follow 2j/d with the column index j \
            (0, 0.5, 1, 1.5): cos(1/100) = 0.99995 in column 1 and sin(1/10000) = 0.0001 in column \
            2. With that reading every printed entry is reproduced, and so are the sums X + PE \
            row 1 = (0.5415, 1.49995, 0.1001, 0.8) and Y + PE row 2 = (1.4093, 0.8998, −0.3998, \
            1.3) \
            printed under Adding Them Together (standard: (0.5415, 1.0403, 0.1100, 0.79995) and \
            (1.4093, −0.5161, −0.3800, 1.2998)); chapter 6 starts from the printed X + PE, as the \
            document's later numbers do.",
        kind: Kind::Erratum,
        tests: &[
            "tests/ch05_positions.rs::printed_pe_follows_the_column_index_exponent",
            "tests/ch05_positions.rs::standard_x_plus_pe_differs_from_the_printed_one",
        ],
    },
    Erratum {
        document: D3,
        section: "1.5 Position Encoding, symbolic PE_input",
        printed: "column 2 = sin(pos/10000²) = 0.0001, 0.0002 (exponents 0, 0.5, 2, 2.5)",
        correct: "sin(1/10000²) = 1.0·10⁻⁸, sin(2/10000²) = 2.0·10⁻⁸; standard: \
            sin(pos/100) = 0.0100, 0.0200",
        why: "The symbolic matrix writes a third set of exponents (0, 0.5, 2, 2.5) whose column 2 \
            is a hundred-millionth, not the 0.0001 printed beside it; the first Python cell of the \
            supplement evaluates this symbolic form, which is why its Q row 1 reads 1.59995001 and \
            0.64147099 where the printed X + PE gives 1.60005 and 0.6416 (chapter 6).",
        kind: Kind::Erratum,
        tests: &["tests/ch05_positions.rs::symbolic_pe_contradicts_its_own_numbers"],
    },
    Erratum {
        document: D3,
        section: "1.5 Position Encoding, breakdown at pos = 0",
        printed: "PE(0, 2i+1) = cos(0/10000^(2(i+1)/d))",
        correct: "PE(pos, 2i+1) = cos(pos/10000^(2i/d))",
        why: "The cosine of pair i uses the same exponent 2i/d as its sine; 2(i+1)/d would give \
            each cosine the next pair's frequency. At pos = 0 every cosine is 1 whatever the \
            exponent, so the values 0, 1, 0, 1 are right, but the expression is not the formula.",
        kind: Kind::Erratum,
        tests: &["tests/ch05_positions.rs::breakdown_at_position_0_is_0_1_0_1"],
    },
    Erratum {
        document: D3,
        section: "1.5 Position Encoding, the bullet under the formula",
        printed: "sin for even positions, cos for odd positions",
        correct: "sin fills the even dimensions (columns 2i) and cos the odd dimensions (2i + 1), \
            at every position",
        why: "Every position gets both sines and cosines; the parity that chooses between them is \
            that of the column index, which the bullet calls a position (the formula beside it, \
            PE(pos, 2i) and PE(pos, 2i + 1), is right).",
        kind: Kind::Notation,
        tests: &["tests/ch05_positions.rs::every_position_mixes_sines_and_cosines"],
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
