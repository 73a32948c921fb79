//! Chapter 1: logistic regression and binary cross-entropy. Run with
//! `cargo test --test ch01_logistic`.

mod common;

use approx::assert_abs_diff_eq;
use llm_workbook::Error;
use llm_workbook::ch01_logistic::book::{CHAPTER, figures};
use llm_workbook::ch01_logistic::*;
use llm_workbook::gradcheck::{self, Config};
use nalgebra::{DMatrix, DVector};
use rstest::rstest;

fn central(f: impl Fn(f64) -> f64, x: f64) -> f64 {
    let h = 1e-6;
    (f(x + h) - f(x - h)) / (2.0 * h)
}

fn col(v: &DVector<f64>) -> DMatrix<f64> {
    DMatrix::from_column_slice(v.len(), 1, v.as_slice())
}

// ───────────── the document's numbers ─────────────

#[test]
fn sigmoid_of_0_is_the_0_5_threshold() {
    assert_eq!(sigmoid(0.0_f64), 0.5);
    assert_eq!(classify(sigmoid(0.0_f64)), 1, "σ(z) ≥ 0.5 is class 1");
    assert_eq!(classify(sigmoid(-1e-9_f64)), 0);
}

#[test]
fn bias_minus_10_switches_on_at_weighted_sum_10() {
    let neuron = |weighted_sum: f64| sigmoid(weighted_sum - 10.0);
    assert_eq!(neuron(10.0), 0.5);
    assert!(neuron(9.99) < 0.5 && neuron(10.01) > 0.5);
    // "meaningfully": far below 10 the neuron is essentially off, far above essentially on.
    assert!(neuron(5.0) < 0.01 && neuron(15.0) > 0.99);
}

#[test]
fn p_of_y_0_is_one_minus_sigmoid() {
    for z in [-3.0, -0.5, 0.0, 0.7, 4.0_f64] {
        let p1 = sigmoid(z);
        let p0 = sigmoid(-z);
        assert_abs_diff_eq!(p0, 1.0 - p1, epsilon = 1e-15);
    }
}

#[test]
fn sigmoid_maps_into_the_open_unit_interval() {
    for z in [-30.0, -5.0, -0.1, 0.1, 5.0, 30.0_f64] {
        let s = sigmoid(z);
        assert!(s > 0.0 && s < 1.0, "σ({z}) = {s}");
    }
}

// ───────────── stability ─────────────

#[test]
fn sigmoid_and_bce_are_finite_and_exact_at_plus_minus_1000() {
    assert_eq!(sigmoid(1000.0_f64), 1.0);
    assert_eq!(sigmoid(-1000.0_f64), 0.0); // e^-1000 ≈ 5e-435 is below the smallest f64
    assert_eq!(sigmoid(-700.0_f64), (-700.0_f64).exp() / (1.0 + (-700.0_f64).exp()));
    // ℓ(y = 0, z = 1000) = 1000 and ℓ(y = 1, z = −1000) = 1000: the confident wrong answer.
    assert_eq!(bce_from_logit(0.0_f64, 1000.0), 1000.0);
    assert_eq!(bce_from_logit(1.0_f64, -1000.0), 1000.0);
    // The confident right answer costs e^-1000, which rounds to 0.
    assert_eq!(bce_from_logit(1.0_f64, 1000.0), 0.0);
    assert_eq!(bce_from_logit(0.0_f64, -1000.0), 0.0);
    // Through the probability the same case is infinite: why losses are computed from logits.
    assert!(bce(0.0_f64, sigmoid(1000.0)).is_infinite());
    // And in f32 too.
    assert_eq!(bce_from_logit(0.0_f32, 1000.0), 1000.0);
}

#[test]
fn bce_from_logit_equals_bce_of_sigmoid_where_both_are_accurate() {
    for z in [-8.0, -1.0, 0.0, 0.3, 2.0, 8.0_f64] {
        for y in [0.0, 1.0] {
            assert_abs_diff_eq!(bce_from_logit(y, z), bce(y, sigmoid(z)), epsilon = 1e-12);
        }
    }
}

// ───────────── derivatives ─────────────

