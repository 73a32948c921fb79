//! Chapter 3: the dense layer, the activations, the MLP and backpropagation, the fact-storing MLP,
//! superposition.
mod common;

use llm_workbook::Error;
use llm_workbook::ch03_mlp::book::{figures, histogram_steps, packing_figures};
use llm_workbook::ch03_mlp::*;
use llm_workbook::gradcheck::{Config, check};
use llm_workbook::report::with_commas;
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
            assert!(
                (numeric - act.derivative(z)).abs() < 1e-8,
                "{act:?} at {z}: {numeric} vs {}",
                act.derivative(z)
            );
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
        check(Config::default(), &[("z", z.clone())], &[d_z], |t| {
            weighted_sum(&activation_forward(act, &t[0]), &r)
        })
        .assert_passed();
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
    let d =
        activation_backward(Activation::Sigmoid, &z, &DMatrix::from_element(1, 3, 1.0f32)).unwrap();
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
        check(
            Config::default(),
            &[("x", x.clone()), ("w", w.clone()), ("b", b.clone())],
            &[g.d_x, g.d_w, g.d_b],
            |t| {
                weighted_sum(
                    &activation_forward(act, &dense_forward(&t[0], &t[1], &t[2]).unwrap()),
                    &r,
                )
            },
        )
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
    let e =
        dense_forward(&DMatrix::<f64>::zeros(0, 3), &DMatrix::zeros(3, 2), &DMatrix::zeros(1, 2))
            .unwrap_err();
    assert!(matches!(e, Error::Empty { op: "dense_forward", .. }), "{e}");
}

#[test]
fn dense_rejects_nan_in_input_weights_or_bias() {
    let good =
        (DMatrix::<f64>::zeros(2, 3), DMatrix::<f64>::zeros(3, 2), DMatrix::<f64>::zeros(1, 2));
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
    let e =
        dense_backward(&DMatrix::<f64>::zeros(2, 3), &DMatrix::zeros(3, 2), &DMatrix::zeros(2, 3))
            .unwrap_err();
    assert!(matches!(e, Error::Shape { op: "dense_backward", arg: "d_y", .. }), "{e}");
    let e =
        activation_backward(Activation::Relu, &DMatrix::<f64>::zeros(2, 3), &DMatrix::zeros(3, 2))
            .unwrap_err();
    assert!(matches!(e, Error::Shape { op: "activation_backward", .. }), "{e}");
}

// ───────────────────────────── the cost ─────────────────────────────

#[test]
fn mse_sums_over_outputs_and_averages_over_samples() {
    let a = DMatrix::from_row_slice(2, 2, &[1.0, 2.0, 0.0, -1.0]);
    let y = DMatrix::from_row_slice(2, 2, &[0.0, 2.0, 1.0, 1.0]);
    // C₁ = 1 + 0, C₂ = 1 + 4; C = (1 + 5)/2 = 3.
    assert_eq!(mse(&a, &y).unwrap(), 3.0);
}

#[test]
fn mse_backward_passes_the_gradient_check() {
    let mut rng = Rng::new(11);
    let a = rng.normal_matrix::<f64>(4, 3, 1.0);
    let y = rng.normal_matrix::<f64>(4, 3, 1.0);
    let d_a = mse_backward(&a, &y).unwrap();
    check(Config::default(), &[("a", a)], &[d_a], |t| mse(&t[0], &y).unwrap()).assert_passed();
}

#[test]
fn mse_rejects_mismatched_empty_and_nan() {
    let a = DMatrix::<f64>::zeros(2, 1);
    assert!(matches!(mse(&a, &DMatrix::zeros(3, 1)), Err(Error::Shape { op: "mse", .. })));
    assert!(matches!(
        mse(&DMatrix::<f64>::zeros(0, 1), &DMatrix::zeros(0, 1)),
        Err(Error::Empty { .. })
    ));
    let mut y = DMatrix::<f64>::zeros(2, 1);
    y[(1, 0)] = f64::NAN;
    assert!(matches!(mse(&a, &y), Err(Error::NonFinite { arg: "y", .. })));
    assert!(matches!(mse_backward(&a, &y), Err(Error::NonFinite { arg: "y", .. })));
}

// ───────────────────────────── the MLP ─────────────────────────────

/// The layers of an MLP rebuilt from a flat list [w₁, b₁, w₂, b₂, …] with the given activations.
fn rebuild(params: &[DMatrix<f64>], acts: &[Option<Activation>]) -> Mlp<f64> {
    let layers = params
        .chunks(2)
        .zip(acts)
        .map(|(wb, &activation)| Layer { w: wb[0].clone(), b: wb[1].clone(), activation })
        .collect();
    Mlp::from_layers(layers).unwrap()
}

fn mlp_gradient_check(sizes: &[usize], hidden: Activation, output: Option<Activation>, seed: u64) {
    let mut rng = Rng::new(seed);
    let mlp = Mlp::<f64>::random(sizes, hidden, output, 0.5, &mut rng).unwrap();
    let x = rng.normal_matrix::<f64>(5, sizes[0], 1.0);
    let y = rng.normal_matrix::<f64>(5, sizes[sizes.len() - 1], 1.0);
    let acts: Vec<Option<Activation>> = mlp.layers().iter().map(|l| l.activation).collect();
    let trace = mlp.forward(&x).unwrap();
    let (grads, d_x) = mlp.backward(&trace, &mse_backward(&trace.output, &y).unwrap()).unwrap();
    let mut names = vec!["x".to_string()];
    let mut tensors = vec![x.clone()];
    let mut analytic = vec![d_x];
    for (l, (layer, g)) in mlp.layers().iter().zip(&grads).enumerate() {
        names.push(format!("w{}", l + 1));
        names.push(format!("b{}", l + 1));
        tensors.push(layer.w.clone());
        tensors.push(layer.b.clone());
        analytic.push(g.d_w.clone());
        analytic.push(g.d_b.clone());
    }
    let named: Vec<(&str, DMatrix<f64>)> = names.iter().map(|n| n.as_str()).zip(tensors).collect();
    let report = check(Config::default(), &named, &analytic, |t| {
        mse(&rebuild(&t[1..], &acts).predict(&t[0]).unwrap(), &y).unwrap()
    });
    assert_eq!(
        report.tensors.len(),
        1 + 2 * (sizes.len() - 1),
        "every weight and bias was checked"
    );
    report.assert_passed();
}

