//! Chapter 4: XOR, the least-squares line, the document's sigmoid and ReLU networks, a learned one.
mod common;

use llm_workbook::Error;
use llm_workbook::ch03_mlp::{Activation, Layer, Mlp, TrainConfig};
use llm_workbook::ch04_xor::book::figures;
use llm_workbook::ch04_xor::*;
use nalgebra::DMatrix;

fn x() -> DMatrix<f64> {
    xor_data().0
}

// ───────────────────────────── the data and the line ─────────────────────────────

#[test]
fn xor_table() {
    let (x, y) = xor_data();
    for r in 0..4 {
        let (a, b) = (x[(r, 0)] as u8, x[(r, 1)] as u8);
        assert_eq!(y[(r, 0)] as u8, a ^ b);
    }
    assert_eq!(y.as_slice(), &[0.0, 1.0, 1.0, 0.0]);
}

#[test]
fn least_squares_line_predicts_0_5_everywhere() {
    let (x, y) = xor_data();
    let fit = least_squares_fit(&x, &y).unwrap();
    assert!(fit.w.abs().max() < 1e-14, "w = {}", fit.w);
    assert!((fit.b - 0.5).abs() < 1e-14);
    assert!(fit.predictions.iter().all(|p| (p - 0.5).abs() < 1e-14));
    // So its squared error is 1/4 on every point, and no threshold gets more than 2 of 4 right.
    let cost =
        fit.predictions.iter().zip(y.iter()).map(|(p, t)| (p - t).powi(2)).sum::<f64>() / 4.0;
    assert!((cost - 0.25).abs() < 1e-14);
}

#[test]
fn least_squares_fit_is_right_where_a_line_exists() {
    // AND is linearly separable: the fit is −0.25 + 0.5x₁ + 0.5x₂, ≥ 0.5 only at (1, 1).
    let (x, _) = xor_data();
    let and = DMatrix::from_column_slice(4, 1, &[0.0, 0.0, 0.0, 1.0]);
    let fit = least_squares_fit(&x, &and).unwrap();
    assert!(
        (fit.w[(0, 0)] - 0.5).abs() < 1e-14
            && (fit.w[(1, 0)] - 0.5).abs() < 1e-14
            && (fit.b + 0.25).abs() < 1e-14
    );
    assert_eq!(classify(&fit.predictions).unwrap(), [0, 0, 0, 1]);
}

#[test]
fn least_squares_fit_rejects_bad_input() {
    let (x, y) = xor_data();
    assert!(matches!(least_squares_fit(&x, &DMatrix::zeros(3, 1)), Err(Error::Shape { .. })));
    assert!(matches!(
        least_squares_fit(&DMatrix::zeros(0, 2), &DMatrix::zeros(0, 1)),
        Err(Error::Empty { .. })
    ));
    let mut bad = x.clone();
    bad[(2, 1)] = f64::NAN;
    assert!(matches!(least_squares_fit(&bad, &y), Err(Error::NonFinite { arg: "x", .. })));
    // Four copies of one point cannot fix a slope.
    assert!(matches!(
        least_squares_fit(&DMatrix::from_element(4, 2, 1.0), &y),
        Err(Error::InvalidValue { .. })
    ));
}

// ───────────────────────────── the sigmoid network ─────────────────────────────

#[test]
fn sigmoid_net_at_0_0() {
    let mlp = SIGMOID_NET.mlp().unwrap();
    let (z, h) = hidden_layer(&mlp, &x()).unwrap();
    assert_eq!(
        (z[(0, 0)], z[(0, 1)]),
        (-10.0, 30.0),
        "z₁ = 0×20 + 0×20 − 10, z₂ = 0×(−20) + 0×(−20) + 30"
    );
    // h₁ = σ(−10) ≈ 0 and h₂ = σ(30) ≈ 1, to the document's 0 decimals and closer.
    assert!((h[(0, 0)] - 4.5397868702434395e-5).abs() < 1e-18);
    assert!((h[(0, 1)] - 1.0).abs() < 1e-12);
    // The document rounds h to (0, 1) and gets σ(−10); with the exact h the argument is −9.99909.
    let zo = output_pre_activation(&mlp, &x()).unwrap();
    assert!((zo[(0, 0)] - (-9.99909204)).abs() < 1e-8);
    assert_eq!(zo[(0, 0)].round(), -10.0);
    let y = mlp.predict(&x()).unwrap();
    assert!((y[(0, 0)] - 0.00004544).abs() < 1e-8);
}