#[test]
fn sigmoid_derivative_is_s_times_one_minus_s() {
    for z in [-6.0, -1.5, 0.0, 0.8, 5.0_f64] {
        assert_abs_diff_eq!(sigmoid_derivative(z), central(sigmoid, z), epsilon = 1e-9);
    }
    assert_eq!(sigmoid_derivative(0.0_f64), 0.25);
}

#[test]
fn factor_1_has_denominator_yhat_times_one_minus_yhat() {
    for &(y, y_hat) in &[(0.0, 0.8), (1.0, 0.3), (0.0, 0.05), (1.0, 0.95)] {
        let numeric = central(|p| bce(y, p), y_hat);
        assert_abs_diff_eq!(d_loss_d_yhat(y, y_hat), numeric, epsilon = 1e-6);
        // The printed (ŷ − y)/(y(1 − ŷ)) is wrong: infinite for y = 0, off for y = 1.
        let printed = (y_hat - y) / (y * (1.0 - y_hat));
        assert!(
            !printed.is_finite() || (printed - numeric).abs() > 1e-3,
            "printed form agrees at y={y}, ŷ={y_hat}"
        );
    }
}

#[test]
fn factor_2_is_yhat_times_one_minus_yhat() {
    for z in [-2.0, 0.0, 1.3_f64] {
        assert_abs_diff_eq!(d_yhat_d_z(sigmoid(z)), central(sigmoid, z), epsilon = 1e-9);
    }
}

#[test]
fn factor_3_is_the_input_x_not_z() {
    let w = DVector::from_vec(vec![0.4, -1.2, 0.7]);
    let x = DVector::from_vec(vec![2.0, 0.5, -1.0]);
    let b = 0.3;
    let z_of = |w: &DVector<f64>| w.dot(&x) + b;
    let z = z_of(&w);
    for i in 0..3 {
        let numeric = central(
            |wi| {
                let mut v = w.clone();
                v[i] = wi;
                z_of(&v)
            },
            w[i],
        );
        assert_abs_diff_eq!(d_z_d_w(&x)[i], numeric, epsilon = 1e-9);
        assert!((numeric - z).abs() > 1e-3, "∂z/∂w_{i} is x_{i}, not z");
    }
}

#[test]
fn chain_product_is_yhat_minus_y_times_x_and_passes_gradcheck() {
    let w = DVector::from_vec(vec![0.5, -0.25]);
    let x = DVector::from_vec(vec![1.0, 2.0]);
    let (b, y) = (0.1, 1.0);
    let g = sample_gradient(&w, b, &x, y).unwrap();
    let y_hat = sigmoid(w.dot(&x) + b);
    assert_abs_diff_eq!(g, x.clone() * (y_hat - y), epsilon = 1e-12);
    let report = gradcheck::check(Config::default(), &[("w", col(&w))], &[col(&g)], |t| {
        bce(y, sigmoid(t[0][(0, 0)] * x[0] + t[0][(1, 0)] * x[1] + b))
    });
    report.assert_passed();
}

#[test]
fn chain_product_stays_finite_where_the_sigmoid_rounds_to_0_or_1() {
    // At z = 40, σ(z) rounds to exactly 1 in f64 (e^{−40} ≈ 4.2e-18 is below half an ulp of 1),
    // so ŷ(1 − ŷ) = 0 and the factors multiplied as written give (ŷ − y)/0 · 0 = NaN.
    // z = −40 is checked as well: there ŷ ≈ 4.2e-18 is small but not 0.
    let x = DVector::from_vec(vec![2.0, -1.0]);
    for (w0, y) in [(20.0, 0.0), (20.0, 1.0), (-20.0, 1.0), (-20.0, 0.0)] {
        let w = DVector::from_vec(vec![w0, 0.0]);
        let g = sample_gradient(&w, 0.0, &x, y).unwrap();
        let y_hat = sigmoid(2.0 * w0);
        assert!(g.iter().all(|v: &f64| v.is_finite()), "z = {}: gradient {g:?}", 2.0 * w0);
        assert_abs_diff_eq!(g, x.clone() * (y_hat - y), epsilon = 1e-15);
    }
}

fn batch() -> (DMatrix<f64>, DVector<f64>, DVector<f64>, f64) {
    let x = DMatrix::from_row_slice(
        5,
        3,
        &[0.5, -1.0, 2.0, 1.5, 0.3, -0.7, -2.0, 1.1, 0.4, 0.0, 0.2, -1.3, 0.9, 0.9, 0.9],
    );
    let y = DVector::from_vec(vec![1.0, 0.0, 1.0, 0.0, 1.0]);
    let w = DVector::from_vec(vec![0.3, -0.6, 0.2]);
    (x, y, w, -0.15)
}