#[test]
fn mlp_backprop_passes_the_gradient_check_for_every_weight_and_bias_gelu_sigmoid() {
    mlp_gradient_check(&[3, 4, 5, 2], Activation::GeluTanh, Some(Activation::Sigmoid), 21);
}

#[test]
fn mlp_backprop_passes_the_gradient_check_for_every_weight_and_bias_deep_erf_linear() {
    mlp_gradient_check(&[2, 3, 3, 3, 1], Activation::GeluErf, None, 22);
}

#[test]
fn mlp_backprop_passes_the_gradient_check_for_every_weight_and_bias_sigmoid() {
    mlp_gradient_check(&[2, 6, 1], Activation::Sigmoid, Some(Activation::Sigmoid), 23);
}

#[test]
fn mlp_backprop_passes_the_gradient_check_for_every_weight_and_bias_relu() {
    // Seeded so that no pre-activation lies within the finite-difference step of ReLU's kink.
    mlp_gradient_check(&[3, 5, 4, 1], Activation::Relu, None, 24);
}

#[test]
fn batch_gradient_is_the_mean_of_the_per_sample_gradients() {
    let mut rng = Rng::new(30);
    let mlp = Mlp::<f64>::random(&[2, 3, 1], Activation::Sigmoid, None, 0.5, &mut rng).unwrap();
    let x = rng.normal_matrix::<f64>(4, 2, 1.0);
    let y = rng.normal_matrix::<f64>(4, 1, 1.0);
    let (cost, grads) = mlp.loss_and_gradients(&x, &y).unwrap();
    let mut mean_cost = 0.0;
    let mut mean_w1 = DMatrix::<f64>::zeros(2, 3);
    for r in 0..4 {
        let (c, g) =
            mlp.loss_and_gradients(&x.rows(r, 1).into_owned(), &y.rows(r, 1).into_owned()).unwrap();
        mean_cost += c / 4.0;
        mean_w1 += &g[0].d_w / 4.0;
    }
    assert!((cost - mean_cost).abs() < 1e-14);
    assert!((grads[0].d_w.clone() - mean_w1).abs().max() < 1e-14);
}

#[test]
fn mini_batch_gradient_descent_lowers_the_cost() {
    let mut rng = Rng::new(31);
    let x = rng.normal_matrix::<f64>(64, 3, 1.0);
    // A smooth target the network can learn: y = sin(x₁) + x₂x₃/2.
    let y = DMatrix::from_fn(64, 1, |r, _| x[(r, 0)].sin() + 0.5 * x[(r, 1)] * x[(r, 2)]);
    let mut mlp =
        Mlp::<f64>::random(&[3, 16, 1], Activation::GeluErf, None, 0.1, &mut rng).unwrap();
    let costs = train(
        &mut mlp,
        &x,
        &y,
        TrainConfig { learning_rate: 0.05, epochs: 200, batch_size: 8, seed: 1 },
    )
    .unwrap();
    assert_eq!(costs.len(), 201);
    assert!(costs[200] < 0.2 * costs[0], "cost {} → {}", costs[0], costs[200]);
    // Full batch (batch size ≥ N) also descends, one step per epoch.
    let mut mlp2 =
        Mlp::<f64>::random(&[3, 16, 1], Activation::GeluErf, None, 0.1, &mut Rng::new(32)).unwrap();
    let full = train(
        &mut mlp2,
        &x,
        &y,
        TrainConfig { learning_rate: 0.05, epochs: 50, batch_size: 1000, seed: 1 },
    )
    .unwrap();
    assert!(
        full.windows(2).all(|w| w[1] <= w[0]),
        "full-batch GD with a small α never goes up here"
    );
}

#[test]
fn mlp_rejects_layer_sizes_that_do_not_chain() {
    let layers = vec![
        Layer {
            w: DMatrix::<f64>::zeros(2, 3),
            b: DMatrix::zeros(1, 3),
            activation: Some(Activation::Relu),
        },
        Layer { w: DMatrix::zeros(4, 1), b: DMatrix::zeros(1, 1), activation: None },
    ];
    let e = Mlp::from_layers(layers).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "Mlp::from_layers", .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("2×3") && msg.contains("4×1"), "{msg}");
    assert!(matches!(Mlp::<f64>::from_layers(vec![]), Err(Error::Empty { .. })));
    assert!(matches!(
        Mlp::<f64>::random(&[3, 0, 1], Activation::Relu, None, 0.0, &mut Rng::new(1)),
        Err(Error::InvalidValue { .. })
    ));
    assert!(matches!(
        Mlp::<f64>::random(&[3], Activation::Relu, None, 0.0, &mut Rng::new(1)),
        Err(Error::InvalidValue { .. })
    ));
}

#[test]
fn mlp_rejects_an_input_of_the_wrong_width_and_an_empty_batch() {
    let mlp =
        Mlp::<f64>::random(&[3, 4, 1], Activation::Relu, None, 0.0, &mut Rng::new(1)).unwrap();
    let e = mlp.predict(&DMatrix::zeros(5, 2)).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "dense_forward", .. }), "{e}");
    assert!(e.to_string().contains("5×2"), "{e}");
    assert!(matches!(mlp.predict(&DMatrix::zeros(0, 3)), Err(Error::Empty { .. })));
}

#[test]
fn mlp_rejects_nan_weights_and_inputs() {
    let mut w = DMatrix::<f64>::zeros(2, 2);
    w[(1, 1)] = f64::NAN;
    let e =
        Mlp::from_layers(vec![Layer { w, b: DMatrix::zeros(1, 2), activation: None }]).unwrap_err();
    assert!(matches!(e, Error::NonFinite { .. }), "{e}");
    let mlp =
        Mlp::<f64>::random(&[2, 2, 1], Activation::Sigmoid, None, 0.0, &mut Rng::new(1)).unwrap();
    let mut x = DMatrix::<f64>::zeros(3, 2);
    x[(2, 0)] = f64::NAN;
    assert!(matches!(mlp.predict(&x), Err(Error::NonFinite { arg: "x", .. })));
}

