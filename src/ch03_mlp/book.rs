//! What the book shows about chapter 3: the errata, the worked-number table, the walk-through, the
//! figures and the chapter's entry. The lesson is in the sibling modules.

use super::activations::{Activation, activation_forward};
use super::chain::{
    Chain, chapter_chain, d_c0_d_a_last, d_c0_d_a_prev, d_c0_d_a_prev_sum, d_c0_d_b_last,
    d_c0_d_w_last, multi_neuron_matrix_form,
};
use super::dense::{dense_backward, dense_forward};
use super::fact::{
    FIRING, GPT3_MLP, GPT3_TOTAL_PARAMETERS, fact_mlp, key_value_read, softmax_memory_read,
};
use super::sin_fit::{SIN_SIZES, SIN_TRAIN, fit_sin};
use super::superposition::{
    ANGLE_DIMS, ANGLE_SEED, ANGLE_VECTORS, NEAR_ORTHOGONAL_DEGREES, PACK_D, PACK_N, PACK_SEED,
    PACK_STEPS, Packing, angle_samples, coherence, pack_unit_vectors, pairwise_cosines,
    random_unit_vectors, two_bases, welch_capacity,
};
use crate::errata::{Erratum, Kind};
use crate::error::{Error, Result};
use crate::plot::{Figure, LineChart, LogAxes, Series};
use crate::report::{Chapter, Walk, Worked, with_commas};
use crate::rng::Rng;
use crate::snapshot::fixed;
use crate::sources::{D0, D1, D4};
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

// ───────────────────────────── errata, worked numbers ─────────────────────────────

