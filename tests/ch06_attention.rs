//! Chapter 6: attention, multi-head attention, LayerNorm, the feed-forward net and the block:
//! D3's walk-through, gradient checks of every backward, invariants, bad input.

mod common;

use llm_workbook::Error;
use llm_workbook::ch03_mlp::Activation;
use llm_workbook::ch05_positions as ch05;
use llm_workbook::ch06_attention::{
    self as ch, AttnSpec, Block, Epsilon, Ffn, LayerNorm, MultiHead, NormOrder, book,
};
use llm_workbook::gradcheck::{Config, check};
use llm_workbook::matmul::matmul;
use llm_workbook::plot::Figure;
use llm_workbook::report::{Status, Worked};
use llm_workbook::rng::Rng;
use nalgebra::DMatrix;

fn assert_status(w: &Worked, want: Status) {
    assert_eq!(w.status, want, "{}: printed {} ours {}", w.quantity, w.printed, w.ours);
}

/// Match, or every entry within one unit of the last printed digit (a tie printed either way).
fn assert_reproduced(w: &Worked) {
    assert!(
        matches!(w.status, Status::Match | Status::Rounding),
        "{}: printed {} ours {}",
        w.quantity,
        w.printed,
        w.ours
    );
}

fn p(text: &str) -> DMatrix<f64> {
    book::printed(text).unwrap()
}

fn rand(rng: &mut Rng, r: usize, c: usize) -> DMatrix<f64> {
    rng.normal_matrix(r, c, 1.0)
}

fn weighted_sum(m: &DMatrix<f64>, r: &DMatrix<f64>) -> f64 {
    m.component_mul(r).sum()
}

// ───────────────────────── D3: Q, K, V ─────────────────────────

#[test]
fn q_first_row_by_hand_is_1_5_1_1_2_6_0() {
    let hand = book::first_row_by_hand().unwrap();
    assert_eq!(hand.map(|v| format!("{v:.4}")), ["1.5000", "1.1000", "2.6000", "0.0000"]);
    // The printed hand sum for Q[1,3] drops the last product 1.4 × 1: 0 + 1.2 + 0 + 0 = 1.2.
    let x = p(ch05::PRINTED_X_PLUS_PE);
    let w = book::m4(&book::W_Q);
    let products: Vec<f64> = (0..4).map(|j| x[(0, j)] * w[(j, 2)]).collect();
    assert_eq!(products, [0.0, 1.2, -0.0, 1.4]);
    assert!(
        (products[..3].iter().sum::<f64>() - 1.2).abs() < 1e-15,
        "the printed 1.2 is the sum without the last term"
    );
    assert_eq!(format!("{:.1}", book::walkthrough().unwrap().q[(0, 2)]), "2.6");
}

#[test]
fn main_text_q_follows_the_symbolic_pe() {
    let x_sym: DMatrix<f64> = ch05::matrix3x4(&ch05::X_EMBEDDINGS)
        + ch05::with_exponents(&[0.0, 1.0, 2.0], &ch05::DOC_SYMBOLIC_EXPONENTS).unwrap();
    let q_sym = matmul(&x_sym, &book::m4(&book::W_Q)).unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "Q", book::PRINTED_Q_MAIN, 4, &q_sym),
        Status::Match,
    );
    // From the printed X + PE (what K, V and the attention use) row 3 differs: 0.9 and 1.5095.
    let q = book::walkthrough().unwrap().q;
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "Q", book::PRINTED_Q_MAIN, 4, &q),
        Status::Mismatch,
    );
    assert_eq!(format!("{:.4} {:.4}", q[(2, 1)], q[(2, 3)]), "0.9000 1.5095");
}

#[test]
fn python_cell_q_uses_the_symbolic_pe() {
    let x_sym: DMatrix<f64> = ch05::matrix3x4(&ch05::X_EMBEDDINGS)
        + ch05::with_exponents(&[0.0, 1.0, 2.0], &ch05::DOC_SYMBOLIC_EXPONENTS).unwrap();
    let q_sym = matmul(&x_sym, &book::m4(&book::W_Q)).unwrap();
    assert_status(
        &Worked::matrix(
            "t",
            llm_workbook::sources::D3,
            "Q",
            book::PRINTED_Q_CELL_SYMBOLIC,
            8,
            &q_sym,
        ),
        Status::Match,
    );
    assert_eq!(format!("{:.8}", q_sym[(1, 1)]), "1.59995001");
    assert_eq!(format!("{:.8}", q_sym[(2, 3)]), "1.50929745");
}

#[test]
fn qkv_cell_is_reproduced() {
    let w = book::walkthrough().unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "Q", book::PRINTED_Q, 5, &w.q),
        Status::Match,
    );
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "K", book::PRINTED_K, 5, &w.k),
        Status::Match,
    );
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "V", book::PRINTED_V, 5, &w.v),
        Status::Match,
    );
    // Exactly, not only at the printed precision: the inputs have at most five decimals.
    assert!((&w.q - p(book::PRINTED_Q)).abs().max() < 1e-12);
    assert!((&w.k - p(book::PRINTED_K)).abs().max() < 1e-12);
    assert!((&w.v - p(book::PRINTED_V)).abs().max() < 1e-12);
}

#[test]
fn k_heading_shows_q_again() {
    let w = book::walkthrough().unwrap();
    assert_status(
        &Worked::matrix(
            "t",
            llm_workbook::sources::D3,
            "K?",
            book::PRINTED_UNDER_K_HEADING,
            4,
            &w.k,
        ),
        Status::Mismatch,
    );
    assert_eq!(book::PRINTED_UNDER_K_HEADING, book::PRINTED_Q_MAIN);
    assert_eq!(
        (0..4).map(|c| format!("{:.1}", w.k[(0, c)])).collect::<Vec<_>>(),
        ["1.1", "1.5", "0.0", "2.6"]
    );
}

#[test]
fn v_follows_the_first_w_v_not_the_displayed_one() {
    let w = book::walkthrough().unwrap();
    assert_reproduced(&Worked::matrix(
        "t",
        llm_workbook::sources::D3,
        "V",
        book::PRINTED_V_MAIN,
        4,
        &w.v,
    ));
    let displayed = matmul(&w.x_pe, &book::m4(&book::W_V_DISPLAYED)).unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "V", book::PRINTED_V_MAIN, 4, &displayed),
        Status::Mismatch,
    );
    assert_eq!(
        (0..4).map(|c| format!("{:.1}", displayed[(0, c)])).collect::<Vec<_>>(),
        ["2.6", "1.1", "1.5", "0.0"]
    );
}

#[test]
fn y_qkv_are_reproduced() {
    let w = book::walkthrough().unwrap();
    for (m, cell, main) in [
        (&w.qkv_y[0], book::PRINTED_Q_Y, book::PRINTED_Q_Y_MAIN),
        (&w.qkv_y[1], book::PRINTED_K_Y, book::PRINTED_K_Y_MAIN),
        (&w.qkv_y[2], book::PRINTED_V_Y, book::PRINTED_V_Y_MAIN),
    ] {
        assert_status(
            &Worked::matrix("t", llm_workbook::sources::D3, "cell", cell, 5, m),
            Status::Match,
        );
        assert_reproduced(&Worked::matrix("t", llm_workbook::sources::D3, "main", main, 4, m));
    }
}

// ───────────────────────── D3: attention ─────────────────────────

#[test]
fn scale_is_one_over_sqrt_d_k() {
    let w = book::walkthrough().unwrap();
    let raw = w.q.clone() * w.k.transpose();
    assert!((w.scores.clone() - raw * 0.5).abs().max() < 1e-15);
    // A custom scale replaces 1/√d_k.
    let s1 = ch::attention_scores(&w.q, &w.k, &AttnSpec::bidirectional(3).with_scale(1.0)).unwrap();
    assert!((s1 - &w.scores * 2.0).abs().max() < 1e-12);
}

#[test]
fn attention_weights_are_reproduced() {
    let w = book::walkthrough().unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "A", book::PRINTED_WEIGHTS, 8, &w.weights),
        Status::Match,
    );
}

#[test]
fn attention_output_is_reproduced() {
    let w = book::walkthrough().unwrap();
    assert_status(
        &Worked::matrix(
            "t",
            llm_workbook::sources::D3,
            "AV",
            book::PRINTED_ATTENTION,
            8,
            &w.attention,
        ),
        Status::Match,
    );
}

#[test]
fn attention_rows_sum_to_one() {
    let w = book::walkthrough().unwrap();
    for r in 0..3 {
        assert!((w.weights.row(r).sum() - 1.0).abs() < 1e-15);
    }
    let mut rng = Rng::new(3);
    let (q, k, v) = (rand(&mut rng, 10, 4), rand(&mut rng, 10, 4), rand(&mut rng, 10, 3));
    for spec in [
        AttnSpec::bidirectional(5),
        AttnSpec::causal(5),
        AttnSpec::causal(5).with_mask(ch::padding_mask(&[5, 3], 5, 5).unwrap()),
    ] {
        let a = ch::attention_forward(&q, &k, &v, &spec).unwrap();
        for r in 0..10 {
            assert!((a.weights.row(r).sum() - 1.0).abs() < 1e-14);
            assert!(a.weights.row(r).iter().all(|&x| (0.0..=1.0).contains(&x)));
        }
    }
}

#[test]
fn concatenation_is_reproduced() {
    let w = book::walkthrough().unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "C", book::PRINTED_CONCAT, 8, &w.concat),
        Status::Match,
    );
    assert_eq!(w.concat.shape(), (3, 8));
}

#[test]
fn multihead_output_is_concat_times_w_o() {
    let w = book::walkthrough().unwrap();
    assert_status(
        &Worked::matrix(
            "t",
            llm_workbook::sources::D3,
            "M",
            book::PRINTED_MULTIHEAD,
            8,
            &w.multihead,
        ),
        Status::Match,
    );
    // What the main text prints after "the final multi-head attention output will be" is the
    // concatenation again: the wrong shape.
    assert_eq!(p(book::PRINTED_CONCAT).shape(), (3, 8));
    assert_eq!(w.multihead.shape(), (3, 4));
}