#[test]
fn training_rejects_bad_settings() {
    let mut mlp =
        Mlp::<f64>::random(&[1, 2, 1], Activation::Relu, None, 0.0, &mut Rng::new(1)).unwrap();
    let x = DMatrix::<f64>::zeros(4, 1);
    let y = DMatrix::<f64>::zeros(4, 1);
    let ok = TrainConfig { learning_rate: 0.1, epochs: 1, batch_size: 2, seed: 0 };
    assert!(matches!(
        train(&mut mlp, &x, &y, TrainConfig { learning_rate: -1.0, ..ok }),
        Err(Error::InvalidValue { .. })
    ));
    assert!(matches!(
        train(&mut mlp, &x, &y, TrainConfig { learning_rate: f64::NAN, ..ok }),
        Err(Error::InvalidValue { .. })
    ));
    assert!(matches!(
        train(&mut mlp, &x, &y, TrainConfig { batch_size: 0, ..ok }),
        Err(Error::InvalidValue { .. })
    ));
    assert!(matches!(train(&mut mlp, &x, &DMatrix::zeros(3, 1), ok), Err(Error::Shape { .. })));
    // A step size far too large diverges: an error, not a NaN cost.
    let xs = DMatrix::from_fn(4, 1, |r, _| r as f64 * 100.0);
    let r = train(
        &mut mlp,
        &xs,
        &xs,
        TrainConfig { learning_rate: 1e6, epochs: 50, batch_size: 4, seed: 0 },
    );
    assert!(matches!(r, Err(Error::InvalidValue { .. }) | Err(Error::NonFinite { .. })), "{r:?}");
}

// ─────────────────── the document's chain of one-neuron layers ───────────────────

const CHAIN_Z: [f64; 3] = [0.9999999999999999, -1.1621171572600097, -0.009373760383382446];
const CHAIN_A: [f64; 4] = [0.6, 0.7310585786300049, 0.23828279952077194, 0.4976565770633328];

#[test]
fn chain_forward_matches_an_independent_computation() {
    // Values from a separate Python computation of the same chain.
    let (chain, x, y) = chapter_chain();
    let t = chain.forward(x);
    for (ours, want) in t.z.iter().zip(CHAIN_Z) {
        assert!((ours - want).abs() < 1e-15);
    }
    for (ours, want) in t.a.iter().zip(CHAIN_A) {
        assert!((ours - want).abs() < 1e-15);
    }
    assert!((chain.cost(x, y) - 0.08859943786905976).abs() < 1e-15);
}

#[test]
fn d_cost_d_output_is_2_times_error_not_z_times_error() {
    let (chain, x, y) = chapter_chain();
    let t = chain.forward(x);
    let a = t.a[3];
    let h = 1e-6;
    let numeric = ((a + h - y).powi(2) - (a - h - y).powi(2)) / (2.0 * h);
    assert!((d_c0_d_a_last(a, y) - numeric).abs() < 1e-9);
    assert!((d_c0_d_a_last(a, y) - 0.5953131541266655).abs() < 1e-14);
    // The printed z(a − y), with z = z⁽ᴸ⁾, is off in size and sign.
    let printed = t.z[2] * (a - y);
    assert!((printed - (-0.0027901614299294924)).abs() < 1e-15);
    assert!((printed - numeric).abs() > 0.5);
}

#[test]
fn last_layer_factors_match_finite_differences() {
    let (chain, x, y) = chapter_chain();
    let t = chain.forward(x);
    let h = 1e-6;
    let nudge = |f: &dyn Fn(&mut Chain)| {
        let mut c = chain.clone();
        f(&mut c);
        c.cost(x, y)
    };
    let dw = (nudge(&|c| c.w[2] += h) - nudge(&|c| c.w[2] -= h)) / (2.0 * h);
    let db = (nudge(&|c| c.b[2] += h) - nudge(&|c| c.b[2] -= h)) / (2.0 * h);
    assert!((d_c0_d_w_last(&t, y) - dw).abs() < 1e-9);
    assert!((d_c0_d_b_last(&t, y) - db).abs() < 1e-9);
    assert!((d_c0_d_w_last(&t, y) - 0.03546244223550167).abs() < 1e-15);
    assert!((d_c0_d_b_last(&t, y) - 0.1488250192914587).abs() < 1e-15);
    // ∂C₀/∂a⁽ᴸ⁻¹⁾: nudge a⁽²⁾ directly and run only the last layer.
    let last =
        |a2: f64| (llm_workbook::ch01_logistic::sigmoid(chain.w[2] * a2 + chain.b[2]) - y).powi(2);
    let da = (last(t.a[2] + h) - last(t.a[2] - h)) / (2.0 * h);
    assert!((d_c0_d_a_prev(&chain, &t, y) - da).abs() < 1e-9);
    assert!((d_c0_d_a_prev(&chain, &t, y) - 0.11906001543316697).abs() < 1e-15);
}

#[test]
fn chain_backprop_passes_the_gradient_check_for_every_weight_and_bias() {
    let (chain, x, y) = chapter_chain();
    let g = chain.gradients(x, y);
    let row = |v: &[f64]| DMatrix::from_row_slice(1, v.len(), v);
    check(
        Config::default(),
        &[("w", row(&chain.w)), ("b", row(&chain.b)), ("a0", row(&[x]))],
        &[row(&g.d_w), row(&g.d_b), row(&[g.d_input])],
        |t| {
            Chain { w: t[0].iter().copied().collect(), b: t[1].iter().copied().collect() }
                .cost(t[2][(0, 0)], y)
        },
    )
    .assert_passed();
    let want_w = [-0.0050985127600555475, 0.015798089456567597, 0.03546244223550167];
    let want_b = [-0.008497521266759246, 0.02160988177742614, 0.1488250192914587];
    for l in 0..3 {
        assert!((g.d_w[l] - want_w[l]).abs() < 1e-15 && (g.d_b[l] - want_b[l]).abs() < 1e-15);
    }
}

#[test]
fn gradient_has_one_weight_and_one_bias_for_each_layer_1_to_l() {
    let (chain, x, y) = chapter_chain();
    let g = chain.gradients(x, y);
    assert_eq!((g.d_w.len(), g.d_b.len()), (chain.depth(), chain.depth()));
    // The first entry is ∂C/∂w⁽¹⁾ = a⁽⁰⁾ σ′(z⁽¹⁾) ∂C/∂a⁽¹⁾: it carries the input a⁽⁰⁾ as a factor,
    // so it vanishes at a⁽⁰⁾ = 0 while ∂C/∂b⁽¹⁾ does not. No "w⁽⁰⁾" exists to differentiate.
    let at_zero = chain.gradients(0.0, y);
    assert_eq!(at_zero.d_w[0], 0.0);
    assert!(at_zero.d_b[0].abs() > 1e-4);
    assert!(matches!(Chain::new(vec![], vec![]), Err(Error::Empty { .. })));
    assert!(matches!(Chain::new(vec![1.0], vec![]), Err(Error::Shape { .. })));
    assert!(matches!(Chain::new(vec![f64::NAN], vec![0.0]), Err(Error::NonFinite { .. })));
}