/// This chapter's rows of the errata register.
pub const ERRATA: &[Erratum] = &[
    Erratum {
        document: D0,
        section: "Backpropagation, chain of one-neuron layers: ∂C₀/∂a⁽ᴸ⁾ and the two results built \
                  on it",
        printed: "∂C₀/∂a⁽ᴸ⁾ = z(a⁽ᴸ⁾ − y); ∂C₀/∂w⁽ᴸ⁾ = a⁽ᴸ⁻¹⁾·σ′(z⁽ᴸ⁾)·z(a⁽ᴸ⁾ − y); \
                  ∂C₀/∂b⁽ᴸ⁾ = 1·σ′(z⁽ᴸ⁾)·z(a⁽ᴸ⁾ − y)",
        correct: "∂C₀/∂a⁽ᴸ⁾ = 2(a⁽ᴸ⁾ − y), and the factor 2(a⁽ᴸ⁾ − y) in ∂C₀/∂w⁽ᴸ⁾ and ∂C₀/∂b⁽ᴸ⁾",
        why: "C₀ = (a⁽ᴸ⁾ − y)² has derivative 2(a⁽ᴸ⁾ − y) by the power rule; no z enters C₀. The \
              document writes 2(a⁽ᴸ⁾ − y) itself a few lines later in ∂C₀/∂a⁽ᴸ⁻¹⁾, so the z is a \
              misread 2. Read as z⁽ᴸ⁾ it gives a wrong value and even a wrong sign (see the worked \
              table).",
        kind: Kind::Erratum,
        tests: &["tests/ch03_mlp.rs::d_cost_d_output_is_2_times_error_not_z_times_error"],
    },
    Erratum {
        document: D0,
        section: "Backpropagation, the gradient vector ∇C",
        printed: "∇C = (∂C/∂w⁽⁰⁾, ∂C/∂b⁽¹⁾, …, ∂C/∂w⁽ᴸ⁾, ∂C/∂b⁽ᴸ⁾)",
        correct: "∇C = (∂C/∂w⁽¹⁾, ∂C/∂b⁽¹⁾, …, ∂C/∂w⁽ᴸ⁾, ∂C/∂b⁽ᴸ⁾)",
        why: "Layer 0 is the input a⁽⁰⁾ and owns no weight: the first weight is w⁽¹⁾ in \
              z⁽¹⁾ = w⁽¹⁾a⁽⁰⁾ + b⁽¹⁾, and it pairs with b⁽¹⁾. A chain of L layers has 2L \
              parameters, w⁽¹⁾…w⁽ᴸ⁾ and b⁽¹⁾…b⁽ᴸ⁾.",
        kind: Kind::Erratum,
        tests: &["tests/ch03_mlp.rs::gradient_has_one_weight_and_one_bias_for_each_layer_1_to_l"],
    },
    Erratum {
        document: D0,
        section: "Backpropagation, the multi-neuron generalisation",
        printed: "∂C₀/∂aₑ⁽ᴸ⁻¹⁾ = Σ_{j=0}^{n_{L−1}} (∂zⱼ⁽ᴸ⁾/∂aₑ⁽ᴸ⁻¹⁾)(∂aⱼ⁽ᴸ⁾/∂zⱼ⁽ᴸ⁾)(∂C₀/∂aⱼ⁽ᴸ⁾)",
        correct: "Σ_{j=0}^{n_L − 1}: j runs over the n_L neurons of layer L",
        why: "j indexes zⱼ⁽ᴸ⁾ and aⱼ⁽ᴸ⁾, the neurons of layer L, numbered 0 … n_L − 1. The printed \
              upper limit n_{L−1} is the width of the previous layer (and one too many): with 3 \
              neurons feeding 2 it would sum over 4 output neurons, 2 of which do not exist.",
        kind: Kind::Erratum,
        tests: &["tests/ch03_mlp.rs::multi_neuron_sum_runs_over_the_neurons_of_layer_l"],
    },
    Erratum {
        document: D0,
        section: "Neural Networks, the matrix form ā⁽¹⁾ = σ(Wā⁽⁰⁾ + b)",
        printed: "W with rows w_{0,·} … w_{L,·}, ā⁽⁰⁾ = (a₀ … aₙ), b̄ = (b₀ … bₙ)",
        correct: "W has one row per neuron of the new layer, say k + 1 rows; b̄ = (b₀ … b_k) has \
                  one entry per row of W",
        why: "Wā⁽⁰⁾ has as many entries as W has rows, so the bias added to it must too; the \
              printed b̄ has as many entries as the input ā⁽⁰⁾ (n + 1), which only works when the \
              layer keeps its width. The row index L also collides with the layer superscript (L). \
              A size letter that makes a formula compute something else is counted as an \
              erratum, here as in the upper limit n_{L−1} of the multi-neuron sum: read as \
              printed, Wā⁽⁰⁾ + b̄ adds vectors of two lengths whenever the layer changes width.",
        kind: Kind::Erratum,
        tests: &["tests/ch03_mlp.rs::bias_has_one_entry_per_output_neuron"],
    },
    Erratum {
        document: D0,
        section: "Multilayer Perceptron, the Michael Jordan toy example",
        printed: "if Ē·(last name Jordan) = Ē·(first name Michael), the vector encodes both first \
                  name Michael and last name Jordan",
        correct: "the vector encodes both when both dot products are ≈ 1, i.e. Ē·(M + J) ≈ 2 \
                  (D4: 2 for the full name, 1 or less otherwise)",
        why: "Equal dot products are not a conjunction: a vector that encodes neither name (both \
              products 0) or only half of each satisfies the equality. The AND is made by the bias \
              −1 and the ReLU acting on the sum.",
        kind: Kind::Erratum,
        tests: &["tests/ch03_mlp.rs::equal_dot_products_do_not_mean_both_names"],
    },
    Erratum {
        document: D0,
        section: "NN gradient descent, the example of −∇C(w̄)",
        printed: "−∇C(w̄) = (0.31, 0.03, ⋮, −0.37, 0.16) for w̄ = (w₀, w₁, ⋮, w_n); \
                  \"w_{n+1} should decrease\"",
        correct: "the −0.37 entry, second from the end, belongs to w_{n−1}: \
                  w_{n−1} should decrease",
        why: "w̄ = (w₀ … w_n) has n + 1 entries and ends in w_n, so no w_{n+1} exists; the \
              negative entry is the one before the last (0.16, which belongs to w_n). A negative \
              entry of −∇C means that weight should decrease, as the text says.",
        kind: Kind::Erratum,
        tests: &["tests/ch03_mlp.rs::minus_gradient_entry_before_the_last_belongs_to_w_n_minus_1"],
    },
    Erratum {
        document: D0,
        section: "Neural Networks, the layers of a digit classifier",
        printed: "the last layer is the activation of digits 0-10",
        correct: "digits 0–9: ten output neurons, one per digit",
        why: "There are ten decimal digits, 0 to 9; 0 to 10 would be eleven classes, and 10 is \
              written with two digits. The classifier's output layer has ten neurons.",
        kind: Kind::Erratum,
        tests: &["tests/ch03_mlp.rs::a_digit_classifier_has_ten_outputs_for_0_to_9"],
    },
];

/// D0's illustrative −∇C(w̄) for w̄ = (w₀, w₁, ⋮, w_n), entry by entry as printed.
pub const PRINTED_MINUS_GRADIENT: [&str; 5] = ["0.31", "0.03", "⋮", "-0.37", "0.16"];

/// The decimal digits a digit classifier tells apart, 0 to 9.
pub const DIGITS: usize = 10;

/// The name of the weight `k` places before the last of w̄ = (w₀, …, w_n): `w_n` for k = 0,
/// `w_{n−k}` otherwise.
pub fn weight_label_from_end(k: usize) -> String {
    if k == 0 { "w_n".to_string() } else { format!("w_{{n−{k}}}") }
}

