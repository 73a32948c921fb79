//! Chapter 7: the encoder–decoder transformer and cross-attention. Run with
//! `cargo test --test ch07_encoder_decoder`.
//!
//! Every printed matrix below was compared, before its snapshot was accepted, with an independent
//! numpy computation of the same cell (numpy 2.x, `np.random.seed(42)` and the cells' code).

mod common;

use approx::assert_abs_diff_eq;
use llm_workbook::Error;
use llm_workbook::ch06_attention::{
    AttnSpec, MultiHead, block_backward, mha_backward, mha_forward,
};
use llm_workbook::ch07_encoder_decoder::book::{
    CHAPTER, PRINTED_CROSS_OUTPUT, PRINTED_CROSS_WEIGHTS, PRINTED_DECODER_LAYER_NORM,
    PRINTED_DECODER_OUTPUT, figures, heatmap_example, numpy_row,
};
use llm_workbook::ch07_encoder_decoder::*;
use llm_workbook::gradcheck::{self, Config};
use llm_workbook::optim::{Adam, AdamConfig};
use llm_workbook::rng::{NumpyMt19937, Rng};
use nalgebra::DMatrix;
use std::collections::HashSet;

fn rows_of(m: &DMatrix<f64>) -> Vec<String> {
    (0..m.nrows()).map(|r| numpy_row(m, r)).collect()
}

fn assert_rows(m: &DMatrix<f64>, printed: &[&str]) {
    assert_eq!(rows_of(m), printed, "rows at numpy's 8 decimals");
}

/// The gradient-check settings of this file. The key bias b_K has an exactly zero gradient
/// (softmax ignores a shift that is the same for every key of a row, and q·(k + b) shifts all
/// scores of a row by q·b), so its central differences are pure rounding noise, about ε·|L|/h.
/// With h = 1e-5 that noise is below 1e-10, and the floor 1e-3 compares entries that small
/// absolutely (|analytic − numeric| ≤ 1e-9); larger entries are compared relatively at 1e-6.
fn config() -> Config {
    Config { step: 1e-5, tolerance: 1e-6, floor: 1e-3 }
}

/// Σ out ⊙ R for a fixed random R: a scalar whose gradient with respect to `out` is R.
fn probe(rows: usize, cols: usize, seed: u64) -> DMatrix<f64> {
    Rng::new(seed).normal_matrix(rows, cols, 1.0)
}

fn dot(a: &DMatrix<f64>, b: &DMatrix<f64>) -> f64 {
    a.component_mul(b).sum()
}

// ───────────── numpy's generator ─────────────

#[test]
fn numpy_seed_42_rand_starts_0_37454012_0_95071431() {
    // np.random.seed(42); np.random.rand(4) → the first row of the decoder cell's W_q.
    let mut g = NumpyMt19937::new(42);
    let got: Vec<f64> = (0..4).map(|_| g.next_f64()).collect();
    assert_eq!(
        got,
        [0.3745401188473625, 0.9507143064099162, 0.7319939418114051, 0.5986584841970366]
    );
}

#[test]
fn decoder_cell_weights_are_four_numpy_draws_in_order() {
    let [w_q, w_k, w_v, w_o] = decoder_cell_weights();
    // numpy: W_q[3] = [0.83244264 0.21233911 0.18182497 0.18340451];
    // W_o[0] = [0.54671028 0.18485446 0.96958463 0.77513282].
    assert_eq!(numpy_row(&w_q, 3), "0.83244264 0.21233911 0.18182497 0.18340451");
    assert_eq!(numpy_row(&w_o, 0), "0.54671028 0.18485446 0.96958463 0.77513282");
    let text = llm_workbook::snapshot::matrices_text(
        &[("W_q", &w_q), ("W_k", &w_k), ("W_v", &w_v), ("W_o", &w_o)],
        8,
    );
    common::snap_text!("decoder_cell_weights", text);
}

// ───────────── the decoder cell ─────────────

#[test]
fn decoder_cell_output_is_2_82896639() {
    let cell = decoder_cell(DecoderReading::CELL).unwrap();
    assert_rows(&cell.output, &PRINTED_DECODER_OUTPUT);
    common::snap_matrix!("decoder_cell_output", cell.output, 8);
    common::snap_matrix!("decoder_cell_attention_weights", cell.weights, 8);
}

#[test]
fn decoder_cell_layer_norm_is_minus_0_46049196() {
    let cell = decoder_cell(DecoderReading::CELL).unwrap();
    assert_rows(&cell.normalised, &PRINTED_DECODER_LAYER_NORM);
    common::snap_matrix!("decoder_cell_layer_norm", cell.normalised, 8);
    // Rows have mean 0 and (population) standard deviation just under 1: σ/(σ + ε).
    for r in 0..3 {
        let row: Vec<f64> = cell.normalised.row(r).iter().copied().collect();
        let mean = row.iter().sum::<f64>() / 4.0;
        let sd = (row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 4.0).sqrt();
        assert_abs_diff_eq!(mean, 0.0, epsilon = 1e-12);
        assert!(sd < 1.0 && sd > 1.0 - 1e-5, "sd {sd}");
    }
}

#[test]
fn decoder_cell_applies_no_causal_mask() {
    let cell = decoder_cell(DecoderReading::CELL).unwrap();
    // <start> (row 1) attends to the later tokens: the cell has no mask.
    assert_eq!(numpy_row(&cell.weights, 0), "0.12451364 0.56641068 0.30907567");
    assert!(cell.weights[(0, 1)] > 0.5);
    let masked = decoder_cell(DecoderReading { causal: true, ..DecoderReading::CELL }).unwrap();
    assert_eq!(numpy_row(&masked.weights, 0), "1. 0. 0.");
    assert_eq!(numpy_row(&masked.output, 0), "1.48356448 1.24013147 1.84159274 1.80408131");
    // The last token may see everything, so its row is the same with and without the mask.
    assert_eq!(numpy_row(&masked.output, 2), PRINTED_DECODER_OUTPUT[2]);
    assert_ne!(numpy_row(&masked.output, 1), PRINTED_DECODER_OUTPUT[1]);
}

