//! Proof by mutation: the main crate's own function behind each exercise, altered mechanically
//! at every site (`tests/mutants_gen.rs` writes the mutants, all compiled in one build behind a
//! run-time switch), must fail its judge, unless no input shows a difference. With no mutant on,
//! every judge passes the copies (they are the main crate's functions). A mutant the judge
//! passes is swept again with two other seeds: if a difference shows there, the judge missed it
//! and the test fails; if none does, it is counted as equivalent (a change no input the doc
//! covers can see, such as `<` for `≤` where the two sides are never equal), never skipped.
//! `cargo test -p llm-workbook-exercises --test mutation -- --nocapture` prints the counts.

use llm_workbook::ch03_mlp::Activation;
use llm_workbook::ch09_gpt::sample::Decoding;
use llm_workbook_exercises::judge::{self, Verdict, sweep};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

#[allow(clippy::all, unused, unused_parens, non_snake_case, non_camel_case_types)]
mod generated {
    include!("mutation/generated.rs");
}
use generated as g;

/// How long one judge may take on a mutant before the mutant counts as caught by a hang (the
/// exercises' runner stops an answer after 30 s and reports it; every judge takes well under a
/// second on the main crate's function).
const HANG: Duration = Duration::from_secs(20);

/// One exercise: its name, the mutated functions it calls (file, function), and its judge run
/// on the mutated copies.
type Exercise = (&'static str, &'static [(&'static str, &'static str)], fn() -> Verdict);

/// Every exercise whose main-crate function is mutated, in the order of the book.
fn exercises() -> Vec<Exercise> {
    use judge::{ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch11};
    const NEURON: &str = "ch01_logistic/neuron.rs";
    const PROB: &str = "ch02_softmax/probabilities.rs";
    const DENSE: &str = "ch03_mlp/dense.rs";
    const MH: &str = "ch06_attention/multihead.rs";
    const FMT: &str = "ch11_precision/format.rs";
    vec![
        ("sigmoid", &[(NEURON, "sigmoid")], || ch01::sigmoid(g::ch01_logistic_neuron::sigmoid)),
        ("logits_forward", &[(NEURON, "logits_forward")], || {
            ch01::logits_forward(g::ch01_logistic_neuron::logits_forward)
        }),
        ("bce_from_logit", &[("ch01_logistic/loss.rs", "bce_from_logit")], || {
            ch01::bce_from_logit(g::ch01_logistic_loss::bce_from_logit)
        }),
        ("sample_gradient", &[("ch01_logistic/gradient.rs", "sample_gradient")], || {
            ch01::sample_gradient(g::ch01_logistic_gradient::sample_gradient)
        }),
        ("logits_backward", &[(NEURON, "logits_backward")], || {
            ch01::logits_backward(|x, w, d| {
                g::ch01_logistic_neuron::logits_backward(x, w, d).map(|g| (g.d_x, g.d_w, g.d_b))
            })
        }),
        ("softmax_rows_forward", &[(PROB, "softmax_rows_forward")], || {
            ch02::softmax_rows_forward(g::ch02_softmax_probabilities::softmax_rows_forward)
        }),
        ("softmax_rows_backward", &[(PROB, "softmax_rows_backward")], || {
            ch02::softmax_rows_backward(g::ch02_softmax_probabilities::softmax_rows_backward)
        }),
        ("log_softmax_rows_backward", &[(PROB, "log_softmax_rows_backward")], || {
            ch02::log_softmax_rows_backward(
                g::ch02_softmax_probabilities::log_softmax_rows_backward,
            )
        }),
        ("dense_forward", &[(DENSE, "dense_forward")], || {
            ch03::dense_forward(g::ch03_mlp_dense::dense_forward)
        }),
        ("dense_backward", &[(DENSE, "dense_backward")], || {
            ch03::dense_backward(|x, w, d| {
                g::ch03_mlp_dense::dense_backward(x, w, d).map(|g| (g.d_x, g.d_w, g.d_b))
            })
        }),
        ("relu_backward", &[("ch03_mlp/activations.rs", "activation_backward")], || {
            ch03::relu_backward(|z, d| {
                g::ch03_mlp_activations::activation_backward(Activation::Relu, z, d)
            })
        }),
        ("gelu_backward", &[("ch03_mlp/activations.rs", "activation_backward")], || {
            ch03::gelu_backward(|z, d| {
                g::ch03_mlp_activations::activation_backward(Activation::GeluErf, z, d)
            })
        }),
        ("mse_backward", &[(DENSE, "mse_backward")], || {
            ch03::mse_backward(g::ch03_mlp_dense::mse_backward)
        }),
        ("least_squares_fit", &[("ch04_xor/linear.rs", "least_squares_fit")], || {
            ch04::least_squares_fit(g::ch04_xor_linear::least_squares_fit)
        }),
        ("frequency", &[("ch05_positions/encoding.rs", "frequency")], || {
            ch05::frequency(g::ch05_positions_encoding::frequency)
        }),
        ("sinusoidal", &[("ch05_positions/encoding.rs", "sinusoidal")], || {
            ch05::sinusoidal(g::ch05_positions_encoding::sinusoidal::<f64>)
        }),
        ("add_positions", &[("ch05_positions/encoding.rs", "add_positions")], || {
            ch05::add_positions(g::ch05_positions_encoding::add_positions)
        }),
        ("split_heads", &[(MH, "split_heads")], || {
            ch06::split_heads(g::ch06_attention_multihead::split_heads)
        }),
        ("concat_heads", &[(MH, "concat_heads")], || {
            ch06::concat_heads(g::ch06_attention_multihead::concat_heads)
        }),
        ("mha_backward", &[(MH, "mha_backward")], || {
            ch06::mha_backward(g::ch06_attention_multihead::mha_backward)
        }),
        (
            "decoder_block_backward",
            &[("ch07_encoder_decoder/layers.rs", "decoder_block_backward")],
            || ch07::decoder_block_backward(g::ch07_encoder_decoder_layers::decoder_block_backward),
        ),
        ("apply_merges", &[("ch08_tokens/bpe.rs", "apply_merges")], || {
            ch08::apply_merges(g::ch08_tokens_bpe::apply_merges)
        }),
        ("temperature_distribution", &[("ch09_gpt/sample.rs", "distribution")], || {
            ch09::temperature_distribution(|z, t| {
                g::ch09_gpt_sample::distribution(z, &Decoding::temperature(t))
            })
        }),
        ("top_k_distribution", &[("ch09_gpt/sample.rs", "distribution")], || {
            ch09::top_k_distribution(|z, k, t| {
                let spec = Decoding::Sample { temperature: t, top_k: Some(k), top_p: None };
                g::ch09_gpt_sample::distribution(z, &spec)
            })
        }),
        ("f32_to_bf16", &[(FMT, "f32_to_bf16")], || {
            ch11::f32_to_bf16(g::ch11_precision_format::f32_to_bf16)
        }),
        ("f16_to_f32", &[(FMT, "f16_to_f32")], || {
            ch11::f16_to_f32(g::ch11_precision_format::f16_to_f32)
        }),
        ("kahan_sum", &[("ch11_precision/summation.rs", "kahan_sum")], || {
            ch11::kahan_sum(|xs| g::ch11_precision_summation::kahan_sum(xs.iter().copied()))
        }),
    ]
}