#[test]
fn w_o_filled_with_0_5_is_not_what_was_used() {
    let w = book::walkthrough().unwrap();
    let half = matmul(&w.concat, &DMatrix::from_element(8, 4, 0.5)).unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "M", book::PRINTED_MULTIHEAD, 8, &half),
        Status::Mismatch,
    );
    // Every column equal, half the row sum.
    for r in 0..3 {
        assert!((0..4).all(|c| (half[(r, c)] - w.concat.row(r).sum() / 2.0).abs() < 1e-12));
    }
    assert_eq!(format!("{:.8}", half[(0, 0)]), "5.92954852");
}

#[test]
fn w_o_filled_with_0_5_misses_every_printed_row() {
    let w = book::walkthrough().unwrap();
    let half = matmul(&w.concat, &DMatrix::from_element(8, 4, 0.5)).unwrap();
    let printed = p(book::PRINTED_MULTIHEAD);
    // With W_O all 0.5 each row is four copies of half its Concat row's sum, at 8 decimals …
    let want = ["5.92954852", "6.02018627", "5.68995938"];
    for (r, want) in want.iter().enumerate() {
        for c in 0..4 {
            assert_eq!(format!("{:.8}", half[(r, c)]), *want, "row {}, column {}", r + 1, c + 1);
        }
        // … and no entry of the printed row is within a unit of the 8th decimal of it.
        for c in 0..4 {
            assert!((printed[(r, c)] - half[(r, c)]).abs() > 0.1, "row {}", r + 1);
        }
    }
    // The printed rows are Concat times the random W_O printed next.
    assert!((&w.multihead - &printed).amax() < 1e-7);
}

#[test]
fn ffn_inner_width_is_4d_in_the_transformer_and_6_in_the_example() {
    let w = book::walkthrough().unwrap();
    let d = w.x_pe.ncols();
    assert_eq!((d, 4 * d), (4, 16));
    let ffn = book::doc_ffn().unwrap();
    assert_eq!(ffn.w1.shape(), (4, 6));
    assert_eq!(ffn.w2.shape(), (6, 4));
}

// ───────────────────────── D3: LayerNorm and the FFN ─────────────────────────

/// LayerNorm with a sample (N − 1) variance, for the comparison only.
fn ln_sample_variance(x: &DMatrix<f64>, eps: f64) -> DMatrix<f64> {
    let c = x.ncols() as f64;
    DMatrix::from_fn(x.nrows(), x.ncols(), |r, j| {
        let mu = x.row(r).sum() / c;
        let var = x.row(r).iter().map(|v| (v - mu).powi(2)).sum::<f64>() / (c - 1.0);
        (x[(r, j)] - mu) / (var + eps).sqrt()
    })
}

#[test]
fn layer_norm_printed_follows_std_plus_eps() {
    let w = book::walkthrough().unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "LN", book::PRINTED_LN1, 8, &w.ln1),
        Status::Match,
    );
    // The formula beside it (ε inside the square root) misses in the seventh decimal …
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "LN", book::PRINTED_LN1, 8, &w.ln1_stated),
        Status::Mismatch,
    );
    assert_eq!(format!("{:.8}", w.ln1_stated[(0, 0)]), "-1.03927194");
    // … as do ε = 0, ε = 1e-5 and the sample variance.
    let m = p(book::PRINTED_MULTIHEAD);
    for eps in [1e-5, 1e-12] {
        let ln = LayerNorm::new(4, eps).unwrap();
        let y = ch::layer_norm_forward(&ln, &m).unwrap().0;
        assert_status(
            &Worked::matrix("t", llm_workbook::sources::D3, "LN", book::PRINTED_LN1, 8, &y),
            Status::Mismatch,
        );
    }
    assert_status(
        &Worked::matrix(
            "t",
            llm_workbook::sources::D3,
            "LN",
            book::PRINTED_LN1,
            8,
            &ln_sample_variance(&m, 1e-6),
        ),
        Status::Mismatch,
    );
}

#[test]
fn ffn_is_reproduced() {
    let w = book::walkthrough().unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "FFN", book::PRINTED_FFN, 8, &w.ffn),
        Status::Match,
    );
    // The hidden layer 4 → 6 → 4, and every hidden unit is positive here, so ReLU changes nothing.
    let (_, cache) = ch::ffn_forward(&book::doc_ffn().unwrap(), &p(book::PRINTED_LN1)).unwrap();
    assert_eq!(cache.z1.shape(), (3, 6));
    assert!(cache.z1.iter().all(|&z| z > 0.0));
}

#[test]
fn ffn_first_entry_from_one_row_and_one_column_is_1_70355949() {
    // The supplement's second cell: row 1 of LN through W₁, b₁, ReLU, then column 1 of W₂ and
    // b₂[1].
    let ln = p(book::PRINTED_LN1);
    let f = book::doc_ffn().unwrap();
    let z1: Vec<f64> = (0..6)
        .map(|h| (0..4).map(|j| ln[(0, j)] * f.w1[(j, h)]).sum::<f64>() + f.b1[(0, h)])
        .collect();
    let z2 =
        z1.iter().enumerate().map(|(h, z)| z.max(0.0) * f.w2[(h, 0)]).sum::<f64>() + f.b2[(0, 0)];
    assert_eq!(format!("{z2:.8}"), "1.70355949");
}

#[test]
fn final_layer_norm_is_reproduced() {
    let w = book::walkthrough().unwrap();
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "LN2", book::PRINTED_LN2, 8, &w.ln2),
        Status::Match,
    );
    // This one follows the stated formula: σ + ε misses it.
    let other = ch::layer_norm_forward(
        &book::doc_layer_norm(Epsilon::AddedToStd).unwrap(),
        &p(book::PRINTED_FFN),
    )
    .unwrap()
    .0;
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "LN2", book::PRINTED_LN2, 8, &other),
        Status::Mismatch,
    );
}

#[test]
fn ffn_rows_are_arithmetic_not_scalar_multiples() {
    let ffn = p(book::PRINTED_FFN);
    assert!(book::rows_are_arithmetic(&ffn, 2e-8));
    assert!(book::rows_are_arithmetic(&book::walkthrough().unwrap().ffn, 1e-12));
    let ratios: Vec<String> =
        (0..3).map(|c| format!("{:.2}", ffn[(0, c + 1)] / ffn[(0, c)])).collect();
    assert_eq!(ratios, ["2.69", "1.63", "1.39"]);
    // Rows are not multiples of one another either.
    assert!((ffn[(1, 0)] / ffn[(0, 0)] - ffn[(1, 3)] / ffn[(0, 3)]).abs() > 1e-4);
    // Any arithmetic progression normalises to ±1.3416, ±0.4472 (here with ε = 0 in the limit).
    let ap = DMatrix::from_row_slice(1, 4, &[-7.0, -2.0, 3.0, 8.0]);
    let y = ch::layer_norm_forward(&LayerNorm::new(4, 1e-12).unwrap(), &ap).unwrap().0;
    let want = [-3.0, -1.0, 1.0, 3.0].map(|v: f64| v / 5f64.sqrt());
    assert!((0..4).all(|c| (y[(0, c)] - want[c]).abs() < 1e-10));
    // A non-arithmetic row is told apart.
    assert!(!book::rows_are_arithmetic(&DMatrix::from_row_slice(1, 4, &[1.0, 2.0, 4.0, 8.0]), 0.5));
}

#[test]
fn walkthrough_omits_the_residual_connections() {
    let w = book::walkthrough().unwrap();
    let ln = book::doc_layer_norm(Epsilon::InsideSqrt).unwrap();
    let with_residual =
        ch::layer_norm_forward(&ln, &(&w.x_pe + p(book::PRINTED_MULTIHEAD))).unwrap().0;
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "LN", book::PRINTED_LN1, 8, &with_residual),
        Status::Mismatch,
    );
    assert_eq!(format!("{:.8}", with_residual[(0, 0)]), "-1.66120976");
    // The standard chain starts from the standard PE, so its first LayerNorm differs again.
    let s = book::standard_chain().unwrap();
    assert!((s.h.clone() - with_residual).abs().max() > 1e-3);
}

#[test]
fn chain_from_scratch_agrees_with_the_printed_steps() {
    // The document feeds each step the previous step's printed (8-decimal) numbers. Computing the
    // whole chain without rounding lands within rounding of every printed matrix.
    let w = book::walkthrough().unwrap();
    let concat = ch::concat_heads(&[w.attention.clone(), p(book::HEAD_2)]).unwrap();
    let m = matmul(&concat, &p(book::W_O)).unwrap();
    let ln1 =
        ch::layer_norm_forward(&book::doc_layer_norm(Epsilon::AddedToStd).unwrap(), &m).unwrap().0;
    let ffn = ch::ffn_forward(&book::doc_ffn().unwrap(), &ln1).unwrap().0;
    let ln2 = ch::layer_norm_forward(&book::doc_layer_norm(Epsilon::InsideSqrt).unwrap(), &ffn)
        .unwrap()
        .0;
    for (ours, printed) in [
        (&m, book::PRINTED_MULTIHEAD),
        (&ln1, book::PRINTED_LN1),
        (&ffn, book::PRINTED_FFN),
        (&ln2, book::PRINTED_LN2),
    ] {
        assert!((ours - p(printed)).abs().max() < 1e-7, "{printed}");
    }
}

// Snapshots of the walk-through, each compared with numpy (tests/checks/ch06_attention.py).

#[test]
fn snapshot_scores() {
    common::snap_matrix!("scores", book::walkthrough().unwrap().scores, 8);
}

#[test]
fn snapshot_weights() {
    common::snap_matrix!("weights", book::walkthrough().unwrap().weights, 8);
}