#[test]
fn decoder_cell_does_not_scale_the_scores() {
    let scaled = decoder_cell(DecoderReading { scale: true, ..DecoderReading::CELL }).unwrap();
    assert_eq!(numpy_row(&scaled.weights, 0), "0.2123884 0.45298941 0.33462219");
    assert_eq!(numpy_row(&scaled.output, 0), "2.71375426 2.3908812 3.13827038 3.23460218");
    // Dividing by √4 = 2 flattens every row: the largest weight drops in each row.
    let cell = decoder_cell(DecoderReading::CELL).unwrap();
    for r in 0..3 {
        assert!(scaled.weights.row(r).max() < cell.weights.row(r).max());
    }
}

#[test]
fn decoder_output_is_attention_times_w_o() {
    let [w_q, w_k, w_v, w_o] = decoder_cell_weights();
    let y = table(&Y_PLUS_PE);
    let (q, k, v) = (&y * &w_q, &y * &w_k, &y * &w_v);
    let s = &q * k.transpose();
    let a = DMatrix::from_fn(3, 3, |i, j| {
        s[(i, j)].exp() / (0..3).map(|c| s[(i, c)].exp()).sum::<f64>()
    });
    let av = &a * &v;
    assert_eq!(numpy_row(&av, 0), "0.71925419 1.65933026 1.94938668 1.81203693");
    assert_rows(&(&av * &w_o), &PRINTED_DECODER_OUTPUT);
}

#[test]
fn decoder_layer_norm_divides_by_std_plus_eps() {
    let cell = decoder_cell(DecoderReading::CELL).unwrap();
    let stated = normalise_rows(&cell.output, WORKED_EPSILON, Spread::SqrtVariancePlusEpsilon);
    assert_eq!(numpy_row(&stated, 0), "-0.46049142 -1.41408325 0.81224896 1.0623257");
    let gap = (&stated - &cell.normalised).abs().max();
    assert!(gap > 1e-6 && gap < 2e-6, "the two formulas differ by {gap}");
}

#[test]
fn decoder_cell_as_the_text_describes_it() {
    let text = decoder_cell(DecoderReading::TEXT).unwrap();
    assert_eq!(numpy_row(&text.weights, 1), "0.16525426 0.83474574 0.");
    assert_eq!(numpy_row(&text.normalised, 0), "-0.44147247 -1.42943838 1.01157498 0.85933588");
    common::snap_matrix!("decoder_text_attention_weights", text.weights, 8);
    common::snap_matrix!("decoder_text_output", text.output, 8);
    common::snap_matrix!("decoder_text_layer_norm", text.normalised, 8);
}

#[test]
fn chapter_6_attention_reproduces_the_text_reading() {
    // Chapter 6's multi-head attention (one head, causal, ÷√d_k) is the text's decoder attention.
    let [w_q, w_k, w_v, w_o] = decoder_cell_weights();
    let y = table(&Y_PLUS_PE);
    let p = MultiHead::new(1, w_q, w_k, w_v, w_o).unwrap();
    let (out, cache) = mha_forward(&p, &y, &y, &AttnSpec::causal(3)).unwrap();
    let text = decoder_cell(DecoderReading::TEXT).unwrap();
    assert_abs_diff_eq!(out, text.output, epsilon = 1e-13);
    assert_abs_diff_eq!(cache.weights[0], text.weights, epsilon = 1e-15);
}

// ───────────── the encoder–decoder cell ─────────────

#[test]
fn cross_cell_weights_are_uniform() {
    let cell = cross_cell(CrossReading::CELL).unwrap();
    assert_rows(&cell.weights, &[PRINTED_CROSS_WEIGHTS; 3]);
    common::snap_matrix!("cross_cell_scores", cell.scores, 8);
    common::snap_matrix!("cross_cell_weights", cell.weights, 10);
}

#[test]
fn cross_cell_output_is_minus_1_7888543() {
    let cell = cross_cell(CrossReading::CELL).unwrap();
    assert_rows(&cell.output, &[PRINTED_CROSS_OUTPUT; 3]);
    common::snap_matrix!("cross_cell_output", cell.output, 8);
    // −1.7888543 = −(3 + 1)/√5: the first two entries of the encoder row, summed.
    assert_abs_diff_eq!(cell.output[(0, 0)], -4.0 / 5f64.sqrt(), epsilon = 1e-7);
}

#[test]
fn cross_cell_transposes_the_weights() {
    let written =
        cross_cell(CrossReading { orientation: Orientation::AsWritten, ..CrossReading::CELL })
            .unwrap();
    assert_rows(&written.output, &["0. -0.89442715 0. 0.89442715"; 3]);
    let cell = cross_cell(CrossReading::CELL).unwrap();
    assert!((&written.output - &cell.output).abs().max() > 1.0);
}

#[test]
fn cross_cell_divides_by_sqrt_3_not_sqrt_4() {
    let cell = cross_cell(CrossReading::CELL).unwrap();
    let text =
        cross_cell(CrossReading { divisor: TEXT_SCORE_DIVISOR, ..CrossReading::CELL }).unwrap();
    assert_eq!(numpy_row(&cell.scores, 0), "0.36329404 0.36329403 0.36329405");
    assert_eq!(numpy_row(&text.scores, 0), "0.31462187 0.31462186 0.31462187");
    assert_abs_diff_eq!(
        &cell.scores * CELL_SCORE_DIVISOR,
        &text.scores * TEXT_SCORE_DIVISOR,
        epsilon = 1e-12
    );
    // Yet the printed weights and output agree at 8 decimals: every score row is (almost) constant.
    assert_eq!(rows_of(&text.weights), rows_of(&cell.weights));
    assert_eq!(rows_of(&text.output), rows_of(&cell.output));
}