#[test]
fn batch_gradient_passes_gradcheck_for_w_and_b() {
    let (x, y, w, b) = batch();
    let (_, d_w, d_b) = loss_and_gradient(&w, b, &x, &y).unwrap();
    let loss = |w: &DMatrix<f64>, b: f64| {
        let wv = DVector::from_column_slice(w.as_slice());
        loss_and_gradient(&wv, b, &x, &y).unwrap().0
    };
    gradcheck::check(
        Config::default(),
        &[("w", col(&w)), ("b", DMatrix::from_element(1, 1, b))],
        &[col(&d_w), DMatrix::from_element(1, 1, d_b)],
        |t| loss(&t[0], t[1][(0, 0)]),
    )
    .assert_passed();
}

#[test]
fn batch_gradient_is_the_mean_of_yhat_minus_y_times_x() {
    let (x, y, w, b) = batch();
    let (_, d_w, d_b) = loss_and_gradient(&w, b, &x, &y).unwrap();
    let n = x.nrows() as f64;
    let mut expect = DVector::zeros(3);
    let mut expect_b = 0.0;
    for i in 0..x.nrows() {
        let xi = x.row(i).transpose();
        let r = sigmoid(w.dot(&xi) + b) - y[i];
        expect += xi * (r / n);
        expect_b += r / n;
    }
    assert_abs_diff_eq!(d_w, expect, epsilon = 1e-14);
    assert_abs_diff_eq!(d_b, expect_b, epsilon = 1e-14);
}

#[test]
fn logits_backward_passes_gradcheck_for_x_w_and_b() {
    let (x, _, w, b) = batch();
    // An arbitrary upstream gradient: L = Σ cᵢ zᵢ².
    let c = DVector::from_vec(vec![0.3, -1.0, 0.5, 2.0, -0.4]);
    let z = logits_forward(&w, b, &x).unwrap();
    let d_z = z.zip_map(&c, |zi, ci| 2.0 * ci * zi);
    let g = logits_backward(&x, &w, &d_z).unwrap();
    let loss = |x: &DMatrix<f64>, w: &DMatrix<f64>, b: f64| {
        let z = logits_forward(&DVector::from_column_slice(w.as_slice()), b, x).unwrap();
        z.iter().zip(c.iter()).map(|(zi, ci)| ci * zi * zi).sum::<f64>()
    };
    gradcheck::check(
        Config::default(),
        &[("x", x.clone()), ("w", col(&w)), ("b", DMatrix::from_element(1, 1, b))],
        &[g.d_x.clone(), col(&g.d_w), DMatrix::from_element(1, 1, g.d_b)],
        |t| loss(&t[0], &t[1], t[2][(0, 0)]),
    )
    .assert_passed();
}

#[test]
fn gradcheck_rejects_a_deliberately_wrong_backward() {
    // The document's factor ③ as printed (z instead of x) must fail the check.
    let w = DVector::from_vec(vec![0.5, -0.25]);
    let x = DVector::from_vec(vec![1.0, 2.0]);
    let (b, y) = (0.1, 1.0);
    let z = w.dot(&x) + b;
    let y_hat = sigmoid(z);
    let wrong = DVector::from_vec(vec![z, z]) * (y_hat - y);
    let report = gradcheck::check(Config::default(), &[("w", col(&w))], &[col(&wrong)], |t| {
        bce(y, sigmoid(t[0][(0, 0)] * x[0] + t[0][(1, 0)] * x[1] + b))
    });
    assert!(!report.passed());
    let text = report.to_string();
    assert!(
        text.contains("w") && text.contains("FAIL"),
        "the report names the tensor and the failure:\n{text}"
    );
}

// ───────────── the likelihood identities ─────────────

#[test]
fn bernoulli_likelihood_picks_yhat_or_one_minus_yhat() {
    assert_abs_diff_eq!(bernoulli_likelihood(1.0, 0.8), 0.8, epsilon = 1e-15);
    assert_abs_diff_eq!(bernoulli_likelihood(0.0, 0.8), 0.2, epsilon = 1e-15);
}

