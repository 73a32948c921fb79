//! Chapter 5: sinusoidal position encodings, D3's printed matrices, and the properties
//! that make the encoding useful.

mod common;

use llm_workbook::Error;
use llm_workbook::ch05_positions::book::{self, PRINTED_PE};
use llm_workbook::ch05_positions::{
    self as ch, D_MODEL, DOC_BREAKDOWN_EXPONENTS, DOC_SYMBOLIC_EXPONENTS, PRINTED_X_PLUS_PE,
    PRINTED_Y_PLUS_PE, Reading,
};
use llm_workbook::matmul::matmul;
use llm_workbook::plot::Figure;
use llm_workbook::report::{Status, Worked};
use nalgebra::DMatrix;

fn assert_status(w: &Worked, want: Status) {
    assert_eq!(w.status, want, "{}: printed {} ours {}", w.quantity, w.printed, w.ours);
}

fn x() -> DMatrix<f64> {
    ch::matrix3x4(&ch::X_EMBEDDINGS)
}

fn y() -> DMatrix<f64> {
    ch::matrix3x4(&ch::Y_EMBEDDINGS)
}

// ───────────────────────── the document's printed matrices ─────────────────────────

#[test]
fn breakdown_at_position_0_is_0_1_0_1() {
    for exps in [
        &DOC_BREAKDOWN_EXPONENTS[..],
        &DOC_SYMBOLIC_EXPONENTS[..],
        &ch::exponents(Reading::Standard, 4).unwrap()[..],
    ] {
        let pe: DMatrix<f64> = ch::with_exponents(&[0.0], exps).unwrap();
        assert_eq!(pe.as_slice(), &[0.0, 1.0, 0.0, 1.0]);
    }
    // The breakdown's cosine exponent 2(i+1)/d is not the formula's 2i/d: at pos = 1 they differ.
    let breakdown: DMatrix<f64> = ch::with_exponents(&[1.0], &DOC_BREAKDOWN_EXPONENTS).unwrap();
    let standard: DMatrix<f64> = ch::sinusoidal_at(&[1.0], 4).unwrap();
    assert!((breakdown[(0, 1)] - standard[(0, 1)]).abs() > 0.4, "cos(1/100) vs cos(1)");
    assert!((breakdown[(0, 3)] - standard[(0, 3)]).abs() > 4e-5);
}

#[test]
fn printed_pe_follows_the_column_index_exponent() {
    assert_eq!(ch::exponents(Reading::ColumnIndex, 4).unwrap(), vec![0.0, 0.5, 1.0, 1.5]);
    assert_eq!(ch::exponents(Reading::Standard, 4).unwrap(), vec![0.0, 0.0, 0.5, 0.5]);
    let doc = ch::walkthrough_pe(Reading::ColumnIndex).unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "PE", PRINTED_PE, 4, &doc),
        Status::Match,
    );
    // Entry by entry, to the digits printed.
    assert_eq!(format!("{:.4}", doc[(1, 0)]), "0.8415");
    assert_eq!(format!("{:.5}", doc[(1, 1)]), "0.99995");
    assert_eq!(format!("{:.4}", doc[(1, 2)]), "0.0001");
    assert_eq!(format!("{:.4}", doc[(2, 1)]), "0.9998");
    assert_eq!(format!("{:.4}", doc[(2, 2)]), "0.0002");
    assert_eq!(format!("{:.4}", doc[(2, 3)]), "1.0000");
    // The stated formula does not give the printed numbers.
    let standard = ch::walkthrough_pe(Reading::Standard).unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "PE", PRINTED_PE, 4, &standard),
        Status::Mismatch,
    );
}

#[test]
fn standard_pe_row_1_is_0_8415_0_5403_0_0100_0_99995() {
    let pe = ch::sinusoidal::<f64>(3, 4).unwrap();
    let row1: Vec<String> = (0..4).map(|c| format!("{:.5}", pe[(1, c)])).collect();
    assert_eq!(row1, ["0.84147", "0.54030", "0.01000", "0.99995"]);
    let row2: Vec<String> = (0..4).map(|c| format!("{:.4}", pe[(2, c)])).collect();
    assert_eq!(row2, ["0.9093", "-0.4161", "0.0200", "0.9998"]);
}