#[test]
fn a_step_against_the_gradient_lowers_the_cost() {
    use llm_workbook::ch03_mlp::book::descent_step_costs;
    // D0's rule: −∇C points downhill, so a small step along it lowers C.
    let (before, after) = descent_step_costs(0.1);
    assert!(after < before, "C₀ {before} → {after}");
    // A step along +∇C raises it: the sign is what matters.
    let (_, uphill) = descent_step_costs(-0.1);
    assert!(uphill > before, "C₀ {before} → {uphill}");
    // Weight by weight: moving one weight alone in the sign of its −∂C₀/∂w lowers C₀.
    let (chain, x, y) = chapter_chain();
    let g = chain.gradients(x, y);
    for l in 0..chain.depth() {
        let mut moved = chain.clone();
        moved.w[l] -= 1e-3 * g.d_w[l].signum();
        assert!(moved.cost(x, y) < chain.cost(x, y), "w{}", l + 1);
    }
}

#[test]
fn minus_gradient_entry_before_the_last_belongs_to_w_n_minus_1() {
    use llm_workbook::ch03_mlp::book::{printed_gradient_label, weight_label_from_end};
    assert_eq!(printed_gradient_label("-0.37").as_deref(), Some("w_{n−1}"));
    assert_eq!(printed_gradient_label("0.16").as_deref(), Some("w_n"));
    assert_eq!(printed_gradient_label("0.31").as_deref(), Some("w_0"));
    assert_eq!(printed_gradient_label("0.03").as_deref(), Some("w_1"));
    assert_eq!(weight_label_from_end(2), "w_{n−2}");
    // (w₀ … w_n) has n + 1 entries: index n + 1 is past the end, for any n.
    for n in 1..6 {
        let w: Vec<usize> = (0..=n).collect();
        assert!(w.get(n + 1).is_none() && w.get(n - 1).is_some());
    }
}

#[test]
fn a_digit_classifier_has_ten_outputs_for_0_to_9() {
    use llm_workbook::ch03_mlp::book::DIGITS;
    let digits: Vec<u32> = (0..=9).collect();
    assert_eq!(digits.len(), DIGITS);
    assert_eq!((0..=10).count(), DIGITS + 1, "0-10 names eleven classes");
    // A classifier from 784 pixels to one output per digit predicts DIGITS columns.
    let net = Mlp::<f64>::random(&[784, 16, DIGITS], Activation::Relu, None, 0.0, &mut Rng::new(1))
        .unwrap();
    let out = net.predict(&DMatrix::zeros(2, 784)).unwrap();
    assert_eq!(out.shape(), (2, 10));
}

#[test]
fn cost_over_examples_averages_the_per_example_gradients() {
    let (chain, _, _) = chapter_chain();
    let (xs, ys) = ([0.6, -1.0, 2.0], [0.2, 0.9, 0.5]);
    let g = chain.average_gradients(&xs, &ys).unwrap();
    assert!((g.cost - 0.071611889885656).abs() < 1e-15);
    let want_w = [-0.005363883464360729, 0.0026540302747445443, -0.016575980600550575];
    let want_b = [0.0009084738169964655, -0.0048132115031812315, -0.011854251997756929];
    for l in 0..3 {
        assert!((g.d_w[l] - want_w[l]).abs() < 1e-15, "w{l}");
        assert!((g.d_b[l] - want_b[l]).abs() < 1e-15, "b{l}");
    }
    let row = |v: &[f64]| DMatrix::from_row_slice(1, v.len(), v);
    let avg_cost = |c: &Chain| xs.iter().zip(&ys).map(|(&x, &y)| c.cost(x, y)).sum::<f64>() / 3.0;
    check(
        Config::default(),
        &[("w", row(&chain.w)), ("b", row(&chain.b))],
        &[row(&g.d_w), row(&g.d_b)],
        |t| {
            avg_cost(&Chain {
                w: t[0].iter().copied().collect(),
                b: t[1].iter().copied().collect(),
            })
        },
    )
    .assert_passed();
    assert!(matches!(chain.average_gradients(&[], &[]), Err(Error::Empty { .. })));
    assert!(matches!(chain.average_gradients(&[1.0], &[1.0, 2.0]), Err(Error::Shape { .. })));
    assert!(matches!(chain.average_gradients(&[f64::NAN], &[1.0]), Err(Error::NonFinite { .. })));
}

#[test]
fn multi_neuron_sum_runs_over_the_neurons_of_layer_l() {
    // Three neurons in layer L − 1 feed two in layer L (document orientation: one row per neuron).
    let w_rows = DMatrix::from_row_slice(2, 3, &[0.5, -1.0, 0.3, 0.2, 0.4, -0.7]);
    let (b, a_prev, y) = ([0.1, -0.2], [0.3, 0.6, 0.9], [1.0, 0.0]);
    let by_sum = d_c0_d_a_prev_sum(&w_rows, &b, &a_prev, &y).unwrap();
    assert_eq!(by_sum.len(), 3);
    let cost = |a: &[f64]| -> f64 {
        (0..2)
            .map(|j| {
                let z: f64 = (0..3).map(|i| w_rows[(j, i)] * a[i]).sum::<f64>() + b[j];
                (llm_workbook::ch01_logistic::sigmoid(z) - y[j]).powi(2)
            })
            .sum()
    };
    let d_a = DMatrix::from_row_slice(1, 3, &by_sum);
    check(Config::default(), &[("a_prev", DMatrix::from_row_slice(1, 3, &a_prev))], &[d_a], |t| {
        cost(t[0].as_slice())
    })
    .assert_passed();
    let by_matrix = multi_neuron_matrix_form(&w_rows, &b, &a_prev, &y).unwrap();
    for (p, q) in by_sum.iter().zip(&by_matrix) {
        assert!((p - q).abs() < 1e-15);
    }
    assert!(matches!(d_c0_d_a_prev_sum(&w_rows, &b, &[0.0; 2], &y), Err(Error::Shape { .. })));
}

