//! Chapter 3: the dense layer, the activations, the MLP and backpropagation, the fact-storing MLP,
//! superposition.
mod common;

use llm_workbook::Error;
use llm_workbook::ch03_mlp::*;
use llm_workbook::gradcheck::{Config, check};
use llm_workbook::rng::Rng;
use nalgebra::DMatrix;

/// Σ y ⊙ r: a scalar loss whose gradient with respect to y is the fixed matrix r.
fn weighted_sum(y: &DMatrix<f64>, r: &DMatrix<f64>) -> f64 {
    y.component_mul(r).sum()
}

// ───────────────────────────── erf ─────────────────────────────

/// Reference values from CPython's `math.erf` / `math.erfc` (the C library's, correct to ~1 ulp).
const ERF_TABLE: &[(f64, f64)] = &[
    (0.0, 0.0),
    (0.1, 0.1124629160182849),
    (0.5, 0.5204998778130465),
    (1.0, 0.8427007929497149),
    (1.5, 0.9661051464753108),
    (2.0, 0.9953222650189527),
    (2.5, 0.999593047982555),
    (3.0, 0.9999779095030014),
    (4.0, 0.9999999845827421),
    (5.0, 0.9999999999984626),
];

#[test]
fn erf_matches_reference_values_to_1e_12() {
    for &(x, want) in ERF_TABLE {
        assert!((erf(x) - want).abs() < 1e-12, "erf({x}) = {} want {want}", erf(x));
        assert!((erf(-x) + want).abs() < 1e-12, "erf is odd at {x}");
    }
    assert_eq!(erf(40.0), 1.0);
    assert_eq!(erf(f64::INFINITY), 1.0);
    assert_eq!(erf(f64::NEG_INFINITY), -1.0);
    assert!(erf(f64::NAN).is_nan());
}

#[test]
fn erfc_keeps_relative_accuracy_in_the_tail() {
    let table = [
        (0.5, 0.4795001221869535),
        (2.0, 0.004677734981047265),
        (2.5, 0.0004069520174449589),
        (3.0, 2.2090496998585438e-05),
        (5.0, 1.5374597944280351e-12),
        (6.0, 2.1519736712498916e-17),
        (10.0, 2.088487583762545e-45),
        (26.0, 5.663192408856143e-296),
    ];
    for (x, want) in table {
        let rel = (erfc(x) - want).abs() / want;
        assert!(rel < 1e-13, "erfc({x}) = {:e} want {want:e} (relative error {rel:e})", erfc(x));
    }
    // Either side of the switch between series and continued fraction agrees.
    let (below, above) = (erf(2.5 - 1e-12), erf(2.5 + 1e-12));
    assert!((above - below).abs() < 1e-14);
}

#[test]
fn erf_is_the_integral_of_its_density() {
    // erf′(x) = (2/√π) e^{−x²}: central differences of our erf against the closed form.
    for x in [-3.0, -1.2, -0.3, 0.0, 0.7, 1.9, 2.4, 2.6, 3.5] {
        let h = 1e-5;
        let numeric = (erf(x + h) - erf(x - h)) / (2.0 * h);
        let exact = std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp();
        assert!((numeric - exact).abs() < 1e-9, "at {x}: {numeric} vs {exact}");
    }
}

#[test]
fn normal_cdf_known_values() {
    assert_eq!(normal_cdf(0.0), 0.5);
    // Φ(1.959963984540054) = 0.975, the two-sided 95 % quantile.
    assert!((normal_cdf(1.959963984540054) - 0.975).abs() < 1e-14);
    assert!((normal_cdf(-1.0) - 0.15865525393145707).abs() < 1e-14);
}

// ───────────────────────────── activations ─────────────────────────────

#[test]
fn activation_values_at_known_points() {
    use Activation::*;
    assert_eq!(Sigmoid.apply(0.0), 0.5);
    assert_eq!(Relu.apply(-2.0), 0.0);
    assert_eq!(Relu.apply(3.0), 3.0);
    // GELU(1) = Φ(1) = 0.8413447460685429; GELU(−1) = −Φ(−1).
    assert!((GeluErf.apply(1.0) - 0.8413447460685429).abs() < 1e-14);
    assert!((GeluErf.apply(-1.0) + 0.15865525393145707).abs() < 1e-14);
    // The tanh form at 1: ½(1 + tanh(√(2/π)·1.044715)) = 0.8411919906082768.
    assert!((GeluTanh.apply(1.0) - 0.8411919906082768).abs() < 1e-14);
}