/// The label of the printed −∇C entry `entry`, counted from the end of
/// [`PRINTED_MINUS_GRADIENT`] (the entries after the `⋮` are the last ones of w̄).
pub fn printed_gradient_label(entry: &str) -> Option<String> {
    let at = PRINTED_MINUS_GRADIENT.iter().position(|e| *e == entry)?;
    let dots = PRINTED_MINUS_GRADIENT.iter().position(|e| *e == "⋮")?;
    if at < dots {
        return Some(format!("w_{at}"));
    }
    Some(weight_label_from_end(PRINTED_MINUS_GRADIENT.len() - 1 - at))
}

/// C₀ of the chapter's chain before and after one step w ← w − α∇C₀ on every weight and bias.
pub fn descent_step_costs(alpha: f64) -> (f64, f64) {
    let (chain, x0, y) = chapter_chain();
    let g = chain.gradients(x0, y);
    let stepped = Chain {
        w: chain.w.iter().zip(&g.d_w).map(|(w, d)| w - alpha * d).collect(),
        b: chain.b.iter().zip(&g.d_b).map(|(b, d)| b - alpha * d).collect(),
    };
    (chain.cost(x0, y), stepped.cost(x0, y))
}

/// The chapter's worked numbers, recomputed.
pub fn worked() -> Result<Vec<Worked>> {
    let (chain, x0, y) = chapter_chain();
    let t = chain.forward(x0);
    let l = chain.depth();
    let h = 1e-6;
    let fd_a = ((t.a[l] + h - y).powi(2) - (t.a[l] - h - y).powi(2)) / (2.0 * h);
    let fact = fact_mlp()?;
    let mj = fact.encode(&["first name Michael", "last name Jordan"])?;
    let mp = fact.encode(&["first name Michael", "last name Phelps"])?;
    let aj = fact.encode(&["first name Alexis", "last name Jordan"])?;
    let ap = fact.encode(&["first name Alexis", "last name Phelps"])?;
    let probe =
        (&fact.direction("first name Michael")? + &fact.direction("last name Jordan")?).transpose();
    let dot = |e: &DMatrix<f64>| (e * &probe)[(0, 0)];
    let fires: Vec<&str> = [
        ("Michael Jordan", &mj),
        ("Michael Phelps", &mp),
        ("Alexis Jordan", &aj),
        ("Alexis Phelps", &ap),
    ]
    .iter()
    .filter(|(_, e)| {
        fact.mlp
            .forward(e)
            .map(|tr| activation_forward(Activation::Relu, &tr.pre[0])[(0, 0)] > FIRING)
            .unwrap_or(false)
    })
    .map(|(n, _)| *n)
    .collect();
    let g = GPT3_MLP;
    let share = g.weights_total() as f64 / GPT3_TOTAL_PARAMETERS;
    let gates = |m: &str, j: &str| Ok::<_, Error>(dot(&fact.encode(&[m, j])?));
    // Three neurons feeding two: the sum over j (2 terms) against the matrix form of backprop.
    let w_rows = DMatrix::from_row_slice(2, 3, &[0.5, -1.0, 0.3, 0.2, 0.4, -0.7]);
    let (b2, a_prev, y2) = ([0.1, -0.2], [0.3, 0.6, 0.9], [1.0, 0.0]);
    let by_sum = d_c0_d_a_prev_sum(&w_rows, &b2, &a_prev, &y2)?;
    let by_matrix = multi_neuron_matrix_form(&w_rows, &b2, &a_prev, &y2)?;
    let gap = by_sum.iter().zip(by_matrix.iter()).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max);
    Ok(vec![
        Worked::erratum(
            "d_cost_d_output_is_2_times_error_not_z_times_error",
            D0,
            format!(
                "∂C₀/∂a⁽ᴸ⁾ for the chapter's chain (a⁽ᴸ⁾ = {:.4}, y = {y}, z⁽ᴸ⁾ = {:.4}); central \
                 difference {fd_a:.4}",
                t.a[l],
                t.z[l - 1]
            ),
            "z(a⁽ᴸ⁾ − y)",
            format!(
                "2(a⁽ᴸ⁾ − y) = {:.4}; z⁽ᴸ⁾(a⁽ᴸ⁾ − y) = {:.4}",
                d_c0_d_a_last(t.a[l], y),
                t.z[l - 1] * (t.a[l] - y)
            ),
        ),
        Worked::erratum(
            "gradient_has_one_weight_and_one_bias_for_each_layer_1_to_l",
            D0,
            "the first two entries of ∇C for a chain a⁽⁰⁾ → a⁽¹⁾ → … → a⁽ᴸ⁾",
            "∂C/∂w⁽⁰⁾, ∂C/∂b⁽¹⁾",
            format!(
                "∂C/∂w⁽¹⁾, ∂C/∂b⁽¹⁾ ({} entries for L = {l})",
                chain.gradients(x0, y).d_w.len() + chain.gradients(x0, y).d_b.len()
            ),
        ),
        Worked::illustrative(
            D0,
            "−∇C(w̄) in n dimensions, entry by entry (no network or data given)",
            "0.31, 0.03, …, −0.37, 0.16",
        ),
        {
            let (before, after) = descent_step_costs(0.1);
            Worked::text(
                "a_step_against_the_gradient_lowers_the_cost",
                D0,
                format!(
                    "the sign rule: C₀ of the chapter's chain after w ← w − 0.1∇C₀ \
                     ({before:.4} → {after:.4})"
                ),
                "C decreases",
                if after < before { "C decreases" } else { "C does not decrease" },
            )
        },
        Worked::erratum(
            "minus_gradient_entry_before_the_last_belongs_to_w_n_minus_1",
            D0,
            "the weight of −∇C's entry −0.37 (second from the end) in (w₀, w₁, …, w_n)",
            "w_{n+1}",
            printed_gradient_label("-0.37").unwrap_or_default(),
        ),
        Worked::erratum(
            "a_digit_classifier_has_ten_outputs_for_0_to_9",
            D0,
            "the digits of a digit classifier's output layer",
            "0-10",
            format!("0–{} ({DIGITS} output neurons)", DIGITS - 1),
        ),
        Worked::erratum(
            "multi_neuron_sum_runs_over_the_neurons_of_layer_l",
            D0,
            "terms in the sum over j for a layer of 2 neurons fed by 3",
            "n_{L−1} + 1 = 4",
            format!(
                "n_L = {} (the sum then equals the matrix form (σ′(z) ⊙ 2(a − y))W; largest gap \
                 {gap:.1e})",
                w_rows.nrows()
            ),
        ),
        Worked::erratum(
            "bias_has_one_entry_per_output_neuron",
            D0,
            "entries of b̄ for a layer of 2 neurons fed by 3 inputs",
            "n + 1 = 3 (one per input)",
            format!(
                "{} (one per neuron); a 1×3 bias is {}",
                2,
                if dense_forward(
                    &DMatrix::<f64>::zeros(1, 3),
                    &DMatrix::zeros(3, 2),
                    &DMatrix::zeros(1, 3)
                )
                .is_err()
                {
                    "rejected"
                } else {
                    "accepted"
                }
            ),
        ),
        Worked::erratum(
            "equal_dot_products_do_not_mean_both_names",
            D0,
            "Alexis Phelps: Ē·J and Ē·M (equal), and Ē·(M + J) − 1 before the ReLU",
            "equal ⇒ encodes both names",
            format!(
                "Ē·J = {} = Ē·M = {}, yet Ē·(M + J) − 1 = {}: the neuron stays off",
                fixed((&ap * fact.direction("last name Jordan")?.transpose())[(0, 0)], 1),
                fixed((&ap * fact.direction("first name Michael")?.transpose())[(0, 0)], 1),
                fixed(dot(&ap) - 1.0, 1)
            ),
        ),
        Worked::number(
            "full_name_gives_dot_product_2",
            D4,
            "Ē·(M + J) for Michael Jordan",
            "2",
            gates("first name Michael", "last name Jordan")?,
        ),
        Worked::number(
            "partial_names_give_dot_product_1_or_less",
            D4,
            "Ē·(M + J) for Michael Phelps",
            "1",
            dot(&mp),
        ),
        Worked::number(
            "partial_names_give_dot_product_1_or_less",
            D4,
            "Ē·(M + J) for Alexis Jordan",
            "1",
            dot(&aj),
        ),
        Worked::text(
            "neuron_fires_only_for_the_full_name",
            D1,
            "with bias −1 and ReLU, the Michael-Jordan neuron is active for",
            "Michael Jordan",
            fires.join(", "),
        ),
        Worked::text(
            "gpt3_mlp_has_49152_neurons",
            D1,
            "rows of GPT-3's up-projection, 4 × 12,288",
            "49,152",
            with_commas(g.neurons()),
        ),
        Worked::text(
            "gpt3_mlp_has_49152_neurons",
            D4,
            "the same count, in words",
            "just under 50,000",
            if g.neurons() < 50_000 && g.neurons() > 45_000 { "just under 50,000" } else { "no" },
        ),
        Worked::number(
            "gpt3_mlp_block_has_1_2_billion_weights",
            D1,
            format!(
                "weights in one MLP, up + down ({}), in billions",
                with_commas(g.weights_per_block())
            ),
            "1.2",
            g.weights_per_block() as f64 / 1e9,
        ),
        Worked::number(
            "gpt3_mlp_block_has_1_2_billion_weights",
            D1,
            "MLP blocks in GPT-3",
            "96",
            g.n_layers as f64,
        ),
        Worked::text(
            "gpt3_mlps_hold_two_thirds_of_the_weights",
            D1,
            format!(
                "96 MLPs: {} weights, as a share of 175 billion ({share:.3})",
                with_commas(g.weights_total())
            ),
            "about 2/3",
            if (share - 2.0 / 3.0).abs() < 0.01 {
                "about 2/3".to_string()
            } else {
                format!("{share:.3}")
            },
        ),
    ])
}