#[test]
fn symbolic_pe_contradicts_its_own_numbers() {
    let sym: DMatrix<f64> = ch::with_exponents(&[0.0, 1.0, 2.0], &DOC_SYMBOLIC_EXPONENTS).unwrap();
    assert!((sym[(1, 2)] - 1e-8).abs() < 1e-20);
    assert!((sym[(2, 2)] - 2e-8).abs() < 1e-20);
    // Printed beside it: 0.0001 and 0.0002, which round from the column-index reading instead.
    assert_ne!(format!("{:.4}", sym[(1, 2)]), "0.0001");
    // The other symbolic columns agree with the printed numbers at the printed precision.
    let printed = ch::printed_matrix(PRINTED_PE).unwrap();
    for (r, c) in [(1, 0), (1, 1), (1, 3), (2, 0), (2, 1), (2, 3)] {
        assert!((sym[(r, c)] - printed[(r, c)]).abs() <= 0.5e-4, "({r},{c})");
    }
}

#[test]
fn every_position_mixes_sines_and_cosines() {
    let pe = ch::sinusoidal::<f64>(50, 8).unwrap();
    assert!(ch::every_position_mixes(&pe));
    for p in 0..50 {
        for i in 0..4 {
            let a = p as f64 * ch::frequency(i, 8);
            assert!((pe[(p, 2 * i)] - a.sin()).abs() < 1e-14);
            assert!((pe[(p, 2 * i + 1)] - a.cos()).abs() < 1e-14);
        }
    }
    // A matrix with the parity swapped is caught.
    let swapped = DMatrix::from_fn(50, 8, |r, c| pe[(r, c ^ 1)]);
    assert!(!ch::every_position_mixes(&swapped));
}

#[test]
fn x_plus_pe_reproduces_the_printed_matrix() {
    let sum = x() + ch::walkthrough_pe(Reading::ColumnIndex).unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "X+PE", PRINTED_X_PLUS_PE, 4, &sum),
        Status::Match,
    );
    // The row-wise sums the document writes out for Y hold for X too: −0.3 + 0.8415 = 0.5415 …
    let printed = ch::printed_matrix(PRINTED_X_PLUS_PE).unwrap();
    let printed_pe = ch::printed_matrix(PRINTED_PE).unwrap();
    assert!((x() + &printed_pe - printed).abs().max() < 1e-12);
}

#[test]
fn y_plus_pe_reproduces_the_printed_matrix() {
    let sum = y() + ch::walkthrough_pe(Reading::ColumnIndex).unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "Y+PE", PRINTED_Y_PLUS_PE, 4, &sum),
        Status::Match,
    );
    let printed = ch::printed_matrix(PRINTED_Y_PLUS_PE).unwrap();
    let printed_pe = ch::printed_matrix(PRINTED_PE).unwrap();
    assert!((y() + &printed_pe - printed).abs().max() < 1e-12);
}

#[test]
fn standard_x_plus_pe_differs_from_the_printed_one() {
    let std_pe = ch::walkthrough_pe(Reading::Standard).unwrap();
    let xs = x() + &std_pe;
    let ys = y() + &std_pe;
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "X+PE", PRINTED_X_PLUS_PE, 4, &xs),
        Status::Mismatch,
    );
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "Y+PE", PRINTED_Y_PLUS_PE, 4, &ys),
        Status::Mismatch,
    );
    let r1: Vec<String> = (0..4).map(|c| format!("{:.5}", xs[(1, c)])).collect();
    assert_eq!(r1, ["0.54147", "1.04030", "0.11000", "0.79995"]);
    let r2: Vec<String> = (0..4).map(|c| format!("{:.4}", ys[(2, c)])).collect();
    assert_eq!(r2, ["1.4093", "-0.5161", "-0.3800", "1.2998"]);
}

// Snapshots, each compared with numpy (see chapters/ch05_positions.md, "How the numbers were
// checked").

#[test]
fn snapshot_pe_standard_3x4() {
    common::snap_matrix!("pe_standard_3x4", ch::walkthrough_pe(Reading::Standard).unwrap(), 8);
}

#[test]
fn snapshot_pe_column_index_3x4() {
    common::snap_matrix!(
        "pe_column_index_3x4",
        ch::walkthrough_pe(Reading::ColumnIndex).unwrap(),
        8
    );
}