#[test]
fn snapshot_attention() {
    common::snap_matrix!("attention", book::walkthrough().unwrap().attention, 8);
}

#[test]
fn snapshot_weights_causal() {
    let w = book::walkthrough().unwrap();
    common::snap_matrix!(
        "weights_causal",
        ch::attention_forward(&w.q, &w.k, &w.v, &AttnSpec::causal(3)).unwrap().weights,
        8
    );
}

#[test]
fn snapshot_attention_causal() {
    let w = book::walkthrough().unwrap();
    common::snap_matrix!(
        "attention_causal",
        ch::attention_forward(&w.q, &w.k, &w.v, &AttnSpec::causal(3)).unwrap().out,
        8
    );
}

#[test]
fn snapshot_multihead() {
    common::snap_matrix!("multihead", book::walkthrough().unwrap().multihead, 8);
}

#[test]
fn snapshot_ln1_std_plus_eps() {
    common::snap_matrix!("ln1_std_plus_eps", book::walkthrough().unwrap().ln1, 8);
}

#[test]
fn snapshot_ln1_stated_formula() {
    common::snap_matrix!("ln1_stated_formula", book::walkthrough().unwrap().ln1_stated, 8);
}

#[test]
fn snapshot_ffn() {
    common::snap_matrix!("ffn", book::walkthrough().unwrap().ffn, 8);
}

#[test]
fn snapshot_ln2() {
    common::snap_matrix!("ln2", book::walkthrough().unwrap().ln2, 8);
}

#[test]
fn snapshot_standard_weights() {
    common::snap_matrix!("standard_weights", book::standard_chain().unwrap().weights, 8);
}

#[test]
fn snapshot_standard_attention() {
    common::snap_matrix!("standard_attention", book::standard_chain().unwrap().attention, 8);
}

#[test]
fn snapshot_standard_multihead() {
    common::snap_matrix!("standard_multihead", book::standard_chain().unwrap().multihead, 8);
}

#[test]
fn snapshot_standard_h() {
    common::snap_matrix!("standard_h", book::standard_chain().unwrap().h, 8);
}

#[test]
fn snapshot_standard_out() {
    common::snap_matrix!("standard_out", book::standard_chain().unwrap().out, 8);
}

#[test]
fn snapshot_two_head_example() {
    let heads = book::two_head_example().unwrap().weights;
    common::snap_matrix!("head0_previous_token", heads[0], 6);
    common::snap_matrix!("head1_same_token", heads[1], 6);
}

// ───────────────────────── other documents' claims ─────────────────────────

#[test]
fn attention_weights_grow_quadratically_with_length() {
    assert_eq!(ch::attention_weight_entries(1000), 1_000_000);
    assert_eq!(ch::attention_weight_entries(500), 250_000);
    // The weight matrix attention actually builds has that many entries.
    let mut rng = Rng::new(5);
    for n in [5usize, 10, 20] {
        let x = rand(&mut rng, n, 4);
        let a = ch::attention_forward(&x, &x, &x, &AttnSpec::bidirectional(n)).unwrap();
        assert_eq!(a.weights.len(), ch::attention_weight_entries(n));
    }
}

#[test]
fn gpt3_head_has_6_3_million_parameters() {
    let per_head = ch::head_parameter_count(book::GPT3_D_MODEL, book::GPT3_D_HEAD);
    assert_eq!(per_head, 6_291_456);
    assert_eq!(format!("{:.1}", per_head as f64 / 1e6), "6.3");
    assert_eq!(book::GPT3_HEADS * book::GPT3_D_HEAD, 12_288);
    assert_eq!(book::GPT3_HEADS * per_head, 603_979_776);
    assert_eq!(book::round_to_two_figures(603.979776), 600.0);
    // The value map is low rank: down (d×128) then up (128×d) has as many parameters as W_Q + W_K.
    assert_eq!(2 * book::GPT3_D_MODEL * book::GPT3_D_HEAD, per_head / 2);
    // With 12,388 the count would not be 6.3 million to one decimal with 96 × 128 heads.
    assert_ne!(12_388, book::GPT3_HEADS * book::GPT3_D_HEAD);
}

#[test]
fn multiplicative_mask_breaks_softmax() {
    assert_eq!(book::multiplicative_mask_row_text(), "NaN NaN NaN");
    // A zero score is as bad: 0 · (−∞) is NaN.
    assert!((0.0f64 * f64::NEG_INFINITY).is_nan());
    // Z ⊙ M with a negative masked score: −2 · −∞ = +∞ and the softmax is NaN.
    let z = [0.3f64, -2.0];
    let zm: Vec<f64> = z.iter().zip([1.0, f64::NEG_INFINITY]).map(|(a, b)| a * b).collect();
    assert_eq!(zm[1], f64::INFINITY);
    // Additively the same row is a proper distribution with the masked key at 0.
    let q = DMatrix::from_row_slice(2, 1, &[1.0, 1.0]);
    let k = DMatrix::from_row_slice(2, 1, &[0.3, -2.0]);
    let a = ch::attention_forward(&q, &k, &k, &AttnSpec::causal(2).with_scale(1.0)).unwrap();
    assert_eq!(a.weights[(0, 1)], 0.0);
    assert_eq!(a.weights[(0, 0)], 1.0);
}

#[test]
fn one_head_value_map_is_redundant() {
    // D2: for one head, A V W_O = A E (W_V W_O); only the product W_V W_O matters.
    let mut rng = Rng::new(11);
    let e = rand(&mut rng, 5, 6);
    let (w_q, w_k, w_v, w_o) =
        (rand(&mut rng, 6, 3), rand(&mut rng, 6, 3), rand(&mut rng, 6, 3), rand(&mut rng, 3, 6));
    let mha = MultiHead::new(1, w_q.clone(), w_k.clone(), w_v.clone(), w_o.clone()).unwrap();
    let (out, cache) = ch::mha_forward(&mha, &e, &e, &AttnSpec::causal(5)).unwrap();
    let a = &cache.weights[0];
    let folded = a * (&e * (&w_v * &w_o));
    assert!((out.clone() - folded).abs().max() < 1e-12);
    // So a second factorisation with the same product gives the same output.
    let g = DMatrix::from_fn(3, 3, |r, c| if r == c { 2.0 } else { 0.1 * (r + c) as f64 });
    let g_inv = g.clone().try_inverse().unwrap();
    let other = MultiHead::new(1, w_q, w_k, &w_v * &g, &g_inv * &w_o).unwrap();
    let (out2, _) = ch::mha_forward(&other, &e, &e, &AttnSpec::causal(5)).unwrap();
    assert!((out - out2).abs().max() < 1e-11);
}

#[test]
fn two_heads_are_a_sum_of_per_head_terms() {
    // O = [A₁V₁, A₂V₂] W_O = A₁ E W_{v,1} W_{o,1} + A₂ E W_{v,2} W_{o,2}, each product of
    // rank ≤ d/2.
    let mut rng = Rng::new(12);
    let d = 6;
    let e = rand(&mut rng, 4, d);
    let mha = MultiHead::random(2, d, d, d / 2, d, 1.0, &mut rng).unwrap();
    let (out, cache) = ch::mha_forward(&mha, &e, &e, &AttnSpec::bidirectional(4)).unwrap();
    let mut sum = DMatrix::zeros(4, d);
    for h in 0..2 {
        let wv = mha.w_v.columns(h * 3, 3).into_owned();
        let wo = mha.w_o.rows(h * 3, 3).into_owned();
        let c = &wv * &wo;
        assert_eq!(c.rank(1e-10), d / 2);
        sum += &cache.weights[h] * (&e * c);
    }
    assert!((out.clone() - &sum).abs().max() < 1e-12);
    // Mixing A₂ with V₁ (the slide's A₂V₁) is a different matrix.
    let wrong = &cache.weights[0] * (&e * (mha.w_v.columns(0, 3) * mha.w_o.rows(0, 3)))
        + &cache.weights[1] * (&e * (mha.w_v.columns(0, 3) * mha.w_o.rows(3, 3)));
    assert!((out - wrong).abs().max() > 1e-3);
}

#[test]
fn literal_reading_of_d2_normalises_the_residual_stream() {
    let mut rng = Rng::new(13);
    let blk = Block::random(8, 2, 16, Activation::Relu, NormOrder::Pre, 0.5, &mut rng).unwrap();
    let x = rand(&mut rng, 4, 8) * 3.0 + DMatrix::from_element(4, 8, 2.0);
    let spec = AttnSpec::causal(4);
    let (standard, _) = ch::block_forward(&blk, &x, &spec).unwrap();
    // Literally: E ← LN(E); Ê = E + AVW_o; Ê ← LN(Ê); E ← Ê + FFN(Ê).
    let e = ch::layer_norm_forward(&blk.ln1, &x).unwrap().0;
    let e_hat = &e + ch::mha_forward(&blk.attn, &e, &e, &spec).unwrap().0;
    let e_hat = ch::layer_norm_forward(&blk.ln2, &e_hat).unwrap().0;
    let literal = &e_hat + ch::ffn_forward(&blk.ffn, &e_hat).unwrap().0;
    assert!((standard.clone() - &literal).abs().max() > 0.1);
    // In the standard pre-LN block the input passes through unnormalised: its mean of 2 survives.
    assert!(standard.mean() > 1.0 && literal.mean().abs() < standard.mean());
}

#[test]
fn random_dot_products_have_spread_sqrt_d() {
    // D2: √d is the typical size of q·k for entries with mean 0 and variance 1.
    let mut rng = Rng::new(17);
    let d = 64;
    let n = 4000;
    let q = rand(&mut rng, n, d);
    let k = rand(&mut rng, n, d);
    let dots: Vec<f64> = (0..n).map(|i| q.row(i).dot(&k.row(i))).collect();
    let var = dots.iter().map(|x| x * x).sum::<f64>() / n as f64;
    assert!((var / d as f64 - 1.0).abs() < 0.08, "var {var}");
    let scaled: f64 = dots.iter().map(|x| (x / (d as f64).sqrt()).powi(2)).sum::<f64>() / n as f64;
    assert!((scaled - 1.0).abs() < 0.08);
}

