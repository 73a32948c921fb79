//! Chapter 2: softmax, temperature, cross-entropy and softmax regression.
mod common;

use llm_workbook::Error;
use llm_workbook::ch02_softmax::book::{
    CHAPTER, ERRATA, FIGURE_TEMPERATURES, figures, printed_chain, worked,
};
use llm_workbook::ch02_softmax::*;
use llm_workbook::gradcheck::{Config, check};
use llm_workbook::report::Status;
use llm_workbook::rng::Rng;
use llm_workbook::snapshot::fixed;
use nalgebra::{DMatrix, DVector};

const NEG_INF: f64 = f64::NEG_INFINITY;

fn v(xs: &[f64]) -> DVector<f64> {
    DVector::from_column_slice(xs)
}

fn row(xs: &DVector<f64>) -> DMatrix<f64> {
    DMatrix::from_row_slice(1, xs.len(), xs.as_slice())
}

/// Asserts `ours` prints as `printed` with the printed number of decimals.
#[track_caller]
fn assert_printed(ours: f64, printed: &str) {
    let d = llm_workbook::report::decimals_of(printed);
    assert_eq!(fixed(ours, d), printed, "ours {ours:.12} vs printed {printed}");
}

/// Σ r ⊙ m: a scalar loss whose gradient with respect to m is the fixed matrix r.
fn weighted_sum(m: &DMatrix<f64>, r: &DMatrix<f64>) -> f64 {
    m.component_mul(r).sum()
}