// ───────────────────────────── walk-through and plots ─────────────────────────────

/// The chapter in the order the document derives it.
pub fn walk(out: &mut Walk) -> Result<()> {
    out.step("1. Activations and their derivatives")?;
    for act in Activation::ALL {
        for z in [-2.0, 0.5, 2.0] {
            out.scalar(&format!("{}({z})", act.name()), act.apply(z))?;
            out.scalar(&format!("{}′({z})", act.name()), act.derivative(z))?;
        }
    }
    out.scalar(
        "largest |GELU_erf − GELU_tanh| on [−8, 8]",
        (0..=1600)
            .map(|i| -8.0 + i as f64 / 100.0)
            .map(|z| (Activation::GeluErf.apply(z) - Activation::GeluTanh.apply(z)).abs())
            .fold(0.0, f64::max),
    )?;

    out.step("2. A dense layer y = xW + b and its backward pass")?;
    let x = DMatrix::from_row_slice(2, 3, &[1.0, 2.0, 3.0, -1.0, 0.0, 0.5]);
    let w = DMatrix::from_row_slice(3, 2, &[0.1, -0.2, 0.3, 0.4, -0.5, 0.6]);
    let b = DMatrix::from_row_slice(1, 2, &[0.05, -0.05]);
    let y = dense_forward(&x, &w, &b)?;
    out.matrix("x", &x)?;
    out.matrix("W", &w)?;
    out.matrix("y = xW + b", &y)?;
    let g = dense_backward(&x, &w, &DMatrix::from_element(2, 2, 1.0))?;
    out.say("with ∂C/∂y = all ones:")?;
    out.matrix("∂C/∂W = xᵀ ∂C/∂y", &g.d_w)?;
    out.matrix("∂C/∂b = column sums of ∂C/∂y", &g.d_b)?;
    out.matrix("∂C/∂x = ∂C/∂y Wᵀ", &g.d_x)?;

    out.step("3. The document's chain of one-neuron layers, a⁽⁰⁾ → a⁽¹⁾ → a⁽²⁾ → a⁽³⁾")?;
    let (chain, x0, yt) = chapter_chain();
    let t = chain.forward(x0);
    for l in 1..=chain.depth() {
        let (s, p) = (sup(l), sup(l - 1));
        out.scalar(
            &format!(
                "z⁽{s}⁾ = w⁽{s}⁾a⁽{p}⁾ + b⁽{s}⁾ (w = {}, b = {})",
                chain.w[l - 1],
                chain.b[l - 1]
            ),
            t.z[l - 1],
        )?;
        out.scalar(&format!("a⁽{s}⁾ = σ(z⁽{s}⁾)"), t.a[l])?;
    }
    out.scalar(&format!("C₀ = (a⁽³⁾ − y)², y = {yt}"), chain.cost(x0, yt))?;
    out.scalar("∂C₀/∂a⁽ᴸ⁾ = 2(a⁽ᴸ⁾ − y)", d_c0_d_a_last(t.a[3], yt))?;
    out.scalar("∂C₀/∂w⁽ᴸ⁾ = a⁽ᴸ⁻¹⁾ σ′(z⁽ᴸ⁾) 2(a⁽ᴸ⁾ − y)", d_c0_d_w_last(&t, yt))?;
    out.scalar("∂C₀/∂b⁽ᴸ⁾ = σ′(z⁽ᴸ⁾) 2(a⁽ᴸ⁾ − y)", d_c0_d_b_last(&t, yt))?;
    out.scalar("∂C₀/∂a⁽ᴸ⁻¹⁾ = w⁽ᴸ⁾ σ′(z⁽ᴸ⁾) 2(a⁽ᴸ⁾ − y)", d_c0_d_a_prev(&chain, &t, yt))?;
    let grads = chain.gradients(x0, yt);
    for l in 1..=chain.depth() {
        out.scalar(&format!("∂C₀/∂w⁽{}⁾", sup(l)), grads.d_w[l - 1])?;
        out.scalar(&format!("∂C₀/∂b⁽{}⁾", sup(l)), grads.d_b[l - 1])?;
    }
    let avg = chain.average_gradients(&[0.6, -1.0, 2.0], &[0.2, 0.9, 0.5])?;
    let cost = avg.cost;
    out.say("averaged over three examples (x, y) = (0.6, 0.2), (−1, 0.9), (2, 0.5):")?;
    out.scalar("C = (1/n) Σ Cₖ", cost)?;
    out.scalar("∂C/∂w⁽³⁾ = (1/n) Σ ∂Cₖ/∂w⁽³⁾", avg.d_w[2])?;

    out.step("4. A line and an MLP fitted to sin(x), 100 points in [−10, 10]")?;
    let fits = fit_sin(SIN_TRAIN.epochs)?;
    out.scalar("least-squares slope", fits.line.0)?;
    out.scalar("least-squares intercept", fits.line.1)?;
    out.scalar("line MSE", fits.line_mse)?;
    out.scalar(&format!("MLP {SIN_SIZES:?} MSE after {} epochs", SIN_TRAIN.epochs), fits.mlp_mse)?;
    out.scalar("ratio", fits.line_mse / fits.mlp_mse)?;

    out.step("5. An MLP that stores \"Michael Jordan plays basketball\"")?;
    let fact = fact_mlp()?;
    out.matrix(
        "orthonormal directions (rows: Michael, Jordan, basketball, Alexis, Phelps, swimming)",
        &fact.directions,
    )?;
    for (who, names) in [
        ("Michael Jordan", ["first name Michael", "last name Jordan"]),
        ("Michael Phelps", ["first name Michael", "last name Phelps"]),
        ("Alexis Jordan", ["first name Alexis", "last name Jordan"]),
        ("Alexis Phelps", ["first name Alexis", "last name Phelps"]),
    ] {
        let e = fact.encode(&names)?;
        let pre = fact.neuron_inputs(&e)?;
        let gained = &fact.block(&e)? - &e;
        out.say(&format!("{who}:"))?;
        out.matrix("   neuron inputs Ē·(M + J) − 1, Ē·(M + P) − 1", &pre)?;
        out.scalar(
            "   basketball gained, (out − Ē)·B",
            (&gained * fact.direction("basketball")?.transpose())[(0, 0)],
        )?;
        out.scalar(
            "   swimming gained, (out − Ē)·S",
            (&gained * fact.direction("swimming")?.transpose())[(0, 0)],
        )?;
    }
    let nobody = fact.encode(&["first name Alexis"])?;
    out.matrix(
        "key–value reading FF(Alexis) (nothing fires)",
        &key_value_read(&fact.mlp, &nobody)?,
    )?;
    out.matrix(
        "softmax memory NM(Alexis) (must mix the values anyway)",
        &softmax_memory_read(&fact.mlp, &nobody)?,
    )?;

    out.step("6. GPT-3's MLPs, counted")?;
    let g = GPT3_MLP;
    out.say(&format!(
        "neurons per MLP: {} = {} × {}",
        with_commas(g.neurons()),
        g.expansion,
        with_commas(g.d_embed)
    ))?;
    out.say(&format!(
        "weights per MLP: {} (+ {} biases)",
        with_commas(g.weights_per_block()),
        with_commas(g.biases())
    ))?;
    out.say(&format!("weights in all {} MLPs: {}", g.n_layers, with_commas(g.weights_total())))?;
    out.scalar("share of 175 billion", g.weights_total() as f64 / GPT3_TOTAL_PARAMETERS)?;

    out.step("7. Superposition: nearly perpendicular directions")?;
    for s in angle_samples(&ANGLE_DIMS, ANGLE_VECTORS, ANGLE_SEED)? {
        out.say(&format!(
            "d = {:>6}: {:.4} of {} random pairs within 89°–91° (exact expectation {:.4})",
            s.d,
            s.near_orthogonal,
            s.angles.len(),
            s.expected
        ))?;
    }
    let eps = NEAR_ORTHOGONAL_DEGREES.to_radians().sin();
    for d in [100, 1000, 3000, 4096] {
        let cap =
            welch_capacity(d, eps).map_or("no limit from this bound".to_string(), with_commas);
        out.say(&format!("Welch: most vectors in d = {d} with every angle in 89°–91°: {cap}"))?;
    }
    let bases = two_bases(1024)?;
    let c = coherence(&bases)?;
    out.say(&format!(
        "standard ∪ Hadamard basis, d = 1,024: {} vectors, largest |cos| measured {c:.5} (angles \
         {:.2}°–{:.2}°)",
        with_commas(bases.nrows() as u64),
        c.acos().to_degrees(),
        180.0 - c.acos().to_degrees()
    ))?;
    let c4096 = 1.0 / 4096f64.sqrt();
    out.say(&format!(
        "the same construction in d = 4,096: 8,192 vectors, largest |cos| 1/√4096 = {c4096:.5} \
         (angles {:.2}°–{:.2}°)",
        c4096.acos().to_degrees(),
        180.0 - c4096.acos().to_degrees()
    ))?;
    let p = pack_unit_vectors(PACK_N, PACK_D, PACK_STEPS, PACK_SEED)?;
    out.say(&format!("packing N = {} unit vectors in d = {} ({} steps):", p.n, p.d, PACK_STEPS))?;
    out.scalar("   largest |cos|, random start", p.start_coherence)?;
    out.scalar("   largest |cos|, optimised", p.coherence)?;
    out.scalar("   Welch lower bound", p.welch)?;
    Ok(())
}

