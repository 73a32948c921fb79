//! What the book shows of chapter 2: the errata, the worked numbers, the walk-through and the
//! figures, and the chapter's entry in the book.

use super::loss::check_same_length;
use super::probabilities::row_of;
use super::{
    CLASSES, LEARNING_RATE, SCRIPT_LEARNING_RATE, STEPS, WORDS, argmax_rows, chapter_model,
    cross_entropy, cross_entropy_from_logit_vector, d_cross_entropy_d_logits,
    d_cross_entropy_d_probabilities, d_logits_by_chain_rule, document_replay, entropy, log_softmax,
    log_sum_exp, logit_step, logits_of, mix_towards_target, one_hot, regression_loss_and_gradient,
    smoothness_bound, softmax, softmax_jacobian, softmax_with_base, softmax_with_temperature,
    summed_weight_gradient,
};
use crate::errata::{Erratum, Kind};
use crate::error::{Result, invalid};
use crate::plot::{BarChart, Figure, LineChart, Regions, ScatterChart, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::snapshot::fixed;
use crate::sources::{D0, D1, D2, D3, THIS_CRATE};
use nalgebra::{DMatrix, DVector};
use std::path::{Path, PathBuf};

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D0,
        section: "Deriving ∇ for multiclass classification, 2. Computing the gradient",
        printed: "∂ℒ/∂ŷ_ik = y_ik − ŷ_ik",
        correct: "∂L/∂ŷ_ik = −y_ik/ŷ_ik for L = −Σᵢ Σₖ y_ik ln ŷ_ik",
        why: "The slope of −y ln ŷ in ŷ is −y/ŷ. The printed y − ŷ is (minus) the slope with \
            respect to the logit z, which already contains the softmax Jacobian. \
            At y = (1, 0, 0, 0), ŷ = (0.7, 0.1, 0.1, 0.1) the printed form gives 0.3 for mat; \
            the slope is −1/0.7 = −1.4286 (a finite difference agrees). The next line carries the \
            same slip into the chain rule, ∂ℒ/∂w = Σᵢ Σₖ (ŷ_ik − y_ik) ∂ŷ_ik/∂w: through the \
            Jacobian ∂ŷ_ik/∂z_ij = ŷ_ik(δ_jk − ŷ_ij) it gives −0.084 for the mat logit where the \
            correct factor −y_ik/ŷ_ik gives ŷ − y = −0.3; the final line Σ(ŷᵢ − yᵢ)xᵢ is right.",
        kind: Kind::Erratum,
        tests: &[
            "tests/ch02_softmax.rs::d_loss_d_probabilities_is_minus_y_over_y_hat",
            "tests/ch02_softmax.rs::jacobian_chain_gives_y_hat_minus_y",
        ],
    },
    Erratum {
        document: D0,
        section: "Deriving ∇ for multiclass classification, 1. Negative log-likelihood ③",
        printed: "−ℒ(w̄) = −Σᵢ Σₖ y_ik log(ŷ_ik)",
        correct: "−log ℒ(w̄) = −Σᵢ Σₖ y_ik log(ŷ_ik)",
        why: "ℒ is the likelihood Πᵢ ŷ_{i,kᵢ} of step ①, a number in (0, 1]; the double sum of \
            step ② is its logarithm, so negating it gives −log ℒ, the summed cross-entropy in \
            [0, ∞). The document uses ℒ for the log-likelihood from step ② on (its gradient \
            ∇ℒ is the loss's), so −ℒ is shorthand for −log ℒ, not a wrong value.",
        kind: Kind::Notation,
        tests: &["tests/ch02_softmax.rs::negative_log_likelihood_is_the_summed_cross_entropy"],
    },
    Erratum {
        document: D3,
        section: "Loss Function and Back-Propagation, the update with α = 0.1",
        printed: "P_mat = 0.1 + 0.1 × 0.9 = 0.19, P_hat = P_bat = 0.09, P_rat = 0.63",
        correct: "a step on the logits, z ← z − 0.1(ŷ − y), then softmax: P = \
            (0.1140, 0.1031, 0.1031, 0.6798)",
        why: "The update rule Wᵢ ← Wᵢ − α ∂L/∂Zᵢ moves logits, but the text subtracts α(ŷ − y) \
            from the probabilities. From logits ln(0.1, 0.1, 0.1, 0.7) \
            (any common shift gives the same answer) the true step multiplies each ŷᵢ by \
            e^{−α(ŷᵢ − yᵢ)} and renormalises.",
        kind: Kind::Erratum,
        tests: &["tests/ch02_softmax.rs::one_logit_step_from_p_gives_0_114_0_103_0_103_0_680"],
    },
    Erratum {
        document: D3,
        section: "Loss Function and Back-Propagation, after the first update",
        printed: "re-normalize: they won't sum up to 1 after the update",
        correct: "0.19 + 0.09 + 0.09 + 0.63 = 1: the probability step stays normalised",
        why: "Σᵢ(ŷᵢ − yᵢ) = 1 − 1 = 0, so ŷ − α(ŷ − y) = (1 − α)ŷ + αy sums to 1 for every α. \
            A softmax is needed after a step on the logits, which is the step gradient descent \
            actually takes.",
        kind: Kind::Erratum,
        tests: &["tests/ch02_softmax.rs::probability_step_keeps_the_sum_at_one"],
    },
    Erratum {
        document: D3,
        section: "Loss Function and Back-Propagation, the Python script",
        printed: "the script performs the work just described (P = (0.1, 0.1, 0.1, 0.7), α = 0.1)",
        correct: "it starts from logits (0.1, 0.1, 0.1, 0.7), i.e. P = \
            (0.2074, 0.2074, 0.2074, 0.3779), with α = 0.01",
        why: "The script's array of weights holds logits and goes through a softmax, \
            so the text's probabilities became its logits, and its learning rate is 0.01. \
            Its printed output is right for what it computes (replayed to 8 decimals).",
        kind: Kind::Erratum,
        tests: &[
            "tests/ch02_softmax.rs::script_starts_from_logits_not_from_the_texts_probabilities",
        ],
    },
];