#[test]
fn gelu_tanh_approximation_stays_within_0_0005_of_the_erf_form() {
    let mut worst: f64 = 0.0;
    for i in 0..=2000 {
        let z = -8.0 + 16.0 * i as f64 / 2000.0;
        worst = worst.max((Activation::GeluErf.apply(z) - Activation::GeluTanh.apply(z)).abs());
    }
    // The approximation is good but not exact: the gap is measured, not zero.
    assert!(worst < 5e-4 && worst > 1e-5, "largest gap {worst:e}");
}

#[test]
fn activation_derivatives_match_central_differences() {
    for act in Activation::ALL {
        for z in [-6.0, -2.5, -1.0, -0.3, 0.2, 0.9, 2.0, 4.5] {
            let h = 1e-6;
            let numeric = (act.apply(z + h) - act.apply(z - h)) / (2.0 * h);
            assert!((numeric - act.derivative(z)).abs() < 1e-8, "{act:?} at {z}: {numeric} vs {}", act.derivative(z));
        }
    }
}

#[test]
fn activation_backward_passes_the_gradient_check_for_every_activation() {
    let mut rng = Rng::new(3);
    // Entries kept away from 0 so ReLU's kink is never straddled by the ±h nudge.
    let z = rng.normal_matrix::<f64>(5, 4, 1.5).map(|v| if v.abs() < 0.05 { v + 0.2 } else { v });
    let r = rng.normal_matrix::<f64>(5, 4, 1.0);
    for act in Activation::ALL {
        let d_z = activation_backward(act, &z, &r).unwrap();
        check(Config::default(), &[("z", z.clone())], &[d_z], |t| weighted_sum(&activation_forward(act, &t[0]), &r)).assert_passed();
    }
}

#[test]
fn relu_derivative_at_the_kink_is_zero_by_convention() {
    assert_eq!(Activation::Relu.derivative(0.0), 0.0);
    assert_eq!(Activation::Relu.derivative(1e-300), 1.0);
}

#[test]
fn activations_run_in_f32_too() {
    let z = DMatrix::from_row_slice(1, 3, &[-1.0f32, 0.0, 2.0]);
    let a = activation_forward(Activation::GeluErf, &z);
    assert!((a[(0, 2)] - 1.9544997f32).abs() < 1e-6);
    let d = activation_backward(Activation::Sigmoid, &z, &DMatrix::from_element(1, 3, 1.0f32)).unwrap();
    assert!((d[(0, 1)] - 0.25).abs() < 1e-7);
}

// ───────────────────────────── the dense layer ─────────────────────────────

#[test]
fn dense_forward_is_xw_plus_b_on_every_row() {
    let x = DMatrix::from_row_slice(2, 3, &[1.0, 2.0, 3.0, -1.0, 0.0, 0.5]);
    let w = DMatrix::from_row_slice(3, 2, &[1.0, 0.0, 0.0, 1.0, 1.0, -1.0]);
    let b = DMatrix::from_row_slice(1, 2, &[0.5, -0.5]);
    let y = dense_forward(&x, &w, &b).unwrap();
    assert_eq!(y, DMatrix::from_row_slice(2, 2, &[4.5, -1.5, 0.0, -1.0]));
}

#[test]
fn dense_backward_passes_the_gradient_check_for_x_w_and_b() {
    let mut rng = Rng::new(7);
    let x = rng.normal_matrix::<f64>(6, 4, 1.0);
    let w = rng.normal_matrix::<f64>(4, 3, 1.0);
    let b = rng.normal_matrix::<f64>(1, 3, 1.0);
    let r = rng.normal_matrix::<f64>(6, 3, 1.0);
    let g = dense_backward(&x, &w, &r).unwrap();
    check(Config::default(), &[("x", x), ("w", w), ("b", b)], &[g.d_x, g.d_w, g.d_b], |t| {
        weighted_sum(&dense_forward(&t[0], &t[1], &t[2]).unwrap(), &r)
    })
    .assert_passed();
}