#[test]
fn cross_attention_has_no_causal_mask() {
    let masked = cross_cell(CrossReading { causal: true, ..CrossReading::CELL }).unwrap();
    assert_eq!(numpy_row(&masked.weights, 0), "1. 0. 0.");
    // Done right (X·W, ÷√d_k, no mask) the uniform weights remain: every target row reads every
    // source row.
    let standard = cross_cell(CrossReading::STANDARD).unwrap();
    assert!(standard.weights.iter().all(|&w| (w - 1.0 / 3.0).abs() < 1e-8));
    // And the lengths may differ: 2 target rows over 5 source rows.
    let dec = table(&DECODER_OUTPUT).rows(0, 2).into_owned();
    let enc = Rng::new(3).normal_matrix::<f64>(5, 4, 1.0);
    let other = cross_cell_on(&dec, &enc, CrossReading::STANDARD).unwrap();
    assert_eq!(other.weights.shape(), (2, 5));
    assert!(other.weights.iter().all(|&w| w > 0.0));
}

#[test]
fn equal_keys_give_uniform_weights_for_any_query() {
    // Why the cell's weights are 1/3: the three encoder rows are equal to 8 decimals, so all keys
    // are the same vector and every score row is constant, whatever the queries or the divisor.
    let enc = DMatrix::from_fn(3, 4, |_, c| ENCODER_OUTPUT[0][c]);
    for seed in 0..5 {
        let dec = Rng::new(seed).normal_matrix::<f64>(3, 4, 3.0);
        let cell = cross_cell_on(&dec, &enc, CrossReading::STANDARD).unwrap();
        assert!(cell.weights.iter().all(|&w| (w - 1.0 / 3.0).abs() < 1e-15));
    }
}

// ───────────── Adam ─────────────

#[test]
fn adam_two_steps_by_hand() {
    // θ = 1, α = 0.1, β₁ = 0.9, β₂ = 0.999, ε = 1e-8.
    // Step 1, g = 0.5: m = 0.05, v = 0.00025, m̂ = 0.05/0.1 = 0.5, v̂ = 0.00025/0.001 = 0.25,
    //   θ = 1 − 0.1·0.5/(0.5 + 1e-8) = 0.900000002 (to 1e-15).
    // Step 2, g = −1: m = 0.045 − 0.1 = −0.055, v = 0.00024975 + 0.001 = 0.00124975,
    //   m̂ = −0.055/0.19 = −0.2894736842…, v̂ = 0.00124975/0.001999 = 0.6251875938…,
    //   θ = 0.900000002 + 0.1·0.2894736842/(0.7906880129 + 1e-8) = 0.9366103542…
    let config = AdamConfig { learning_rate: 0.1, beta1: 0.9, beta2: 0.999, epsilon: 1e-8 };
    let mut adam = Adam::<f64>::new(config).unwrap();
    let mut theta = DMatrix::from_element(1, 1, 1.0);
    adam.step(&mut [&mut theta], &[&DMatrix::from_element(1, 1, 0.5)]).unwrap();
    assert_abs_diff_eq!(theta[(0, 0)], 0.900000002, epsilon = 1e-15);
    assert_abs_diff_eq!(adam.moments.first()[0][(0, 0)], 0.05, epsilon = 1e-15);
    assert_abs_diff_eq!(adam.moments.second()[0][(0, 0)], 0.00025, epsilon = 1e-17);
    adam.step(&mut [&mut theta], &[&DMatrix::from_element(1, 1, -1.0)]).unwrap();
    let m_hat: f64 = -0.055 / 0.19;
    let v_hat: f64 = 0.00124975 / 0.001999;
    assert_abs_diff_eq!(
        theta[(0, 0)],
        0.900000002 - 0.1 * m_hat / (v_hat.sqrt() + 1e-8),
        epsilon = 1e-15
    );
    assert_abs_diff_eq!(theta[(0, 0)], 0.9366103542, epsilon = 1e-10);
    assert_eq!(adam.moments.steps(), 2);
}

#[test]
fn adam_first_step_moves_every_weight_by_alpha_whatever_the_gradient_scale() {
    let mut adam = Adam::<f64>::with_learning_rate(0.01).unwrap();
    let mut p = DMatrix::from_row_slice(1, 3, &[0.0, 0.0, 0.0]);
    let g = DMatrix::from_row_slice(1, 3, &[1e-4, -3.0, 250.0]);
    adam.step(&mut [&mut p], &[&g]).unwrap();
    assert_abs_diff_eq!(p, DMatrix::from_row_slice(1, 3, &[-0.01, 0.01, -0.01]), epsilon = 1e-6);
}