// ───────────────────────── invariants ─────────────────────────

fn random_block(order: NormOrder, seed: u64) -> Block<f64> {
    let mut rng = Rng::new(seed);
    let mut blk = Block::random(8, 2, 16, Activation::GeluTanh, order, 0.4, &mut rng).unwrap();
    // Non-trivial biases, γ and β, so every tensor matters.
    blk.attn.b_q = rng.normal_matrix(1, 8, 0.1);
    blk.attn.b_k = rng.normal_matrix(1, 8, 0.1);
    blk.attn.b_v = rng.normal_matrix(1, 8, 0.1);
    blk.attn.b_o = rng.normal_matrix(1, 8, 0.1);
    blk.ffn.b1 = rng.normal_matrix(1, 16, 0.1);
    blk.ffn.b2 = rng.normal_matrix(1, 8, 0.1);
    blk.ln1.gamma = DMatrix::from_element(1, 8, 1.0) + rng.normal_matrix(1, 8, 0.1);
    blk.ln1.beta = rng.normal_matrix(1, 8, 0.1);
    blk.ln2.gamma = DMatrix::from_element(1, 8, 1.0) + rng.normal_matrix(1, 8, 0.1);
    blk.ln2.beta = rng.normal_matrix(1, 8, 0.1);
    blk
}

#[test]
fn causal_mask_never_leaks_a_later_token() {
    for order in [NormOrder::Pre, NormOrder::Post] {
        let blk = random_block(order, 21);
        let mut rng = Rng::new(22);
        let (b, t) = (2, 5);
        let x = rand(&mut rng, b * t, 8);
        let spec = AttnSpec::causal(t);
        let (y, _) = ch::block_forward(&blk, &x, &spec).unwrap();
        for changed in 1..t {
            let mut x2 = x.clone();
            for c in 0..8 {
                x2[(changed, c)] += 10.0 * (c as f64 - 3.5);
            }
            let (y2, _) = ch::block_forward(&blk, &x2, &spec).unwrap();
            for r in 0..changed {
                assert_eq!(
                    y.row(r),
                    y2.row(r),
                    "{order:?}: row {r} moved when token {changed} changed"
                );
            }
            assert_ne!(y.row(changed), y2.row(changed));
            // The other sequence of the batch is untouched too.
            assert_eq!(y.rows(t, t), y2.rows(t, t));
        }
    }
}

#[test]
fn causal_gradient_never_reaches_a_later_token() {
    let blk = random_block(NormOrder::Pre, 23);
    let mut rng = Rng::new(24);
    let x = rand(&mut rng, 5, 8);
    let (_, cache) = ch::block_forward(&blk, &x, &AttnSpec::causal(5)).unwrap();
    // A loss on the first two outputs only.
    let mut d_y = DMatrix::zeros(5, 8);
    d_y.rows_mut(0, 2).copy_from(&rand(&mut rng, 2, 8));
    let g = ch::block_backward(&blk, &cache, &d_y).unwrap();
    assert!(g.d_x.rows(2, 3).iter().all(|&v| v == 0.0));
    assert!(g.d_x.rows(0, 2).iter().any(|&v| v != 0.0));
}

#[test]
fn permuting_tokens_permutes_the_output() {
    let blk = random_block(NormOrder::Post, 31);
    let mut rng = Rng::new(32);
    let t = 6;
    let x = rand(&mut rng, t, 8);
    let perm = [3usize, 0, 5, 1, 4, 2];
    let xp = DMatrix::from_fn(t, 8, |r, c| x[(perm[r], c)]);
    let spec = AttnSpec::bidirectional(t);
    let (y, _) = ch::block_forward(&blk, &x, &spec).unwrap();
    let (yp, _) = ch::block_forward(&blk, &xp, &spec).unwrap();
    let y_perm = DMatrix::from_fn(t, 8, |r, c| y[(perm[r], c)]);
    assert!((yp - y_perm).abs().max() < 1e-12);
    // With positions added first, it no longer does.
    let (y, _) = ch::block_forward(&blk, &ch05::add_positions(&x, t).unwrap(), &spec).unwrap();
    let (yp, _) = ch::block_forward(&blk, &ch05::add_positions(&xp, t).unwrap(), &spec).unwrap();
    let y_perm = DMatrix::from_fn(t, 8, |r, c| y[(perm[r], c)]);
    assert!((yp - y_perm).abs().max() > 1e-3);
}

#[test]
fn layer_norm_of_a_constant_row_is_beta() {
    for placement in [Epsilon::InsideSqrt, Epsilon::AddedToStd] {
        let mut ln = LayerNorm::new(4, 1e-6).unwrap().with_placement(placement);
        ln.gamma = DMatrix::from_row_slice(1, 4, &[2.0, -1.0, 0.5, 3.0]);
        ln.beta = DMatrix::from_row_slice(1, 4, &[0.1, 0.2, 0.3, 0.4]);
        let x = DMatrix::from_row_slice(2, 4, &[7.0, 7.0, 7.0, 7.0, 0.0, 0.0, 0.0, 0.0]);
        let (y, cache) = ch::layer_norm_forward(&ln, &x).unwrap();
        assert!(y.iter().all(|v: &f64| v.is_finite()));
        for r in 0..2 {
            assert_eq!(y.row(r), ln.beta.row(0));
        }
        let g = ch::layer_norm_backward(&ln, &cache, &DMatrix::from_element(2, 4, 1.0)).unwrap();
        assert!(g.d_x.iter().all(|v: &f64| v.is_finite()));
    }
}

#[test]
fn layer_norm_rows_have_mean_0_and_variance_1() {
    let mut rng = Rng::new(41);
    let x = rand(&mut rng, 7, 16) * 5.0 + DMatrix::from_element(7, 16, 3.0);
    let (y, _) = ch::layer_norm_forward(&LayerNorm::new(16, 1e-9).unwrap(), &x).unwrap();
    for r in 0..7 {
        let mean = y.row(r).mean();
        let var = y.row(r).iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 16.0;
        assert!(mean.abs() < 1e-12 && (var - 1.0).abs() < 1e-8);
    }
}

#[test]
fn batch_is_the_same_as_one_sequence_at_a_time() {
    let mut rng = Rng::new(51);
    let (b, tq, tk) = (3, 2, 4);
    let (q, k, v) =
        (rand(&mut rng, b * tq, 5), rand(&mut rng, b * tk, 5), rand(&mut rng, b * tk, 3));
    let spec = AttnSpec::cross(tq, tk);
    let all = ch::attention_forward(&q, &k, &v, &spec).unwrap();
    for s in 0..b {
        let one = ch::attention_forward(
            &q.rows(s * tq, tq).into_owned(),
            &k.rows(s * tk, tk).into_owned(),
            &v.rows(s * tk, tk).into_owned(),
            &spec,
        )
        .unwrap();
        assert_eq!(all.out.rows(s * tq, tq), one.out.rows(0, tq));
        assert_eq!(all.weights.rows(s * tq, tq), one.weights.rows(0, tq));
    }
}

#[test]
fn cross_attention_takes_keys_from_another_sequence_of_another_width() {
    let mut rng = Rng::new(52);
    let (b, tq, tk) = (2, 3, 5);
    let mha = MultiHead::random(2, 6, 10, 4, 7, 0.5, &mut rng).unwrap();
    let x_q = rand(&mut rng, b * tq, 6);
    let x_kv = rand(&mut rng, b * tk, 10);
    let (out, cache) = ch::mha_forward(&mha, &x_q, &x_kv, &AttnSpec::cross(tq, tk)).unwrap();
    assert_eq!(out.shape(), (b * tq, 7));
    assert_eq!(cache.weights[0].shape(), (b * tq, tk));
    // Changing the decoder side's query 0 leaves the other queries' outputs alone (no mixing
    // among queries).
    let mut x_q2 = x_q.clone();
    x_q2[(0, 0)] += 1.0;
    let (out2, _) = ch::mha_forward(&mha, &x_q2, &x_kv, &AttnSpec::cross(tq, tk)).unwrap();
    assert_eq!(out.rows(1, b * tq - 1), out2.rows(1, b * tq - 1));
}

#[test]
fn padding_mask_ignores_the_padded_keys() {
    let mut rng = Rng::new(53);
    let (b, t) = (2, 4);
    let x = rand(&mut rng, b * t, 4);
    let spec = AttnSpec::bidirectional(t).with_mask(ch::padding_mask(&[4, 2], t, t).unwrap());
    let a = ch::attention_forward(&x, &x, &x, &spec).unwrap();
    assert!(a.weights.rows(t, t).columns(2, 2).iter().all(|&w| w == 0.0));
    let mut x2 = x.clone();
    for r in [t + 2, t + 3] {
        for c in 0..4 {
            x2[(r, c)] = 100.0 * (c as f64 + 1.0);
        }
    }
    let k2 = x2.clone();
    let a2 = ch::attention_forward(&x, &k2, &k2, &spec).unwrap();
    assert_eq!(a.out, a2.out, "values and keys behind padding never matter");
}

#[test]
fn causal_with_a_cache_matches_the_last_rows_of_full_attention() {
    let mut rng = Rng::new(54);
    let (q, k, v) = (rand(&mut rng, 6, 4), rand(&mut rng, 6, 4), rand(&mut rng, 6, 4));
    let full = ch::attention_forward(&q, &k, &v, &AttnSpec::causal(6)).unwrap();
    let spec = AttnSpec { q_len: 2, kv_len: 6, causal: true, mask: None, scale: None };
    let last = ch::attention_forward(&q.rows(4, 2).into_owned(), &k, &v, &spec).unwrap();
    assert!((full.out.rows(4, 2) - last.out).abs().max() < 1e-15);
    assert_eq!(ch::causal_mask::<f64>(2, 4).unwrap()[(0, 3)], f64::NEG_INFINITY);
    assert_eq!(ch::causal_mask::<f64>(2, 4).unwrap()[(0, 2)], 0.0);
}