#[test]
fn dense_then_activation_passes_the_gradient_check() {
    let mut rng = Rng::new(8);
    let x = rng.normal_matrix::<f64>(5, 3, 1.0);
    let w = rng.normal_matrix::<f64>(3, 4, 1.0);
    let b = rng.normal_matrix::<f64>(1, 4, 0.5);
    let r = rng.normal_matrix::<f64>(5, 4, 1.0);
    for act in [Activation::Sigmoid, Activation::GeluErf, Activation::GeluTanh] {
        let z = dense_forward(&x, &w, &b).unwrap();
        let d_z = activation_backward(act, &z, &r).unwrap();
        let g = dense_backward(&x, &w, &d_z).unwrap();
        check(Config::default(), &[("x", x.clone()), ("w", w.clone()), ("b", b.clone())], &[g.d_x, g.d_w, g.d_b], |t| {
            weighted_sum(&activation_forward(act, &dense_forward(&t[0], &t[1], &t[2]).unwrap()), &r)
        })
        .assert_passed();
    }
}

#[test]
fn dense_rejects_widths_that_do_not_chain() {
    let x = DMatrix::<f64>::zeros(2, 3);
    let w = DMatrix::<f64>::zeros(4, 2);
    let b = DMatrix::<f64>::zeros(1, 2);
    let e = dense_forward(&x, &w, &b).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "dense_forward", .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("2×3") && msg.contains("4×2"), "{msg}");
}

#[test]
fn dense_rejects_a_bias_of_the_wrong_shape() {
    let x = DMatrix::<f64>::zeros(2, 3);
    let w = DMatrix::<f64>::zeros(3, 2);
    for b in [DMatrix::<f64>::zeros(1, 3), DMatrix::<f64>::zeros(2, 2)] {
        let e = dense_forward(&x, &w, &b).unwrap_err();
        assert!(matches!(e, Error::Shape { arg: "b", .. }), "{e}");
    }
}

#[test]
fn dense_rejects_an_empty_batch() {
    let e = dense_forward(&DMatrix::<f64>::zeros(0, 3), &DMatrix::zeros(3, 2), &DMatrix::zeros(1, 2)).unwrap_err();
    assert!(matches!(e, Error::Empty { op: "dense_forward", .. }), "{e}");
}

#[test]
fn dense_rejects_nan_in_input_weights_or_bias() {
    let good = (DMatrix::<f64>::zeros(2, 3), DMatrix::<f64>::zeros(3, 2), DMatrix::<f64>::zeros(1, 2));
    let mut x = good.0.clone();
    x[(1, 2)] = f64::NAN;
    assert!(matches!(dense_forward(&x, &good.1, &good.2), Err(Error::NonFinite { arg: "x", .. })));
    let mut w = good.1.clone();
    w[(0, 1)] = f64::INFINITY;
    assert!(matches!(dense_forward(&good.0, &w, &good.2), Err(Error::NonFinite { arg: "w", .. })));
    let mut b = good.2.clone();
    b[(0, 0)] = f64::NAN;
    assert!(matches!(dense_forward(&good.0, &good.1, &b), Err(Error::NonFinite { arg: "b", .. })));
}

#[test]
fn dense_backward_rejects_a_gradient_of_the_wrong_shape() {
    let e = dense_backward(&DMatrix::<f64>::zeros(2, 3), &DMatrix::zeros(3, 2), &DMatrix::zeros(2, 3)).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "dense_backward", arg: "d_y", .. }), "{e}");
    let e = activation_backward(Activation::Relu, &DMatrix::<f64>::zeros(2, 3), &DMatrix::zeros(3, 2)).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "activation_backward", .. }), "{e}");
}

// ───────────────────────────── the chapter ─────────────────────────────

#[test]
fn relu_unit_on_hidden_0_1_gives_0_5() {
    let h = DMatrix::from_row_slice(1, 2, &[0.0, 1.0]);
    let y = activation_forward(
        Activation::Relu,
        &dense_forward(&h, &DMatrix::from_row_slice(2, 1, &[1.0, 1.0]), &DMatrix::from_row_slice(1, 1, &[-0.5])).unwrap(),
    );
    assert_eq!(y[(0, 0)], 0.5);
}

#[test]
fn prose_carries_the_errata_and_worked_tables() {
    common::check_chapter_prose(&llm_workbook::ch03_mlp::CHAPTER);
}

#[test]
fn figures_hold_every_activation_and_derivative() {
    let figs = figures().unwrap();
    assert_eq!(figs.len(), 2);
    for (_, f) in &figs {
        match f {
            llm_workbook::plot::Figure::Line(c) => {
                assert_eq!(c.series.len(), 4);
                assert!(c.series.iter().all(|s| s.points.len() == 241 && s.points.iter().all(|p| p.1.is_finite())));
            }
            _ => panic!("expected line charts"),
        }
    }
}