#[test]
fn batch_likelihood_equals_exp_of_minus_n_times_bce() {
    let (x, y, w, b) = batch();
    let p = predict_proba(&w, b, &x).unwrap();
    let mean_bce = bce_mean_from_logits(&logits_forward(&w, b, &x).unwrap(), &y).unwrap();
    assert_abs_diff_eq!(
        batch_likelihood(&y, &p).unwrap(),
        (-(x.nrows() as f64) * mean_bce).exp(),
        epsilon = 1e-14
    );
}

#[test]
fn log_likelihood_is_minus_the_summed_loss() {
    let (x, y, w, b) = batch();
    let p = predict_proba(&w, b, &x).unwrap();
    let summed: f64 = p.iter().zip(y.iter()).map(|(&pi, &yi)| bce(yi, pi)).sum();
    assert_abs_diff_eq!(log_likelihood(&y, &p).unwrap(), -summed, epsilon = 1e-13);
    assert_abs_diff_eq!(
        log_likelihood(&y, &p).unwrap(),
        batch_likelihood(&y, &p).unwrap().ln(),
        epsilon = 1e-13
    );
    // The printed line log(yᵢ ŷᵢ (1 − ŷᵢ)^{1−yᵢ}) is −∞ for any yᵢ = 0: not the log-likelihood.
    let printed: f64 =
        p.iter().zip(y.iter()).map(|(&pi, &yi)| (yi * pi * (1.0 - pi).powf(1.0 - yi)).ln()).sum();
    assert!(printed.is_infinite());
}

// ───────────── training ─────────────

#[test]
fn training_reaches_95_percent() {
    let (x, y, t) = chapter_model().unwrap();
    let acc = t.accuracy(&x, &y).unwrap();
    assert!(acc >= 0.95, "training accuracy {acc}");
    assert!(t.losses.last().unwrap() < &(0.25 * t.losses[0]));
}

#[test]
fn loss_never_rises_for_alpha_below_one_over_l() {
    let (x, _, t) = chapter_model().unwrap();
    let l = smoothness_bound(&x);
    assert!(LEARNING_RATE <= 1.0 / l, "α = {LEARNING_RATE} exceeds 1/L = {}", 1.0 / l);
    for (i, pair) in t.losses.windows(2).enumerate() {
        assert!(pair[1] <= pair[0], "loss rose at step {i}: {} → {}", pair[0], pair[1]);
    }
}

#[test]
fn two_clouds_is_reproducible_from_its_seed() {
    let (a, ya) = two_clouds(10, 7);
    let (b, yb) = two_clouds(10, 7);
    assert_eq!(a, b);
    assert_eq!(ya, yb);
    assert_ne!(a, two_clouds(10, 8).0);
}

// ───────────── bad input ─────────────

#[rstest]
#[case::w_and_x_lengths_differ(
    DVector::from_vec(vec![1.0, 2.0, 3.0]),
    DMatrix::from_row_slice(2, 2, &[1.0, 2.0, 3.0, 4.0]),
    "w and x"
)]
#[case::empty_batch(DVector::from_vec(vec![1.0, 2.0]), DMatrix::zeros(0, 2), "empty")]
#[case::nan_feature(
    DVector::from_vec(vec![1.0, 2.0]),
    DMatrix::from_row_slice(1, 2, &[f64::NAN, 1.0]),
    "non-finite"
)]
#[case::infinite_feature(
    DVector::from_vec(vec![1.0, 2.0]),
    DMatrix::from_row_slice(1, 2, &[1.0, f64::INFINITY]),
    "non-finite"
)]
#[case::nan_weight(
    DVector::from_vec(vec![f64::NAN, 2.0]),
    DMatrix::from_row_slice(1, 2, &[1.0, 1.0]),
    "non-finite"
)]
fn bad_batches_are_clear_errors(
    #[case] w: DVector<f64>,
    #[case] x: DMatrix<f64>,
    #[case] needle: &str,
) {
    let err = logits_forward(&w, 0.0, &x).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(needle), "{msg}");
    if let Error::Shape { got, .. } = &err {
        assert!(got.contains("2×2") && got.contains('3'), "names both shapes: {msg}");
    }
}