#[test]
fn explicit_causal_mask_equals_the_causal_flag() {
    let mut rng = Rng::new(55);
    let x = rand(&mut rng, 8, 4);
    let a = ch::attention_forward(&x, &x, &x, &AttnSpec::causal(4)).unwrap();
    let b = ch::attention_forward(
        &x,
        &x,
        &x,
        &AttnSpec::bidirectional(4).with_mask(ch::causal_mask(4, 4).unwrap()),
    )
    .unwrap();
    assert_eq!(a, b);
}

#[test]
fn f32_block_agrees_with_f64() {
    let blk = random_block(NormOrder::Pre, 61);
    let mut rng = Rng::new(62);
    let x = rand(&mut rng, 6, 8);
    let spec = AttnSpec::causal(3);
    let (y64, _) = ch::block_forward(&blk, &x, &spec).unwrap();
    let c = |m: &DMatrix<f64>| llm_workbook::float::cast::<f64, f32>(m);
    let mh = &blk.attn;
    let blk32 = Block {
        attn: MultiHead {
            heads: mh.heads,
            w_q: c(&mh.w_q),
            b_q: c(&mh.b_q),
            w_k: c(&mh.w_k),
            b_k: c(&mh.b_k),
            w_v: c(&mh.w_v),
            b_v: c(&mh.b_v),
            w_o: c(&mh.w_o),
            b_o: c(&mh.b_o),
        },
        ln1: LayerNorm {
            gamma: c(&blk.ln1.gamma),
            beta: c(&blk.ln1.beta),
            eps: blk.ln1.eps,
            placement: blk.ln1.placement,
        },
        ffn: Ffn {
            w1: c(&blk.ffn.w1),
            b1: c(&blk.ffn.b1),
            w2: c(&blk.ffn.w2),
            b2: c(&blk.ffn.b2),
            act: blk.ffn.act,
        },
        ln2: LayerNorm {
            gamma: c(&blk.ln2.gamma),
            beta: c(&blk.ln2.beta),
            eps: blk.ln2.eps,
            placement: blk.ln2.placement,
        },
        order: blk.order,
    };
    let (y32, _) = ch::block_forward(&blk32, &c(&x), &AttnSpec::causal(3)).unwrap();
    let diff = (llm_workbook::float::cast::<f32, f64>(&y32) - y64).abs().max();
    assert!(diff < 1e-4, "{diff}");
}

#[test]
fn two_head_example_heads_look_back_and_at_themselves() {
    let heads = book::two_head_example().unwrap().weights;
    for i in 0..6 {
        let argmax =
            |m: &DMatrix<f64>| (0..6).max_by(|&a, &b| m[(i, a)].total_cmp(&m[(i, b)])).unwrap();
        assert_eq!(argmax(&heads[0]), i.saturating_sub(1), "head 0, query {i}");
        assert_eq!(argmax(&heads[1]), i, "head 1, query {i}");
        assert!(heads[0][(i, i.saturating_sub(1))] > 0.5);
    }
}

// ───────────────────────── gradient checks ─────────────────────────

#[test]
fn attention_backward_passes_gradient_checks() {
    let mut rng = Rng::new(71);
    let cases: Vec<(AttnSpec<f64>, usize, usize)> = vec![
        (AttnSpec::bidirectional(3), 2, 3),
        (AttnSpec::causal(3), 2, 3),
        (AttnSpec::causal(3).with_scale(0.7), 1, 3),
        (AttnSpec::bidirectional(4).with_mask(ch::padding_mask(&[4, 2], 4, 4).unwrap()), 2, 4),
        (AttnSpec::cross(2, 3), 2, 3),
        (AttnSpec { q_len: 2, kv_len: 4, causal: true, mask: None, scale: None }, 2, 4),
    ];
    for (spec, b, tk) in cases {
        let (q, k, v) = (
            rand(&mut rng, b * spec.q_len, 4),
            rand(&mut rng, b * tk, 4),
            rand(&mut rng, b * tk, 3),
        );
        let r = rand(&mut rng, b * spec.q_len, 3);
        let a = ch::attention_forward(&q, &k, &v, &spec).unwrap();
        let g = ch::attention_backward(&q, &k, &v, &a.weights, &r, &spec).unwrap();
        check(Config::default(), &[("q", q), ("k", k), ("v", v)], &[g.d_q, g.d_k, g.d_v], |t| {
            weighted_sum(&ch::attention_forward(&t[0], &t[1], &t[2], &spec).unwrap().out, &r)
        })
        .assert_passed();
    }
}

/// The check used for multi-head attention and whole blocks. Their losses sum many terms, so the
/// rounding noise of a central difference (about 1e-16·|L|/h) reaches 1e-9 with the default step;
/// h = 1e-5 cuts it tenfold, and gradients under 1e-3 are compared absolutely (|a − n| ≤ 1e-9).
/// This matters for b_K, whose true gradient is exactly zero (`key_bias_gradient_is_exactly_zero`):
/// a relative error between two numbers that are zero up to rounding means nothing.
const WIDE: Config = Config { step: 1e-5, tolerance: 1e-6, floor: 1e-3 };

fn mha_from(t: &[DMatrix<f64>], heads: usize) -> MultiHead<f64> {
    MultiHead {
        heads,
        w_q: t[2].clone(),
        b_q: t[3].clone(),
        w_k: t[4].clone(),
        b_k: t[5].clone(),
        w_v: t[6].clone(),
        b_v: t[7].clone(),
        w_o: t[8].clone(),
        b_o: t[9].clone(),
    }
}

#[test]
fn mha_backward_passes_gradient_checks() {
    let mut rng = Rng::new(72);
    // (spec, [batch, C_q, C_kv, heads, d_head, C_out])
    let cases = [
        (AttnSpec::causal(3), [2, 4, 4, 2, 2, 4]),
        (AttnSpec::cross(2, 3), [2, 3, 5, 2, 3, 4]),
        (AttnSpec::bidirectional(3), [1, 4, 4, 1, 4, 4]),
    ];
    for (spec, [b, cq, ckv, heads, dh, cout]) in cases {
        let x_q = rand(&mut rng, b * spec.q_len, cq);
        let x_kv = rand(&mut rng, b * spec.kv_len, ckv);
        let mut mha = MultiHead::random(heads, cq, ckv, dh, cout, 0.6, &mut rng).unwrap();
        mha.b_q = rng.normal_matrix(1, heads * dh, 0.2);
        mha.b_k = rng.normal_matrix(1, heads * dh, 0.2);
        mha.b_v = rng.normal_matrix(1, heads * dh, 0.2);
        mha.b_o = rng.normal_matrix(1, cout, 0.2);
        let r = rand(&mut rng, b * spec.q_len, cout);
        let (_, cache) = ch::mha_forward(&mha, &x_q, &x_kv, &spec).unwrap();
        let g = ch::mha_backward(&mha, &cache, &r).unwrap();
        let inputs = [
            ("x_q", x_q),
            ("x_kv", x_kv),
            ("w_q", mha.w_q.clone()),
            ("b_q", mha.b_q.clone()),
            ("w_k", mha.w_k.clone()),
            ("b_k", mha.b_k.clone()),
            ("w_v", mha.w_v.clone()),
            ("b_v", mha.b_v.clone()),
            ("w_o", mha.w_o.clone()),
            ("b_o", mha.b_o.clone()),
        ];
        let grads = [
            g.d_x_q, g.d_x_kv, g.d_w_q, g.d_b_q, g.d_w_k, g.d_b_k, g.d_w_v, g.d_b_v, g.d_w_o,
            g.d_b_o,
        ];
        check(WIDE, &inputs, &grads, |t| {
            weighted_sum(&ch::mha_forward(&mha_from(t, heads), &t[0], &t[1], &spec).unwrap().0, &r)
        })
        .assert_passed();
    }
}

#[test]
fn key_bias_gradient_is_exactly_zero() {
    // q·(k_j + b_K) = q·k_j + q·b_K: the bias shifts every score of a row by the same amount, and
    // softmax ignores such a shift. So ∂L/∂b_K = 0 whatever the loss: Σ_j ∂L/∂S_ij = 0 per row.
    let mut rng = Rng::new(76);
    let mut mha = MultiHead::random(2, 4, 4, 2, 4, 0.7, &mut rng).unwrap();
    mha.b_k = rng.normal_matrix(1, 4, 1.0);
    let x = rand(&mut rng, 6, 4);
    let (y, cache) = ch::mha_forward(&mha, &x, &x, &AttnSpec::causal(3)).unwrap();
    let g = ch::mha_backward(&mha, &cache, &rand(&mut rng, 6, 4)).unwrap();
    assert!(g.d_b_k.abs().max() < 1e-14, "{}", g.d_b_k);
    // And changing b_K indeed leaves the output alone (to rounding).
    mha.b_k *= -3.0;
    let (y2, _) = ch::mha_forward(&mha, &x, &x, &AttnSpec::causal(3)).unwrap();
    assert!((y - y2).abs().max() < 1e-13);
}

#[test]
fn self_attention_gradient_is_the_sum_of_both_input_paths() {
    let mut rng = Rng::new(73);
    let x = rand(&mut rng, 6, 4);
    let mha = MultiHead::random(2, 4, 4, 2, 4, 0.7, &mut rng).unwrap();
    let spec = AttnSpec::causal(3);
    let r = rand(&mut rng, 6, 4);
    let (_, cache) = ch::mha_forward(&mha, &x, &x, &spec).unwrap();
    let g = ch::mha_backward(&mha, &cache, &r).unwrap();
    check(Config::default(), &[("x", x)], &[&g.d_x_q + &g.d_x_kv], |t| {
        weighted_sum(&ch::mha_forward(&mha, &t[0], &t[0], &spec).unwrap().0, &r)
    })
    .assert_passed();
}