#[test]
fn snapshot_x_plus_pe_standard() {
    common::snap_matrix!(
        "x_plus_pe_standard",
        x() + ch::walkthrough_pe(Reading::Standard).unwrap(),
        8
    );
}

#[test]
fn snapshot_y_plus_pe_standard() {
    common::snap_matrix!(
        "y_plus_pe_standard",
        y() + ch::walkthrough_pe(Reading::Standard).unwrap(),
        8
    );
}

#[test]
fn snapshot_pe_standard_8x8() {
    common::snap_matrix!("pe_standard_8x8", ch::sinusoidal::<f64>(8, 8).unwrap(), 8);
}

// ───────────────────────────── properties ─────────────────────────────

#[test]
fn frequencies_fall_geometrically_from_1() {
    let d = 64;
    assert_eq!(ch::frequency(0, d), 1.0);
    for i in 1..d / 2 {
        let ratio = ch::frequency(i, d) / ch::frequency(i - 1, d);
        assert!((ratio - 10_000f64.powf(-2.0 / d as f64)).abs() < 1e-14);
    }
    assert!((ch::frequency(d / 2 - 1, d) - 10_000f64.powf(-62.0 / 64.0)).abs() < 1e-18);
}

#[test]
fn shift_is_a_rotation_independent_of_position() {
    for d in [4usize, 16, 64] {
        for k in [1.0, 3.0, 17.0, -5.0, 0.5, 250.0] {
            let s = ch::shift_operator::<f64>(k, d).unwrap();
            // Orthogonal: SᵀS = I, so it preserves lengths.
            let sts = s.transpose() * &s;
            assert!((sts - DMatrix::<f64>::identity(d, d)).abs().max() < 1e-12, "d={d} k={k}");
            // Block-diagonal: nothing couples different pairs.
            for r in 0..d {
                for c in 0..d {
                    if r / 2 != c / 2 {
                        assert_eq!(s[(r, c)], 0.0);
                    }
                }
            }
            let positions: Vec<f64> = (0..40).map(|p| p as f64 * 7.3).collect();
            let shifted: Vec<f64> = positions.iter().map(|p| p + k).collect();
            let pe: DMatrix<f64> = ch::sinusoidal_at(&positions, d).unwrap();
            let want: DMatrix<f64> = ch::sinusoidal_at(&shifted, d).unwrap();
            let got = matmul(&pe, &s).unwrap();
            assert!((got - want).abs().max() < 1e-9, "d={d} k={k}");
        }
    }
}

#[test]
fn shift_operator_fails_for_columnwise_frequencies() {
    // The document's column-index reading gives each column its own frequency, so no single
    // matrix maps PE(pos) to PE(pos + k): the pair rotation is lost.
    let exps = ch::exponents(Reading::ColumnIndex, 4).unwrap();
    let pos: Vec<f64> = (0..10).map(|p| p as f64).collect();
    let next: Vec<f64> = pos.iter().map(|p| p + 1.0).collect();
    let a: DMatrix<f64> = ch::with_exponents(&pos, &exps).unwrap();
    let b: DMatrix<f64> = ch::with_exponents(&next, &exps).unwrap();
    // Least squares S = A⁺B, then check the residual.
    let svd = a.clone().svd(true, true);
    let s = svd.solve(&b, 1e-12).unwrap();
    let residual = (&a * &s - &b).abs().max();
    assert!(residual > 1e-3, "column-index PE should not shift linearly, residual {residual}");
    // The standard reading does, to rounding.
    let exps = ch::exponents(Reading::Standard, 4).unwrap();
    let a: DMatrix<f64> = ch::with_exponents(&pos, &exps).unwrap();
    let b: DMatrix<f64> = ch::with_exponents(&next, &exps).unwrap();
    let s = a.clone().svd(true, true).solve(&b, 1e-12).unwrap();
    assert!((&a * &s - &b).abs().max() < 1e-9);
}