#[test]
fn labels_outside_0_1_are_an_error() {
    let (x, _, w, b) = batch();
    let y = DVector::from_vec(vec![1.0, 0.0, 2.0, 0.0, 1.0]);
    let msg = loss_and_gradient(&w, b, &x, &y).unwrap_err().to_string();
    assert!(msg.contains("y[2] = 2"), "{msg}");
    let short = DVector::from_vec(vec![1.0, 0.0]);
    assert!(matches!(loss_and_gradient(&w, b, &x, &short), Err(Error::Shape { .. })));
}

#[rstest]
#[case(0.0)]
#[case(-0.1)]
#[case(f64::NAN)]
#[case(f64::INFINITY)]
fn bad_learning_rates_are_an_error(#[case] alpha: f64) {
    let (x, y, _, _) = batch();
    let msg =
        train(&x, &y, TrainConfig { learning_rate: alpha, steps: 3 }).unwrap_err().to_string();
    assert!(msg.contains("learning rate"), "{msg}");
}

#[test]
fn empty_logits_are_an_error() {
    let z = DVector::<f64>::zeros(0);
    assert!(matches!(bce_mean_from_logits(&z, &z), Err(Error::Empty { .. })));
}

// ───────────── plots and prose ─────────────

#[test]
fn figures_hold_the_plotted_series_and_draw() {
    use llm_workbook::plot::Figure;
    let figs = figures().unwrap();
    let stems: Vec<&str> = figs.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(stems, ["ch01_sigmoid", "ch01_bce", "ch01_loss", "ch01_boundary"]);
    let Figure::Line(sig) = &figs[0].1 else { panic!("sigmoid plot is a line chart") };
    for &(z, s) in &sig.series[0].points {
        assert_eq!(s, sigmoid(z));
    }
    let peak = sig.series[1].points.iter().map(|p| p.1).fold(0.0, f64::max);
    assert_abs_diff_eq!(peak, 0.25, epsilon = 1e-12);
    let Figure::LogLine(loss, _) = &figs[2].1 else { panic!("loss plot is a log-x line chart") };
    assert_eq!(loss.series[0].points.len(), STEPS, "the loss after each update");
    let Figure::Scatter(sc) = &figs[3].1 else { panic!("boundary plot is a scatter chart") };
    assert_eq!(sc.classes.iter().map(|c| c.points.len()).sum::<usize>(), 2 * PER_CLASS);
    // Rendering works with the embedded font, into a temporary folder.
    let dir = common::temp_dir("ch01");
    let written = figs[3].1.save(&dir, "boundary").unwrap();
    for f in written {
        assert!(std::fs::metadata(&f).unwrap().len() > 1000, "{} is too small", f.display());
    }
}

