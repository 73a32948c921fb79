//! Proof by mutation: the main crate's own function behind each exercise, altered mechanically
//! at every site (`tests/mutants_gen.rs` writes the mutants, all compiled in one build behind a
//! run-time switch), must fail its judge, unless no input shows a difference. With no mutant on,
//! every judge passes the copies (they are the main crate's functions). A mutant the judge
//! passes is swept again with two other seeds: if a difference shows there, the judge missed it
//! and the test fails; if none does, it is counted as equivalent (a change no input the doc
//! covers can see, such as `<` for `≤` where the two sides are never equal), never skipped.
//! `cargo test -p llm-workbook-exercises --test mutation -- --nocapture` prints the counts.

use llm_workbook::ch03_mlp::Activation;
use llm_workbook::ch06_attention as book6;
use llm_workbook::ch09_gpt::sample::Decoding;
use llm_workbook::matmul::Op;
use llm_workbook_exercises::judge::{self, Verdict, sweep};
use nalgebra::DMatrix;
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
    use judge::{ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, ch11};
    const NEURON: &str = "ch01_logistic/neuron.rs";
    const PROB: &str = "ch02_softmax/probabilities.rs";
    const LOSS2: &str = "ch02_softmax/loss.rs";
    const DENSE: &str = "ch03_mlp/dense.rs";
    const ATT: &str = "ch06_attention/attention.rs";
    const LN: &str = "ch06_attention/layer_norm.rs";
    const MH: &str = "ch06_attention/multihead.rs";
    const BLK: &str = "ch06_attention/block.rs";
    const CROSS: &str = "ch07_encoder_decoder/cross_attention.rs";
    const MM: &str = "matmul/mod.rs";
    const FMT: &str = "ch11_precision/format.rs";
    const QUANT: &str = "ch11_precision/quant.rs";
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
        ("cross_entropy_from_logits", &[(LOSS2, "cross_entropy_from_logits")], || {
            ch02::cross_entropy_from_logits(g::ch02_softmax_loss::cross_entropy_from_logits)
        }),
        ("cross_entropy_from_logits_backward", &[(LOSS2, "cross_entropy_from_logits_backward")], || {
            ch02::cross_entropy_from_logits_backward(
                g::ch02_softmax_loss::cross_entropy_from_logits_backward,
            )
        }),
        ("softmax_rows_backward", &[(PROB, "softmax_rows_backward")], || {
            ch02::softmax_rows_backward(g::ch02_softmax_probabilities::softmax_rows_backward)
        }),
        ("log_softmax_rows_backward", &[(PROB, "log_softmax_rows_backward")], || {
            ch02::log_softmax_rows_backward(g::ch02_softmax_probabilities::log_softmax_rows_backward)
        }),
        (
            "regression_logits_backward",
            &[("ch02_softmax/regression.rs", "regression_logits_backward")],
            || {
                ch02::regression_logits_backward(
                    g::ch02_softmax_regression::regression_logits_backward,
                )
            },
        ),
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
            ch05::sinusoidal(|n, d| g::ch05_positions_encoding::sinusoidal::<f64>(n, d))
        }),
        ("add_positions", &[("ch05_positions/encoding.rs", "add_positions")], || {
            ch05::add_positions(g::ch05_positions_encoding::add_positions)
        }),
        ("causal_mask", &[(ATT, "causal_mask")], || {
            ch06::causal_mask(|q, k| g::ch06_attention_attention::causal_mask::<f64>(q, k))
        }),
        ("attention_forward", &[(ATT, "attention_forward")], || {
            ch06::attention_forward(|q, k, v, c| {
                let spec = book6::AttnSpec { causal: c, ..book6::AttnSpec::cross(q.nrows(), k.nrows()) };
                g::ch06_attention_attention::attention_forward(q, k, v, &spec).map(|a| (a.out, a.weights))
            })
        }),
        ("attention_backward", &[(ATT, "attention_backward")], || {
            ch06::attention_backward(|q, k, v, a, d, c| {
                let spec = book6::AttnSpec { causal: c, ..book6::AttnSpec::cross(q.nrows(), k.nrows()) };
                g::ch06_attention_attention::attention_backward(q, k, v, a, d, &spec)
                    .map(|g| (g.d_q, g.d_k, g.d_v))
            })
        }),
        ("layer_norm_forward", &[(LN, "layer_norm_forward")], || {
            ch06::layer_norm_forward(|x, gamma, beta, eps| {
                let ln = layer_norm(gamma, beta.clone(), eps);
                g::ch06_attention_layer_norm::layer_norm_forward(&ln, x).map(|(y, _)| y)
            })
        }),
        ("layer_norm_backward", &[(LN, "layer_norm_backward")], || {
            ch06::layer_norm_backward(|x, gamma, d_y, eps| {
                let ln = layer_norm(gamma, DMatrix::zeros(gamma.nrows(), gamma.ncols()), eps);
                let (_, cache) = book6::layer_norm_forward(&ln, x)?;
                g::ch06_attention_layer_norm::layer_norm_backward(&ln, &cache, d_y)
                    .map(|g| (g.d_x, g.d_gamma, g.d_beta))
            })
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
        ("ffn_backward", &[(BLK, "ffn_backward")], || {
            ch06::ffn_backward(g::ch06_attention_block::ffn_backward)
        }),
        ("block_backward", &[(BLK, "block_backward")], || {
            ch06::block_backward(g::ch06_attention_block::block_backward)
        }),
        ("padding_mask", &[(ATT, "padding_mask")], || {
            ch07::padding_mask(|l, q, k| g::ch06_attention_attention::padding_mask::<f64>(l, q, k))
        }),
        ("cross_attention_forward", &[(CROSS, "cross_attention_forward")], || {
            ch07::cross_attention_forward(|y, yb, e, eb, w| {
                g::ch07_encoder_decoder_cross_attention::cross_attention_forward(y, yb, e, eb, w)
                    .map(|(o, _)| o)
            })
        }),
        ("cross_attention_backward", &[(CROSS, "cross_attention_backward")], || {
            ch07::cross_attention_backward(|y, yb, e, eb, w, d| {
                let (_, cache) =
                    llm_workbook::ch07_encoder_decoder::cross_attention_forward(y, yb, e, eb, w)?;
                g::ch07_encoder_decoder_cross_attention::cross_attention_backward(w, &cache, d)
            })
        }),
        ("decoder_block_backward", &[("ch07_encoder_decoder/layers.rs", "decoder_block_backward")], || {
            ch07::decoder_block_backward(g::ch07_encoder_decoder_layers::decoder_block_backward)
        }),
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
        ("pack_a_block", &[(MM, "pack_a_block")], || {
            ch10::pack_a_block(|a, op: Op, r, d, w| g::matmul_mod::pack_a_block::<f64>(a, op, r, d, w))
        }),
        ("pack_b_panel", &[(MM, "pack_b_panel")], || {
            ch10::pack_b_panel(|b, op: Op, d, c, w| g::matmul_mod::pack_b_panel::<f64>(b, op, d, c, w))
        }),
        ("f32_to_bf16", &[(FMT, "f32_to_bf16")], || ch11::f32_to_bf16(g::ch11_precision_format::f32_to_bf16)),
        ("f16_to_f32", &[(FMT, "f16_to_f32")], || ch11::f16_to_f32(g::ch11_precision_format::f16_to_f32)),
        ("kahan_sum", &[("ch11_precision/summation.rs", "kahan_sum")], || {
            ch11::kahan_sum(|xs| g::ch11_precision_summation::kahan_sum(xs.iter().copied()))
        }),
        ("quantize_block", &[(QUANT, "block_scale"), (QUANT, "quantize_value")], || {
            ch11::quantize_block(|w, l| {
                let s = g::ch11_precision_quant::block_scale(w, l);
                (s, w.iter().map(|&x| g::ch11_precision_quant::quantize_value(x, s, l)).collect())
            })
        }),
        ("dequantize_block", &[(QUANT, "dequantize_block")], || {
            ch11::dequantize_block(|scale, codes| {
                use llm_workbook::ch11_precision::quant::{BLOCK, Block};
                let mut block = Block { scale, codes: [0; BLOCK] };
                let n = codes.len().min(BLOCK);
                block.codes[..n].copy_from_slice(&codes[..n]);
                g::ch11_precision_quant::dequantize_block(&block)[..n].to_vec()
            })
        }),
        ("int8_block_dot", &[("ch11_precision/quant_step.rs", "column_dot_reference")], || {
            ch11::int8_block_dot(|x, scale, codes| {
                use llm_workbook::ch11_precision::quant::{BLOCK, Storage};
                let (mut xs, mut qs) = ([0.0f32; BLOCK], [0u8; BLOCK]);
                let n = x.len().min(codes.len()).min(BLOCK);
                xs[..n].copy_from_slice(&x[..n]);
                for (q, &c) in qs.iter_mut().zip(&codes[..n]) {
                    *q = c as u8;
                }
                g::ch11_precision_quant_step::column_dot_reference(&xs, &[scale], &qs, Storage::Int8)
            })
        }),
    ]
}

/// Chapter 6's LayerNorm with ε inside the square root, as the exercises define it.
fn layer_norm(gamma: &DMatrix<f64>, beta: DMatrix<f64>, eps: f64) -> book6::LayerNorm<f64> {
    book6::LayerNorm { gamma: gamma.clone(), beta, eps, placement: book6::Epsilon::InsideSqrt }
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
            if let Some((name, _, _)) = judges.iter().find(|(_, _, judge)| judged(id, *judge).is_err()) {
                seen = Some(*name);
            }
            sweep::set_salt(0);
            if seen.is_some() {
                break;
            }
        }
        let line = format!("#{id} {file}:{function}: {what}");
        match seen {
            Some(name) => missed.push(format!("{line} (the sweep of `{name}` with another seed sees it)")),
            None => equivalent.push(line),
        }
    }
    sweep::set_quick(false);
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
}