#[test]
fn sigmoid_net_computes_xor() {
    let y = SIGMOID_NET.mlp().unwrap().predict(&x()).unwrap();
    assert_eq!(classify(&y).unwrap(), [0, 1, 1, 0]);
    // And decisively: every output within 5e-5 of its target.
    for (o, t) in y.iter().zip(XOR_TARGETS) {
        assert!((o - t).abs() < 5e-5);
    }
}

#[test]
fn sigmoid_hidden_neurons_are_or_and_nand() {
    let (_, h) = hidden_layer(&SIGMOID_NET.mlp().unwrap(), &x()).unwrap();
    let bits = |c: usize| (0..4).map(|r| u8::from(h[(r, c)] > 0.5)).collect::<Vec<_>>();
    assert_eq!(bits(0), [0, 1, 1, 1], "OR");
    assert_eq!(bits(1), [1, 1, 1, 0], "NAND");
}

#[test]
fn printed_sigmoid_w_read_as_x_times_w_does_not_compute_xor() {
    // The document's ReLU code multiplies x·W; its sigmoid text uses one row of W per hidden
    // neuron (W·x). The ReLU W is symmetric so both readings agree there; the sigmoid W is not.
    let flipped = SIGMOID_NET.mlp_read_as_x_times_w().unwrap().predict(&x()).unwrap();
    assert_eq!(classify(&flipped).unwrap(), [0, 0, 1, 0]);
    let relu_flipped = RELU_NET.mlp_read_as_x_times_w().unwrap().predict(&x()).unwrap();
    assert_eq!(relu_flipped, RELU_NET.mlp().unwrap().predict(&x()).unwrap());
}

#[test]
fn sigmoid_net_hidden_and_output_snapshot() {
    // Checked by hand against a separate Python computation: h = (0.00004540, 1.00000000),
    // (0.99995460, 0.99995460) twice, (1.00000000, 0.00004540); outputs 0.00004544,
    // 0.99995452, 0.99995452, 0.00004544.
    let mlp = SIGMOID_NET.mlp().unwrap();
    let (_, h) = hidden_layer(&mlp, &x()).unwrap();
    common::snap_matrix!("sigmoid_hidden", h, 8);
    common::snap_matrix!("sigmoid_output", mlp.predict(&x()).unwrap(), 8);
}

// ───────────────────────────── the ReLU network ─────────────────────────────

#[test]
fn relu_net_at_0_0() {
    let mlp = RELU_NET.mlp().unwrap();
    let (_, h) = hidden_layer(&mlp, &x()).unwrap();
    assert_eq!((h[(0, 0)], h[(0, 1)]), (0.0, 0.0));
    assert_eq!(mlp.predict(&x()).unwrap()[(0, 0)], 0.0, "ReLU(0×1 + 0×1 − 0.5) = 0");
}

#[test]
fn relu_net_at_0_1() {
    let mlp = RELU_NET.mlp().unwrap();
    let (z, h) = hidden_layer(&mlp, &x()).unwrap();
    assert_eq!((z[(1, 0)], z[(1, 1)]), (-1.0, 1.0));
    assert_eq!((h[(1, 0)], h[(1, 1)]), (0.0, 1.0));
    let y = mlp.predict(&x()).unwrap();
    assert_eq!(y[(1, 0)], 0.5, "ReLU(0×1 + 1×1 − 0.5) = 0.5");
    assert_eq!(classify(&y).unwrap()[1], 1, "0.5 ≥ 0.5 ↦ 1");
}

#[test]
fn relu_net_computes_xor() {
    let y = RELU_NET.mlp().unwrap().predict(&x()).unwrap();
    assert_eq!(y.as_slice(), &[0.0, 0.5, 0.5, 0.0]);
    assert_eq!(classify(&y).unwrap(), [0, 1, 1, 0]);
    // The margin is zero: the two 1s sit exactly on the threshold. A threshold of 0.5 + ε fails.
    assert!(y.iter().filter(|&&o| o > 0.5).count() == 0);
}