#[test]
fn layer_norm_backward_passes_gradient_checks() {
    let mut rng = Rng::new(74);
    for placement in [Epsilon::InsideSqrt, Epsilon::AddedToStd] {
        let x = rand(&mut rng, 4, 5);
        let gamma = DMatrix::from_element(1, 5, 1.0) + rng.normal_matrix(1, 5, 0.3);
        let beta = rng.normal_matrix(1, 5, 0.3);
        let r = rand(&mut rng, 4, 5);
        let make = |g: &DMatrix<f64>, b: &DMatrix<f64>| LayerNorm {
            gamma: g.clone(),
            beta: b.clone(),
            eps: 1e-3,
            placement,
        };
        let ln = make(&gamma, &beta);
        let (_, cache) = ch::layer_norm_forward(&ln, &x).unwrap();
        let g = ch::layer_norm_backward(&ln, &cache, &r).unwrap();
        check(
            Config::default(),
            &[("x", x), ("gamma", gamma), ("beta", beta)],
            &[g.d_x, g.d_gamma, g.d_beta],
            |t| weighted_sum(&ch::layer_norm_forward(&make(&t[1], &t[2]), &t[0]).unwrap().0, &r),
        )
        .assert_passed();
    }
}

#[test]
fn ffn_backward_passes_gradient_checks() {
    let mut rng = Rng::new(75);
    for act in [Activation::Relu, Activation::GeluTanh] {
        let x = rand(&mut rng, 5, 4);
        let mut f = Ffn::random(4, 6, act, 0.7, &mut rng);
        f.b1 = rng.normal_matrix(1, 6, 0.3);
        f.b2 = rng.normal_matrix(1, 4, 0.3);
        let r = rand(&mut rng, 5, 4);
        let (_, cache) = ch::ffn_forward(&f, &x).unwrap();
        let g = ch::ffn_backward(&f, &cache, &r).unwrap();
        let make = |t: &[DMatrix<f64>]| Ffn {
            w1: t[1].clone(),
            b1: t[2].clone(),
            w2: t[3].clone(),
            b2: t[4].clone(),
            act,
        };
        check(
            Config::default(),
            &[
                ("x", x),
                ("w1", f.w1.clone()),
                ("b1", f.b1.clone()),
                ("w2", f.w2.clone()),
                ("b2", f.b2.clone()),
            ],
            &[g.d_x, g.d_w1, g.d_b1, g.d_w2, g.d_b2],
            |t| weighted_sum(&ch::ffn_forward(&make(t), &t[0]).unwrap().0, &r),
        )
        .assert_passed();
    }
}

fn block_tensors(blk: &Block<f64>) -> Vec<(&'static str, DMatrix<f64>)> {
    let a = &blk.attn;
    vec![
        ("w_q", a.w_q.clone()),
        ("b_q", a.b_q.clone()),
        ("w_k", a.w_k.clone()),
        ("b_k", a.b_k.clone()),
        ("w_v", a.w_v.clone()),
        ("b_v", a.b_v.clone()),
        ("w_o", a.w_o.clone()),
        ("b_o", a.b_o.clone()),
        ("ln1.gamma", blk.ln1.gamma.clone()),
        ("ln1.beta", blk.ln1.beta.clone()),
        ("w1", blk.ffn.w1.clone()),
        ("b1", blk.ffn.b1.clone()),
        ("w2", blk.ffn.w2.clone()),
        ("b2", blk.ffn.b2.clone()),
        ("ln2.gamma", blk.ln2.gamma.clone()),
        ("ln2.beta", blk.ln2.beta.clone()),
    ]
}

fn block_from(t: &[DMatrix<f64>], like: &Block<f64>) -> Block<f64> {
    let mut b = like.clone();
    let a = &mut b.attn;
    (a.w_q, a.b_q, a.w_k, a.b_k) = (t[0].clone(), t[1].clone(), t[2].clone(), t[3].clone());
    (a.w_v, a.b_v, a.w_o, a.b_o) = (t[4].clone(), t[5].clone(), t[6].clone(), t[7].clone());
    (b.ln1.gamma, b.ln1.beta) = (t[8].clone(), t[9].clone());
    (b.ffn.w1, b.ffn.b1, b.ffn.w2, b.ffn.b2) =
        (t[10].clone(), t[11].clone(), t[12].clone(), t[13].clone());
    (b.ln2.gamma, b.ln2.beta) = (t[14].clone(), t[15].clone());
    b
}

#[test]
fn block_backward_passes_gradient_checks() {
    for (order, seed) in [(NormOrder::Pre, 81), (NormOrder::Post, 82)] {
        let mut rng = Rng::new(seed);
        let mut blk = random_block(order, seed + 100);
        blk.ln1.eps = 1e-3;
        blk.ln2.eps = 1e-3;
        let x = rand(&mut rng, 6, 8);
        let spec = AttnSpec::causal(3);
        let r = rand(&mut rng, 6, 8);
        let (_, cache) = ch::block_forward(&blk, &x, &spec).unwrap();
        let g = ch::block_backward(&blk, &cache, &r).unwrap();
        let mut inputs = vec![("x", x)];
        inputs.extend(block_tensors(&blk));
        let (a, f) = (&g.attn, &g.ffn);
        let grads = vec![
            g.d_x.clone(),
            a.d_w_q.clone(),
            a.d_b_q.clone(),
            a.d_w_k.clone(),
            a.d_b_k.clone(),
            a.d_w_v.clone(),
            a.d_b_v.clone(),
            a.d_w_o.clone(),
            a.d_b_o.clone(),
            g.ln1.d_gamma.clone(),
            g.ln1.d_beta.clone(),
            f.d_w1.clone(),
            f.d_b1.clone(),
            f.d_w2.clone(),
            f.d_b2.clone(),
            g.ln2.d_gamma.clone(),
            g.ln2.d_beta.clone(),
        ];
        let report = check(WIDE, &inputs, &grads, |t| {
            weighted_sum(
                &ch::block_forward(&block_from(&t[1..], &blk), &t[0], &spec).unwrap().0,
                &r,
            )
        });
        assert_eq!(report.tensors.len(), 17);
        report.assert_passed();
    }
}

// ───────────────────────── bad input ─────────────────────────