#[test]
fn bias_has_one_entry_per_output_neuron() {
    // 3 inputs, 2 neurons: W (our orientation) 3×2, so b is 1×2; a bias with one entry per input is
    // refused.
    let x = DMatrix::from_row_slice(1, 3, &[1.0, 2.0, 3.0]);
    let w = DMatrix::from_row_slice(3, 2, &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    let y = dense_forward(&x, &w, &DMatrix::from_row_slice(1, 2, &[0.5, -0.5])).unwrap();
    assert_eq!(y.shape(), (1, 2));
    assert_eq!(y, DMatrix::from_row_slice(1, 2, &[4.5, 4.5]));
    assert!(matches!(
        dense_forward(&x, &w, &DMatrix::zeros(1, 3)),
        Err(Error::Shape { arg: "b", .. })
    ));
}

// ───────────────────────────── sin(x): a line versus an MLP ─────────────────────────────

#[test]
fn least_squares_line_of_sin_matches_an_independent_computation() {
    let x = linspace(-10.0, 10.0, 100);
    let y: Vec<f64> = x.iter().map(|v| v.sin()).collect();
    let (slope, intercept) = least_squares_line(&x, &y).unwrap();
    assert!((slope - 0.021154927311878298).abs() < 1e-15);
    assert!(intercept.abs() < 1e-15);
    assert!(matches!(least_squares_line(&[1.0], &[1.0]), Err(Error::InvalidValue { .. })));
    assert!(matches!(
        least_squares_line(&[1.0, 1.0], &[0.0, 2.0]),
        Err(Error::InvalidValue { .. })
    ));
    assert!(matches!(least_squares_line(&[1.0, 2.0], &[0.0]), Err(Error::Shape { .. })));
    assert!(matches!(
        least_squares_line(&[1.0, f64::NAN], &[0.0, 1.0]),
        Err(Error::NonFinite { .. })
    ));
}

#[test]
fn sin_mlp_mse_is_at_least_10_times_lower_than_the_line() {
    let f = fit_sin(SIN_TRAIN.epochs).unwrap();
    assert!((f.line_mse - 0.460453357358232).abs() < 1e-12, "line MSE {}", f.line_mse);
    assert!(f.mlp_mse * 10.0 <= f.line_mse, "MLP {} vs line {}", f.mlp_mse, f.line_mse);
    assert_eq!(f.costs.len(), SIN_TRAIN.epochs + 1);
    assert!((f.costs[SIN_TRAIN.epochs] - f.mlp_mse).abs() < 1e-12);
}

// ───────────────────────────── the fact-storing MLP ─────────────────────────────

fn names(f: &FactMlp, who: &[&str]) -> DMatrix<f64> {
    f.encode(who).unwrap()
}

const MJ: [&str; 2] = ["first name Michael", "last name Jordan"];
const MP: [&str; 2] = ["first name Michael", "last name Phelps"];
const AJ: [&str; 2] = ["first name Alexis", "last name Jordan"];
const AP: [&str; 2] = ["first name Alexis", "last name Phelps"];

#[test]
fn fact_directions_are_orthonormal() {
    let f = fact_mlp().unwrap();
    let g = &f.directions * f.directions.transpose();
    assert!((g - DMatrix::<f64>::identity(6, 6)).abs().max() < 1e-14);
}

#[test]
fn at_most_d_vectors_are_exactly_orthogonal() {
    // d orthonormal vectors span the space: any further vector keeps nothing after its
    // projections onto them are removed, so it cannot be a new unit vector orthogonal to all.
    let d = 8;
    let q = orthonormal_rows(d, d, 1).unwrap();
    let mut v = Rng::new(99).normal_matrix::<f64>(1, d, 1.0);
    let before = v.norm();
    for i in 0..d {
        let qi = q.row(i).into_owned();
        let p = v.dot(&qi);
        v -= qi * p;
    }
    assert!(v.norm() < 1e-14 * before, "remainder {}", v.norm());
    assert!(matches!(orthonormal_rows(d + 1, d, 1), Err(Error::InvalidValue { .. })));
}

#[test]
fn full_name_gives_dot_product_2() {
    let f = fact_mlp().unwrap();
    let probe = (f.direction("first name Michael").unwrap()
        + f.direction("last name Jordan").unwrap())
    .transpose();
    assert!(((names(&f, &MJ) * &probe)[(0, 0)] - 2.0).abs() < 1e-14);
}

#[test]
fn partial_names_give_dot_product_1_or_less() {
    let f = fact_mlp().unwrap();
    let probe = (f.direction("first name Michael").unwrap()
        + f.direction("last name Jordan").unwrap())
    .transpose();
    for who in [MP, AJ] {
        assert!(((names(&f, &who) * &probe)[(0, 0)] - 1.0).abs() < 1e-14, "{who:?}");
    }
    assert!((names(&f, &AP) * &probe)[(0, 0)].abs() < 1e-14);
    assert!((names(&f, &["basketball"]) * &probe)[(0, 0)].abs() < 1e-14);
}

#[test]
fn neuron_fires_only_for_the_full_name() {
    let f = fact_mlp().unwrap();
    let on = |who: &[&str]| {
        activation_forward(Activation::Relu, &f.neuron_inputs(&names(&f, who)).unwrap())
    };
    assert!((on(&MJ)[(0, 0)] - 1.0).abs() < 1e-14, "Michael Jordan: ReLU(2 − 1) = 1");
    // Half a name puts the neuron exactly on the ReLU's kink, ReLU(1 − 1) = 0: with random
    // orthonormal directions rounding leaves at most a few units of 1e-16 there.
    for who in [MP, AJ] {
        assert!(on(&who)[(0, 0)] < 1e-14, "{who:?}");
    }
    assert_eq!(on(&AP)[(0, 0)], 0.0, "no name at all: ReLU(0 − 1) = 0");
    // The second neuron is the same AND gate for Michael Phelps.
    assert!((on(&MP)[(0, 1)] - 1.0).abs() < 1e-14);
    assert!(on(&MJ)[(0, 1)] < 1e-14);
}

#[test]
fn output_gains_the_basketball_direction_exactly_for_the_full_name() {
    let f = fact_mlp().unwrap();
    let ball = f.direction("basketball").unwrap();
    for (who, gains) in [(MJ, true), (MP, false), (AJ, false), (AP, false)] {
        let e = names(&f, &who);
        let added = f.block(&e).unwrap() - &e;
        if gains {
            assert!((&added - &ball).abs().max() < 1e-14, "{who:?} gains exactly B");
        } else {
            assert!(
                (&added * ball.transpose())[(0, 0)].abs() < 1e-14,
                "{who:?} gains no basketball"
            );
        }
    }
}

#[test]
fn equal_dot_products_do_not_mean_both_names() {
    let f = fact_mlp().unwrap();
    let (m, j) =
        (f.direction("first name Michael").unwrap(), f.direction("last name Jordan").unwrap());
    // Alexis Phelps: Ē·J = Ē·M (both 0), yet it encodes neither and the neuron stays off.
    let e = names(&f, &AP);
    let (ej, em) = ((&e * j.transpose())[(0, 0)], (&e * m.transpose())[(0, 0)]);
    assert!((ej - em).abs() < 1e-14);
    assert_eq!(activation_forward(Activation::Relu, &f.neuron_inputs(&e).unwrap())[(0, 0)], 0.0);
    // Half of each name: equal again (0.5 = 0.5), still no fact written.
    let half = (&m + &j) * 0.5;
    assert!(((&half * j.transpose())[(0, 0)] - (&half * m.transpose())[(0, 0)]).abs() < 1e-14);
    let gained = f.block(&half).unwrap() - &half;
    assert!(gained.abs().max() < 1e-14);
}

#[test]
fn mlp_reads_as_an_unnormalised_key_value_memory() {
    let f = fact_mlp().unwrap();
    for who in [MJ, MP, AJ, AP] {
        let e = names(&f, &who);
        let by_keys = key_value_read(&f.mlp, &e).unwrap();
        assert!((by_keys - f.mlp.predict(&e).unwrap()).abs().max() < 1e-14, "{who:?}");
    }
    // Nobody known: the ReLU memory writes nothing; the softmax memory must still write a
    // mixture of its values, because its weights sum to one.
    let e = names(&f, &["first name Alexis"]);
    assert!(key_value_read(&f.mlp, &e).unwrap().abs().max() < 1e-14);
    let nm = softmax_memory_read(&f.mlp, &e).unwrap();
    let ball = f.direction("basketball").unwrap();
    let swim = f.direction("swimming").unwrap();
    assert!(((&nm * ball.transpose())[(0, 0)] - 0.5).abs() < 1e-14);
    assert!(((&nm * swim.transpose())[(0, 0)] - 0.5).abs() < 1e-14);
    assert!(matches!(key_value_read(&f.mlp, &DMatrix::zeros(1, 3)), Err(Error::Shape { .. })));
    let two_activations = Mlp::<f64>::random(
        &[8, 2, 8],
        Activation::Relu,
        Some(Activation::Relu),
        0.0,
        &mut Rng::new(1),
    )
    .unwrap();
    assert!(matches!(key_value_read(&two_activations, &e), Err(Error::InvalidValue { .. })));
    assert!(matches!(f.direction("LeBron"), Err(Error::InvalidValue { .. })));
}

// ───────────────────────────── GPT-3's MLPs ─────────────────────────────

#[test]
fn gpt3_mlp_has_49152_neurons() {
    assert_eq!(GPT3_MLP.neurons(), 49_152);
    assert_eq!(with_commas(GPT3_MLP.neurons()), "49,152");
    assert_eq!(with_commas(7), "7");
    assert_eq!(with_commas(1_000), "1,000");
    assert_eq!(with_commas(123_456_789), "123,456,789");
}

#[test]
fn gpt3_mlp_block_has_1_2_billion_weights() {
    assert_eq!(GPT3_MLP.up_weights(), 603_979_776);
    assert_eq!(GPT3_MLP.down_weights(), GPT3_MLP.up_weights());
    assert_eq!(GPT3_MLP.weights_per_block(), 1_207_959_552);
    assert_eq!(GPT3_MLP.biases(), 61_440);
    assert_eq!(GPT3_MLP.n_layers, 96);
    // Cross-check against an actual (scaled-down) MLP built by this crate: same formula.
    let small = MlpShape { d_embed: 6, expansion: 4, n_layers: 1 };
    let mlp =
        Mlp::<f64>::random(&[6, 24, 6], Activation::GeluTanh, None, 0.0, &mut Rng::new(1)).unwrap();
    assert_eq!(mlp.parameter_count() as u64, small.weights_per_block() + small.biases());
}

#[test]
fn gpt3_mlps_hold_two_thirds_of_the_weights() {
    assert_eq!(GPT3_MLP.weights_total(), 115_964_116_992);
    let share = GPT3_MLP.weights_total() as f64 / GPT3_TOTAL_PARAMETERS;
    assert!((share - 0.6626520970971429).abs() < 1e-12);
}

// ───────────────────────────── superposition ─────────────────────────────

#[test]
fn near_orthogonal_probability_known_values() {
    // d = 2: the angle is uniform on [0°, 180°], so 2° of 180°.
    assert!((near_orthogonal_probability(2, 1.0) - 2.0 / 180.0).abs() < 1e-10);
    // d = 3: the cosine is uniform on [−1, 1] (Archimedes), so sin 1°.
    assert!((near_orthogonal_probability(3, 1.0) - 1f64.to_radians().sin()).abs() < 1e-10);
    // Large d: the cosine is nearly N(0, 1/d): P(|Z| < √d sin 1°) = erf(√(d/2) sin 1°).
    let d = 12_288.0;
    let approx = erf((d / 2.0f64).sqrt() * 1f64.to_radians().sin());
    assert!((near_orthogonal_probability(12_288, 1.0) - approx).abs() < 2e-3);
    assert_eq!(near_orthogonal_probability(1, 1.0), 0.0);
    assert_eq!(near_orthogonal_probability(50, 90.0), 1.0);
}

#[test]
fn near_orthogonal_share_grows_with_d_and_matches_its_exact_value() {
    let samples = angle_samples(&ANGLE_DIMS, ANGLE_VECTORS, ANGLE_SEED).unwrap();
    assert_eq!(samples.len(), 6);
    for s in &samples {
        assert_eq!(s.angles.len(), ANGLE_VECTORS * (ANGLE_VECTORS - 1) / 2);
        assert!(
            (s.near_orthogonal - s.expected).abs() < 0.02,
            "d = {}: {} vs {}",
            s.d,
            s.near_orthogonal,
            s.expected
        );
    }
    assert!(samples.windows(2).all(|w| w[1].near_orthogonal > w[0].near_orthogonal));
    let gpt3 = &samples[5];
    assert_eq!(gpt3.d, 12_288);
    assert!(gpt3.near_orthogonal > 0.93, "at GPT-3's width most random pairs lie within 89°–91°");
}

#[test]
fn welch_bound_and_capacity() {
    assert!((welch_bound(1000, 100) - 0.0949157995752499).abs() < 1e-15);
    assert_eq!(welch_bound(50, 100), 0.0);
    let eps = 1f64.to_radians().sin();
    assert_eq!(welch_capacity(100, eps), Some(103));
    assert_eq!(welch_capacity(1000, eps), Some(1437));
    assert_eq!(welch_capacity(4096, eps), None);
}

#[test]
fn two_bases_give_2d_nearly_orthogonal_vectors() {
    let d = 256;
    let v = two_bases(d).unwrap();
    assert_eq!(v.nrows(), 2 * d);
    assert!(v.row_iter().all(|r| (r.norm() - 1.0).abs() < 1e-14));
    assert!((coherence(&v).unwrap() - 1.0 / 16.0).abs() < 1e-14);
    assert!(matches!(two_bases(12), Err(Error::InvalidValue { .. })));
    // In d = 4096 ≥ 1/sin²1° ≈ 3283 the same construction keeps all 8,192 within 89°–91°.
    assert!((1.0 / 64.0f64).acos().to_degrees() > 89.0);
}

#[test]
fn packing_1000_vectors_in_100_dimensions_beats_the_random_start() {
    // The main job runs PACK_STEPS steps; this test runs PACK_TEST_STEPS of the same problem.
    let p = pack_unit_vectors(PACK_N, PACK_D, PACK_TEST_STEPS, PACK_SEED).unwrap();
    assert_eq!((p.n, p.d), (1000, 100));
    assert!(p.vectors.row_iter().all(|r| (r.norm() - 1.0).abs() < 1e-12));
    assert!((coherence(&p.vectors).unwrap() - p.coherence).abs() < 1e-15);
    assert!(p.start_coherence > 0.4, "random start {}", p.start_coherence);
    assert!(p.coherence < 0.2, "optimised {}", p.coherence);
    assert!(p.coherence >= p.welch, "no set can beat the Welch bound");
    assert_eq!(p.history.len(), PACK_TEST_STEPS + 1);
    assert!(matches!(pack_unit_vectors(1, 3, 5, 0), Err(Error::InvalidValue { .. })));
}

// ───────────────────────────── prose and figures ─────────────────────────────

#[test]
fn prose_carries_the_errata_and_worked_tables() {
    common::check_chapter_prose(&llm_workbook::ch03_mlp::book::CHAPTER);
}

#[test]
fn figures_hold_finite_data_and_can_be_drawn() {
    use llm_workbook::plot::{Figure, LogAxes};
    let figs = figures().unwrap();
    let stems: Vec<&str> = figs.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        stems,
        [
            "ch03_activations",
            "ch03_activation_derivatives",
            "ch03_sin_fits",
            "ch03_sin_loss",
            "ch03_angle_histograms",
            "ch03_near_orthogonal_share"
        ]
    );
    for (stem, f) in &figs {
        let (Figure::Line(c) | Figure::LogLine(c, _)) = f else {
            panic!("{stem}: expected a line chart")
        };
        assert!(!c.series.is_empty());
        assert!(
            c.series.iter().all(|s| !s.points.is_empty()
                && s.points.iter().all(|p| p.0.is_finite() && p.1.is_finite())),
            "{stem}"
        );
    }
    let Figure::Line(acts) = &figs[0].1 else { unreachable!() };
    assert_eq!(acts.series.len(), 4);
    let Figure::Line(hist) = &figs[4].1 else { unreachable!() };
    assert_eq!(hist.series.len(), ANGLE_DIMS.len() + 1);
    // The share spans d = 2 … 12,288: a real logarithmic x axis, the data in real d (not log₁₀ d).
    let Figure::LogLine(share, LogAxes::X) = &figs[5].1 else {
        panic!("ch03_near_orthogonal_share: expected a line chart on a log x axis")
    };
    let xs: Vec<f64> = share.series[0].points.iter().map(|p| p.0).collect();
    assert_eq!(xs, ANGLE_DIMS.map(|d| d as f64), "the real d, 2 … 12,288");
    let small = pack_unit_vectors(60, 6, 5, 1).unwrap();
    let pf = packing_figures(&small).unwrap();
    assert_eq!(pf.len(), 2);
    let dir = common::temp_dir("ch03");
    let written = pf[0].1.save(&dir, "packing").unwrap();
    assert!(written.iter().all(|p| p.metadata().map(|m| m.len() > 1000).unwrap_or(false)));
}