#[test]
fn relu_net_hidden_and_output_snapshot() {
    // Checked by hand: h = (0,0), (0,1), (1,0), (0,0); outputs 0, 0.5, 0.5, 0.
    let mlp = RELU_NET.mlp().unwrap();
    let (_, h) = hidden_layer(&mlp, &x()).unwrap();
    common::snap_matrix!("relu_hidden", h, 2);
    common::snap_matrix!("relu_output", mlp.predict(&x()).unwrap(), 2);
}

#[test]
fn hidden_layers_make_the_points_linearly_separable() {
    // In hidden space a least-squares line, thresholded, gets all four right (it could not in x).
    for net in [SIGMOID_NET, RELU_NET] {
        let mlp = net.mlp().unwrap();
        let (_, h) = hidden_layer(&mlp, &x()).unwrap();
        let fit = least_squares_fit(&h, &xor_data().1).unwrap();
        assert_eq!(classify(&fit.predictions).unwrap(), [0, 1, 1, 0], "{:?}", net.activation);
    }
}

// ───────────────────────────── a learned network ─────────────────────────────

#[test]
fn learned_2_2_1_net_reaches_100_percent() {
    let l = learn_xor(LEARN_SEED, LEARN_TRAIN).unwrap();
    assert_eq!(l.accuracy, 1.0);
    assert_eq!(l.mlp.sizes(), [2, 2, 1]);
    assert!(
        l.costs[l.costs.len() - 1] < 0.01 * l.costs[0],
        "cost {} → {}",
        l.costs[0],
        l.costs[l.costs.len() - 1]
    );
    let y = l.mlp.predict(&x()).unwrap();
    for (o, t) in y.iter().zip(XOR_TARGETS) {
        assert!((o - t).abs() < 0.1, "output {o} for target {t}");
    }
}

#[test]
fn other_seeds_fail_at_the_reported_rate() {
    // The prose reports this survey: 48 of 200 seeds (24 %) end in a local minimum.
    let s = seed_survey(SURVEY_SEEDS, LEARN_TRAIN).unwrap();
    assert_eq!(s.tried, 200);
    assert_eq!(s.failures.len(), 48);
    assert!(!s.failures.contains(&LEARN_SEED));
    // Every failure is one of the two stuck states.
    assert_eq!(s.stuck_near(0.125) + s.stuck_near(1.0 / 6.0), s.failures.len());
    assert_eq!((s.stuck_near(0.125), s.stuck_near(1.0 / 6.0)), (43, 5));
}

#[test]
fn a_seed_that_fails_is_stuck_not_slow() {
    // Seed 0 fails with the chapter's schedule and still fails with 2.5 times as many epochs.
    let long = TrainConfig { epochs: 10_000, ..LEARN_TRAIN };
    let l = learn_xor(0, long).unwrap();
    assert!(l.accuracy < 1.0);
    assert!((l.costs[l.costs.len() - 1] - 0.125).abs() < 0.01);
}

// ───────────────────────────── bad input ─────────────────────────────

#[test]
fn classify_and_accuracy_reject_bad_shapes_and_nan() {
    assert!(matches!(classify(&DMatrix::zeros(4, 2)), Err(Error::Shape { .. })));
    assert!(matches!(
        classify(&DMatrix::from_element(2, 1, f64::NAN)),
        Err(Error::NonFinite { .. })
    ));
    let mlp = RELU_NET.mlp().unwrap();
    assert!(matches!(accuracy(&mlp, &x(), &DMatrix::zeros(3, 1)), Err(Error::Shape { .. })));
    assert!(matches!(
        accuracy(&mlp, &DMatrix::zeros(4, 3), &DMatrix::zeros(4, 1)),
        Err(Error::Shape { .. })
    ));
    let one_layer = Mlp::from_layers(vec![Layer {
        w: DMatrix::zeros(2, 1),
        b: DMatrix::zeros(1, 1),
        activation: Some(Activation::Relu),
    }])
    .unwrap();
    assert!(matches!(hidden_layer(&one_layer, &x()), Err(Error::InvalidValue { .. })));
}

// ───────────────────────────── prose and figures ─────────────────────────────

#[test]
fn prose_carries_the_errata_and_worked_tables() {
    common::check_chapter_prose(&llm_workbook::ch04_xor::book::CHAPTER);
}