/// The loss falls by most of its fall within its first few updates and then creeps for the
/// rest: on a linear step axis the whole fall would sit against the left edge. On the axis as
/// drawn, the first 90 % of the fall must span more than a tenth of the axis's width.
#[test]
fn the_loss_curve_spreads_its_fall_across_the_axis() {
    use llm_workbook::plot::{Figure, LogAxes};
    // Where x lands across the drawn axis, 0 at the left edge and 1 at the right.
    let across = |fig: &Figure, x: f64| -> f64 {
        let (chart, log) = match fig {
            Figure::Line(c) => (c, false),
            Figure::LogLine(c, LogAxes::X) => (c, true),
            other => panic!("the loss plot is a line chart, not {other:?}"),
        };
        let xs = chart.series[0].points.iter().map(|p| p.0);
        let (lo, hi) = xs.fold((f64::INFINITY, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
        if log {
            // A log axis runs over whole powers of two (see `plot::LogAxes`).
            let (l0, l1) = (lo.log2().floor(), hi.log2().ceil());
            (x.log2() - l0) / (l1 - l0)
        } else {
            (x - lo) / (hi - lo)
        }
    };
    let figs = figures().unwrap();
    let (_, _, t) = chapter_model().unwrap();
    let (first, last) = (t.losses[0], t.losses[STEPS]);
    let most = first - 0.9 * (first - last);
    let step = t.losses.iter().position(|&l| l <= most).unwrap();
    assert!(step <= STEPS / 10, "the fall is fast: 90 % of it by update {step}");
    // From the first drawn point (update 1) to that update, the fall gets room on the axis.
    let room = across(&figs[2].1, step as f64) - across(&figs[2].1, 1.0);
    assert!(room > 0.1, "90 % of the fall (by update {step}) fills {room:.3} of the axis");
    // The planted mistake, the old drawing: the same curve on a linear step axis.
    let Figure::LogLine(chart, _) = &figs[2].1 else { unreachable!("checked above") };
    let linear = Figure::Line(chart.clone());
    let squeezed = across(&linear, step as f64) - across(&linear, 1.0);
    assert!(squeezed <= 0.1, "a linear axis squeezes the fall into {squeezed:.3}");
}

#[test]
fn prose_carries_the_register_and_the_worked_table() {
    common::check_chapter_prose(&CHAPTER);
}

// ───────────── hardening: infinities, NaN, ŷ at 0 and 1, determinism ─────────────

mod hardening {
    use super::*;

    #[test]
    fn bce_from_logit_at_infinite_logits_is_the_limit_and_nan_propagates() {
        let inf = f64::INFINITY;
        // The confident right answer costs nothing, the confident wrong one is infinite: the
        // limits of ℓ as z → ±∞, never ∞ − ∞ = NaN.
        assert_eq!(bce_from_logit(1.0, inf), 0.0);
        assert_eq!(bce_from_logit(0.0, -inf), 0.0);
        assert_eq!(bce_from_logit(0.0, inf), inf);
        assert_eq!(bce_from_logit(1.0, -inf), inf);
        assert_eq!(bce_from_logit(1.0_f32, f32::INFINITY), 0.0);
        assert_eq!(sigmoid(inf), 1.0);
        assert_eq!(sigmoid(-inf), 0.0);
        // NaN in, NaN out, as documented: the scalar functions do not invent a number.
        assert!(bce_from_logit(1.0, f64::NAN).is_nan());
        assert!(bce_from_logit(f64::NAN, 2.0).is_nan());
        assert!(sigmoid(f64::NAN).is_nan());
        // The batch function refuses both instead of averaging them.
        let y = DVector::from_vec(vec![1.0, 0.0]);
        for bad in [inf, -inf, f64::NAN] {
            let z = DVector::from_vec(vec![0.5, bad]);
            let e = bce_mean_from_logits(&z, &y).unwrap_err();
            assert!(
                matches!(e, Error::NonFinite { .. }) && e.to_string().contains("index 1"),
                "{e}"
            );
        }
        // The fractional label in between still follows the formula.
        assert_abs_diff_eq!(
            bce_from_logit(0.25, 2.0),
            0.75 * 2.0 + (-2.0_f64).exp().ln_1p(),
            epsilon = 1e-15
        );
    }

    #[test]
    fn bce_at_y_hat_0_and_1_through_logits_is_finite_with_the_exact_gradient() {
        // z = ±800: ŷ = σ(z) rounds to exactly 1 or 0 in f64, where −ln ŷ or −ln(1 − ŷ) is ∞.
        assert_eq!(sigmoid(800.0_f64), 1.0);
        assert_eq!(sigmoid(-800.0_f64), 0.0);
        assert!(
            bce(0.0, sigmoid(800.0_f64)).is_infinite()
                && bce(1.0, sigmoid(-800.0_f64)).is_infinite()
        );
        // Through the logits both losses and the gradient are finite and exact.
        let x = DMatrix::from_row_slice(2, 1, &[800.0, -800.0]);
        let w = DVector::from_vec(vec![1.0]);
        let wrong = DVector::from_vec(vec![0.0, 1.0]);
        let (loss, d_w, d_b) = loss_and_gradient(&w, 0.0, &x, &wrong).unwrap();
        assert_eq!(loss, 800.0, "both samples confidently wrong by 800 nats");
        // ∂L/∂w = mean((ŷ − y)x) = ((1 − 0)·800 + (0 − 1)·(−800))/2 = 800; ∂L/∂b = (1 − 1)/2 = 0.
        assert_eq!((d_w[0], d_b), (800.0, 0.0));
        let right = DVector::from_vec(vec![1.0, 0.0]);
        let (loss, d_w, d_b) = loss_and_gradient(&w, 0.0, &x, &right).unwrap();
        assert_eq!((loss, d_w[0], d_b), (0.0, 0.0, 0.0));
    }

    #[test]
    fn likelihoods_refuse_labels_and_probabilities_of_different_lengths() {
        let y = DVector::from_vec(vec![1.0, 0.0, 1.0]);
        let p = DVector::from_vec(vec![0.9, 0.2]);
        for e in [batch_likelihood(&y, &p).unwrap_err(), log_likelihood(&y, &p).unwrap_err()] {
            assert!(
                matches!(e, Error::Shape { .. })
                    && e.to_string().contains("length 3")
                    && e.to_string().contains("got 2"),
                "{e}"
            );
        }
        assert_eq!(
            batch_likelihood::<f64>(&DVector::zeros(0), &DVector::zeros(0)).unwrap(),
            1.0,
            "no data: likelihood 1"
        );
    }

    #[test]
    fn training_is_deterministic_to_the_bit() {
        let run = || {
            let (x, y) = two_clouds(40, 11);
            train(&x, &y, TrainConfig { learning_rate: 0.5, steps: 60 }).unwrap()
        };
        let (a, b) = (run(), run());
        let bits = |t: &Trained| {
            let mut v: Vec<u64> = t.w.iter().map(|w| w.to_bits()).collect();
            v.push(t.b.to_bits());
            v.extend(t.losses.iter().map(|l| l.to_bits()));
            v
        };
        assert_eq!(bits(&a), bits(&b));
        let (x, y) = two_clouds(40, 12);
        let c = train(&x, &y, TrainConfig { learning_rate: 0.5, steps: 60 }).unwrap();
        assert_ne!(bits(&a), bits(&c), "another data seed gives other numbers");
    }
}

/// Where the boundary plot draws its line: each end of the drawn segment (as
/// [`llm_workbook::plot::ScatterChart::drawn_lines`] computes it for the drawing) lies on
/// wᵀx + b = 0 within a pixel and on the chart's edge.
mod drawn_boundary {
    use super::*;
    use llm_workbook::plot::{Figure, ScatterChart};

    /// Data units per pixel along x: the chart's x span over the plot's width (under 900 px).
    fn pixel(chart: &ScatterChart) -> f64 {
        let (x, _) = chart.ranges();
        (x.1 - x.0) / 600.0
    }

    /// The reasons `ends` do not lie on the line and on the edges; empty when they do.
    fn faults(chart: &ScatterChart, w: &DVector<f64>, b: f64, ends: &[(f64, f64)]) -> Vec<String> {
        let ((x0, x1), (y0, y1)) = chart.ranges();
        let mut out = Vec::new();
        for &(px, py) in ends {
            let off_line = (w[0] * px + w[1] * py + b).abs() / w.norm();
            if off_line > pixel(chart) {
                out.push(format!("({px:.3}, {py:.3}) is {off_line:.3} off wᵀx + b = 0"));
            }
            let edge = |v: f64, lo: f64, hi: f64| (v - lo).abs() < 1e-9 || (v - hi).abs() < 1e-9;
            if !(edge(px, x0, x1) || edge(py, y0, y1)) {
                out.push(format!("({px:.3}, {py:.3}) is not on the chart's edge"));
            }
        }
        out
    }

    #[test]
    fn the_boundary_is_drawn_on_its_line_from_edge_to_edge() {
        let (_, _, trained) = chapter_model().unwrap();
        let figs = figures().unwrap();
        let Figure::Scatter(chart) = &figs[3].1 else { panic!("boundary plot is a scatter chart") };
        let drawn = chart.drawn_lines();
        assert_eq!(drawn.len(), 1, "one boundary line");
        assert_eq!(drawn[0].len(), 1, "one unbroken segment");
        let segment = &drawn[0][0];
        let ends = [segment[0], segment[segment.len() - 1]];
        let found = faults(chart, &trained.w, trained.b, &ends);
        assert!(found.is_empty(), "{}", found.join("\n"));
        // The planted mistake, the old drawing: each end pinned to the chart's rectangle.
        let ((x0, x1), (y0, y1)) = chart.ranges();
        let given = &chart.lines[0].points;
        let pinned: Vec<(f64, f64)> = [given[0], given[given.len() - 1]]
            .iter()
            .map(|&(px, py)| (px.clamp(x0, x1), py.clamp(y0, y1)))
            .collect();
        assert!(!faults(chart, &trained.w, trained.b, &pinned).is_empty(), "pinning went unseen");
    }
}