#[test]
fn dot_product_depends_only_on_offset() {
    let d = 64;
    let pe = ch::sinusoidal::<f64>(300, d).unwrap();
    for k in [0usize, 1, 2, 10, 57, 100] {
        let expected = ch::dot_at_offset(k as f64, d).unwrap();
        for p in [0usize, 3, 50, 199] {
            let dot = pe.row(p).dot(&pe.row(p + k));
            assert!((dot - expected).abs() < 1e-10, "p={p} k={k}: {dot} vs {expected}");
        }
        assert_eq!(ch::dot_at_offset(-(k as f64), d).unwrap(), expected, "symmetric in k");
    }
    // Every row has squared length d/2, the largest possible dot product.
    assert_eq!(ch::dot_at_offset(0.0, d).unwrap(), 32.0);
    assert!((1..300).all(|k| ch::dot_at_offset(k as f64, d).unwrap() < 32.0));
}

#[test]
fn values_stay_in_minus_one_to_one() {
    let pe = ch::sinusoidal::<f64>(2048, 512).unwrap();
    assert!(pe.iter().all(|v| (-1.0..=1.0).contains(v)));
    assert!(pe.iter().any(|&v| v < -0.999) && pe.iter().any(|&v| v > 0.999));
    let far: DMatrix<f64> = ch::sinusoidal_at(&[1e6, 1e9, -3e7], 128).unwrap();
    assert!(far.iter().all(|v| (-1.0..=1.0).contains(v)));
}

#[test]
fn positions_get_distinct_encodings() {
    let pe = ch::sinusoidal::<f64>(1000, 64).unwrap();
    let mut closest = f64::INFINITY;
    for a in 0..1000 {
        for b in a + 1..(a + 40).min(1000) {
            closest = closest.min((pe.row(a) - pe.row(b)).norm());
        }
    }
    assert!(closest > 0.5, "neighbouring positions are at least this far apart: {closest}");
}

#[test]
fn add_positions_repeats_the_encoding_for_every_sequence_of_a_batch() {
    let x = DMatrix::from_fn(6, 4, |r, c| (r * 4 + c) as f64 * 0.1);
    let out = ch::add_positions(&x, 3).unwrap();
    let pe = ch::sinusoidal::<f64>(3, 4).unwrap();
    for r in 0..6 {
        for c in 0..4 {
            assert_eq!(out[(r, c)], x[(r, c)] + pe[(r % 3, c)]);
        }
    }
    let f32_out = ch::add_positions(&x.map(|v| v as f32), 3).unwrap();
    assert!((f32_out.map(|v| v as f64) - out).abs().max() < 1e-6);
}

#[test]
fn f32_encoding_agrees_with_f64() {
    let a = ch::sinusoidal::<f32>(128, 32).unwrap().map(|v| v as f64);
    let b = ch::sinusoidal::<f64>(128, 32).unwrap();
    assert!((a - b).abs().max() < 1e-6);
}

// ───────────────────────────── bad input ─────────────────────────────

#[test]
fn odd_or_zero_width_is_an_error() {
    for d in [1usize, 3, 5] {
        match ch::sinusoidal::<f64>(4, d) {
            Err(Error::InvalidValue { arg, reason, .. }) => {
                assert_eq!(arg, "d_model");
                assert!(reason.contains(&d.to_string()));
            }
            other => panic!("d = {d}: {other:?}"),
        }
        assert!(ch::shift_operator::<f64>(1.0, d).is_err());
        assert!(ch::dot_at_offset(1.0, d).is_err());
        assert!(ch::exponents(Reading::Standard, d).is_err());
    }
    assert!(matches!(ch::sinusoidal::<f64>(4, 0), Err(Error::Empty { arg: "d_model", .. })));
    assert!(matches!(
        ch::add_positions(&DMatrix::<f64>::zeros(3, 3), 3),
        Err(Error::InvalidValue { arg: "d_model", .. })
    ));
}