#[test]
fn adam_rejects_bad_settings_and_changed_parameters() {
    for bad in [
        AdamConfig { learning_rate: 0.0, ..AdamConfig::default() },
        AdamConfig { beta1: 1.0, ..AdamConfig::default() },
        AdamConfig { beta2: -0.1, ..AdamConfig::default() },
        AdamConfig { epsilon: 0.0, ..AdamConfig::default() },
        AdamConfig { learning_rate: f64::NAN, ..AdamConfig::default() },
    ] {
        assert!(matches!(Adam::<f64>::new(bad), Err(Error::InvalidValue { .. })), "{bad:?}");
    }
    let mut adam = Adam::<f64>::with_learning_rate(0.1).unwrap();
    let mut p = DMatrix::zeros(2, 2);
    adam.step(&mut [&mut p], &[&DMatrix::from_element(2, 2, 1.0)]).unwrap();
    let mut q = DMatrix::zeros(3, 2);
    let err = adam.step(&mut [&mut q], &[&DMatrix::zeros(3, 2)]).unwrap_err();
    assert!(err.to_string().contains("2×2") && err.to_string().contains("3×2"), "{err}");
    let err = adam.step(&mut [&mut p], &[&DMatrix::from_element(2, 2, f64::NAN)]).unwrap_err();
    assert!(matches!(err, Error::NonFinite { .. }));
    assert_eq!(adam.moments.steps(), 1, "a refused step changes nothing");
}

// ───────────── gradient checks ─────────────

fn attention_case() -> (DMatrix<f64>, Batch, DMatrix<f64>, Batch, MultiHead<f64>) {
    let mut rng = Rng::new(11);
    // Two sequences: decoder lengths 3 and 2 (padded to 3), encoder lengths 4 and 2 (padded to 4).
    let q_batch = Batch::new(3, vec![3, 2]).unwrap();
    let kv_batch = Batch::new(4, vec![4, 2]).unwrap();
    let xq = rng.normal_matrix(6, 4, 1.0);
    let xkv = rng.normal_matrix(8, 4, 1.0);
    let mut w = MultiHead::random(2, 4, 4, 2, 4, 0.5, &mut rng).unwrap();
    for b in [&mut w.b_q, &mut w.b_k, &mut w.b_v, &mut w.b_o] {
        *b = rng.normal_matrix(1, 4, 0.3); // non-zero biases, so their gradients are checked too
    }
    (xq, q_batch, xkv, kv_batch, w)
}

fn mha_with(like: &MultiHead<f64>, t: &[DMatrix<f64>]) -> MultiHead<f64> {
    MultiHead {
        heads: like.heads,
        w_q: t[0].clone(),
        b_q: t[1].clone(),
        w_k: t[2].clone(),
        b_k: t[3].clone(),
        w_v: t[4].clone(),
        b_v: t[5].clone(),
        w_o: t[6].clone(),
        b_o: t[7].clone(),
    }
}

fn mha_named(w: &MultiHead<f64>) -> Vec<(&'static str, DMatrix<f64>)> {
    vec![
        ("W_Q", w.w_q.clone()),
        ("b_Q", w.b_q.clone()),
        ("W_K", w.w_k.clone()),
        ("b_K", w.b_k.clone()),
        ("W_V", w.w_v.clone()),
        ("b_V", w.b_v.clone()),
        ("W_O", w.w_o.clone()),
        ("b_O", w.b_o.clone()),
    ]
}

#[test]
fn cross_attention_backward_passes_gradcheck_into_the_encoder_output() {
    let (y, yb, e, eb, w) = attention_case();
    let r = probe(6, 4, 5);
    let (_, cache) = cross_attention_forward(&y, &yb, &e, &eb, &w).unwrap();
    let g = cross_attention_backward(&w, &cache, &r).unwrap();
    let loss = |t: &[DMatrix<f64>]| {
        dot(&cross_attention_forward(&t[0], &yb, &t[1], &eb, &mha_with(&w, &t[2..])).unwrap().0, &r)
    };
    let mut inputs = vec![("decoder y", y), ("encoder output", e)];
    inputs.extend(mha_named(&w));
    let analytic = [
        g.d_x_q,
        g.d_x_kv.clone(),
        g.d_w_q,
        g.d_b_q,
        g.d_w_k,
        g.d_b_k.clone(),
        g.d_w_v,
        g.d_b_v,
        g.d_w_o,
        g.d_b_o,
    ];
    gradcheck::check(config(), &inputs, &analytic, loss).assert_passed();
    // b_K cannot change any weight: its gradient is zero (up to rounding).
    assert!(g.d_b_k.iter().all(|v| v.abs() < 1e-12), "{}", g.d_b_k);
    // The padded encoder rows of sequence 2 (rows 6, 7) are masked: no gradient reaches them.
    assert!(g.d_x_kv.rows(6, 2).iter().all(|&v| v == 0.0));
    assert!(g.d_x_kv.rows(0, 6).iter().any(|&v| v != 0.0));
}

#[test]
fn causal_self_attention_with_padding_passes_gradcheck() {
    let (x, xb, _, _, w) = attention_case();
    let r = probe(6, 4, 6);
    let spec = attention_spec::<f64>(&xb, &xb, true).unwrap();
    assert!(
        spec.causal && spec.mask.is_some(),
        "sequence 2 is padded, so its padded keys are masked too"
    );
    let (_, cache) = mha_forward(&w, &x, &x, &spec).unwrap();
    let g = mha_backward(&w, &cache, &r).unwrap();
    let loss = |t: &[DMatrix<f64>]| {
        dot(&mha_forward(&mha_with(&w, &t[1..]), &t[0], &t[0], &spec).unwrap().0, &r)
    };
    let mut inputs = vec![("x", x)];
    inputs.extend(mha_named(&w));
    // x feeds queries, keys and values: its gradient is the sum of both input gradients.
    let analytic = [
        &g.d_x_q + &g.d_x_kv,
        g.d_w_q,
        g.d_b_q,
        g.d_w_k,
        g.d_b_k,
        g.d_w_v,
        g.d_b_v,
        g.d_w_o,
        g.d_b_o,
    ];
    gradcheck::check(config(), &inputs, &analytic, loss).assert_passed();
}