#[test]
fn histogram_steps_count_every_value_once() {
    let pts = histogram_steps(&[0.5, 1.5, 1.7, 3.0], 0.0, 3.0, 1.0);
    // (lo, 0), then two corners per bin, then (hi, 0).
    assert_eq!(pts.len(), 2 + 2 * 3);
    let heights: Vec<f64> = pts[1..pts.len() - 1].iter().step_by(2).map(|p| p.1).collect();
    assert_eq!(heights, [0.25, 0.5, 0.25]);
}

// ───────────── hardening: zero-initialised weights, determinism ─────────────

mod hardening {
    use super::*;

    #[test]
    fn zero_initialised_weights_give_finite_symmetric_gradients_that_pass_the_gradient_check() {
        let acts = [Some(Activation::Sigmoid), None];
        let zero = |i: usize, o: usize| Layer {
            w: DMatrix::<f64>::zeros(i, o),
            b: DMatrix::zeros(1, o),
            activation: None,
        };
        let layers = vec![
            Layer { activation: acts[0], ..zero(3, 4) },
            Layer { activation: acts[1], ..zero(4, 2) },
        ];
        let mlp = Mlp::from_layers(layers).unwrap();
        let mut rng = Rng::new(33);
        let x = rng.normal_matrix::<f64>(5, 3, 1.0);
        let y = rng.normal_matrix::<f64>(5, 2, 1.0);
        let (cost, grads) = mlp.loss_and_gradients(&x, &y).unwrap();
        // The output is 0 everywhere, so the cost is the mean of Σ y².
        let expected = y.iter().map(|v| v * v).sum::<f64>() / 5.0;
        assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
        for g in &grads {
            assert!(g.d_w.iter().chain(g.d_b.iter()).all(|v| v.is_finite()));
        }
        // W₂ = 0 blocks every signal to layer 1: its gradients are exactly zero …
        assert!(grads[0].d_w.iter().all(|&v| v == 0.0) && grads[0].d_b.iter().all(|&v| v == 0.0));
        // … and every hidden neuron outputs σ(0) = 0.5, so every row of ∂C/∂W₂ is the same: the
        // symmetry that keeps zero-initialised hidden neurons identical forever.
        let d_w2 = &grads[1].d_w;
        assert!(d_w2.amax() > 0.0);
        for r in 1..d_w2.nrows() {
            assert_eq!(d_w2.row(r), d_w2.row(0));
        }
        // And the backward pass is right at this point too.
        let mut analytic = Vec::new();
        let mut named = Vec::new();
        for (l, (layer, g)) in mlp.layers().iter().zip(&grads).enumerate() {
            named.push((["w1", "b1", "w2", "b2"][2 * l], layer.w.clone()));
            named.push((["w1", "b1", "w2", "b2"][2 * l + 1], layer.b.clone()));
            analytic.push(g.d_w.clone());
            analytic.push(g.d_b.clone());
        }
        check(Config::default(), &named, &analytic, |t| {
            mse(&rebuild(t, &acts).predict(&x).unwrap(), &y).unwrap()
        })
        .assert_passed();
    }