/// A layer index as superscript digits, for the walk-through (3 → "³").
fn sup(n: usize) -> String {
    const DIGITS: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    n.to_string().chars().map(|c| c.to_digit(10).map_or(c, |d| DIGITS[d as usize])).collect()
}

/// A histogram as a step line: bins of `width` from `lo` to `hi`, heights the fraction of
/// `values` in each bin.
pub fn histogram_steps(values: &[f64], lo: f64, hi: f64, width: f64) -> Vec<(f64, f64)> {
    let bins = ((hi - lo) / width).round().max(1.0) as usize;
    let mut counts = vec![0usize; bins];
    for v in values {
        let i = ((v - lo) / width).floor();
        if i >= 0.0 && (i as usize) < bins {
            counts[i as usize] += 1;
        } else if *v == hi {
            counts[bins - 1] += 1;
        }
    }
    let n = values.len().max(1) as f64;
    let mut pts = vec![(lo, 0.0)];
    for (i, c) in counts.iter().enumerate() {
        let (a, b) = (lo + i as f64 * width, lo + (i + 1) as f64 * width);
        pts.push((a, *c as f64 / n));
        pts.push((b, *c as f64 / n));
    }
    pts.push((hi, 0.0));
    pts
}

/// An activation's legend entry: the erf GELU is drawn first and the tanh approximation lies
/// on top of it, within a pixel everywhere, so its entry says where it is.
/// `mark` follows the name (a prime for the derivative).
fn legend_name(a: Activation, mark: &str) -> String {
    match a {
        Activation::GeluErf => format!("{}{mark}, under the tanh curve", a.name()),
        _ => format!("{}{mark}", a.name()),
    }
}