fn randomise_norms<T: llm_workbook::Float>(tensors: Vec<&mut DMatrix<T>>, rng: &mut Rng) {
    // γ = 1, β = 0 and zero biases would hide mistakes in their gradients: move every tensor.
    for t in tensors {
        let noise = rng.normal_matrix::<T>(t.nrows(), t.ncols(), 0.3);
        *t += noise;
    }
}

fn named(tensors: &[DMatrix<f64>], prefix: &str) -> Vec<(String, DMatrix<f64>)> {
    tensors.iter().enumerate().map(|(i, t)| (format!("{prefix}{i}"), t.clone())).collect()
}

#[test]
fn decoder_block_backward_passes_gradcheck_for_every_input_and_weight() {
    let (y, yb, e, eb, _) = attention_case();
    let mut rng = Rng::new(14);
    let mut block = DecoderBlock::<f64>::random(4, 2, 6, &mut rng).unwrap();
    randomise_norms(block.tensors_mut(), &mut rng);
    let r = probe(6, 4, 9);
    let (_, cache) = decoder_block_forward(&y, &yb, &e, &eb, &block).unwrap();
    let (dy, de, gb) = decoder_block_backward(&block, &cache, &r).unwrap();
    let weights: Vec<DMatrix<f64>> = block.tensors().into_iter().cloned().collect();
    let mut inputs = vec![("y".to_string(), y), ("encoder output".to_string(), e)];
    inputs.extend(named(&weights, "decoder weight "));
    let mut analytic = vec![dy, de];
    analytic.extend(gb.tensors().into_iter().cloned());
    let refs: Vec<(&str, DMatrix<f64>)> =
        inputs.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let loss = |t: &[DMatrix<f64>]| {
        let mut b = block.clone();
        for (slot, v) in b.tensors_mut().into_iter().zip(&t[2..]) {
            slot.copy_from(v);
        }
        dot(&decoder_block_forward(&t[0], &yb, &t[1], &eb, &b).unwrap().0, &r)
    };
    let report = gradcheck::check(config(), &refs, &analytic, loss);
    assert_eq!(report.tensors.len(), 2 + 26, "y, the encoder output and all 26 weight tensors");
    report.assert_passed();
}

#[test]
fn encoder_block_backward_passes_gradcheck_for_every_input_and_weight() {
    // Chapter 6's post-LN block over a padded batch, as the encoder uses it.
    let (_, _, x, xb, _) = attention_case();
    let mut rng = Rng::new(15);
    let mut block = encoder_block::<f64>(4, 2, 6, &mut rng).unwrap();
    randomise_norms(block_tensors_mut(&mut block), &mut rng);
    let r = probe(8, 4, 10);
    let (_, cache) = encoder_block_forward(&x, &xb, &block).unwrap();
    let g = block_backward(&block, &cache, &r).unwrap();
    let weights: Vec<DMatrix<f64>> = block_tensors(&block).into_iter().cloned().collect();
    let mut inputs = vec![("x".to_string(), x)];
    inputs.extend(named(&weights, "encoder weight "));
    let a = &g.attn;
    let mut analytic = vec![g.d_x.clone()];
    analytic.extend(
        [&a.d_w_q, &a.d_b_q, &a.d_w_k, &a.d_b_k, &a.d_w_v, &a.d_b_v, &a.d_w_o, &a.d_b_o]
            .map(|m| m.clone()),
    );
    analytic.extend([g.ln1.d_gamma.clone(), g.ln1.d_beta.clone()]);
    analytic.extend([
        g.ffn.d_w1.clone(),
        g.ffn.d_b1.clone(),
        g.ffn.d_w2.clone(),
        g.ffn.d_b2.clone(),
    ]);
    analytic.extend([g.ln2.d_gamma.clone(), g.ln2.d_beta.clone()]);
    let refs: Vec<(&str, DMatrix<f64>)> =
        inputs.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let loss = |t: &[DMatrix<f64>]| {
        let mut b = block.clone();
        for (slot, v) in block_tensors_mut(&mut b).into_iter().zip(&t[1..]) {
            slot.copy_from(v);
        }
        dot(&encoder_block_forward(&t[0], &xb, &b).unwrap().0, &r)
    };
    gradcheck::check(config(), &refs, &analytic, loss).assert_passed();
}

#[test]
fn padded_cross_entropy_passes_gradcheck_and_skips_padding() {
    let z = probe(4, 5, 16);
    let labels = [Some(2), None, Some(0), Some(4)];
    let (_, d) = padded_cross_entropy(&z, &labels).unwrap();
    assert!(d.row(1).iter().all(|&v| v == 0.0));
    gradcheck::check(Config::default(), &[("logits", z.clone())], &[d], |t| {
        padded_cross_entropy(&t[0], &labels).unwrap().0
    })
    .assert_passed();
    // Uniform logits over 5 classes cost ln 5.
    let (l, _) = padded_cross_entropy(&DMatrix::<f64>::zeros(1, 5), &[Some(3)]).unwrap();
    assert!(matches!(padded_cross_entropy(&z, &[None; 4]), Err(Error::Empty { .. })));
    assert_abs_diff_eq!(l, 5f64.ln(), epsilon = 1e-15);
}

fn tiny() -> EncoderDecoder<f64> {
    let config = ModelConfig {
        vocab: 6,
        width: 4,
        heads: 2,
        hidden: 6,
        encoder_layers: 1,
        decoder_layers: 1,
        max_len: 5,
    };
    let mut m = EncoderDecoder::<f64>::new(config, 3).unwrap();
    randomise_norms(m.tensors_mut(), &mut Rng::new(4));
    m
}