fn vec_of(xs: &[f64]) -> DVector<f64> {
    DVector::from_column_slice(xs)
}

/// The example of D3: y = mat, the good and the bad prediction.
fn mat_example() -> Result<(DVector<f64>, DVector<f64>, DVector<f64>)> {
    Ok((one_hot(4, 0)?, vec_of(&[0.7, 0.1, 0.1, 0.1]), vec_of(&[0.1, 0.1, 0.1, 0.7])))
}

/// The text's chain Σₖ(ŷₖ − yₖ)·∂ŷₖ/∂zⱼ, as D0 prints it, for the erratum row.
pub fn printed_chain(y: &DVector<f64>, y_hat: &DVector<f64>) -> Result<DVector<f64>> {
    let jacobian = softmax_jacobian(y_hat)?;
    check_same_length("printed_chain", "y and y_hat", y, y_hat)?;
    Ok(jacobian.transpose() * (y_hat - y))
}

fn tuple_text(v: &DVector<f64>, decimals: usize) -> String {
    format!("({})", v.iter().map(|&x| fixed(x, decimals)).collect::<Vec<_>>().join(", "))
}

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let mut rows = Vec::new();

    // D0: softmax((1, 2, 8)), the base remark, temperature.
    let p = softmax(&vec_of(&[1.0, 2.0, 8.0]))?;
    for (i, printed) in ["0.001", "0.002", "0.997"].into_iter().enumerate() {
        rows.push(Worked::number(
            "softmax_of_1_2_8_is_0_001_0_002_0_997",
            D0,
            format!("softmax((1, 2, 8)), entry {}", i + 1),
            printed,
            p[i],
        ));
    }
    rows.push(Worked::illustrative(
        D0,
        "probabilities after the softmax in the next-token figure (logits not given)",
        "0.1, 0.2, 0.7",
    ));
    let z = vec_of(&[2.0, 1.0, 0.2]);
    let base_ok = [2.0, 10.0, 0.5].iter().try_fold(true, |ok, &b: &f64| -> Result<bool> {
        let direct = DVector::from_iterator(3, z.iter().map(|&v| b.powf(v)));
        let direct = &direct / direct.sum();
        let by_base = softmax_with_base(&z, b)?;
        let by_b = softmax(&z.map(|v| v * b.ln()))?;
        Ok(ok && (by_base - &direct).amax() < 1e-15 && (by_b - direct).amax() < 1e-15)
    })?;
    rows.push(Worked::text(
        "softmax_with_base_b_is_softmax_of_ln_b_times_z",
        D0,
        "b^{zᵢ}/Σ b^{zⱼ} against softmax(B·z), B = ln b, for b = 2, 10, 0.5",
        "any b > 0, written b = e^B",
        if base_ok { "any b > 0, written b = e^B" } else { "differs" },
    ));
    let temps = [0.1, 0.5, 1.0, 2.0, 10.0, 100.0];
    let entropies: Vec<f64> = temps
        .iter()
        .map(|&t| softmax_with_temperature(&z, t).and_then(|p| entropy(&p)))
        .collect::<Result<_>>()?;
    let softer = entropies.windows(2).all(|w| w[1] > w[0]);
    let softer_text = if softer { "softer" } else { "not softer" };
    rows.push(Worked::text(
        "higher_temperature_flattens_the_distribution",
        D0,
        "entropy of softmax((2.0, 1.0, 0.2)/T) rises with T = 0.1 … 100",
        "softer",
        softer_text,
    ));

    // D1: the temperature limits.
    let cold = softmax_with_temperature(&z, 1e-3)?;
    rows.push(Worked::text(
        "temperature_to_zero_tends_to_argmax",
        D1,
        "softmax((2.0, 1.0, 0.2)/T) at T = 0.001 (T = 0 itself divides by zero and is refused)",
        "(1, 0, 0)",
        format!("({})", cold.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")),
    ));
    let hot = softmax_with_temperature(&z, 1e4)?;
    let near_uniform = hot.iter().all(|&v| (v - 1.0 / 3.0).abs() < 1e-4);
    rows.push(Worked::text(
        "temperature_to_infinity_tends_to_uniform",
        D1,
        "softmax((2.0, 1.0, 0.2)/T) at T = 10⁴, each entry within 10⁻⁴ of 1/3",
        "more uniform",
        if near_uniform { "more uniform" } else { "not uniform" },
    ));
    rows.push(Worked::text(
        "higher_temperature_flattens_the_distribution",
        D1,
        "larger T gives more weight to the lower logits (entropy rises with T)",
        "softer",
        softer_text,
    ));
    rows.push(Worked::illustrative(
        D1,
        "largest temperature a text-generation tool allows \
            (a product limit, not a property of softmax)",
        "2",
    ));

    // D2: stability and the log-loss.
    let big = softmax(&vec_of(&[1000.0, 1001.0, 1002.0]))?;
    let small = softmax(&vec_of(&[0.0, 1.0, 2.0]))?;
    rows.push(Worked::text(
        "softmax_of_1000_1001_1002_equals_softmax_of_0_1_2",
        D2,
        "softmax((1000, 1001, 1002)) with the max subtracted, against softmax((0, 1, 2))",
        "subtracting the max keeps it finite",
        if big == small && big.iter().all(|v| v.is_finite()) {
            "subtracting the max keeps it finite"
        } else {
            "overflow"
        },
    ));
    let (y, good, bad) = mat_example()?;
    let batch: DMatrix<f64> =
        DMatrix::from_row_slice(2, 4, &[0.7, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.7]);
    let summed: f64 = cross_entropy(&y, &good)? + cross_entropy(&y, &bad)?;
    let neg_log_joint = -(batch[(0, 0)] * batch[(1, 0)]).ln();
    rows.push(Worked::text(
        "negative_log_likelihood_is_the_summed_cross_entropy",
        D2,
        "Σ −log P_v over two predictions of mat against −log of their joint probability",
        "log-loss = −log P(x)",
        if (summed - neg_log_joint).abs() < 1e-12 { "log-loss = −log P(x)" } else { "differs" },
    ));

    // D3: the supplemental softmax example.
    let p = softmax(&z)?;
    for (i, (name, printed)) in
        [("A", "0.65"), ("B", "0.24"), ("C", "0.11")].into_iter().enumerate()
    {
        rows.push(Worked::number(
            "softmax_of_2_1_0_2_is_0_65_0_24_0_11",
            D3,
            format!("softmax((2.0, 1.0, 0.2)), category {name}"),
            printed,
            p[i],
        ));
    }

    // D3: the cross-entropy example and its gradient.
    rows.push(Worked::number(
        "cross_entropy_of_mat_at_0_7_is_0_357",
        D3,
        "L = −ln 0.7, P = (0.7, 0.1, 0.1, 0.1), y = mat (text and script)",
        "0.357",
        cross_entropy(&y, &good)?,
    ));
    rows.push(Worked::number(
        "cross_entropy_of_mat_at_0_1_is_2_303",
        D3,
        "L = −ln 0.1, P = (0.1, 0.1, 0.1, 0.7), y = mat (text and script)",
        "2.303",
        cross_entropy(&y, &bad)?,
    ));
    let g = d_cross_entropy_d_logits(&y, &bad)?;
    for (i, printed) in ["-0.9", "0.1", "0.1", "0.7"].into_iter().enumerate() {
        rows.push(Worked::number(
            "gradient_at_0_1_0_1_0_1_0_7_is_minus_0_9_0_1_0_1_0_7",
            D3,
            format!("∂L/∂Z_{} = P − y", WORDS[i]),
            printed,
            g[i],
        ));
    }
    let z = logits_of(&bad)?;
    let change = logit_step(&z, 0, 0.1)? - &z;
    for (i, printed) in ["0.09", "-0.01", "-0.01", "-0.07"].into_iter().enumerate() {
        rows.push(Worked::number(
            "one_step_changes_the_logits_by_0_09_minus_0_01_minus_0_01_minus_0_07",
            D3,
            format!("change of Z_{} in one step, −0.1·∂L/∂Z = −0.1·(P − y)", WORDS[i]),
            printed,
            change[i],
        ));
    }
    let mixed = mix_towards_target(&bad, &y, 0.1)?;
    let stepped = softmax(&logit_step(&logits_of(&bad)?, 0, 0.1)?)?;
    for (i, printed) in ["0.19", "0.09", "0.09", "0.63"].into_iter().enumerate() {
        rows.push(Worked::number(
            "text_probability_step_gives_0_19_0_09_0_09_0_63",
            D3,
            format!("the text's arithmetic P − 0.1·(P − y), {}", WORDS[i]),
            printed,
            mixed[i],
        ));
    }
    for (i, printed) in ["0.19", "0.09", "0.09", "0.63"].into_iter().enumerate() {
        rows.push(Worked::erratum(
            "one_logit_step_from_p_gives_0_114_0_103_0_103_0_680",
            D3,
            format!("P_{} after one gradient step on the logits, α = 0.1", WORDS[i]),
            printed,
            fixed(stepped[i], 2),
        ));
    }
    rows.push(Worked::erratum(
        "probability_step_keeps_the_sum_at_one",
        D3,
        "Σ of the text's updated probabilities",
        "≠ 1, needs re-normalising",
        fixed(mixed.sum(), 2),
    ));

    // D3: the 2000-iteration script, replayed.
    let replay = document_replay()?;
    rows.push(Worked::erratum(
        "script_starts_from_logits_not_from_the_texts_probabilities",
        D3,
        "P_mat where the script starts (the text's P_mat is 0.1)",
        "0.1",
        fixed(replay.probabilities[0][0], 4),
    ));
    let first =
        replay.line(0).ok_or_else(|| invalid("worked", "replay", "no line for iteration 0"))?;
    let late = replay
        .line(1990)
        .ok_or_else(|| invalid("worked", "replay", "no line for iteration 1990"))?;
    let printed_lines: [(&'static str, &str, [&str; 4], &DVector<f64>); 5] = [
        (
            "replay_iteration_0_weights_are_after_the_first_update",
            "iteration 0 weights (after update 1)",
            ["0.10792622", "0.09792622", "0.09792622", "0.69622133"],
            &first.weights_after_update,
        ),
        (
            "replay_iteration_0_probabilities_are_before_the_first_update",
            "iteration 0 probabilities (before update 1)",
            ["0.20737772", "0.20737772", "0.20737772", "0.37786684"],
            &first.probabilities_before_update,
        ),
        (
            "replay_iteration_1990_weights_match_to_8_decimals",
            "iteration 1990 weights (after update 1991)",
            ["3.41207767", "-0.86673008", "-0.86673008", "-0.67861750"],
            &late.weights_after_update,
        ),
        (
            "replay_iteration_1990_probabilities_match_to_8_decimals",
            "iteration 1990 probabilities (before update 1991)",
            ["0.95742224", "0.01327650", "0.01327650", "0.01602477"],
            &late.probabilities_before_update,
        ),
        (
            "replay_final_probabilities_match_to_8_decimals",
            "final probabilities (after 2000 updates)",
            ["0.95765298", "0.01320591", "0.01320591", "0.01593520"],
            &replay.final_probabilities,
        ),
    ];
    for (test, what, printed, ours) in printed_lines {
        for (i, p) in printed.into_iter().enumerate() {
            rows.push(Worked::number(
                test,
                D3,
                format!("script, {what}, {}", WORDS[i]),
                p,
                ours[i],
            ));
        }
    }

    // D0: the multiclass gradient.
    let y_hat = &good;
    rows.push(Worked::erratum(
        "d_loss_d_probabilities_is_minus_y_over_y_hat",
        D0,
        "∂L/∂ŷ_mat at ŷ = (0.7, 0.1, 0.1, 0.1), y = mat: y − ŷ as printed vs −y/ŷ",
        "0.3",
        fixed(d_cross_entropy_d_probabilities(&y, y_hat)?[0], 4),
    ));
    rows.push(Worked::erratum(
        "jacobian_chain_gives_y_hat_minus_y",
        D0,
        "∂L/∂z_mat at the same point: Σₖ(ŷₖ − yₖ)∂ŷₖ/∂z as printed vs Jᵀ(−y/ŷ)",
        &fixed(printed_chain(&y, y_hat)?[0], 3),
        fixed(d_logits_by_chain_rule(&y, y_hat)?[0], 3),
    ));
    let (x, t, trained) = chapter_model()?;
    let n = x.nrows() as f64;
    let (_, d_w, _) = regression_loss_and_gradient(&trained.w, &trained.b, &x, &t)?;
    let summed_gradient = summed_weight_gradient(&trained.w, &trained.b, &x, &t)?;
    let same = (summed_gradient - d_w.transpose() * n).amax() < 1e-9;
    rows.push(Worked::text(
        "summed_weight_gradient_is_n_times_the_mean_gradient",
        D0,
        "Σᵢ(ŷᵢ − yᵢ)xᵢᵀ summed sample by sample against N·(∂L/∂W)ᵀ = N·(Xᵀ(P − Y)/N)ᵀ",
        "Σᵢ (ŷᵢ − yᵢ)xᵢ",
        if same { "Σᵢ (ŷᵢ − yᵢ)xᵢ" } else { "differs" },
    ));
    rows.push(Worked::number(
        "softmax_regression_reaches_95_percent",
        THIS_CRATE,
        format!(
            "training accuracy on three clouds after {STEPS} steps, α = {LEARNING_RATE} \
            (test: ≥ 0.95)"
        ),
        "0.99",
        trained.accuracy(&x, &t)?,
    ));
    Ok(rows)
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The chapter in the order the documents derive it.
pub fn walk(out: &mut Walk) -> Result<()> {
    out.step("1. Softmax of (1, 2, 8): exponentiate, then divide by the sum")?;
    let z = vec_of(&[1.0, 2.0, 8.0]);
    out.matrix("e^z", &row_of(&z.map(f64::exp)))?;
    out.scalar("Σ e^z", z.map(f64::exp).sum())?;
    out.matrix("softmax(z)", &row_of(&softmax(&z)?))?;

    out.step("2. Softmax of (2.0, 1.0, 0.2)")?;
    let z = vec_of(&[2.0, 1.0, 0.2]);
    out.matrix("softmax(z)", &row_of(&softmax(&z)?))?;
    out.matrix("log-softmax(z) = z − log-sum-exp(z)", &row_of(&log_softmax(&z)?))?;
    out.scalar("log-sum-exp(z)", log_sum_exp(&z)?)?;

    out.step("3. Stability: subtract the maximum before exponentiating")?;
    let huge = vec_of(&[1000.0, 1001.0, 1002.0]);
    out.say(&format!(
        "unshifted e^1000 in f64 = {} (overflow), so e^z/Σe^z would be ∞/∞",
        1000.0_f64.exp()
    ))?;
    out.matrix("softmax((1000, 1001, 1002)) via e^{z − 1002}", &row_of(&softmax(&huge)?))?;
    out.matrix(
        "log-softmax((−1000, 0, 1000))",
        &row_of(&log_softmax(&vec_of(&[-1000.0, 0.0, 1000.0]))?),
    )?;

    out.step("4. Temperature: softmax(z/T) for z = (2.0, 1.0, 0.2)")?;
    for t in [0.1, 0.5, 1.0, 2.0, 10.0] {
        let p = softmax_with_temperature(&z, t)?;
        out.say(&format!(
            "T = {t:>4}: p = {}, entropy = {} nats",
            tuple_text(&p, 4),
            fixed(entropy(&p)?, 4)
        ))?;
    }
    out.say(&format!("uniform limit: entropy ln 3 = {}", fixed(3f64.ln(), 4)))?;

    out.step("5. Any base b = e^B: b^z/Σb^z = softmax(B·z)")?;
    for b in [2.0, std::f64::consts::E, 10.0] {
        out.say(&format!("b = {b:.4}: {}", tuple_text(&softmax_with_base(&z, b)?, 4)))?;
    }

    out.step("6. Cross-entropy of the mat/hat/bat/rat example, y = mat")?;
    let (y, good, bad) = mat_example()?;
    out.scalar("L for P = (0.7, 0.1, 0.1, 0.1)", cross_entropy(&y, &good)?)?;
    out.scalar("L for P = (0.1, 0.1, 0.1, 0.7)", cross_entropy(&y, &bad)?)?;
    out.scalar(
        "the same from the logits ln P",
        cross_entropy_from_logit_vector(&logits_of(&bad)?, 0)?,
    )?;

    out.step("7. The gradient with respect to the logits, two ways")?;
    out.matrix("∂L/∂ŷ = −y/ŷ", &row_of(&d_cross_entropy_d_probabilities(&y, &bad)?))?;
    out.matrix("J = diag(ŷ) − ŷŷᵀ", &softmax_jacobian(&bad)?)?;
    out.matrix("Jᵀ·∂L/∂ŷ", &row_of(&d_logits_by_chain_rule(&y, &bad)?))?;
    out.matrix("ŷ − y", &row_of(&d_cross_entropy_d_logits(&y, &bad)?))?;

    out.step("8. One step with α = 0.1")?;
    out.matrix(
        "the text's P − α(P − y) (already sums to 1)",
        &row_of(&mix_towards_target(&bad, &y, 0.1)?),
    )?;
    out.matrix(
        "softmax(ln P − α(P − y)), the real step",
        &row_of(&softmax(&logit_step(&logits_of(&bad)?, 0, 0.1)?)?),
    )?;

    out.step("9. The 2000-iteration script, replayed (8 decimals)")?;
    let replay = document_replay()?;
    let saved = out.decimals;
    out.decimals = 8;
    for i in [0, 1990] {
        if let Some(line) = replay.line(i) {
            out.matrix(
                &format!("iteration {i}: weights after update {}", i + 1),
                &row_of(&line.weights_after_update),
            )?;
            out.matrix(
                &format!("iteration {i}: probabilities before update {}", i + 1),
                &row_of(&line.probabilities_before_update),
            )?;
        }
    }
    out.matrix("final probabilities", &row_of(&replay.final_probabilities))?;
    out.decimals = saved;

    out.step("10. Softmax regression on three clouds of points")?;
    let (x, t, trained) = chapter_model()?;
    out.scalar("smoothness L of the mean cross-entropy", smoothness_bound(&x))?;
    out.scalar("α (must be ≤ 1/L)", LEARNING_RATE)?;
    out.scalar("loss before training (ln 3)", trained.losses[0])?;
    out.scalar("loss after training", *trained.losses.last().unwrap_or(&f64::NAN))?;
    out.matrix("learned W (D×K)", &trained.w)?;
    out.matrix("learned b (1×K)", &trained.b)?;
    out.scalar("training accuracy", trained.accuracy(&x, &t)?)?;
    Ok(())
}

/// The temperatures the temperature figure shows.
pub const FIGURE_TEMPERATURES: [f64; 5] = [0.25, 0.5, 1.0, 2.0, 5.0];

/// The chapter's figures as data: (file stem, figure).
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let z = vec_of(&[2.0, 1.0, 0.2]);
    let mut temperature_series = Vec::new();
    for t in FIGURE_TEMPERATURES {
        let p = softmax_with_temperature(&z, t)?;
        temperature_series.push((format!("T = {t}"), p.iter().copied().collect()));
    }
    // The classes are names, not points on a line: bars, one group per class.
    let temperature = Figure::Bars(BarChart {
        title: "softmax((2.0, 1.0, 0.2)/T) at five temperatures".into(),
        x_label: "class (its logit)".into(),
        y_label: "probability".into(),
        categories: z.iter().enumerate().map(|(i, v)| format!("{} (z = {v:.1})", i + 1)).collect(),
        series: temperature_series,
    });

    let replay = document_replay()?;
    let replay_fig = Figure::Line(LineChart {
        title: format!(
            "The script replayed: softmax of the logits, α = {SCRIPT_LEARNING_RATE}, true word mat"
        ),
        x_label: "updates done".into(),
        y_label: "probability".into(),
        series: WORDS
            .iter()
            .enumerate()
            .map(|(k, w)| {
                Series::new(
                    if k == 1 {
                        "hat (hidden under bat: equal)".to_string()
                    } else {
                        w.to_string()
                    },
                    replay
                        .probabilities
                        .iter()
                        .enumerate()
                        .map(|(s, p)| (s as f64, p[k]))
                        .collect(),
                )
            })
            .collect(),
        markers: false,
    });

    let (x, t, trained) = chapter_model()?;
    let loss = Figure::Line(LineChart {
        title: format!("Training loss, full-batch gradient descent, α = {LEARNING_RATE}"),
        x_label: "step".into(),
        y_label: "mean cross-entropy (nats)".into(),
        series: vec![Series::new(
            "training loss",
            trained.losses.iter().enumerate().map(|(i, &l)| (i as f64, l)).collect(),
        )],
        markers: false,
    });
    let mut classes: Vec<Series> =
        (0..CLASSES).map(|k| Series::new(format!("class {k}"), vec![])).collect();
    for (r, &k) in t.iter().enumerate() {
        classes[k].points.push((x[(r, 0)], x[(r, 1)]));
    }
    let (w, b) = (&trained.w, &trained.b);
    let predict = |px: f64, py: f64| {
        argmax_rows(&DMatrix::from_fn(1, CLASSES, |_, k| {
            w[(0, k)] * px + w[(1, k)] * py + b[(0, k)]
        }))[0]
    };
    let regions = Figure::Scatter(ScatterChart {
        title: "Three classes and the regions where each wins the argmax".into(),
        x_label: "x₁".into(),
        y_label: "x₂".into(),
        classes,
        regions: Some(Regions::evaluate((-7.0, 7.0), (-6.0, 7.0), 140, 130, predict)),
        lines: vec![],
    });
    Ok(vec![
        ("ch02_temperature".into(), temperature),
        ("ch02_replay".into(), replay_fig),
        ("ch02_regions".into(), regions),
        ("ch02_loss".into(), loss),
    ])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 2,
    stem: "ch02_softmax",
    title: "Softmax, temperature and cross-entropy",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