/// The textbook formula e^{zᵢ}/Σ e^{zⱼ}, unshifted: fine for small logits, the reference there.
fn naive_softmax(z: &[f64]) -> Vec<f64> {
    let e: Vec<f64> = z.iter().map(|x| x.exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

fn mat() -> DVector<f64> {
    one_hot(4, 0).unwrap()
}

// ───────────────────────── D0 ─────────────────────────

#[test]
fn softmax_of_1_2_8_is_0_001_0_002_0_997() {
    let p = softmax(&v(&[1.0, 2.0, 8.0])).unwrap();
    for (ours, printed) in p.iter().zip(["0.001", "0.002", "0.997"]) {
        assert_printed(*ours, printed);
    }
    // The exact values, so the test also fails if the rounding happens to agree by luck.
    let e8 = 8f64.exp();
    let s = 1f64.exp() + 2f64.exp() + e8;
    assert!((p[2] - e8 / s).abs() < 1e-15);
    assert!((p[0] - 9.088_005_55e-4).abs() < 1e-12);
}

#[test]
fn softmax_of_z_and_0_is_the_sigmoid_of_chapter_1() {
    use llm_workbook::ch01_logistic::sigmoid;
    for z in [-30.0, -2.5, -0.1, 0.0, 0.7, 4.0, 30.0] {
        let p = softmax(&v(&[z, 0.0])).unwrap();
        assert!((p[0] - sigmoid(z)).abs() < 1e-15, "z = {z}");
        assert!((p[1] - sigmoid(-z)).abs() < 1e-15);
    }
    // More generally only differences of logits matter: softmax((a, b))₁ = σ(a − b).
    let p = softmax(&v(&[3.5, 1.25])).unwrap();
    assert!((p[0] - sigmoid(2.25)).abs() < 1e-15);
}

#[test]
fn softmax_with_base_b_is_softmax_of_ln_b_times_z() {
    let z = v(&[2.0, 1.0, 0.2, -0.7]);
    for b in [2.0, 10.0, 0.5, std::f64::consts::E] {
        let direct: Vec<f64> = z.iter().map(|&x| f64::powf(b, x)).collect();
        let s: f64 = direct.iter().sum();
        let ours = softmax_with_base(&z, b).unwrap();
        for i in 0..4 {
            assert!((ours[i] - direct[i] / s).abs() < 1e-15, "b = {b}");
        }
        // b = e^B is temperature 1/B for B > 0.
        if b > 1.0 {
            let t = softmax_with_temperature(&z, 1.0 / b.ln()).unwrap();
            assert!((ours - t).amax() < 1e-15);
        }
    }
    // base e is the ordinary softmax; base 1 is uniform; a base below 1 reverses the order.
    assert!(
        (softmax_with_base(&z, std::f64::consts::E).unwrap() - softmax(&z).unwrap()).amax() < 1e-15
    );
    assert!(softmax_with_base(&z, 1.0).unwrap().iter().all(|&p| p == 0.25));
    let flipped = softmax_with_base(&z, 0.5).unwrap();
    assert!(flipped[3] > flipped[2] && flipped[2] > flipped[1] && flipped[1] > flipped[0]);
}

#[test]
fn higher_temperature_flattens_the_distribution() {
    let z = v(&[2.0, 1.0, 0.2]);
    let temps = [0.05, 0.1, 0.5, 1.0, 2.0, 10.0, 100.0];
    let h: Vec<f64> = temps
        .iter()
        .map(|&t| entropy(&softmax_with_temperature(&z, t).unwrap()).unwrap())
        .collect();
    for w in h.windows(2) {
        assert!(w[1] > w[0], "entropy must rise with T: {h:?}");
    }
    assert!(h[h.len() - 1] < 3f64.ln());
    // The order of the classes never changes with T, only how sharp the distribution is.
    for t in temps {
        let p = softmax_with_temperature(&z, t).unwrap();
        assert!(p[0] >= p[1] && p[1] >= p[2]);
    }
    // T = 1 is the plain softmax, bit for bit.
    assert_eq!(softmax_with_temperature(&z, 1.0).unwrap(), softmax(&z).unwrap());
}

#[test]
fn temperature_to_zero_tends_to_argmax() {
    let z = v(&[2.0, 1.0, 0.2]);
    assert_eq!(softmax_with_temperature(&z, 1e-3).unwrap(), v(&[1.0, 0.0, 0.0]));
    // Even an absurdly small T stays finite, because the shifted logits are divided.
    assert_eq!(softmax_with_temperature(&z, 1e-300).unwrap(), v(&[1.0, 0.0, 0.0]));
    // Ties share the weight.
    assert_eq!(softmax_with_temperature(&v(&[3.0, 1.0, 3.0]), 1e-6).unwrap(), v(&[0.5, 0.0, 0.5]));
    // On the way down the winner's probability grows monotonically towards 1.
    let mut last = 0.0;
    for t in [10.0, 2.0, 1.0, 0.5, 0.1, 0.01] {
        let p = softmax_with_temperature(&z, t).unwrap()[0];
        assert!(p > last);
        last = p;
    }
}

#[test]
fn temperature_to_infinity_tends_to_uniform() {
    let z = v(&[2.0, 1.0, 0.2]);
    let p = softmax_with_temperature(&z, 1e4).unwrap();
    assert!(p.iter().all(|&x| (x - 1.0 / 3.0).abs() < 1e-4), "{p}");
    let p = softmax_with_temperature(&z, 1e12).unwrap();
    assert!(p.iter().all(|&x| (x - 1.0 / 3.0).abs() < 1e-12));
}

#[test]
fn temperature_table_snapshot() {
    let z = v(&[2.0, 1.0, 0.2]);
    let rows: Vec<f64> = FIGURE_TEMPERATURES
        .iter()
        .flat_map(|&t| softmax_with_temperature(&z, t).unwrap().iter().copied().collect::<Vec<_>>())
        .collect();
    let table = DMatrix::from_row_slice(FIGURE_TEMPERATURES.len(), 3, &rows);
    common::snap_matrix!("temperature_table", table, 4);
}

#[test]
fn negative_log_likelihood_is_the_summed_cross_entropy() {
    // Three samples, their predicted distributions and true classes.
    let p = DMatrix::from_row_slice(
        3,
        4,
        &[0.7, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.7, 0.25, 0.25, 0.4, 0.1],
    );
    let truth = [0usize, 0, 2];
    let likelihood: f64 = truth.iter().enumerate().map(|(i, &k)| p[(i, k)]).product();
    let summed: f64 = truth
        .iter()
        .enumerate()
        .map(|(i, &k)| cross_entropy(&one_hot(4, k).unwrap(), &p.row(i).transpose()).unwrap())
        .sum();
    assert!((-likelihood.ln() - summed).abs() < 1e-14);
    // −ℒ (as printed) is a number in [−1, 0), not the loss.
    assert!((0.0..=1.0).contains(&likelihood));
    assert!((-likelihood - summed).abs() > 1.0);
    // The same from logits: ln p are logits whose softmax is p.
    let logits = p.map(f64::ln);
    let mean = cross_entropy_from_logits(&logits, &truth).unwrap();
    assert!((mean * 3.0 - summed).abs() < 1e-13);
}

#[test]
fn d_loss_d_probabilities_is_minus_y_over_y_hat() {
    let y = mat();
    let p = v(&[0.7, 0.1, 0.1, 0.1]);
    let ours = d_cross_entropy_d_probabilities(&y, &p).unwrap();
    assert_eq!(fixed(ours[0], 4), "-1.4286");
    assert_eq!(&ours.as_slice()[1..], &[0.0, 0.0, 0.0]);
    // The printed y − ŷ would be 0.3 for mat: wrong sign and size.
    assert!((y[0] - p[0] - 0.3).abs() < 1e-15);
    // Finite differences of −Σ y ln p, treating every pᵢ as a free variable.
    check(Config::default(), &[("y_hat", row(&p))], &[row(&ours)], |t| {
        -(0..4).filter(|&i| y[i] > 0.0).map(|i| y[i] * t[0][(0, i)].ln()).sum::<f64>()
    })
    .assert_passed();
}

#[test]
fn jacobian_chain_gives_y_hat_minus_y() {
    let y = mat();
    let mut rng = Rng::new(21);
    for p in [
        v(&[0.7, 0.1, 0.1, 0.1]),
        v(&[0.1, 0.1, 0.1, 0.7]),
        softmax(&DVector::from_fn(4, |_, _| rng.normal())).unwrap(),
    ] {
        let chain = d_logits_by_chain_rule(&y, &p).unwrap();
        let direct = d_cross_entropy_d_logits(&y, &p).unwrap();
        assert!((chain - &direct).amax() < 1e-15);
        // The printed chain Σₖ(ŷₖ − yₖ)∂ŷₖ/∂z is something else.
        let printed = printed_chain(&y, &p).unwrap();
        assert!((printed - direct).amax() > 1e-3);
    }
    // At the document's point: −0.084 by the printed chain, −0.3 by the correct one.
    let p = v(&[0.7, 0.1, 0.1, 0.1]);
    assert_eq!(fixed(printed_chain(&y, &p).unwrap()[0], 3), "-0.084");
    assert_eq!(fixed(d_logits_by_chain_rule(&y, &p).unwrap()[0], 3), "-0.300");
    // And ŷ − y is the gradient of the loss as a function of the logits.
    let z = logits_of(&p).unwrap();
    let g = d_cross_entropy_d_logits(&y, &p).unwrap();
    check(Config::default(), &[("z", row(&z))], &[row(&g)], |t| {
        cross_entropy_from_logits(&t[0], &[0]).unwrap()
    })
    .assert_passed();
}

#[test]
fn summed_weight_gradient_is_n_times_the_mean_gradient() {
    let (x, t) = three_clouds(10, 5);
    let mut rng = Rng::new(8);
    let w = rng.normal_matrix::<f64>(2, 3, 0.7);
    let b = rng.normal_matrix::<f64>(1, 3, 0.3);
    let n = x.nrows() as f64;
    let summed = summed_weight_gradient(&w, &b, &x, &t).unwrap();
    assert_eq!(summed.shape(), (3, 2), "one row per class, as D0 writes it");
    let (_, d_w, _) = regression_loss_and_gradient(&w, &b, &x, &t).unwrap();
    assert!((&summed - d_w.transpose() * n).amax() < 1e-12);
    // Σᵢ(ŷᵢ − yᵢ)xᵢᵀ is the gradient of the summed loss N·L with respect to the K×D weights Wᵀ.
    check(Config::default(), &[("w (K×D)", w.transpose())], &[summed], |p| {
        n * cross_entropy_from_logits(&regression_logits(&p[0].transpose(), &b, &x).unwrap(), &t)
            .unwrap()
    })
    .assert_passed();
}

// ───────────────────────── D3 ─────────────────────────

#[test]
fn softmax_of_2_1_0_2_is_0_65_0_24_0_11() {
    let p = softmax(&v(&[2.0, 1.0, 0.2])).unwrap();
    for (ours, printed) in p.iter().zip(["0.65", "0.24", "0.11"]) {
        assert_printed(*ours, printed);
    }
    let reference = naive_softmax(&[2.0, 1.0, 0.2]);
    assert!((p[0] - reference[0]).abs() < 1e-15 && (p[0] - 0.652_239_85).abs() < 1e-8);
    assert!((p.sum() - 1.0).abs() < 1e-15);
}

#[test]
fn cross_entropy_of_mat_at_0_7_is_0_357() {
    let ce = cross_entropy(&mat(), &v(&[0.7, 0.1, 0.1, 0.1])).unwrap();
    assert_printed(ce, "0.357");
    assert_eq!(ce, -(0.7f64.ln()));
    let from_logits =
        cross_entropy_from_logit_vector(&logits_of(&v(&[0.7, 0.1, 0.1, 0.1])).unwrap(), 0).unwrap();
    assert!((from_logits - ce).abs() < 1e-15);
}

#[test]
fn cross_entropy_of_mat_at_0_1_is_2_303() {
    let ce = cross_entropy(&mat(), &v(&[0.1, 0.1, 0.1, 0.7])).unwrap();
    assert_printed(ce, "2.303");
    assert!((ce - 10f64.ln()).abs() < 1e-15);
    let from_logits =
        cross_entropy_from_logit_vector(&logits_of(&v(&[0.1, 0.1, 0.1, 0.7])).unwrap(), 0).unwrap();
    assert!((from_logits - ce).abs() < 1e-14);
}

#[test]
fn gradient_at_0_1_0_1_0_1_0_7_is_minus_0_9_0_1_0_1_0_7() {
    let p = v(&[0.1, 0.1, 0.1, 0.7]);
    let g = d_cross_entropy_d_logits(&mat(), &p).unwrap();
    for (ours, printed) in g.iter().zip(["-0.9", "0.1", "0.1", "0.7"]) {
        assert_printed(*ours, printed);
    }
    // The same gradient from the logits ln P, by the backward pass (N = 1).
    let back = cross_entropy_from_logits_backward(&row(&logits_of(&p).unwrap()), &[0]).unwrap();
    assert!((back - row(&g)).amax() < 1e-15);
    assert!(g.sum().abs() < 1e-15, "the gradient of a softmax loss sums to zero");
}

#[test]
fn one_step_changes_the_logits_by_0_09_minus_0_01_minus_0_01_minus_0_07() {
    // D3's update Zᵢ ← Zᵢ − 0.1·∂L/∂Zᵢ at P = (0.1, 0.1, 0.1, 0.7), y = mat: the amounts it adds
    // (0.1 + 0.09, 0.1 − 0.01, 0.7 − 0.07) are the changes of the logits.
    let p = v(&[0.1, 0.1, 0.1, 0.7]);
    let z = logits_of(&p).unwrap();
    let change = logit_step(&z, 0, 0.1).unwrap() - &z;
    for (ours, printed) in change.iter().zip(["0.09", "-0.01", "-0.01", "-0.07"]) {
        assert_printed(*ours, printed);
    }
    // The changes are −α(P − y) and sum to zero, whatever the logits' common shift.
    let g = d_cross_entropy_d_logits(&mat(), &p).unwrap();
    assert!((&change + &g * 0.1).amax() < 1e-15);
    assert!(change.sum().abs() < 1e-15);
}

#[test]
fn text_probability_step_gives_0_19_0_09_0_09_0_63() {
    let mixed = mix_towards_target(&v(&[0.1, 0.1, 0.1, 0.7]), &mat(), 0.1).unwrap();
    for (ours, printed) in mixed.iter().zip(["0.19", "0.09", "0.09", "0.63"]) {
        assert_printed(*ours, printed);
    }
    assert!((mixed[0] - 0.19).abs() < 1e-15 && (mixed[3] - 0.63).abs() < 1e-15);
}

#[test]
fn one_logit_step_from_p_gives_0_114_0_103_0_103_0_680() {
    let p = v(&[0.1, 0.1, 0.1, 0.7]);
    let z = logits_of(&p).unwrap();
    let stepped = softmax(&logit_step(&z, 0, 0.1).unwrap()).unwrap();
    for (ours, want) in stepped.iter().zip(["0.1140", "0.1031", "0.1031", "0.6798"]) {
        assert_printed(*ours, want);
    }
    // Closed form: ŷᵢ' ∝ ŷᵢ e^{−α(ŷᵢ − yᵢ)}.
    let g = d_cross_entropy_d_logits(&mat(), &p).unwrap();
    let unnorm = DVector::from_fn(4, |i, _| p[i] * (-0.1 * g[i]).exp());
    assert!((&stepped - &unnorm / unnorm.sum()).amax() < 1e-15);
    // Any common shift of the logits gives the same step.
    let shifted = softmax(&logit_step(&z.add_scalar(5.0), 0, 0.1).unwrap()).unwrap();
    assert!((&shifted - &stepped).amax() < 1e-15);
    // And it is not the text's 0.19, 0.09, 0.09, 0.63.
    assert_ne!(fixed(stepped[0], 2), "0.19");
    // The step lowers the loss, as a gradient step with a small α must.
    assert!(cross_entropy(&mat(), &stepped).unwrap() < cross_entropy(&mat(), &p).unwrap());
}

#[test]
fn probability_step_keeps_the_sum_at_one() {
    let mixed = mix_towards_target(&v(&[0.1, 0.1, 0.1, 0.7]), &mat(), 0.1).unwrap();
    assert!((mixed.sum() - 1.0).abs() < 1e-15);
    // For any distribution, target and α in [0, 1].
    let mut rng = Rng::new(3);
    for _ in 0..50 {
        let p = softmax(&DVector::from_fn(6, |_, _| 2.0 * rng.normal())).unwrap();
        let y = one_hot(6, rng.below(6)).unwrap();
        let alpha = rng.next_f64();
        assert!((mix_towards_target(&p, &y, alpha).unwrap().sum() - 1.0).abs() < 1e-14);
        assert!(d_cross_entropy_d_logits(&y, &p).unwrap().sum().abs() < 1e-15);
    }
}

#[test]
fn script_starts_from_logits_not_from_the_texts_probabilities() {
    assert_eq!(SCRIPT_START, [0.1, 0.1, 0.1, 0.7]);
    assert_eq!(SCRIPT_LEARNING_RATE, 0.01);
    let replay = document_replay().unwrap();
    let start = &replay.probabilities[0];
    assert_eq!(fixed(start[0], 4), "0.2074");
    assert_eq!(fixed(start[3], 4), "0.3779");
    assert!((start - v(&[0.1, 0.1, 0.1, 0.7])).amax() > 0.1);
    // Had it started from the text's probabilities (logits ln P) with the text's α = 0.1, its first
    // step would be the erratum's (0.114, 0.103, 0.103, 0.680).
    let text_start = logits_of(&v(&[0.1, 0.1, 0.1, 0.7])).unwrap();
    let text_replay = replay_script(text_start.as_slice(), 0, 0.1, 1, 1).unwrap();
    assert_eq!(fixed(text_replay.final_probabilities[0], 4), "0.1140");
}

fn assert_line(ours: &DVector<f64>, printed: [&str; 4]) {
    assert_eq!(ours.len(), 4);
    for (o, p) in ours.iter().zip(printed) {
        assert_printed(*o, p);
    }
}

#[test]
fn replay_iteration_0_weights_are_after_the_first_update() {
    let replay = document_replay().unwrap();
    let line = replay.line(0).unwrap();
    assert_line(
        &line.weights_after_update,
        ["0.10792622", "0.09792622", "0.09792622", "0.69622133"],
    );
    // Not the starting weights: the print comes after the update.
    assert_ne!(line.weights_after_update, v(&SCRIPT_START));
}

#[test]
fn replay_iteration_0_probabilities_are_before_the_first_update() {
    let replay = document_replay().unwrap();
    let line = replay.line(0).unwrap();
    assert_line(
        &line.probabilities_before_update,
        ["0.20737772", "0.20737772", "0.20737772", "0.37786684"],
    );
    assert_eq!(line.probabilities_before_update, softmax(&v(&SCRIPT_START)).unwrap());
}

#[test]
fn replay_iteration_1990_weights_match_to_8_decimals() {
    let replay = document_replay().unwrap();
    // numpy prints −0.6786175 for −0.67861750: the dropped zero is restored here.
    assert_line(
        &replay.line(1990).unwrap().weights_after_update,
        ["3.41207767", "-0.86673008", "-0.86673008", "-0.67861750"],
    );
}

#[test]
fn replay_iteration_1990_probabilities_match_to_8_decimals() {
    let replay = document_replay().unwrap();
    assert_line(
        &replay.line(1990).unwrap().probabilities_before_update,
        ["0.95742224", "0.01327650", "0.01327650", "0.01602477"],
    );
}

#[test]
fn replay_final_probabilities_match_to_8_decimals() {
    let replay = document_replay().unwrap();
    assert_line(
        &replay.final_probabilities,
        ["0.95765298", "0.01320591", "0.01320591", "0.01593520"],
    );
    assert_eq!(replay.probabilities.len(), SCRIPT_ITERATIONS + 1);
    assert_eq!(&replay.final_probabilities, replay.probabilities.last().unwrap());
}

#[test]
fn replay_printed_probabilities_lag_the_printed_weights_by_one_update() {
    let replay = document_replay().unwrap();
    assert_eq!(replay.lines.len(), 200);
    assert_eq!(replay.lines.last().unwrap().iteration, 1990);
    for line in &replay.lines {
        let i = line.iteration;
        assert_eq!(line.probabilities_before_update, replay.probabilities[i]);
        // The softmax of the weights printed beside them is the *next* iteration's probabilities.
        assert_eq!(softmax(&line.weights_after_update).unwrap(), replay.probabilities[i + 1]);
        assert_ne!(replay.probabilities[i + 1], replay.probabilities[i]);
    }
    // The script's unshifted np.exp and our max-shifted softmax agree to rounding here.
    let late = replay.line(1990).unwrap();
    let unshifted = naive_softmax(late.weights_after_update.as_slice());
    assert!((softmax(&late.weights_after_update).unwrap() - v(&unshifted)).amax() < 1e-15);
}

#[test]
fn replay_snapshot() {
    let replay = document_replay().unwrap();
    let (a, b) = (replay.line(0).unwrap(), replay.line(1990).unwrap());
    let rows = [
        &a.weights_after_update,
        &a.probabilities_before_update,
        &b.weights_after_update,
        &b.probabilities_before_update,
        &replay.final_probabilities,
    ];
    let m = DMatrix::from_fn(5, 4, |r, c| rows[r][c]);
    common::snap_matrix!("replay_printed_lines", m, 8);
}

// ───────────────────────── softmax: properties and stability ─────────────────────────

#[test]
fn rows_sum_to_one_and_match_the_textbook_formula() {
    let mut rng = Rng::new(1);
    let z = rng.normal_matrix::<f64>(7, 5, 2.0);
    let y = softmax_rows_forward(&z).unwrap();
    for r in 0..7 {
        assert!((y.row(r).sum() - 1.0).abs() < 1e-15);
        let zr: Vec<f64> = z.row(r).iter().copied().collect();
        for (c, want) in naive_softmax(&zr).into_iter().enumerate() {
            assert!((y[(r, c)] - want).abs() < 1e-15);
        }
    }
    // Each row may be shifted by its own constant without changing anything.
    let shifted = DMatrix::from_fn(7, 5, |r, c| z[(r, c)] + 10.0 * r as f64 - 3.0);
    assert!((softmax_rows_forward(&shifted).unwrap() - &y).amax() < 1e-14);
    // A row's softmax is the vector softmax of that row.
    let third = softmax(&z.row(3).transpose()).unwrap();
    assert_eq!(third, y.row(3).transpose());
}

#[test]
fn log_softmax_and_log_sum_exp_agree_with_their_definitions() {
    let mut rng = Rng::new(4);
    let z = rng.normal_matrix::<f64>(4, 6, 3.0);
    let ls = log_softmax_rows(&z).unwrap();
    let y = softmax_rows_forward(&z).unwrap();
    assert!((ls.map(f64::exp) - &y).amax() < 1e-15);
    let lse = log_sum_exp_rows(&z).unwrap();
    for r in 0..4 {
        let direct = z.row(r).iter().map(|x| x.exp()).sum::<f64>().ln();
        assert!((lse[r] - direct).abs() < 1e-14);
        for c in 0..6 {
            assert!((ls[(r, c)] - (z[(r, c)] - lse[r])).abs() < 1e-14);
        }
    }
    let z1 = z.row(1).transpose();
    assert_eq!(log_softmax(&z1).unwrap(), ls.row(1).transpose());
    assert_eq!(log_sum_exp(&z1).unwrap(), lse[1]);
}

#[test]
fn softmax_of_1000_1001_1002_equals_softmax_of_0_1_2() {
    let big = softmax(&v(&[1000.0, 1001.0, 1002.0])).unwrap();
    let small = softmax(&v(&[0.0, 1.0, 2.0])).unwrap();
    assert_eq!(big, small, "the shifted computation is exactly the same arithmetic");
    assert!((small[2] - naive_softmax(&[0.0, 1.0, 2.0])[2]).abs() < 1e-15);
    // The unshifted formula overflows: e^1000 = ∞ and ∞/∞ is NaN.
    assert!(naive_softmax(&[1000.0, 1001.0, 1002.0]).iter().all(|p| p.is_nan()));
    assert_eq!(
        log_softmax(&v(&[1000.0, 1001.0, 1002.0])).unwrap(),
        log_softmax(&v(&[0.0, 1.0, 2.0])).unwrap()
    );
    assert_eq!(
        log_sum_exp(&v(&[1000.0, 1001.0, 1002.0])).unwrap(),
        1000.0 + log_sum_exp(&v(&[-2.0, -1.0, 0.0])).unwrap() + 2.0
    );
    let rows = DMatrix::from_row_slice(2, 3, &[1000.0, 1001.0, 1002.0, -1002.0, -1001.0, -1000.0]);
    let shifted = DMatrix::from_row_slice(2, 3, &[0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
    assert_eq!(softmax_rows_forward(&rows).unwrap(), softmax_rows_forward(&shifted).unwrap());
    assert_eq!(
        cross_entropy_from_logits(&rows, &[0, 2]).unwrap(),
        cross_entropy_from_logits(&shifted, &[0, 2]).unwrap()
    );
    assert_eq!(
        cross_entropy_from_logits_backward(&rows, &[1, 1]).unwrap(),
        cross_entropy_from_logits_backward(&shifted, &[1, 1]).unwrap()
    );
    // The same in f32.
    let rows32: DMatrix<f32> = llm_workbook::float::cast(&rows);
    let shifted32: DMatrix<f32> = llm_workbook::float::cast(&shifted);
    assert_eq!(softmax_rows_forward(&rows32).unwrap(), softmax_rows_forward(&shifted32).unwrap());
}

#[test]
fn each_row_needs_its_own_maximum() {
    // Subtracting one maximum for the whole matrix is exact in theory, but a row far below the
    // global maximum then underflows to all zeros and 0/0 gives NaN. Per-row maxima cannot.
    let z: DMatrix<f64> = DMatrix::from_row_slice(2, 2, &[0.0, 1.0, -1000.0, -999.0]);
    let global = z.max();
    let e = z.map(|x| (x - global).exp());
    let second_row_sum = e[(1, 0)] + e[(1, 1)];
    assert_eq!(second_row_sum, 0.0);
    assert!((e[(1, 0)] / second_row_sum).is_nan());
    let y = softmax_rows_forward(&z).unwrap();
    assert_eq!(y.row(1), y.row(0));
    assert!((y[(1, 1)] - llm_workbook::ch01_logistic::sigmoid(1.0)).abs() < 1e-15);
}

#[test]
fn logits_of_plus_minus_1000_give_exact_finite_results() {
    assert_eq!(softmax(&v(&[-1000.0, 1000.0])).unwrap(), v(&[0.0, 1.0]));
    assert_eq!(log_softmax(&v(&[-1000.0, 0.0, 1000.0])).unwrap(), v(&[-2000.0, -1000.0, 0.0]));
    assert_eq!(log_sum_exp(&v(&[-1000.0, 1000.0])).unwrap(), 1000.0);
    let z = DMatrix::from_row_slice(2, 2, &[-1000.0, 1000.0, 1000.0, -1000.0]);
    // Row 0 wrong by 2000 nats, row 1 right: mean (2000 + 0)/2.
    assert_eq!(cross_entropy_from_logits(&z, &[0, 0]).unwrap(), 1000.0);
    let g = cross_entropy_from_logits_backward(&z, &[0, 0]).unwrap();
    assert_eq!(g, DMatrix::from_row_slice(2, 2, &[-0.5, 0.5, 0.0, 0.0]));
    // The probability route cannot do this: softmax rounds e^{−2000} to 0 and −ln 0 = ∞.
    let p = softmax(&v(&[-1000.0, 1000.0])).unwrap();
    assert_eq!(cross_entropy(&one_hot(2, 0).unwrap(), &p).unwrap(), f64::INFINITY);
    // And ±1000 in f32 too.
    let z32: DMatrix<f32> = llm_workbook::float::cast(&z);
    assert_eq!(cross_entropy_from_logits(&z32, &[0, 0]).unwrap(), 1000.0f32);
}

#[test]
fn masked_entries_get_probability_zero() {
    let z = DMatrix::from_row_slice(
        3,
        4,
        &[0.5, NEG_INF, 1.5, -1.0, NEG_INF, NEG_INF, 2.0, NEG_INF, 1000.0, 1001.0, NEG_INF, 1002.0],
    );
    let y = softmax_rows_forward(&z).unwrap();
    // Row 0 is the softmax of its three finite entries, with a 0 in the masked place.
    let finite = naive_softmax(&[0.5, 1.5, -1.0]);
    assert_eq!(y[(0, 1)], 0.0);
    assert!((y[(0, 0)] - finite[0]).abs() < 1e-15 && (y[(0, 2)] - finite[1]).abs() < 1e-15);
    assert_eq!(y.row(1).iter().copied().collect::<Vec<_>>(), vec![0.0, 0.0, 1.0, 0.0]);
    assert_eq!(y[(2, 2)], 0.0);
    for r in 0..3 {
        assert!((y.row(r).sum() - 1.0).abs() < 1e-15);
    }
    let ls = log_softmax_rows(&z).unwrap();
    assert_eq!(ls[(0, 1)], NEG_INF);
    assert_eq!(ls[(1, 2)], 0.0);
    assert!(ls.iter().all(|x| !x.is_nan()));
    // Gradients never reach a masked entry.
    let d = softmax_rows_backward(&y, &DMatrix::from_element(3, 4, 1.5)).unwrap();
    assert_eq!(d[(0, 1)], 0.0);
    let d = cross_entropy_from_logits_backward(&z, &[0, 2, 3]).unwrap();
    assert_eq!(d[(0, 1)], 0.0);
    assert!(d.iter().all(|x| x.is_finite()));
    assert!(cross_entropy_from_logits(&z, &[0, 2, 3]).unwrap().is_finite());
    common::snap_matrix!("masked_softmax_rows", y, 4);
}

#[test]
fn f32_rows_agree_with_f64() {
    let mut rng = Rng::new(12);
    let z64 = rng.normal_matrix::<f64>(6, 9, 3.0);
    let z32: DMatrix<f32> = llm_workbook::float::cast(&z64);
    let y64 = softmax_rows_forward(&z64).unwrap();
    let y32: DMatrix<f64> = llm_workbook::float::cast(&softmax_rows_forward(&z32).unwrap());
    assert!((y64 - y32).amax() < 1e-6);
    let t = [0, 3, 8, 1, 1, 5];
    let l64 = cross_entropy_from_logits(&z64, &t).unwrap();
    let l32 = cross_entropy_from_logits(&z32, &t).unwrap() as f64;
    assert!((l64 - l32).abs() < 1e-5);
}

#[test]
fn entropy_is_zero_for_one_hot_and_ln_k_for_uniform() {
    assert_eq!(entropy(&one_hot::<f64>(5, 2).unwrap()).unwrap(), 0.0);
    assert!((entropy(&v(&[0.25; 4])).unwrap() - 4f64.ln()).abs() < 1e-15);
}

#[test]
fn argmax_rows_picks_the_first_maximum() {
    let z = DMatrix::from_row_slice(3, 3, &[1.0, 3.0, 2.0, 5.0, 5.0, 0.0, NEG_INF, -1.0, -2.0]);
    assert_eq!(argmax_rows(&z), vec![1, 0, 1]);
}

// ───────────────────────── the Jacobian and the backward passes ─────────────────────────

#[test]
fn jacobian_is_diag_minus_outer_product() {
    let p = v(&[0.1, 0.1, 0.1, 0.7]);
    let j = softmax_jacobian(&p).unwrap();
    assert!((&j - (DMatrix::from_diagonal(&p) - &p * p.transpose())).amax() < 1e-16);
    assert_eq!(j, j.transpose());
    for r in 0..4 {
        assert!(j.row(r).sum().abs() < 1e-16, "rows sum to zero: softmax outputs always sum to 1");
    }
    // Against finite differences of softmax itself, one weighted sum per random direction.
    let z = logits_of(&p).unwrap();
    let mut rng = Rng::new(9);
    for _ in 0..3 {
        let r = rng.normal_matrix::<f64>(1, 4, 1.0);
        let analytic = &r * &j; // ∂(Σᵢ rᵢyᵢ)/∂zⱼ = Σᵢ rᵢ J_ij
        check(Config::default(), &[("z", row(&z))], &[analytic], |t| {
            weighted_sum(&row(&softmax(&t[0].row(0).transpose()).unwrap()), &r)
        })
        .assert_passed();
    }
    common::snap_matrix!("jacobian_at_0_1_0_1_0_1_0_7", j, 4);
}

#[test]
fn softmax_rows_backward_passes_gradcheck() {
    let mut rng = Rng::new(2);
    let mut z = rng.normal_matrix::<f64>(4, 5, 1.5);
    let r = rng.normal_matrix::<f64>(4, 5, 1.0);
    let y = softmax_rows_forward(&z).unwrap();
    let d_z = softmax_rows_backward(&y, &r).unwrap();
    check(Config::default(), &[("z", z.clone())], &[d_z], |t| {
        weighted_sum(&softmax_rows_forward(&t[0]).unwrap(), &r)
    })
    .assert_passed();
    // With masked entries, as causal attention has them.
    z[(0, 3)] = NEG_INF;
    z[(2, 0)] = NEG_INF;
    z[(2, 4)] = NEG_INF;
    let y = softmax_rows_forward(&z).unwrap();
    let d_z = softmax_rows_backward(&y, &r).unwrap();
    assert_eq!(d_z[(2, 4)], 0.0);
    check(Config::default(), &[("z", z.clone())], &[d_z], |t| {
        weighted_sum(&softmax_rows_forward(&t[0]).unwrap(), &r)
    })
    .assert_passed();
    // Row by row it is Jᵀ·∂L/∂y.
    for i in 0..4 {
        let j = softmax_jacobian(&y.row(i).transpose()).unwrap();
        let by_j = j.transpose() * r.row(i).transpose();
        let ours = softmax_rows_backward(&y, &r).unwrap().row(i).transpose();
        assert!((by_j - ours).amax() < 1e-15);
    }
}

#[test]
fn log_softmax_rows_backward_passes_gradcheck() {
    let mut rng = Rng::new(6);
    let z = rng.normal_matrix::<f64>(3, 6, 2.0);
    let r = rng.normal_matrix::<f64>(3, 6, 1.0);
    let ls = log_softmax_rows(&z).unwrap();
    let d_z = log_softmax_rows_backward(&ls, &r).unwrap();
    check(Config::default(), &[("z", z)], &[d_z], |t| {
        weighted_sum(&log_softmax_rows(&t[0]).unwrap(), &r)
    })
    .assert_passed();
}

#[test]
fn cross_entropy_from_logits_backward_passes_gradcheck() {
    let mut rng = Rng::new(10);
    let z = rng.normal_matrix::<f64>(5, 4, 2.0);
    let t = [3, 0, 0, 2, 1];
    let d = cross_entropy_from_logits_backward(&z, &t).unwrap();
    // (P − Y)/N, written out.
    let p = softmax_rows_forward(&z).unwrap();
    let y = DMatrix::from_fn(5, 4, |r, c| if t[r] == c { 1.0 } else { 0.0 });
    assert!((&d - (p - y) / 5.0).amax() < 1e-16);
    let (loss, d2) = cross_entropy_from_logits_with_gradient(&z, &t).unwrap();
    assert_eq!(loss, cross_entropy_from_logits(&z, &t).unwrap());
    assert_eq!(d2, d);
    check(Config::default(), &[("logits", z)], &[d], |q| {
        cross_entropy_from_logits(&q[0], &t).unwrap()
    })
    .assert_passed();
}

#[test]
fn cross_entropy_from_logits_equals_cross_entropy_of_the_softmax() {
    let mut rng = Rng::new(14);
    let z = rng.normal_matrix::<f64>(6, 5, 1.0);
    let t = [4, 4, 0, 1, 2, 3];
    let p = softmax_rows_forward(&z).unwrap();
    let mean: f64 = (0..6)
        .map(|r| cross_entropy(&one_hot(5, t[r]).unwrap(), &p.row(r).transpose()).unwrap())
        .sum::<f64>()
        / 6.0;
    assert!((cross_entropy_from_logits(&z, &t).unwrap() - mean).abs() < 1e-14);
}

#[test]
fn regression_backward_passes_gradcheck_for_x_w_and_b() {
    let (x, t) = three_clouds(4, 11);
    let mut rng = Rng::new(13);
    let w = rng.normal_matrix::<f64>(2, 3, 0.8);
    let b = rng.normal_matrix::<f64>(1, 3, 0.5);
    let z = regression_logits(&w, &b, &x).unwrap();
    let d_z = cross_entropy_from_logits_backward(&z, &t).unwrap();
    let (d_x, d_w, d_b) = regression_logits_backward(&w, &x, &d_z).unwrap();
    check(
        Config::default(),
        &[("x", x.clone()), ("w", w.clone()), ("b", b.clone())],
        &[d_x, d_w.clone(), d_b.clone()],
        |p| {
            cross_entropy_from_logits(&regression_logits(&p[1], &p[2], &p[0]).unwrap(), &t).unwrap()
        },
    )
    .assert_passed();
    let (_, d_w2, d_b2) = regression_loss_and_gradient(&w, &b, &x, &t).unwrap();
    assert_eq!((d_w2, d_b2), (d_w, d_b));
}

// ───────────────────────── softmax regression ─────────────────────────

#[test]
fn three_clouds_are_balanced_and_reproducible() {
    let (x, t) = three_clouds(PER_CLASS, DATA_SEED);
    assert_eq!(x.shape(), (3 * PER_CLASS, 2));
    for k in 0..3 {
        assert_eq!(t.iter().filter(|&&c| c == k).count(), PER_CLASS);
    }
    assert_eq!(three_clouds(PER_CLASS, DATA_SEED).0, x);
    assert_ne!(three_clouds(PER_CLASS, DATA_SEED + 1).0, x);
    // Each class's mean sits near its centre on the circle of radius 3.
    for (k, deg) in [90.0_f64, 210.0, 330.0].into_iter().enumerate() {
        let rows: Vec<usize> = (0..x.nrows()).filter(|&r| t[r] == k).collect();
        let mx = rows.iter().map(|&r| x[(r, 0)]).sum::<f64>() / rows.len() as f64;
        let my = rows.iter().map(|&r| x[(r, 1)]).sum::<f64>() / rows.len() as f64;
        let (cx, cy) =
            (CENTRE_RADIUS * deg.to_radians().cos(), CENTRE_RADIUS * deg.to_radians().sin());
        assert!((mx - cx).abs() < 0.35 && (my - cy).abs() < 0.35, "class {k}: mean ({mx}, {my})");
    }
}

#[test]
fn softmax_regression_reaches_95_percent() {
    let (x, t, trained) = chapter_model().unwrap();
    let accuracy = trained.accuracy(&x, &t).unwrap();
    assert!(accuracy >= 0.95, "training accuracy {accuracy}");
    assert_eq!(fixed(accuracy, 2), "0.99");
    // Untrained (all-zero) weights predict class 0 everywhere: a third right, loss ln 3.
    assert!((trained.losses[0] - 3f64.ln()).abs() < 1e-14);
    let untrained = Trained { w: DMatrix::zeros(2, 3), b: DMatrix::zeros(1, 3), losses: vec![] };
    assert!((untrained.accuracy(&x, &t).unwrap() - 1.0 / 3.0).abs() < 1e-12);
}

#[test]
fn learning_rate_respects_the_smoothness_bound_and_the_loss_never_rises() {
    let (x, _, trained) = chapter_model().unwrap();
    let l = smoothness_bound(&x);
    assert!(LEARNING_RATE <= 1.0 / l, "α = {LEARNING_RATE} but 1/L = {}", 1.0 / l);
    assert_eq!(trained.losses.len(), STEPS + 1);
    for (i, w) in trained.losses.windows(2).enumerate() {
        assert!(w[1] <= w[0], "loss rose at step {i}: {} → {}", w[0], w[1]);
    }
    let last = *trained.losses.last().unwrap();
    assert!(last < 0.05, "final loss {last}");
    // The gradient at the end is small: training has nearly converged.
    let (_, t, _) = chapter_model().unwrap();
    let (_, d_w, d_b) = regression_loss_and_gradient(&trained.w, &trained.b, &x, &t).unwrap();
    assert!(d_w.amax() < 0.02 && d_b.amax() < 0.02, "{d_w} {d_b}");
}

// ───────────────────────── bad input ─────────────────────────

#[test]
fn empty_logits_are_refused() {
    assert!(matches!(softmax(&DVector::<f64>::zeros(0)), Err(Error::Empty { .. })));
    assert!(matches!(softmax_rows_forward(&DMatrix::<f64>::zeros(0, 4)), Err(Error::Empty { .. })));
    assert!(matches!(softmax_rows_forward(&DMatrix::<f64>::zeros(3, 0)), Err(Error::Empty { .. })));
    assert!(matches!(log_softmax_rows(&DMatrix::<f64>::zeros(0, 0)), Err(Error::Empty { .. })));
    assert!(matches!(
        cross_entropy_from_logits(&DMatrix::<f64>::zeros(0, 3), &[]),
        Err(Error::Empty { .. })
    ));
    assert!(matches!(
        cross_entropy(&DVector::<f64>::zeros(0), &DVector::zeros(0)),
        Err(Error::Empty { .. })
    ));
    assert!(matches!(one_hot::<f64>(0, 0), Err(Error::Empty { .. })));
    let e = softmax_rows_forward(&DMatrix::<f32>::zeros(0, 4)).unwrap_err();
    assert!(e.to_string().contains("z is empty"), "{e}");
}

#[test]
fn nan_and_plus_infinity_logits_are_refused() {
    let mut z = DMatrix::from_element(2, 3, 0.5);
    z[(1, 2)] = f64::NAN;
    for e in [
        softmax_rows_forward(&z).unwrap_err(),
        log_softmax_rows(&z).unwrap_err(),
        log_sum_exp_rows(&z).unwrap_err(),
        softmax_rows_with_temperature(&z, 2.0).unwrap_err(),
        cross_entropy_from_logits(&z, &[0, 0]).unwrap_err(),
        cross_entropy_from_logits_backward(&z, &[0, 0]).unwrap_err(),
    ] {
        assert!(matches!(e, Error::NonFinite { .. }), "{e}");
        assert!(e.to_string().contains("row 1, column 2"), "{e}");
    }
    z[(1, 2)] = f64::INFINITY;
    assert!(matches!(softmax_rows_forward(&z), Err(Error::NonFinite { .. })));
    assert!(matches!(softmax(&v(&[1.0, f64::NAN])), Err(Error::NonFinite { .. })));
    // Backward passes refuse NaN gradients and mismatched shapes.
    let y = softmax_rows_forward(&DMatrix::from_element(2, 3, 0.5)).unwrap();
    let mut d = DMatrix::from_element(2, 3, 1.0);
    d[(0, 0)] = f64::NAN;
    assert!(matches!(softmax_rows_backward(&y, &d), Err(Error::NonFinite { .. })));
    assert!(matches!(log_softmax_rows_backward(&y, &d), Err(Error::NonFinite { .. })));
    let e = softmax_rows_backward(&y, &DMatrix::zeros(3, 2)).unwrap_err();
    assert!(
        matches!(e, Error::Shape { .. })
            && e.to_string().contains("2×3")
            && e.to_string().contains("3×2"),
        "{e}"
    );
}

#[test]
fn a_fully_masked_row_is_refused() {
    let z = DMatrix::from_row_slice(2, 3, &[0.0, 1.0, NEG_INF, NEG_INF, NEG_INF, NEG_INF]);
    let e = softmax_rows_forward(&z).unwrap_err();
    assert!(matches!(e, Error::InvalidValue { .. }) && e.to_string().contains("row 1"), "{e}");
    assert!(log_softmax_rows(&z).is_err() && cross_entropy_from_logits(&z, &[0, 0]).is_err());
    assert!(softmax(&v(&[NEG_INF, NEG_INF])).is_err());
    // A target whose own logit is masked has infinite loss: refused, not returned as ∞.
    let z = DMatrix::from_row_slice(1, 3, &[0.0, 1.0, NEG_INF]);
    let e = cross_entropy_from_logits(&z, &[2]).unwrap_err();
    assert!(e.to_string().contains("masked"), "{e}");
}

#[test]
fn a_label_out_of_range_is_refused() {
    let z = DMatrix::from_element(2, 4, 0.0);
    let e = cross_entropy_from_logits(&z, &[1, 7]).unwrap_err();
    assert!(matches!(e, Error::InvalidValue { .. }), "{e}");
    assert!(e.to_string().contains("targets[1] = 7") && e.to_string().contains("4 classes"), "{e}");
    assert!(cross_entropy_from_logits_backward(&z, &[4, 0]).is_err());
    let e = cross_entropy_from_logits(&z, &[1]).unwrap_err();
    assert!(
        matches!(e, Error::Shape { .. }) && e.to_string().contains("1 targets for 2 rows"),
        "{e}"
    );
    assert!(cross_entropy_from_logit_vector(&v(&[1.0, 2.0]), 2).is_err());
    assert!(logit_step(&v(&[1.0, 2.0]), 5, 0.1).is_err());
    assert!(matches!(one_hot::<f64>(3, 3), Err(Error::InvalidValue { .. })));
    let (x, _) = three_clouds(2, 1);
    let (w, b) = (DMatrix::zeros(2, 3), DMatrix::zeros(1, 3));
    assert!(regression_loss_and_gradient(&w, &b, &x, &[0, 1, 2, 0, 1, 3]).is_err());
    let trained = Trained { w, b, losses: vec![] };
    assert!(trained.accuracy(&x, &[0, 1, 2, 0, 1, 3]).is_err());
}

#[test]
fn temperature_must_be_positive_and_finite() {
    let z = v(&[2.0, 1.0, 0.2]);
    for t in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = softmax_with_temperature(&z, t).unwrap_err();
        assert!(
            matches!(e, Error::InvalidValue { .. }) && e.to_string().contains("temperature"),
            "T = {t}: {e}"
        );
    }
    for b in [0.0, -2.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(softmax_with_base(&z, b), Err(Error::InvalidValue { .. })), "b = {b}");
    }
    // 1^{−∞} has no value: base 1 with a masked logit is refused rather than turned into NaN.
    assert!(softmax_with_base(&v(&[NEG_INF, 1.0]), 1.0).is_err());
    assert!(logit_step(&z, 0, 0.0).is_err() && logit_step(&z, 0, f64::NAN).is_err());
    assert!(replay_script(&[0.0, 0.0], 0, 0.1, 10, 0).is_err());
}

#[test]
fn probabilities_that_are_not_a_distribution_are_refused() {
    let y = one_hot(3, 0).unwrap();
    let e = cross_entropy(&y, &v(&[0.5, 0.5, 0.3])).unwrap_err();
    assert!(matches!(e, Error::InvalidValue { .. }) && e.to_string().contains("sum to 1"), "{e}");
    assert!(cross_entropy(&y, &v(&[1.2, -0.1, -0.1])).unwrap_err().to_string().contains("[0, 1]"));
    assert!(matches!(cross_entropy(&y, &v(&[f64::NAN, 0.5, 0.5])), Err(Error::NonFinite { .. })));
    assert!(
        cross_entropy(&v(&[0.5, 0.6, 0.0]), &v(&[0.2, 0.3, 0.5])).is_err(),
        "y must be a distribution too"
    );
    let e = cross_entropy(&y, &v(&[0.5, 0.5])).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    assert!(softmax_jacobian(&v(&[0.2, 0.2])).is_err());
    assert!(entropy(&v(&[0.2, 0.2])).is_err());
    assert!(d_cross_entropy_d_logits(&y, &v(&[0.2, 0.2, 0.2])).is_err());
    assert!(mix_towards_target(&v(&[0.2, 0.8, 0.0]), &y, 1.5).is_err());
    assert!(logits_of(&v(&[0.0, 1.0])).is_err());
    // ŷ = 0 on the true class: the loss is +∞ (said plainly), its slope is refused.
    assert_eq!(cross_entropy(&y, &v(&[0.0, 0.5, 0.5])).unwrap(), f64::INFINITY);
    assert!(d_cross_entropy_d_probabilities(&y, &v(&[0.0, 0.5, 0.5])).is_err());
    // Within rounding of 1 is accepted: a softmax output always is.
    let p = softmax(&v(&[0.3, -1.7, 2.9])).unwrap();
    assert!(cross_entropy(&y, &p).is_ok());
}

#[test]
fn regression_shapes_are_checked() {
    let x = DMatrix::from_element(4, 2, 1.0);
    let e = regression_logits(&DMatrix::zeros(3, 3), &DMatrix::zeros(1, 3), &x).unwrap_err();
    assert!(
        matches!(e, Error::Shape { .. })
            && e.to_string().contains("3×3")
            && e.to_string().contains("4×2"),
        "{e}"
    );
    let e = regression_logits(&DMatrix::zeros(2, 3), &DMatrix::zeros(1, 2), &x).unwrap_err();
    assert!(e.to_string().contains("1×3"), "{e}");
    assert!(matches!(
        regression_logits::<f64>(
            &DMatrix::zeros(2, 3),
            &DMatrix::zeros(1, 3),
            &DMatrix::zeros(0, 2)
        ),
        Err(Error::Empty { .. })
    ));
    let mut bad = x.clone();
    bad[(2, 1)] = f64::NAN;
    assert!(matches!(
        regression_logits(&DMatrix::zeros(2, 3), &DMatrix::zeros(1, 3), &bad),
        Err(Error::NonFinite { .. })
    ));
    assert!(regression_logits_backward(&DMatrix::zeros(2, 3), &x, &DMatrix::zeros(4, 2)).is_err());
    assert!(train(&x, &[0, 1, 2, 0], 3, TrainConfig { learning_rate: -0.1, steps: 1 }).is_err());
    assert!(train(&x, &[0, 1, 2, 0], 0, TrainConfig { learning_rate: 0.1, steps: 1 }).is_err());
}

// ───────────────────────── the chapter as a whole ─────────────────────────

#[test]
fn chapter_prose_carries_the_errata_and_worked_tables() {
    common::check_chapter_prose(&CHAPTER);
}

#[test]
fn every_worked_row_and_erratum_names_a_test_in_this_file() {
    let source = include_str!("ch02_softmax.rs");
    let rows = worked().unwrap();
    assert!(rows.iter().all(|r| r.status != Status::Mismatch));
    for name in rows.iter().map(|r| r.test).filter(|t| !t.is_empty()) {
        assert!(source.contains(&format!("fn {name}()")), "worked row names a missing test {name}");
    }
    for test in ERRATA.iter().flat_map(|e| e.tests) {
        let name = test.rsplit("::").next().unwrap();
        assert!(test.starts_with("tests/ch02_softmax.rs::"));
        assert!(source.contains(&format!("fn {name}()")), "erratum names a missing test {name}");
    }
    for e in ERRATA.iter().filter(|e| e.kind == llm_workbook::errata::Kind::Erratum) {
        let name = e.tests[0].rsplit("::").next().unwrap();
        assert!(rows.iter().any(|r| r.test == name), "erratum {name} has no worked row");
    }
    let errata_rows = rows.iter().filter(|r| r.status == Status::Erratum).count();
    assert!(errata_rows >= llm_workbook::errata::error_count(ERRATA));
    assert!(llm_workbook::book::chapter(2).is_some_and(|c| c.stem == "ch02_softmax"));
}

#[test]
fn walk_prints_every_step() {
    let text = common::walk_text(&CHAPTER);
    for needle in [
        "1. Softmax of (1, 2, 8)",
        "0.9966",
        "0.10792622",
        "0.95765298",
        "[-0.9000,  0.1000,  0.1000,  0.7000]",
        "training accuracy",
    ] {
        assert!(text.contains(needle), "walk lacks {needle:?}:\n{text}");
    }
}

#[test]
fn figures_show_what_the_chapter_computes() {
    use llm_workbook::plot::Figure;
    let figs = figures().unwrap();
    let stems: Vec<&str> = figs.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(stems, ["ch02_temperature", "ch02_replay", "ch02_regions", "ch02_loss"]);
    let Figure::Bars(temp) = &figs[0].1 else { panic!("temperature figure is a bar chart") };
    assert_eq!(temp.series.len(), FIGURE_TEMPERATURES.len());
    assert_eq!(temp.categories, ["1 (z = 2.0)", "2 (z = 1.0)", "3 (z = 0.2)"]);
    for (_, p) in &temp.series {
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }
    // Colder temperatures put more on class 1.
    assert!(temp.series.windows(2).all(|w| w[0].1[0] > w[1].1[0]));
    let Figure::Line(rep) = &figs[1].1 else { panic!("replay figure is a line chart") };
    assert_eq!(rep.series.len(), 4);
    assert_eq!(rep.series[0].points.len(), SCRIPT_ITERATIONS + 1);
    assert_eq!(fixed(rep.series[0].points[0].1, 8), "0.20737772");
    assert_eq!(fixed(rep.series[0].points[SCRIPT_ITERATIONS].1, 8), "0.95765298");
    let Figure::Scatter(reg) = &figs[2].1 else { panic!("regions figure is a scatter chart") };
    assert_eq!(reg.classes.iter().map(|c| c.points.len()).collect::<Vec<_>>(), vec![PER_CLASS; 3]);
    let regions = reg.regions.as_ref().unwrap();
    for k in 0..3 {
        assert!(
            regions.class.iter().filter(|&&c| c == k).count() > regions.class.len() / 6,
            "class {k} owns a good share of the plane"
        );
    }
    let Figure::Line(loss) = &figs[3].1 else { panic!("loss figure is a line chart") };
    assert_eq!(loss.series[0].points.len(), STEPS + 1);
    // Drawing them works and writes both formats.
    common::render_plots(&CHAPTER, 8);
}

// ───────────── properties (proptest) ─────────────

mod properties {
    use llm_workbook::ch02_softmax::{entropy, softmax, softmax_with_temperature};
    use nalgebra::DVector;
    use proptest::prelude::*;

    fn logits() -> impl Strategy<Value = Vec<f64>> {
        prop::collection::vec(-50.0..50.0f64, 1..12)
    }

    proptest! {
        #[test]
        fn softmax_is_a_distribution(z in logits()) {
            let p = softmax(&DVector::from_vec(z)).unwrap();
            prop_assert!(p.iter().all(|&x| (0.0..=1.0).contains(&x)));
            prop_assert!((p.sum() - 1.0).abs() < 1e-12);
        }

        #[test]
        fn softmax_ignores_a_common_shift(z in logits(), c in -1000.0..1000.0f64) {
            let p = softmax(&DVector::from_vec(z.clone())).unwrap();
            let q = softmax(&DVector::from_vec(z.iter().map(|x| x + c).collect())).unwrap();
            for (a, b) in p.iter().zip(q.iter()) {
                prop_assert!((a - b).abs() < 1e-12, "{a} vs {b}");
            }
        }

        #[test]
        fn a_higher_temperature_never_sharpens(
            z in logits(),
            t in 0.05..20.0f64,
            factor in 1.01..10.0f64,
        ) {
            let z = DVector::from_vec(z);
            let cold = softmax_with_temperature(&z, t).unwrap();
            let hot = softmax_with_temperature(&z, t * factor).unwrap();
            // The largest probability falls (or stays) and the entropy rises (or stays).
            prop_assert!(hot.max() <= cold.max() + 1e-12);
            prop_assert!(entropy(&hot).unwrap() >= entropy(&cold).unwrap() - 1e-12);
        }
    }
}

// ───────────── hardening: NaN in argmax, regression inputs, determinism ─────────────

mod hardening {
    use super::*;

    #[test]
    fn argmax_rows_never_picks_nan_and_keeps_the_first_of_ties() {
        let nan = f64::NAN;
        let z = DMatrix::from_row_slice(
            4,
            3,
            &[nan, 1.0, 2.0, 3.0, nan, 1.0, 1.0, 1.0, nan, nan, nan, nan],
        );
        // A NaN entry loses to any number wherever it stands; an all-NaN row gives 0.
        assert_eq!(argmax_rows(&z), [2, 0, 0, 0]);
        assert_eq!(argmax_rows(&DMatrix::from_row_slice(1, 3, &[NEG_INF, nan, NEG_INF])), [0]);
        assert!(argmax_rows(&DMatrix::<f64>::zeros(0, 3)).is_empty());
        assert_eq!(
            argmax_rows(&DMatrix::<f64>::zeros(2, 0)),
            [0, 0],
            "no columns: the documented 0"
        );
    }

    #[test]
    fn regression_refuses_non_finite_weights_and_empty_training_data() {
        let x = DMatrix::from_element(4, 2, 1.0);
        let mut w = DMatrix::zeros(2, 3);
        w[(1, 2)] = f64::INFINITY;
        let e = regression_logits(&w, &DMatrix::zeros(1, 3), &x).unwrap_err();
        assert!(matches!(e, Error::NonFinite { .. }), "{e}");
        let mut b = DMatrix::zeros(1, 3);
        b[(0, 0)] = f64::NAN;
        assert!(matches!(
            regression_logits(&DMatrix::zeros(2, 3), &b, &x),
            Err(Error::NonFinite { .. })
        ));
        let e = train(&DMatrix::zeros(0, 2), &[], 3, TrainConfig { learning_rate: 0.1, steps: 1 })
            .unwrap_err();
        assert!(
            matches!(e, Error::Empty { .. } | Error::Shape { .. } | Error::InvalidValue { .. }),
            "{e}"
        );
        assert!(
            train(&x, &[0, 1, 2, 0], 3, TrainConfig { learning_rate: f64::INFINITY, steps: 1 })
                .is_err()
        );
    }

    #[test]
    fn training_is_deterministic_to_the_bit() {
        let run = |seed| {
            let (x, t) = three_clouds(30, seed);
            train(&x, &t, 3, TrainConfig { learning_rate: 0.2, steps: 50 }).unwrap()
        };
        let bits = |t: &Trained| {
            let mut v: Vec<u64> = t.w.iter().chain(t.b.iter()).map(|x| x.to_bits()).collect();
            v.extend(t.losses.iter().map(|l| l.to_bits()));
            v
        };
        assert_eq!(bits(&run(5)), bits(&run(5)));
        assert_ne!(bits(&run(5)), bits(&run(6)), "another data seed gives other numbers");
    }
}