#[test]
fn whole_model_gradients_pass_gradcheck_with_padding_and_teacher_forcing() {
    let model = tiny();
    // Unequal lengths on both sides: padding masks and the padded loss rows are exercised.
    let source = vec![vec![1, 2, 3], vec![4, 0]];
    let target_in = vec![vec![5, 3, 2, 1], vec![5, 0]];
    let labels = vec![vec![3, 2, 1, 4], vec![0, 4]];
    let g = model.loss_and_gradients(&source, &target_in, &labels).unwrap();
    let tensors: Vec<DMatrix<f64>> = model.tensors().into_iter().cloned().collect();
    let inputs = named(&tensors, "tensor ");
    let refs: Vec<(&str, DMatrix<f64>)> =
        inputs.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let analytic: Vec<DMatrix<f64>> = g.grads.tensors().into_iter().cloned().collect();
    let loss = |t: &[DMatrix<f64>]| {
        model
            .with_tensors(t)
            .unwrap()
            .loss_and_gradients(&source, &target_in, &labels)
            .unwrap()
            .loss
    };
    let report = gradcheck::check(config(), &refs, &analytic, loss);
    assert_eq!(report.tensors.len(), model.tensors().len());
    report.assert_passed();
}

// ───────────── masks ─────────────

#[test]
fn padding_never_changes_a_real_output() {
    let (y, yb, e, eb, w) = attention_case();
    let (out, _) = cross_attention_forward(&y, &yb, &e, &eb, &w).unwrap();
    let mut e2 = e.clone();
    for r in 6..8 {
        for c in 0..4 {
            e2[(r, c)] = 1e3 * (r + c) as f64; // the padded encoder rows of sequence 2
        }
    }
    let (out2, _) = cross_attention_forward(&y, &yb, &e2, &eb, &w).unwrap();
    assert_eq!(out, out2, "exactly equal: masked keys get weight 0");
}

#[test]
fn a_padded_batch_gives_what_each_sequence_gives_alone() {
    let model = tiny();
    let sources = vec![vec![1, 2, 3, 4], vec![2], vec![0, 3]];
    let inputs = vec![vec![5, 4], vec![5, 2, 1, 0], vec![5]];
    let (logits, cache) = model.forward(&sources, &inputs).unwrap();
    let t = 4; // the padded target length
    for (b, (s, i)) in sources.iter().zip(&inputs).enumerate() {
        let (alone, _) = model.forward(std::slice::from_ref(s), std::slice::from_ref(i)).unwrap();
        for p in 0..i.len() {
            for c in 0..logits.ncols() {
                assert_abs_diff_eq!(logits[(b * t + p, c)], alone[(p, c)], epsilon = 1e-12);
            }
        }
    }
    // The cross-attention maps put no weight on padded source positions.
    // Head 1's weights are (B·T_t)×T_s; sequence 1 (a source of length 1) owns rows 4–7: all of
    // its weight sits on its one real source position.
    let map = &cache.decoder[0].cross_attention.weights[0];
    assert!(map.rows(4, 4).column(0).iter().all(|&w| w == 1.0));
    assert!(map.rows(4, 4).columns(1, 3).iter().all(|&w| w == 0.0));
}

#[test]
fn a_later_target_token_never_changes_an_earlier_logit() {
    let model = tiny();
    let source = vec![vec![1, 2, 3]];
    let (a, _) = model.forward(&source, &[vec![5, 1, 2, 3]]).unwrap();
    let (b, _) = model.forward(&source, &[vec![5, 1, 4, 0]]).unwrap();
    assert_eq!(a.rows(0, 2), b.rows(0, 2), "positions 0 and 1 cannot see positions 2 and 3");
    assert_ne!(a.rows(2, 2), b.rows(2, 2));
}

// ───────────── the task and the trained model ─────────────

#[test]
fn held_out_set_is_large_distinct_and_never_trained_on() {
    let task = CHAPTER_CONFIG.task;
    assert!(task.possible_sequences() > 1e8, "{} possible sources", task.possible_sequences());
    let held = task.held_out(1000, CHAPTER_CONFIG.held_out_seed).unwrap();
    let set: HashSet<Vec<usize>> = held.iter().cloned().collect();
    assert_eq!(set.len(), 1000);
    assert!(
        held.iter()
            .all(|s| (task.min_len..=task.max_len).contains(&s.len())
                && s.iter().all(|&d| d < DIGITS))
    );
    // With a tiny task most samples hit the excluded set; the sampler must still never return one.
    let small = ReversalTask { min_len: 2, max_len: 2 };
    let excluded: HashSet<Vec<usize>> = small.held_out(40, 1).unwrap().into_iter().collect();
    let mut rng = Rng::new(2);
    for _ in 0..200 {
        assert!(
            small.training_batch(&mut rng, 16, &excluded).iter().all(|s| !excluded.contains(s))
        );
    }
    assert!(matches!(small.held_out(60, 1), Err(Error::InvalidValue { .. })));
}

#[test]
fn teacher_forcing_shifts_the_target_right_behind_the_start_token() {
    let (inputs, labels) = teacher_forcing(&[vec![1, 2, 3]]);
    assert_eq!(inputs, [vec![START, 3, 2, 1]]);
    assert_eq!(labels, [vec![3, 2, 1, END]]);
}

#[test]
fn trained_model_reverses_99_percent_of_held_out_sequences() {
    let trained = chapter_model().unwrap();
    assert_eq!(trained.held_out.len(), 1000);
    let outputs = trained.held_out_outputs().unwrap();
    let right = outputs
        .iter()
        .zip(&trained.held_out)
        .filter(|(o, s)| **o == ReversalTask::target(s))
        .count();
    println!("held-out exact match: {right}/1000");
    assert!(right >= 990, "only {right} of 1000 held-out sources reversed exactly");
    assert_eq!(trained.exact_match().unwrap(), right as f64 / 1000.0);
}