#[test]
fn figures_show_points_regions_and_hidden_spaces() {
    use llm_workbook::plot::Figure;
    let figs = figures().unwrap();
    let stems: Vec<&str> = figs.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        stems,
        [
            "ch04_xor_points",
            "ch04_sigmoid_regions",
            "ch04_relu_regions",
            "ch04_learned_regions",
            "ch04_sigmoid_hidden",
            "ch04_relu_hidden",
            "ch04_learned_hidden"
        ]
    );
    for (stem, f) in &figs {
        let Figure::Scatter(c) = f else { panic!("{stem}: expected a scatter chart") };
        assert_eq!(c.classes.iter().map(|s| s.points.len()).sum::<usize>(), 4, "{stem}");
        if let Some(r) = &c.regions {
            // Each decision region map shows both classes.
            assert!(r.class.contains(&0) && r.class.contains(&1), "{stem}");
        }
    }
    // The printed sigmoid net's regions: (0.5, 0.5) is class 1, the corners are class 0.
    let Figure::Scatter(sig) = &figs[1].1 else { unreachable!() };
    let r = sig.regions.as_ref().unwrap();
    let at = |px: f64, py: f64| {
        let ix = ((px - r.x.0) / (r.x.1 - r.x.0) * r.nx as f64) as usize;
        let iy = ((py - r.y.0) / (r.y.1 - r.y.0) * r.ny as f64) as usize;
        r.class[iy * r.nx + ix]
    };
    assert_eq!((at(0.5, 0.5), at(0.0, 0.0), at(1.0, 1.0), at(0.0, 1.0)), (1, 0, 0, 1));
    // In the hidden space each net's output threshold is drawn as a line.
    for (stem, f) in &figs[4..] {
        let Figure::Scatter(c) = f else { unreachable!() };
        assert_eq!(c.lines.len(), 1);
        assert_eq!(c.lines[0].points.len(), 2, "{stem}");
    }
    let dir = common::temp_dir("ch04");
    let written = figs[4].1.save(&dir, "hidden").unwrap();
    assert!(written.iter().all(|p| p.metadata().map(|m| m.len() > 1000).unwrap_or(false)));
}

// ───────────── hardening: bad seeds' ranges, NaN targets, determinism ─────────────

mod hardening {
    use super::*;

    #[test]
    fn learning_is_deterministic_to_the_bit() {
        let bits = |l: &Learned| {
            let mut v: Vec<u64> = l.costs.iter().map(|c| c.to_bits()).collect();
            for layer in l.mlp.layers() {
                v.extend(layer.w.iter().chain(layer.b.iter()).map(|x| x.to_bits()));
            }
            v
        };
        let a = learn_xor(LEARN_SEED, LEARN_TRAIN).unwrap();
        let b = learn_xor(LEARN_SEED, LEARN_TRAIN).unwrap();
        assert_eq!(bits(&a), bits(&b));
        assert_ne!(
            bits(&a),
            bits(&learn_xor(LEARN_SEED + 1, LEARN_TRAIN).unwrap()),
            "another seed, other weights"
        );
    }

    #[test]
    fn bad_training_settings_and_targets_are_refused() {
        for bad in [
            TrainConfig { learning_rate: 0.0, ..LEARN_TRAIN },
            TrainConfig { batch_size: 0, ..LEARN_TRAIN },
        ] {
            assert!(matches!(learn_xor(1, bad), Err(Error::InvalidValue { .. })), "{bad:?}");
        }
        let mlp = SIGMOID_NET.mlp().unwrap();
        let mut y = xor_data().1;
        y[(3, 0)] = f64::NAN;
        let e = accuracy(&mlp, &x(), &y).unwrap_err();
        assert!(
            matches!(e, Error::InvalidValue { .. }) && e.to_string().contains("y[3] = NaN"),
            "{e}"
        );
        let two = DMatrix::from_column_slice(4, 1, &[0.0, 1.0, 2.0, 0.0]);
        assert!(accuracy(&mlp, &x(), &two).unwrap_err().to_string().contains("y[2] = 2"));
        assert!(matches!(least_squares_fit(&x(), &y), Err(Error::NonFinite { .. })));
        // An empty seed range surveys nothing rather than dividing by zero.
        let s = seed_survey(5..5, LEARN_TRAIN);
        assert!(s.as_ref().map_or(true, |s| s.tried == 0 && s.failure_rate().is_finite()), "{s:?}");
    }
}