/// The judge's verdict on `mutant` (0: none), or a failure if it hangs past [`HANG`].
fn judged(mutant: u32, judge: fn() -> Verdict) -> Verdict {
    g::ACTIVE.store(mutant, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(judge());
    });
    let verdict = rx.recv_timeout(HANG).unwrap_or_else(|_| Err("a hang".into()));
    g::ACTIVE.store(0, Ordering::Relaxed);
    verdict
}

#[test]
fn every_mutant_that_changes_a_result_fails_its_judge() {
    let exercises = exercises();
    // The copies with no mutant on are the main crate's functions: every judge passes them.
    for (name, _, judge) in &exercises {
        if let Err(m) = judged(0, *judge) {
            panic!("the judge of `{name}` failed the unmutated copy of its function:\n{m}");
        }
    }
    // Every mutated function is behind some exercise.
    for (_, file, function, _) in g::MUTANTS {
        assert!(
            exercises.iter().any(|(_, uses, _)| uses.contains(&(*file, *function))),
            "no exercise calls the mutated {file}:{function}"
        );
    }
    sweep::set_quick(true);
    let (mut caught, mut equivalent, mut missed) = (0, Vec::new(), Vec::new());
    for &(id, file, function, what) in g::MUTANTS {
        let judges: Vec<_> =
            exercises.iter().filter(|(_, uses, _)| uses.contains(&(file, function))).collect();
        if judges.iter().any(|(_, _, judge)| judged(id, *judge).is_err()) {
            caught += 1;
            continue;
        }
        // Passed: is there an input on which it differs? Sweep again with other seeds.
        let mut seen = None;
        for salt in [1, 2] {
            sweep::set_salt(salt);
            if let Some((name, _, _)) =
                judges.iter().find(|(_, _, judge)| judged(id, *judge).is_err())
            {
                seen = Some(*name);
            }
            sweep::set_salt(0);
            if seen.is_some() {
                break;
            }
        }
        let line = format!("#{id} {file}:{function}: {what}");
        match seen {
            Some(name) => {
                missed.push(format!("{line} (the sweep of `{name}` with another seed sees it)"))
            }
            None => equivalent.push(line),
        }
    }
    sweep::set_quick(false);
    println!(
        "{} exercises' functions not mutated (they call private items of the crate, or are \
         methods or constants):",
        g::NOT_MUTATED.len()
    );
    for (name, why) in g::NOT_MUTATED {
        println!("  {name}: {why}");
    }
    println!(
        "{} mutants generated: {caught} caught, {} equivalent (no difference on the sweeps of three \
         seeds), {} missed",
        g::MUTANTS.len(),
        equivalent.len(),
        missed.len()
    );
    for line in &equivalent {
        println!("  equivalent: {line}");
    }
    assert!(missed.is_empty(), "mutants the judges missed:\n{}", missed.join("\n"));
    // The exercises page states these counts.
    let page = include_str!("../../chapters/exercises.md");
    let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    let says = format!(
        "{} exercises have their function mutated: {} mutants, {caught} caught by the judges and {} \
         equivalent, none missed",
        exercises.len(),
        g::MUTANTS.len(),
        equivalent.len()
    );
    assert!(flat(page).contains(&says), "chapters/exercises.md should say: {says}");
}