#[test]
fn heads_must_divide_d_model() {
    let mut rng = Rng::new(91);
    let w = rand(&mut rng, 6, 6);
    match MultiHead::new(4, w.clone(), w.clone(), w.clone(), w.clone()) {
        Err(e @ Error::InvalidValue { .. }) => {
            assert!(e.to_string().contains("not divisible by 4 heads"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(MultiHead::new(0, w.clone(), w.clone(), w.clone(), w.clone()).is_err());
    assert!(
        Block::<f64>::random(6, 4, 8, Activation::Relu, NormOrder::Pre, 0.1, &mut rng).is_err()
    );
    assert!(ch::split_heads(&w, 4).is_err());
}

#[test]
fn mismatched_q_k_v_shapes_are_errors() {
    let mut rng = Rng::new(92);
    let spec = AttnSpec::<f64>::bidirectional(3);
    let (q, k, v) = (rand(&mut rng, 3, 4), rand(&mut rng, 3, 4), rand(&mut rng, 3, 2));
    let e = ch::attention_forward(&q, &rand(&mut rng, 3, 5), &v, &spec).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("3×5"), "{e}");
    let e = ch::attention_forward(&q, &k, &rand(&mut rng, 2, 2), &spec).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("2×2"), "{e}");
    let e = ch::attention_forward(&rand(&mut rng, 4, 4), &k, &v, &spec).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    // Two query sequences but keys for one.
    let e = ch::attention_forward(&rand(&mut rng, 6, 4), &k, &v, &spec).unwrap_err();
    assert!(e.to_string().contains("6 rows"), "{e}");
    // MHA: inputs of the wrong width, W_K and W_V reading different widths, W_O of the wrong
    // height.
    let mha = MultiHead::random(2, 4, 4, 2, 4, 0.5, &mut rng).unwrap();
    assert!(matches!(
        ch::mha_forward(&mha, &rand(&mut rng, 3, 5), &k, &spec),
        Err(Error::Shape { .. })
    ));
    assert!(
        MultiHead::new(
            1,
            rand(&mut rng, 4, 4),
            rand(&mut rng, 4, 4),
            rand(&mut rng, 5, 4),
            rand(&mut rng, 4, 4)
        )
        .is_err()
    );
    assert!(
        MultiHead::new(
            1,
            rand(&mut rng, 4, 4),
            rand(&mut rng, 4, 4),
            rand(&mut rng, 4, 4),
            rand(&mut rng, 3, 4)
        )
        .is_err()
    );
    assert!(
        MultiHead::new(
            1,
            rand(&mut rng, 4, 4),
            rand(&mut rng, 4, 3),
            rand(&mut rng, 4, 4),
            rand(&mut rng, 4, 4)
        )
        .is_err()
    );
    // Backward with the wrong upstream gradient.
    let a = ch::attention_forward(&q, &k, &v, &spec).unwrap();
    assert!(matches!(
        ch::attention_backward(&q, &k, &v, &a.weights, &rand(&mut rng, 3, 3), &spec),
        Err(Error::Shape { .. })
    ));
    let (_, cache) = ch::mha_forward(&mha, &q, &q, &spec).unwrap();
    assert!(matches!(
        ch::mha_backward(&mha, &cache, &rand(&mut rng, 2, 4)),
        Err(Error::Shape { .. })
    ));
    // A cross-attention spec given to a block.
    let blk = random_block(NormOrder::Pre, 93);
    assert!(ch::block_forward(&blk, &rand(&mut rng, 6, 8), &AttnSpec::cross(3, 2)).is_err());
    assert!(matches!(ch::residual_add(&q, &v), Err(Error::Shape { .. })));
}

#[test]
fn a_mask_of_the_wrong_shape_is_an_error() {
    let mut rng = Rng::new(94);
    let x = rand(&mut rng, 6, 4);
    for bad in [DMatrix::zeros(3, 2), DMatrix::zeros(2, 3), DMatrix::zeros(9, 3)] {
        let spec = AttnSpec::bidirectional(3).with_mask(bad.clone());
        match ch::attention_forward(&x, &x, &x, &spec) {
            Err(e @ Error::Shape { .. }) => {
                assert!(e.to_string().contains(&format!("{}×{}", bad.nrows(), bad.ncols())), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }
    let mut nan = DMatrix::zeros(3, 3);
    nan[(1, 1)] = f64::NAN;
    assert!(matches!(
        ch::attention_forward(&x, &x, &x, &AttnSpec::bidirectional(3).with_mask(nan)),
        Err(Error::InvalidValue { arg: "mask", .. })
    ));
    let plus_inf = DMatrix::from_element(3, 3, f64::INFINITY);
    assert!(
        ch::attention_forward(&x, &x, &x, &AttnSpec::bidirectional(3).with_mask(plus_inf)).is_err()
    );
    assert!(ch::padding_mask::<f64>(&[3, 5], 3, 4).is_err());
    assert!(ch::padding_mask::<f64>(&[0], 3, 4).is_err());
    assert!(ch::padding_mask::<f64>(&[], 3, 4).is_err());
    assert!(ch::causal_mask::<f64>(4, 3).is_err());
    assert!(ch::causal_mask::<f64>(0, 3).is_err());
}

#[test]
fn a_fully_masked_row_is_an_error_not_nan() {
    let mut rng = Rng::new(95);
    let x = rand(&mut rng, 3, 4);
    let mut m = DMatrix::zeros(3, 3);
    m.row_mut(1).fill(f64::NEG_INFINITY);
    match ch::attention_forward(&x, &x, &x, &AttnSpec::bidirectional(3).with_mask(m)) {
        Err(Error::InvalidValue { arg: "mask", reason, .. }) => {
            assert!(reason.contains("row 1"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // Causal plus a padding mask that hides the first key leaves query 0 with nothing to see.
    let pad = ch::padding_mask::<f64>(&[3], 3, 3).unwrap();
    assert!(ch::attention_forward(&x, &x, &x, &AttnSpec::causal(3).with_mask(pad)).is_ok());
    let mut first_hidden = DMatrix::zeros(3, 3);
    first_hidden.column_mut(0).fill(f64::NEG_INFINITY);
    assert!(matches!(
        ch::attention_forward(&x, &x, &x, &AttnSpec::causal(3).with_mask(first_hidden)),
        Err(Error::InvalidValue { .. })
    ));
}

#[test]
fn epsilon_must_be_positive() {
    for eps in [0.0, -1e-6, f64::NAN, f64::INFINITY] {
        match LayerNorm::<f64>::new(4, eps) {
            Err(Error::InvalidValue { arg: "eps", .. }) => {}
            other => panic!("ε = {eps}: {other:?}"),
        }
    }
    let mut ln = LayerNorm::<f64>::new(4, 1e-6).unwrap();
    ln.eps = 0.0;
    assert!(ch::layer_norm_forward(&ln, &DMatrix::zeros(2, 4)).is_err());
    let ln = LayerNorm::<f64>::new(4, 1e-6).unwrap();
    assert!(matches!(ch::layer_norm_forward(&ln, &DMatrix::zeros(2, 5)), Err(Error::Shape { .. })));
    let mut bad_beta = ln.clone();
    bad_beta.beta = DMatrix::zeros(1, 3);
    assert!(ch::layer_norm_forward(&bad_beta, &DMatrix::zeros(2, 4)).is_err());
}

#[test]
fn non_finite_input_and_bad_specs_are_errors() {
    let mut rng = Rng::new(96);
    let mut x = rand(&mut rng, 3, 4);
    x[(2, 1)] = f64::NAN;
    assert!(matches!(
        ch::attention_forward(&x, &x, &x, &AttnSpec::bidirectional(3)),
        Err(Error::NonFinite { arg: "q", .. })
    ));
    assert!(matches!(
        ch::layer_norm_forward(&LayerNorm::new(4, 1e-6).unwrap(), &x),
        Err(Error::NonFinite { .. })
    ));
    let y = rand(&mut rng, 3, 4);
    for bad in [
        AttnSpec::bidirectional(0),
        AttnSpec::bidirectional(3).with_scale(0.0),
        AttnSpec::bidirectional(3).with_scale(f64::NAN),
    ] {
        assert!(matches!(ch::attention_forward(&y, &y, &y, &bad), Err(Error::InvalidValue { .. })));
    }
    assert!(
        ch::attention_forward(
            &y,
            &y,
            &y,
            &AttnSpec { q_len: 3, kv_len: 2, causal: true, mask: None, scale: None }
        )
        .is_err()
    );
    assert!(ch::concat_heads::<f64>(&[]).is_err());
    assert!(ch::concat_heads(&[DMatrix::<f64>::zeros(2, 2), DMatrix::zeros(3, 2)]).is_err());
}

#[test]
fn printed_matrices_are_compared_entry_by_entry() {
    let ours = DMatrix::from_row_slice(2, 2, &[1.59995001, 2.29995, 0.123456789, -0.5]);
    // Each entry at its printed precision, trailing zeros dropped as numpy does.
    assert_status(
        &Worked::matrix(
            "t",
            llm_workbook::sources::D3,
            "m",
            "1.59995001 2.29995; 0.12345679 -0.5",
            8,
            &ours,
        ),
        Status::Match,
    );
    // A tie printed the other way is one unit in the last digit: rounding, not a match.
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "m", "1.6 2.3; 0.1235 -0.5", 4, &ours),
        Status::Rounding,
    );
    // Two units off, a wrong shape, or text that is not a matrix: mismatch.
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "m", "1.6002 2.3; 0.1235 -0.5", 4, &ours),
        Status::Mismatch,
    );
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "m", "1.6 2.3 0; 0.1235 -0.5 0", 4, &ours),
        Status::Mismatch,
    );
    assert_status(
        &Worked::matrix("t", llm_workbook::sources::D3, "m", "1.6 x; 0.1 0.2", 4, &ours),
        Status::Mismatch,
    );
    assert_eq!(
        llm_workbook::report::matrix_like(
            "0.99995 1",
            4,
            &DMatrix::from_row_slice(1, 2, &[0.9999500004, 1.0])
        ),
        "0.99995 1.0000"
    );
    assert!(llm_workbook::report::parse_printed("1 2; 3").is_none());
}

// ───────────────────────── the chapter as a whole ─────────────────────────

#[test]
fn worked_table_has_no_mismatch_and_prose_is_current() {
    let rows = book::worked().unwrap();
    assert!(rows.iter().all(|r| r.status != Status::Mismatch), "{rows:#?}");
    common::check_chapter_prose(&book::CHAPTER);
}

#[test]
fn figures_show_the_weights() {
    let figs = book::figures().unwrap();
    let stems: Vec<&str> = figs.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(stems, ["ch06_weights", "ch06_weights_causal", "ch06_head0", "ch06_head1"]);
    let Figure::Heatmap(h) = &figs[0].1 else { panic!() };
    assert_eq!(h.col_names, ["You", "are", "welcome"]);
    assert_eq!(format!("{:.8}", h.values[0][0]), "0.07057112");
    let Figure::Heatmap(c) = &figs[1].1 else { panic!() };
    assert_eq!(c.values[0], [1.0, 0.0, 0.0]);
    assert_eq!(c.values[2], h.values[2], "the last token sees everything with or without the mask");
    for (_, f) in &figs {
        let Figure::Heatmap(m) = f else { panic!() };
        assert!(m.values.iter().all(|row| (row.iter().sum::<f64>() - 1.0).abs() < 1e-12));
    }
}

#[test]
fn plots_render() {
    common::render_plots(&book::CHAPTER, 8);
}

#[test]
fn walk_prints_every_step() {
    let text = common::walk_text(&book::CHAPTER);
    for step in 1..=10 {
        assert!(text.contains(&format!("── {step}.")), "step {step}");
    }
    assert!(text.contains("0.07057112") && text.contains("-1.03927142"));
}

#[test]
fn every_erratum_names_a_test_of_this_file() {
    let source = include_str!("ch06_attention.rs");
    // The σ + ε row is one slip made in chapter 6's LayerNorm and again in chapter 7's decoder:
    // one row, pinned by the tests of both.
    let decoder = include_str!("ch07_encoder_decoder.rs");
    for test in book::ERRATA.iter().flat_map(|e| e.tests) {
        let (file, name) = test.split_once("::").expect("tests/<file>.rs::<name>");
        let source = match file {
            "tests/ch06_attention.rs" => source,
            "tests/ch07_encoder_decoder.rs" => decoder,
            other => panic!("{name}: {other} is neither this file nor chapter 7's"),
        };
        assert!(source.contains(&format!("fn {name}()")), "{name} is not a test in {file}");
    }
    for w in book::worked().unwrap().iter().filter(|w| !w.test.is_empty()) {
        assert!(source.contains(&format!("fn {}()", w.test)), "{} is not a test here", w.test);
    }
}

// ───────────── properties (proptest) ─────────────

mod properties {
    use llm_workbook::ch06_attention::{self as ch, AttnSpec, LayerNorm};
    use llm_workbook::rng::Rng;
    use nalgebra::DMatrix;
    use proptest::prelude::*;

    /// A row's mean and population variance.
    fn moments(row: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
        let n = row.clone().count() as f64;
        let mean = row.clone().sum::<f64>() / n;
        (mean, row.map(|v| (v - mean) * (v - mean)).sum::<f64>() / n)
    }

    /// N×C entries in [−10, 10] whose every row has variance at least 10⁻², so ε never dominates.
    fn spread_rows() -> impl Strategy<Value = DMatrix<f64>> {
        (1usize..5, 2usize..12).prop_flat_map(|(n, c)| {
            prop::collection::vec(-10.0..10.0f64, n * c)
                .prop_map(move |v| DMatrix::from_row_slice(n, c, &v))
                .prop_filter("every row spread out", |m| {
                    m.row_iter().all(|r| moments(r.iter().copied()).1 >= 1e-2)
                })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        // y = (x − μ)/√(σ² + ε) has mean 0 and variance σ²/(σ² + ε) (1 as ε → 0).
        #[test]
        fn layer_norm_rows_have_mean_zero_and_the_variance_the_formula_gives(
            x in spread_rows(), eps in 1e-9..1e-3f64
        ) {
            let ln = LayerNorm::<f64>::new(x.ncols(), eps).unwrap();
            let (y, _) = ch::layer_norm_forward(&ln, &x).unwrap();
            for (xr, yr) in x.row_iter().zip(y.row_iter()) {
                let (_, var_x) = moments(xr.iter().copied());
                let (mean_y, var_y) = moments(yr.iter().copied());
                prop_assert!(mean_y.abs() < 1e-12, "mean {mean_y}");
                prop_assert!((var_y - var_x / (var_x + eps)).abs() < 1e-12, "variance {var_y}");
                prop_assert!((var_y - 1.0).abs() <= eps / var_x + 1e-12);
            }
        }

        // LN(c·x + d) = LN(x) for c > 0, up to ε: the two differ by x̂·(1 − √((σ²+ε)/(σ²+ε/c²))),
        // at most |x̂|·ε/(c²σ²) ≤ √C · 10⁻¹²/(10⁻² · 10⁻²) = √C · 10⁻⁸ with ε = 10⁻¹², c ≥ 0.1 and
        // σ² ≥ 10⁻². Rounding c·x + d (|·| ≤ 1100) and its mean costs at most about
        // C · 1100 · 2⁻⁵³ / (c·σ) ≤ 12 · 1100 · 1.1·10⁻¹⁶ / 10⁻² ≈ 1.5·10⁻¹⁰ more.
        #[test]
        fn layer_norm_ignores_scale_and_shift(
            x in spread_rows(), c in 0.1..100.0f64, d in -100.0..100.0f64
        ) {
            let eps = 1e-12;
            let ln = LayerNorm::<f64>::new(x.ncols(), eps).unwrap();
            let (y, _) = ch::layer_norm_forward(&ln, &x).unwrap();
            let (y2, _) = ch::layer_norm_forward(&ln, &x.map(|v| c * v + d)).unwrap();
            let bound = (x.ncols() as f64).sqrt() * 1e-8 + 2e-10;
            prop_assert!((&y - &y2).amax() <= bound, "{} > {bound}", (&y - &y2).amax());
        }

        #[test]
        fn attention_rows_are_distributions_and_causal_rows_see_no_later_key(
            seed in any::<u64>(), batch in 1usize..3, t in 1usize..8, d in 1usize..6,
            causal in any::<bool>()
        ) {
            let mut rng = Rng::new(seed);
            let (q, k, v) = (
                rng.normal_matrix::<f64>(batch * t, d, 2.0),
                rng.normal_matrix(batch * t, d, 2.0),
                rng.normal_matrix(batch * t, 3, 1.0),
            );
            let spec = if causal { AttnSpec::causal(t) } else { AttnSpec::bidirectional(t) };
            let a = ch::attention_forward(&q, &k, &v, &spec).unwrap();
            for r in 0..batch * t {
                let row = a.weights.row(r);
                prop_assert!(row.iter().all(|&w| (0.0..=1.0).contains(&w)));
                prop_assert!((row.sum() - 1.0).abs() < 1e-12, "row {r} sums to {}", row.sum());
                if causal {
                    prop_assert!(
                        row.iter().skip(r % t + 1).all(|&w| w == 0.0),
                        "row {r} looks ahead"
                    );
                }
            }
        }

        // Changing tokens from position p on never changes an output before p, to the bit.
        #[test]
        fn causal_attention_never_leaks_later_tokens(
            seed in any::<u64>(), t in 2usize..9, d in 1usize..6, p_frac in 0.0..1.0f64
        ) {
            let p = 1 + ((t - 1) as f64 * p_frac) as usize;
            let mut rng = Rng::new(seed);
            let x = rng.normal_matrix::<f64>(t, d, 1.0);
            let mut x2 = x.clone();
            for r in p..t {
                for c in 0..d {
                    x2[(r, c)] += rng.normal() * 5.0 + 1.0;
                }
            }
            let spec = AttnSpec::causal(t);
            let a = ch::attention_forward(&x, &x, &x, &spec).unwrap();
            let b = ch::attention_forward(&x2, &x2, &x2, &spec).unwrap();
            prop_assert_eq!(a.out.rows(0, p), b.out.rows(0, p));
            prop_assert_eq!(a.weights.rows(0, p), b.weights.rows(0, p));
        }

        // Without positions, attention cannot tell the order of its tokens: permuting them permutes
        // the output (up to the summation order over keys, a few ulps of values of size ~1).
        #[test]
        fn bidirectional_attention_is_permutation_equivariant(
            seed in any::<u64>(),
            perm in Just((0usize..7).collect::<Vec<_>>()).prop_shuffle(),
            d in 1usize..6
        ) {
            let t = perm.len();
            let mut rng = Rng::new(seed);
            let (q, k, v) = (
                rng.normal_matrix::<f64>(t, d, 1.0),
                rng.normal_matrix(t, d, 1.0),
                rng.normal_matrix(t, 4, 1.0),
            );
            let permute = |m: &DMatrix<f64>| {
                DMatrix::from_fn(m.nrows(), m.ncols(), |r, c| m[(perm[r], c)])
            };
            let spec = AttnSpec::bidirectional(t);
            let a = ch::attention_forward(&q, &k, &v, &spec).unwrap();
            let b = ch::attention_forward(&permute(&q), &permute(&k), &permute(&v), &spec).unwrap();
            let diff = (&b.out - permute(&a.out)).amax();
            prop_assert!(diff < 1e-12, "{diff}");
        }
    }
}

// ────────── LayerNorm walks memory column by column: the same numbers as row by row ──────────

/// The row-by-row statement of LayerNorm and its backward, as the formulas read: the reference the
/// column-by-column implementation must reproduce bit for bit.
fn layer_norm_by_rows(
    ln: &LayerNorm<f64>,
    x: &DMatrix<f64>,
    d_y: &DMatrix<f64>,
) -> (DMatrix<f64>, DMatrix<f64>) {
    let (n, cols) = x.shape();
    let c = cols as f64;
    let mut y = DMatrix::zeros(n, cols);
    let mut d_x = DMatrix::zeros(n, cols);
    for r in 0..n {
        let mu = x.row(r).iter().copied().sum::<f64>() / c;
        let var = x.row(r).iter().map(|&v| (v - mu) * (v - mu)).sum::<f64>() / c;
        let sd = var.sqrt();
        let s = match ln.placement {
            Epsilon::InsideSqrt => (var + ln.eps).sqrt(),
            Epsilon::AddedToStd => sd + ln.eps,
        };
        let hat: Vec<f64> = (0..cols).map(|j| (x[(r, j)] - mu) / s).collect();
        let g: Vec<f64> = (0..cols).map(|j| ln.gamma[(0, j)] * d_y[(r, j)]).collect();
        let mean_g = g.iter().copied().sum::<f64>() / c;
        let mean_gx = (0..cols).map(|j| g[j] * hat[j]).sum::<f64>() / c;
        let factor = match ln.placement {
            Epsilon::InsideSqrt => 1.0,
            Epsilon::AddedToStd if sd > 0.0 => s / sd,
            Epsilon::AddedToStd => 0.0,
        };
        for j in 0..cols {
            y[(r, j)] = ln.gamma[(0, j)] * hat[j] + ln.beta[(0, j)];
            d_x[(r, j)] = (g[j] - mean_g - hat[j] * factor * mean_gx) / s;
        }
    }
    (y, d_x)
}

#[test]
fn layer_norm_column_by_column_equals_the_row_by_row_formula_bit_for_bit() {
    let mut rng = Rng::new(41);
    for placement in [Epsilon::InsideSqrt, Epsilon::AddedToStd] {
        let mut ln = LayerNorm::<f64>::new(13, 1e-5).unwrap().with_placement(placement);
        ln.gamma = rng.normal_matrix(1, 13, 1.0);
        ln.beta = rng.normal_matrix(1, 13, 1.0);
        let mut x = rng.normal_matrix(9, 13, 2.0);
        x.row_mut(4).fill(0.75); // a constant row: σ = 0
        let d_y = rng.normal_matrix(9, 13, 1.0);
        let (y, cache) = ch::layer_norm_forward(&ln, &x).unwrap();
        let g = ch::layer_norm_backward(&ln, &cache, &d_y).unwrap();
        let (y_ref, d_x_ref) = layer_norm_by_rows(&ln, &x, &d_y);
        assert_eq!(y, y_ref, "{placement:?}");
        assert_eq!(g.d_x, d_x_ref, "{placement:?}");
    }
}

#[test]
fn layer_norm_backward_refuses_a_cache_of_other_rows() {
    let ln = LayerNorm::<f64>::new(3, 1e-5).unwrap();
    let (_, mut cache) = ch::layer_norm_forward(
        &ln,
        &DMatrix::from_row_slice(2, 3, &[1.0, 2.0, 4.0, 0.0, 1.0, -1.0]),
    )
    .unwrap();
    cache.denom.pop();
    let e = ch::layer_norm_backward(&ln, &cache, &DMatrix::zeros(2, 3)).unwrap_err();
    assert!(e.to_string().contains("one s and one σ per row"), "{e}");
}