    #[test]
    fn training_is_deterministic_to_the_bit() {
        let run = |seed: u64| {
            let mut rng = Rng::new(seed);
            let mut mlp =
                Mlp::<f64>::random(&[1, 8, 1], Activation::GeluErf, None, 0.1, &mut rng).unwrap();
            let x = DMatrix::from_fn(24, 1, |r, _| r as f64 / 4.0 - 3.0);
            let y = x.map(f64::sin);
            let costs = train(
                &mut mlp,
                &x,
                &y,
                TrainConfig { learning_rate: 0.05, epochs: 20, batch_size: 5, seed },
            )
            .unwrap();
            let mut bits: Vec<u64> = costs.iter().map(|c| c.to_bits()).collect();
            for l in mlp.layers() {
                bits.extend(l.w.iter().chain(l.b.iter()).map(|v| v.to_bits()));
            }
            bits
        };
        assert_eq!(run(4), run(4));
        assert_ne!(run(4), run(5), "another seed draws other weights and batches");
    }
}

// ───────────── GELU (tanh form) in f32, the fast path, against the f64 reference ─────────────

#[test]
fn the_f32_tanh_stays_within_its_stated_error_of_the_f64_tanh() {
    let mut worst = 0.0_f64;
    for i in -200_000..=200_000 {
        let x = i as f32 * 5e-5;
        worst = worst.max((f64::from(tanh_f32(x)) - f64::from(x).tanh()).abs());
        assert_eq!(tanh_f32(-x), -tanh_f32(x), "odd at {x}");
    }
    assert!(worst <= 2.0 * TANH_F32_MAX_ERROR, "largest error {worst:e}");
    // Saturated, and NaN is not hidden.
    assert_eq!(tanh_f32(f32::INFINITY), 1.0);
    assert_eq!(tanh_f32(-1e30), -1.0);
    assert_eq!(tanh_f32(0.0), 0.0);
    assert!(tanh_f32(f32::NAN).is_nan());
}