#[test]
fn bad_positions_and_batches_are_errors() {
    assert!(matches!(ch::sinusoidal::<f64>(0, 4), Err(Error::Empty { arg: "n_positions", .. })));
    assert!(matches!(ch::sinusoidal_at::<f64>(&[], 4), Err(Error::Empty { .. })));
    assert!(matches!(
        ch::sinusoidal_at::<f64>(&[0.0, f64::NAN], 4),
        Err(Error::NonFinite { arg: "positions", .. })
    ));
    assert!(matches!(ch::shift_operator::<f64>(f64::INFINITY, 4), Err(Error::NonFinite { .. })));
    let x = DMatrix::<f64>::zeros(5, 4);
    match ch::add_positions(&x, 3) {
        Err(e @ Error::Shape { .. }) => {
            let text = e.to_string();
            assert!(text.contains("5×4") && text.contains('3'), "{text}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(ch::add_positions(&x, 0), Err(Error::InvalidValue { arg: "seq_len", .. })));
    let mut bad = DMatrix::<f64>::zeros(3, 4);
    bad[(1, 2)] = f64::NAN;
    assert!(matches!(ch::add_positions(&bad, 3), Err(Error::NonFinite { arg: "x", .. })));
    assert!(matches!(ch::add_positions(&DMatrix::<f64>::zeros(0, 4), 3), Err(Error::Empty { .. })));
    assert!(ch::printed_matrix("1 2; 3").is_err());
}

// ───────────────────────────── the chapter as a whole ─────────────────────────────

#[test]
fn worked_table_has_no_mismatch_and_prose_is_current() {
    let rows = book::worked().unwrap();
    assert!(rows.iter().all(|r| r.status != Status::Mismatch), "{rows:#?}");
    assert!(rows.iter().filter(|r| r.status == Status::Erratum).count() >= 3);
    common::check_chapter_prose(&book::CHAPTER);
}

#[test]
fn figures_show_the_encoding() {
    let figs = book::figures().unwrap();
    assert_eq!(figs.len(), 3);
    let Figure::Heatmap(h) = &figs[0].1 else { panic!("first figure is the heatmap") };
    assert_eq!((h.values.len(), h.values[0].len()), (64, 64));
    assert_eq!(h.values[0][..4], [0.0, 1.0, 0.0, 1.0]);
    assert!(h.values.iter().flatten().all(|v| (-1.0..=1.0).contains(v)));
    let Figure::Line(curves) = &figs[1].1 else { panic!("second figure is the curves") };
    assert!(curves.series.len() >= 4);
    assert!(curves.series.iter().all(|s| s.points.len() == 401 && s.points[400].0 == 100.0));
    // Column 0 is sin(pos): its curve crosses zero between 3 and 3.25 (π).
    let s0 = &curves.series[0].points;
    assert!(s0[12].1 > 0.0 && s0[13].1 < 0.0);
    let Figure::Line(dots) = &figs[2].1 else { panic!("third figure is the dot products") };
    let peak = dots.series[0].points.iter().fold(f64::NEG_INFINITY, |m, p| m.max(p.1));
    assert_eq!(peak, 32.0);
}

/// The heat map's colour bar is labelled at both ends: the encoding's extremes (±1 within
/// 10^{-4}) put the bar's ends on −1 and 1, while ends far from a round value stay put.
#[test]
fn the_colour_bar_of_the_encoding_runs_from_minus_one_to_one() {
    use llm_workbook::plot::colour_bar_range;
    let figs = book::figures().unwrap();
    let Figure::Heatmap(h) = &figs[0].1 else { panic!("first figure is the heatmap") };
    let values = h.values.iter().flatten().copied();
    let (lo, hi) =
        values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    assert!(lo > -1.0, "the data stop short of −1 ({lo}), so the bar must be moved to it");
    assert_eq!(colour_bar_range(lo, hi), (-1.0, 1.0));
    assert_eq!(colour_bar_range(0.13, 0.87), (0.13, 0.87));
    assert_eq!(colour_bar_range(2.0, 2.0), (2.0, 2.0));
}

#[test]
fn plots_render() {
    common::render_plots(&book::CHAPTER, 6);
}

#[test]
fn walk_prints_every_step() {
    let text = common::walk_text(&book::CHAPTER);
    for step in ["1.", "2.", "3.", "4.", "5.", "6."] {
        assert!(text.contains(&format!("── {step}")), "{step}");
    }
    assert!(text.contains("0.99995000"));
    assert_eq!(D_MODEL, 4);
}

#[test]
fn every_erratum_names_a_test_of_this_file() {
    let source = include_str!("ch05_positions.rs");
    for test in book::ERRATA.iter().flat_map(|e| e.tests) {
        let (file, name) = test.split_once("::").expect("tests/<file>.rs::<name>");
        assert_eq!(file, "tests/ch05_positions.rs");
        assert!(source.contains(&format!("fn {name}()")), "{name} is not a test here");
    }
    for w in book::worked().unwrap().iter().filter(|w| !w.test.is_empty()) {
        assert!(source.contains(&format!("fn {}()", w.test)), "{} is not a test here", w.test);
    }
}