#[test]
fn training_loss_falls_from_chance_to_near_zero() {
    let trained = chapter_model().unwrap();
    let l = &trained.losses;
    assert_eq!(l.len(), CHAPTER_CONFIG.steps);
    // At the start the 13 tokens are about equally likely: ln 13 ≈ 2.56.
    assert!(l[0] > 2.0 && l[0] < 4.0, "first loss {}", l[0]);
    let tail = l[l.len() - 50..].iter().sum::<f64>() / 50.0;
    assert!(tail < 0.05, "mean of the last 50 losses {tail}");
}

#[test]
fn cross_attention_of_the_trained_model_reads_the_source_backwards() {
    let trained = chapter_model().unwrap();
    let example = heatmap_example(trained);
    let map = trained.cross_attention_map(&example).unwrap();
    let n = example.len();
    assert_eq!(
        map.shape(),
        (n + 1, n),
        "rows: <start> and the n output digits; columns: the source"
    );
    for r in 0..map.nrows() {
        assert_abs_diff_eq!(map.row(r).sum(), 1.0, epsilon = 1e-5);
    }
    // Writing output digit i (decoder input i) the model reads around source position n − 1 − i:
    // the attention-weighted mean source position of every row lies within one place of it.
    for i in 0..n {
        let centre: f64 = (0..n).map(|j| j as f64 * map[(i, j)]).sum();
        let mirror = (n - 1 - i) as f64;
        assert!(
            (centre - mirror).abs() < 1.0,
            "row {i} centres on {centre:.2}, not near {mirror}:\n{map:.3}"
        );
    }
}

/// The chapter's loss curve and cross-attention map are committed figures, so the training that
/// draws them gives the same bits under every kernel a user may force: the main job computes the
/// book on the portable kernel
/// ([`compute_on_the_portable_kernel`](llm_workbook::book::compute_on_the_portable_kernel)),
/// whatever `LLM_WORKBOOK_KERNEL` says. Each kernel runs in a child process, as a user sets it.
/// The same training left to a SIMD kernel ends in other bits, which is what would change the
/// figures from one CPU to the next (planted: the call left out of the child).
#[test]
fn the_figures_training_gives_the_same_bits_under_every_kernel() {
    const NAME: &str = "the_figures_training_gives_the_same_bits_under_every_kernel";
    if common::is_child() {
        common::child_chooses_as_the_main_job();
        let trained = train(&TrainConfig { steps: 20, ..CHAPTER_CONFIG }).unwrap();
        let losses: Vec<u64> = trained.losses.iter().map(|l| l.to_bits()).collect();
        let map = trained.cross_attention_map(&heatmap_example(&trained)).unwrap();
        let map: Vec<u64> = map.iter().map(|v| v.to_bits()).collect();
        println!("{}{losses:?} {map:?}", common::CHILD_LINE);
        return;
    }
    common::same_bits_under_every_kernel(NAME, "the figures' training");
}

#[test]
fn greedy_decoding_stops_at_the_end_token() {
    let trained = chapter_model().unwrap();
    let out = trained
        .model
        .greedy_decode(&[vec![1, 2, 3], vec![9, 8, 7, 6, 5, 4, 3, 2]], START, END)
        .unwrap();
    assert_eq!(out, [vec![3, 2, 1], vec![2, 3, 4, 5, 6, 7, 8, 9]]);
}

// ───────────── bad input ─────────────

#[test]
fn a_decoder_width_unlike_the_encoders_is_a_shape_error() {
    let (_, _, e, eb, w) = attention_case();
    let y = DMatrix::<f64>::zeros(3, 6);
    let err = cross_attention_forward(&y, &Batch::full(1, 3).unwrap(), &e, &eb, &w).unwrap_err();
    assert!(matches!(err, Error::Shape { .. }));
    let msg = err.to_string();
    assert!(msg.contains("3×6") && msg.contains("8×4"), "{msg}");
}

#[test]
fn empty_sources_and_targets_are_errors() {
    let model = tiny();
    assert!(matches!(model.forward(&[], &[]), Err(Error::Empty { .. })));
    let err = model.forward(&[vec![]], &[vec![5]]).unwrap_err();
    assert!(err.to_string().contains("source") && err.to_string().contains("empty"), "{err}");
    let err = model.forward(&[vec![1]], &[vec![]]).unwrap_err();
    assert!(err.to_string().contains("target") && err.to_string().contains("empty"), "{err}");
    assert!(model.greedy_decode(&[], 5, 4).is_err());
}

#[test]
fn token_ids_outside_the_vocabulary_are_errors() {
    let model = tiny();
    let err = model.forward(&[vec![1, 6]], &[vec![5]]).unwrap_err();
    assert!(
        matches!(err, Error::InvalidValue { .. }) && err.to_string().contains("token id 6"),
        "{err}"
    );
    assert!(model.forward(&[vec![1]], &[vec![99]]).is_err());
    assert!(model.greedy_decode(&[vec![1]], 6, 4).is_err());
    let err = model.loss_and_gradients(&[vec![1]], &[vec![5]], &[vec![7]]).unwrap_err();
    assert!(err.to_string().contains("labels") && err.to_string().contains("token id 7"), "{err}");
}

#[test]
fn a_target_longer_than_the_maximum_is_an_error() {
    let model = tiny(); // max_len 5
    let err = model.forward(&[vec![1]], &[vec![5, 1, 1, 1, 1, 1]]).unwrap_err();
    assert!(
        err.to_string().contains("6 positions") && err.to_string().contains("maximum 5"),
        "{err}"
    );
    let mut config = CHAPTER_CONFIG;
    config.task.max_len = config.model.max_len;
    assert!(matches!(train(&config), Err(Error::InvalidValue { .. })));
    for bad in [
        TrainConfig { task: ReversalTask { min_len: 5, max_len: 4 }, ..CHAPTER_CONFIG },
        TrainConfig { task: ReversalTask { min_len: 0, max_len: 4 }, ..CHAPTER_CONFIG },
        TrainConfig { held_out: 0, ..CHAPTER_CONFIG },
        TrainConfig { batch_size: 0, ..CHAPTER_CONFIG },
        TrainConfig { model: ModelConfig { vocab: 20, ..CHAPTER_CONFIG.model }, ..CHAPTER_CONFIG },
        TrainConfig { learning_rate: -1.0, ..CHAPTER_CONFIG },
    ] {
        assert!(train(&bad).is_err(), "{bad:?}");
    }
}