/// The chapter's light figures as data (activations, the sin fits and loss, the angle
/// histograms); the packing figures come from [`packing_figures`].
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let grid: Vec<f64> = (0..=240).map(|i| -4.0 + 8.0 * i as f64 / 240.0).collect();
    let curve = |f: &dyn Fn(f64) -> f64| grid.iter().map(|&z| (z, f(z))).collect::<Vec<_>>();
    let values = Figure::Line(LineChart {
        title: "Activation functions".into(),
        x_label: "z".into(),
        y_label: "f(z)".into(),
        series: Activation::ALL
            .iter()
            .map(|&a| Series::new(legend_name(a, ""), curve(&|z| a.apply(z))))
            .collect(),
        markers: false,
    });
    let slopes = Figure::Line(LineChart {
        title: "Their derivatives".into(),
        x_label: "z".into(),
        y_label: "f′(z)".into(),
        series: Activation::ALL
            .iter()
            .map(|&a| Series::new(legend_name(a, "′"), curve(&|z| a.derivative(z))))
            .collect(),
        markers: false,
    });
    let fits = fit_sin(SIN_TRAIN.epochs)?;
    let pts = |ys: &[f64]| fits.x.iter().copied().zip(ys.iter().copied()).collect::<Vec<_>>();
    let sin_fig = Figure::Line(LineChart {
        title: format!(
            "sin(x) at 100 points: line MSE {:.3}, MLP MSE {:.4}",
            fits.line_mse, fits.mlp_mse
        ),
        x_label: "x".into(),
        y_label: "y".into(),
        series: vec![
            Series::new("sin(x)", pts(&fits.y)),
            Series::new("least-squares line", pts(&fits.line_fit)),
            Series::new(format!("MLP {SIN_SIZES:?}, ReLU"), pts(&fits.mlp_fit)),
        ],
        markers: true,
    });
    // The MSE falls over decades: a log y axis marked 0.01, 0.1 … (not an axis of log₁₀ MSE).
    let loss = Figure::LogLine(
        LineChart {
            title: format!(
                "Training the sin(x) MLP: mini-batch GD, α = {}, batch {}",
                SIN_TRAIN.learning_rate, SIN_TRAIN.batch_size
            ),
            x_label: "epoch".into(),
            y_label: "MSE (log scale)".into(),
            series: vec![
                Series::new(
                    "MLP",
                    fits.costs.iter().enumerate().map(|(i, &c)| (i as f64, c)).collect(),
                ),
                Series::new(
                    "least-squares line",
                    vec![(0.0, fits.line_mse), (fits.costs.len() as f64 - 1.0, fits.line_mse)],
                ),
            ],
            markers: false,
        },
        LogAxes::YDecades,
    );
    let samples = angle_samples(&ANGLE_DIMS, ANGLE_VECTORS, ANGLE_SEED)?;
    let top = samples
        .iter()
        .flat_map(|s| histogram_steps(&s.angles, 0.0, 180.0, 1.0))
        .map(|p| p.1)
        .fold(0.0, f64::max);
    let mut series: Vec<Series> = samples
        .iter()
        .map(|s| {
            Series::new(
                format!("d = {}", with_commas(s.d as u64)),
                histogram_steps(&s.angles, 0.0, 180.0, 1.0),
            )
        })
        .collect();
    series.push(Series::new("89°–91°", vec![(89.0, 0.0), (89.0, top), (91.0, top), (91.0, 0.0)]));
    let hist = Figure::Line(LineChart {
        title: format!("Angles between {ANGLE_VECTORS} random unit vectors (fraction per 1° bin)"),
        x_label: "angle (degrees)".into(),
        y_label: "fraction of pairs".into(),
        series,
        markers: false,
    });
    let frac = Figure::LogLine(
        LineChart {
            title: "Share of random pairs within 89°–91°".into(),
            x_label: "d (log scale)".into(),
            y_label: "fraction".into(),
            series: vec![
                Series::new(
                    "measured",
                    samples.iter().map(|s| (s.d as f64, s.near_orthogonal)).collect(),
                ),
                Series::new("exact", samples.iter().map(|s| (s.d as f64, s.expected)).collect()),
            ],
            markers: true,
        },
        LogAxes::X,
    );
    Ok(vec![
        ("ch03_activations".into(), values),
        ("ch03_activation_derivatives".into(), slopes),
        ("ch03_sin_fits".into(), sin_fig),
        ("ch03_sin_loss".into(), loss),
        ("ch03_angle_histograms".into(), hist),
        ("ch03_near_orthogonal_share".into(), frac),
    ])
}