#[test]
fn gelu_in_f32_and_its_derivative_follow_the_f64_reference() {
    // Measured worst cases over this grid: 1.7e-7·(1 + |z|) and 7.4e-7·(1 + |z|).
    let (mut worst_f, mut worst_d) = (0.0_f64, 0.0_f64);
    for i in -40_000..=40_000 {
        let z = i as f32 * 2.5e-4;
        let zf = f64::from(z);
        worst_f = worst_f.max(
            (f64::from(gelu_tanh_f32(z)) - Activation::GeluTanh.apply(zf)).abs() / (1.0 + zf.abs()),
        );
        worst_d = worst_d.max(
            (f64::from(gelu_tanh_derivative_f32(z)) - Activation::GeluTanh.derivative(zf)).abs()
                / (1.0 + zf.abs()),
        );
    }
    assert!(worst_f < 1e-6, "GELU: {worst_f:e}");
    assert!(worst_d < 4e-6, "GELU′: {worst_d:e}");
}

#[test]
fn the_matrix_activations_take_the_f32_path_in_f32_only() {
    let z64 = DMatrix::from_fn(5, 7, |r, c| (r as f64 - 2.0) * 1.3 + c as f64 * 0.37 - 1.1);
    let z32 = z64.map(|v| v as f32);
    let d64 = DMatrix::from_fn(5, 7, |r, c| 0.1 * (r + 2 * c) as f64 - 0.5);
    let d32 = d64.map(|v| v as f32);
    // f32: exactly the fast functions.
    let a32 = activation_forward(Activation::GeluTanh, &z32);
    let g32 = activation_backward(Activation::GeluTanh, &z32, &d32).unwrap();
    for i in 0..z32.len() {
        assert_eq!(a32[i], gelu_tanh_f32(z32[i]));
        assert_eq!(g32[i], gelu_tanh_derivative_f32(z32[i]) * d32[i]);
    }
    // f64: exactly the reference, bit for bit.
    let a64 = activation_forward(Activation::GeluTanh, &z64);
    let g64 = activation_backward(Activation::GeluTanh, &z64, &d64).unwrap();
    for i in 0..z64.len() {
        assert_eq!(a64[i].to_bits(), Activation::GeluTanh.apply(z64[i]).to_bits());
        assert_eq!(g64[i].to_bits(), (Activation::GeluTanh.derivative(z64[i]) * d64[i]).to_bits());
    }
    // The bias of a dense layer reaches every row.
    let w = DMatrix::from_fn(7, 3, |r, c| (r as f64 - c as f64) * 0.1);
    let b = DMatrix::from_row_slice(1, 3, &[1.0, -2.0, 0.5]);
    let y = dense_forward(&z64, &w, &b).unwrap();
    let xw = llm_workbook::matmul::matmul(&z64, &w).unwrap();
    for r in 0..5 {
        for c in 0..3 {
            assert_eq!(y[(r, c)], xw[(r, c)] + b[(0, c)]);
        }
    }
}