#[test]
fn bad_shapes_heads_and_masks_are_errors() {
    let (y, yb, e, eb, w) = attention_case();
    assert!(matches!(
        cross_attention_forward(&y, &Batch::full(1, 6).unwrap(), &e, &eb, &w),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        cross_attention_forward(&y, &Batch::full(3, 2).unwrap(), &e, &eb, &w),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        attention_spec::<f64>(&yb, &Batch::full(3, 2).unwrap(), false),
        Err(Error::Shape { .. })
    ));
    assert!(
        Batch::new(3, vec![0]).is_err()
            && Batch::new(3, vec![4]).is_err()
            && Batch::new(3, vec![]).is_err()
    );
    let nan = DMatrix::from_element(6, 4, f64::NAN);
    assert!(matches!(
        cross_attention_forward(&nan, &yb, &e, &eb, &w),
        Err(Error::NonFinite { .. })
    ));
    let all_masked = masked_softmax_rows("test", &DMatrix::<f64>::zeros(2, 2), |_, _| false);
    assert!(matches!(all_masked, Err(Error::InvalidValue { .. })));
    assert!(DecoderBlock::<f64>::random(6, 4, 6, &mut Rng::new(0)).is_err());
    assert!(encoder_block::<f64>(6, 0, 6, &mut Rng::new(0)).is_err());
    let bad = ModelConfig {
        vocab: 6,
        width: 6,
        heads: 4,
        hidden: 6,
        encoder_layers: 1,
        decoder_layers: 1,
        max_len: 5,
    };
    assert!(EncoderDecoder::<f64>::new(bad, 0).is_err());
}

// ───────────── figures and prose ─────────────

#[test]
fn figures_hold_the_plotted_data_and_draw() {
    let figs = figures().unwrap();
    let stems: Vec<&str> = figs.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        stems,
        [
            "ch07_decoder_cell_weights",
            "ch07_decoder_text_weights",
            "ch07_cross_attention",
            "ch07_loss"
        ]
    );
    match &figs[0].1 {
        llm_workbook::plot::Figure::Heatmap(h) => {
            assert_eq!(format!("{:.8}", h.values[0][1]), "0.56641068")
        }
        _ => panic!("the decoder weights are a heatmap"),
    }
    match &figs[2].1 {
        llm_workbook::plot::Figure::Heatmap(h) => {
            assert_eq!(h.col_names.len(), h.values[0].len());
            assert_eq!(h.row_names.len(), h.values.len());
        }
        _ => panic!("the cross-attention is a heatmap"),
    }
    match &figs[3].1 {
        llm_workbook::plot::Figure::Line(c) => {
            assert_eq!(c.series[0].points.len(), CHAPTER_CONFIG.steps)
        }
        _ => panic!("the loss is a line chart"),
    }
    let dir = common::temp_dir("ch07");
    for (stem, f) in &figs {
        let files = f.save(&dir, stem).unwrap();
        assert!(
            files.iter().all(|p| std::fs::metadata(p).map(|m| m.len() > 1000).unwrap_or(false))
        );
    }
}

#[test]
fn prose_carries_the_register_and_the_worked_table() {
    common::check_chapter_prose(&CHAPTER);
}

// ───────────── hardening: training settings, determinism ─────────────

mod hardening {
    use super::*;

    fn small() -> TrainConfig {
        TrainConfig { steps: 6, batch_size: 8, warmup: 2, held_out: 20, ..CHAPTER_CONFIG }
    }

    #[test]
    fn training_is_deterministic_to_the_bit() {
        let (a, b) = (train(&small()).unwrap(), train(&small()).unwrap());
        assert_eq!(a.model, b.model);
        let bits = |t: &Trained| t.losses.iter().map(|l| l.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b));
        assert_eq!(a.held_out, b.held_out);
        let c = train(&TrainConfig { seed: small().seed + 1, ..small() }).unwrap();
        assert_ne!(bits(&a), bits(&c), "another seed draws other weights and batches");
    }

    #[test]
    fn bad_training_settings_are_refused_by_name() {
        for (bad, needle) in [
            (TrainConfig { steps: 0, ..small() }, "must all be positive"),
            (TrainConfig { batch_size: 0, ..small() }, "must all be positive"),
            (
                TrainConfig { task: ReversalTask { min_len: 0, max_len: 4 }, ..small() },
                "1 ≤ min ≤ max",
            ),
            (
                TrainConfig { task: ReversalTask { min_len: 5, max_len: 4 }, ..small() },
                "1 ≤ min ≤ max",
            ),
            (
                TrainConfig { task: ReversalTask { min_len: 3, max_len: 20 }, ..small() },
                "decoder positions",
            ),
            (TrainConfig { model: ModelConfig { vocab: 3, ..small().model }, ..small() }, "tokens"),
            (TrainConfig { learning_rate: -1.0, ..small() }, "learning rate"),
            (TrainConfig { learning_rate: f64::NAN, ..small() }, "learning rate"),
        ] {
            let e = train(&bad).unwrap_err();
            assert!(e.to_string().contains(needle), "{bad:?}: {e}");
        }
    }
}