/// The packing figures: the largest |cos| step by step against the Welch bound, and the angle
/// histograms of the random start and the optimised set.
pub fn packing_figures(p: &Packing) -> Result<Vec<(String, Figure)>> {
    let last = p.history.len() as f64 - 1.0;
    let curve = Figure::Line(LineChart {
        title: format!("Packing N = {} unit vectors in d = {}: largest |cos|", p.n, p.d),
        x_label: "step".into(),
        y_label: "max |cos|".into(),
        series: vec![
            Series::new(
                "optimised",
                p.history.iter().enumerate().map(|(i, c)| (i as f64, *c)).collect(),
            ),
            Series::new("Welch lower bound", vec![(0.0, p.welch), (last, p.welch)]),
        ],
        markers: false,
    });
    let mut rng = Rng::new(PACK_SEED);
    let start = random_unit_vectors(p.n, p.d, &mut rng)?;
    let to_deg = |v: &DMatrix<f64>| {
        pairwise_cosines(v).map(|c| c.iter().map(|x| x.acos().to_degrees()).collect::<Vec<_>>())
    };
    let welch_deg = p.welch.acos().to_degrees();
    let (a0, a1) = (to_deg(&start)?, to_deg(&p.vectors)?);
    let top = histogram_steps(&a1, 40.0, 140.0, 0.5).iter().map(|q| q.1).fold(0.0, f64::max);
    let hist = Figure::Line(LineChart {
        title: format!("Angles of all pairs, N = {} in d = {}", p.n, p.d),
        x_label: "angle (degrees)".into(),
        y_label: "fraction of pairs per 0.5° bin".into(),
        series: vec![
            Series::new("random start", histogram_steps(&a0, 40.0, 140.0, 0.5)),
            Series::new("optimised", histogram_steps(&a1, 40.0, 140.0, 0.5)),
            Series::new(
                "Welch window",
                vec![
                    (welch_deg, 0.0),
                    (welch_deg, top),
                    (180.0 - welch_deg, top),
                    (180.0 - welch_deg, 0.0),
                ],
            ),
        ],
        markers: false,
    });
    Ok(vec![("ch03_packing".into(), curve), ("ch03_packing_angles".into(), hist)])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut figs = figures()?;
    figs.extend(packing_figures(&pack_unit_vectors(PACK_N, PACK_D, PACK_STEPS, PACK_SEED)?)?);
    let mut out = Vec::new();
    for (stem, f) in figs {
        out.extend(f.save(dir, &stem)?);
    }
    Ok(out)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 3,
    stem: "ch03_mlp",
    title: "The multi-layer perceptron, backpropagation, and how an MLP stores a fact",
    worked,
    walk,
    plots,
    errata: ERRATA,
};
