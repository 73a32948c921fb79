//! Proof by mutation: the main crate's own function behind each exercise, altered mechanically
//! at every site (`tests/mutants_gen.rs` writes the mutants, all compiled in one build behind a
//! run-time switch), must fail its judge, unless no input shows a difference. With no mutant on,
//! every judge passes the copies (they are the main crate's functions). A mutant the judge
//! passes is swept again: with another seed, then twice with the shapes and edges varied too
//! (rows and lengths one more or fewer, down to 0; NaN and infinities; token ids past the
//! vocabulary; values a million times larger or smaller: `sweep::set_wide`). If a difference
//! shows there, the judge missed it and the test fails; if none does, it is counted as
//! equivalent (a change no input the doc covers can see, such as `<` for `≤` where the two sides
//! are never equal, or a check of a setting the exercise never passes), never skipped.
//! `cargo test -p llm-workbook-exercises --test mutation -- --nocapture` prints the counts.

use llm_workbook::ch03_mlp::Activation;
use llm_workbook::ch06_attention::{AttnSpec, Epsilon, LayerNorm};
use llm_workbook::ch06_attention::{concat_heads, split_heads};
use llm_workbook::ch08_tokens::TokenId;
use llm_workbook::ch08_tokens::ngram::{Followers, NGramModel};
use llm_workbook::ch09_gpt::sample::Decoding;
use llm_workbook::ch12_modern::{
    Gate, GatedMlp, KvCacheShape, Pairing, Positions, RmsNorm, RopeTable,
};
use llm_workbook::ch13_finetune::Lora;
use llm_workbook::optim::{AdamMoments, AdamW};
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

/// The re-sweeps of a mutant its judge passed: (salt, wide) — another seed for the values,
/// then two more with the shapes and edges varied too ([`sweep::set_wide`]).
const RESWEEPS: [(u64, bool); 3] = [(1, false), (2, true), (3, true)];

/// One exercise: its name, the mutated functions it calls (file, function), and its judge run
/// on the mutated copies.
type Exercise = (&'static str, &'static [(&'static str, &'static str)], fn() -> Verdict);

/// Every exercise whose main-crate function is mutated, in the order of the book.
fn exercises() -> Vec<Exercise> {
    use judge::{ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, ch11, ch12, ch13};
    const NEURON: &str = "ch01_logistic/neuron.rs";
    const PROB: &str = "ch02_softmax/probabilities.rs";
    const DENSE: &str = "ch03_mlp/dense.rs";
    const MH: &str = "ch06_attention/multihead.rs";
    const FMT: &str = "ch11_precision/format.rs";
    const LOSS: &str = "ch02_softmax/loss.rs";
    const ATT: &str = "ch06_attention/attention.rs";
    const LN: &str = "ch06_attention/layer_norm.rs";
    const BLOCK: &str = "ch06_attention/block.rs";
    const CROSS: &str = "ch07_encoder_decoder/cross_attention.rs";
    const QUANT: &str = "ch11_precision/quant.rs";
    const NGRAM: &str = "ch08_tokens/ngram.rs";
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
        ("mlp_backward", &[("ch03_mlp/mlp.rs", "Mlp::backward")], || {
            ch03::mlp_backward(|mlp, trace, d_out| {
                use g::ch03_mlp_mlp::Ext_ch03_mlp_mlp_Mlp_0 as Mutated;
                Mutated::backward(mlp, trace, d_out)
            })
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
        (
            "loss_and_gradients",
            &[("ch07_encoder_decoder/model.rs", "EncoderDecoder::loss_and_gradients")],
            || {
                ch07::loss_and_gradients(|model, source, target_in, labels| {
                    use copy::Ext_ch07_encoder_decoder_model_EncoderDecoder_0 as Mutated;
                    use g::ch07_encoder_decoder_model as copy;
                    Mutated::loss_and_gradients(model, source, target_in, labels)
                })
            },
        ),
        ("apply_merges", &[("ch08_tokens/bpe.rs", "apply_merges")], || {
            ch08::apply_merges(g::ch08_tokens_bpe::apply_merges)
        }),
        ("bigram_counts", &[(NGRAM, "context_followers")], || {
            ch08::bigram_counts(|tokens, v| {
                NGramModel::fit(tokens, 2, v)?; // the checks of the tokens, not mutated
                let pairs = g::ch08_tokens_ngram::context_followers(tokens, 1);
                Ok(DMatrix::from_fn(v, v, |a, b| {
                    let count = |f: &Followers| f.count(b as TokenId) as f64;
                    pairs.get(&vec![a as TokenId]).map_or(0.0, count)
                }))
            })
        }),
        ("add_k_probability", &[(NGRAM, "NGramModel::add_k")], || {
            ch08::add_k_probability(|tokens, v, context, next, k| {
                use g::ch08_tokens_ngram::Ext_ch08_tokens_ngram_NGramModel_0 as Mutated;
                Ok(Mutated::add_k(&NGramModel::fit(tokens, 2, v)?, &[context], next, k))
            })
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
        ("kv_cache_step", &[(CACHED, "attend_one"), (FORWARD, "causal_block_forward")], || {
            ch09::kv_cache_step(|keys, values, len, q, k, v| {
                // The reference's checks and its writes of row len (its attention discarded),
                // then the mutated attention of the one new row over rows 0 … len.
                use llm_workbook_exercises::solutions::ch09_gpt::kv_cache_step;
                let (mut k_after, mut v_after) = (keys.clone(), values.clone());
                kv_cache_step(&mut k_after, &mut v_after, len, q, k, v)?;
                (*keys, *values) = (k_after, v_after);
                g::ch09_gpt_fast_cached::attend_one("kv_cache_step", q, keys, values, len + 1, 1)
            })
        }),
        ("adamw_step", &[("optim.rs", "AdamW::step")], || {
            ch09::adamw_step(|theta, grad, m, v, steps, config, weight_decay| {
                use g::optim::Ext_optim_AdamW_0 as Mutated;
                let mut opt = AdamW::new(*config, weight_decay)?;
                if steps > 0 {
                    opt.moments = AdamMoments::from_parts(vec![m.clone()], vec![v.clone()], steps)?;
                }
                Mutated::step(&mut opt, &mut [theta], &[grad], &[true])?;
                *m = opt.moments.first()[0].clone();
                *v = opt.moments.second()[0].clone();
                Ok(())
            })
        }),
        ("pack_a_block", &[(LAB, "pack_a_block"), (PACK, "pack_a")], || {
            ch10::pack_a_block(g::matmul_lab::pack_a_block::<f64>)
        }),
        ("pack_b_panel", &[(LAB, "pack_b_panel"), (PACK, "pack_a")], || {
            ch10::pack_b_panel(g::matmul_lab::pack_b_panel::<f64>)
        }),
        ("micro_kernel", &[(LAB, "scalar_update"), ("matmul/scalar.rs", "kernel")], || {
            ch10::micro_kernel(|kc, a, b, alpha, beta, c| {
                let _ = g::matmul_lab::scalar_update(kc, a, b, alpha, beta, c);
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
        ("cross_entropy_from_logits", &[(LOSS, "cross_entropy_from_logits")], || {
            ch02::cross_entropy_from_logits(g::ch02_softmax_loss::cross_entropy_from_logits)
        }),
        (
            "cross_entropy_from_logits_backward",
            &[(LOSS, "cross_entropy_from_logits_backward")],
            || {
                ch02::cross_entropy_from_logits_backward(
                    g::ch02_softmax_loss::cross_entropy_from_logits_backward,
                )
            },
        ),
        (
            "regression_logits_backward",
            &[("ch02_softmax/regression.rs", "regression_logits_backward")],
            || {
                ch02::regression_logits_backward(
                    g::ch02_softmax_regression::regression_logits_backward,
                )
            },
        ),
        ("causal_mask", &[(ATT, "causal_mask")], || {
            ch06::causal_mask(g::ch06_attention_attention::causal_mask::<f64>)
        }),
        ("padding_mask", &[(ATT, "padding_mask")], || {
            ch07::padding_mask(g::ch06_attention_attention::padding_mask::<f64>)
        }),
        ("attention_forward", &[(ATT, "attention_forward")], || {
            ch06::attention_forward(|q, k, v, causal| {
                let spec = attention_spec(q, k, causal);
                let a = g::ch06_attention_attention::attention_forward(q, k, v, &spec)?;
                Ok((a.out, a.weights))
            })
        }),
        ("attention_backward", &[(ATT, "attention_backward")], || {
            ch06::attention_backward(|q, k, v, weights, d_out, causal| {
                let spec = attention_spec(q, k, causal);
                let g = g::ch06_attention_attention::attention_backward(
                    q, k, v, weights, d_out, &spec,
                )?;
                Ok((g.d_q, g.d_k, g.d_v))
            })
        }),
        ("layer_norm_forward", &[(LN, "layer_norm_forward")], || {
            ch06::layer_norm_forward(|x, gamma, beta, eps| {
                let ln = layer_norm(gamma, beta.clone(), eps);
                Ok(g::ch06_attention_layer_norm::layer_norm_forward(&ln, x)?.0)
            })
        }),
        ("layer_norm_backward", &[(LN, "layer_norm_forward"), (LN, "layer_norm_backward")], || {
            ch06::layer_norm_backward(|x, gamma, d_y, eps| {
                let ln = layer_norm(gamma, DMatrix::zeros(gamma.nrows(), gamma.ncols()), eps);
                let (_, cache) = g::ch06_attention_layer_norm::layer_norm_forward(&ln, x)?;
                let g = g::ch06_attention_layer_norm::layer_norm_backward(&ln, &cache, d_y)?;
                Ok((g.d_x, g.d_gamma, g.d_beta))
            })
        }),
        ("ffn_backward", &[(BLOCK, "ffn_backward")], || {
            ch06::ffn_backward(g::ch06_attention_block::ffn_backward)
        }),
        ("block_backward", &[(BLOCK, "ffn_backward"), (BLOCK, "block_backward")], || {
            ch06::block_backward(g::ch06_attention_block::block_backward)
        }),
        ("cross_attention_forward", &[(CROSS, "cross_attention_forward")], || {
            ch07::cross_attention_forward(|y, yb, e, eb, w| {
                g::ch07_encoder_decoder_cross_attention::cross_attention_forward(y, yb, e, eb, w)
                    .map(|(o, _)| o)
            })
        }),
        (
            "cross_attention_backward",
            &[(CROSS, "cross_attention_forward"), (CROSS, "cross_attention_backward")],
            || {
                ch07::cross_attention_backward(|y, yb, e, eb, w, d_out| {
                    use g::ch07_encoder_decoder_cross_attention as ca;
                    let (_, cache) = ca::cross_attention_forward(y, yb, e, eb, w)?;
                    ca::cross_attention_backward(w, &cache, d_out)
                })
            },
        ),
        ("lm_head_backward", &[(LOSS, "cross_entropy_from_logits_with_gradient")], || {
            ch09::lm_head_backward(|h, w_u, targets| {
                use llm_workbook::matmul::{matmul, matmul_nt, matmul_tn};
                let z = matmul_nt(h, w_u)?;
                let (loss, d_z) =
                    g::ch02_softmax_loss::cross_entropy_from_logits_with_gradient(&z, targets)?;
                Ok((loss, matmul(&d_z, w_u)?, matmul_tn(&d_z, h)?))
            })
        }),
        ("quantize_block", &[(QUANT, "block_scale"), (QUANT, "quantize_value")], || {
            ch11::quantize_block(|w, max_level| {
                use g::ch11_precision_quant::{block_scale, quantize_value};
                let s = block_scale(w, max_level);
                (s, w.iter().map(|&x| quantize_value(x, s, max_level)).collect())
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
                g::ch11_precision_quant_step::column_dot_reference(
                    &xs,
                    &[scale],
                    &qs,
                    Storage::Int8,
                )
            })
        }),
        ("balanced_step", &[("ch11_precision/steps.rs", "Difference::balanced_step")], || {
            ch11::balanced_step(|kind, epsilon| {
                use g::ch11_precision_steps::Ext_ch11_precision_steps_Difference_0 as Mutated;
                Mutated::balanced_step(kind, epsilon)
            })
        }),
        ("rms_norm_backward", &[(RMS, "rms_norm_forward"), (RMS, "rms_norm_backward")], || {
            ch12::rms_norm_backward(|x, gamma, d_y, eps| {
                use g::ch12_modern_rms_norm as m;
                let norm = RmsNorm { gamma: gamma.clone(), eps };
                let (_, cache) = m::rms_norm_forward(&norm, x)?;
                let g = m::rms_norm_backward(&norm, &cache, d_y)?;
                Ok((g.d_x, g.d_gamma))
            })
        }),
        ("rope_forward", ROPES, || {
            ch12::rope_forward(|q, h, start, base, p| rope_heads(q, h, start, base, p, false))
        }),
        ("rope_backward", ROPES, || {
            ch12::rope_backward(|d, h, start, base, p| rope_heads(d, h, start, base, p, true))
        }),
        ("swiglu_backward", &[(GLU, "glu_forward"), (GLU, "glu_backward")], || {
            ch12::swiglu_backward(|x, w_gate, w_up, w_down, d_y| {
                let (w_gate, w_up, w_down) = (w_gate.clone(), w_up.clone(), w_down.clone());
                let p = GatedMlp { w_gate, w_up, w_down, gate: Gate::Swish };
                let (_, cache) = g::ch12_modern_glu::glu_forward(&p, x)?;
                g::ch12_modern_glu::glu_backward(&p, &cache, d_y)
            })
        }),
        ("gqa_backward", &[(GQA, "gqa_forward_with"), (GQA, "gqa_backward_with")], || {
            ch12::gqa_backward(|p, x, seq_len, d_y| {
                let (_, cache) = g::ch12_modern_gqa::gqa_forward_with(p, None, x, seq_len)?;
                g::ch12_modern_gqa::gqa_backward_with(p, None, &cache, d_y)
            })
        }),
        (
            "kv_cache_bytes_per_token",
            &[("ch12_modern/mod.rs", "KvCacheShape::bytes_per_token")],
            || {
                ch12::kv_cache_bytes_per_token(|layers, n_heads, n_kv_heads, head_dim, bytes| {
                    use g::ch12_modern_mod::Ext_ch12_modern_mod_KvCacheShape_0 as Mutated;
                    let shape = KvCacheShape { layers, n_heads, n_kv_heads, head_dim };
                    Mutated::bytes_per_token(&shape, bytes)
                })
            },
        ),
        ("masked_cross_entropy", SFTS, || {
            ch13::masked_cross_entropy(|z, targets, mask| {
                use g::ch13_finetune_sft as m;
                let (loss, cache) = m::masked_cross_entropy_forward(z, targets, mask)?;
                Ok((loss, m::masked_cross_entropy_backward(&cache)?))
            })
        }),
        ("lora_new", &[(LORA, "Lora::new")], || {
            ch13::lora_new(|w, rank, alpha, seed| {
                use g::ch13_finetune_lora::Ext_ch13_finetune_lora_Lora_0 as Mutated;
                <Lora as Mutated>::new(w, rank, alpha, seed)
            })
        }),
        ("lora_backward", &[(LORA, "lora_forward"), (LORA, "lora_backward")], || {
            ch13::lora_backward(|layer, x, d_y| {
                let (_, cache) = g::ch13_finetune_lora::lora_forward(layer, x)?;
                g::ch13_finetune_lora::lora_backward(layer, &cache, d_y)
            })
        }),
        ("dpo_loss_and_gradient", DPOS, || {
            ch13::dpo_loss_and_gradient(|pairs, beta| {
                let (loss, cache) = g::ch13_finetune_dpo::dpo_forward(pairs, beta)?;
                let g = g::ch13_finetune_dpo::dpo_backward(&cache);
                Ok((loss, g.d_chosen, g.d_rejected))
            })
        }),
        ("group_advantages", &[(GRPO, "group_advantages")], || {
            ch13::group_advantages(g::ch13_finetune_grpo::group_advantages)
        }),
        ("grpo_loss_and_gradient", GRPOS, || {
            ch13::grpo_loss_and_gradient(|spec, sample| {
                let (loss, cache) = g::ch13_finetune_grpo::grpo_forward(spec, sample)?;
                Ok((loss, g::ch13_finetune_grpo::grpo_backward(&cache)?))
            })
        }),
        ("k3", &[(GRPO, "k3")], || ch13::k3(g::ch13_finetune_grpo::k3)),
    ]
}

/// Chapter 9's files of the cached step's attention.
const CACHED: &str = "ch09_gpt/fast/cached.rs";
const FORWARD: &str = "ch09_gpt/fast/forward.rs";
/// Chapter 10's files of the packing and the portable micro-kernel.
const LAB: &str = "matmul/lab.rs";
const PACK: &str = "matmul/pack.rs";
/// Chapter 12's file of RMSNorm.
const RMS: &str = "ch12_modern/rms_norm.rs";
/// Chapter 12's file of the rotation.
const ROPE: &str = "ch12_modern/rope.rs";
/// Chapter 12's file of the gated MLPs.
const GLU: &str = "ch12_modern/glu.rs";
/// Chapter 12's file of grouped-query attention.
const GQA: &str = "ch12_modern/gqa.rs";
/// Chapter 13's files.
const SFT: &str = "ch13_finetune/sft.rs";
const LORA: &str = "ch13_finetune/lora.rs";
const DPO: &str = "ch13_finetune/dpo.rs";
const GRPO: &str = "ch13_finetune/grpo.rs";
/// The rotation's mutated functions, which both rotation exercises call.
const ROPES: &[(&str, &str)] = &[
    (ROPE, "rope_frequencies"),
    (ROPE, "RopeTable::new"),
    (ROPE, "rope_forward"),
    (ROPE, "rope_backward"),
];
/// The masked cross-entropy's mutated functions.
const SFTS: &[(&str, &str)] = &[
    (SFT, "masked_cross_entropy_forward"),
    (SFT, "masked_cross_entropy_backward"),
    (SFT, "sequence_log_prob_backward"),
    (SFT, "token_log_probs_backward"),
];
/// DPO's mutated functions.
const DPOS: &[(&str, &str)] = &[
    (DPO, "sigmoid"),
    (DPO, "neg_log_sigmoid"),
    (DPO, "reward_margin"),
    (DPO, "dpo_forward"),
    (DPO, "dpo_backward"),
];
/// GRPO's mutated functions.
const GRPOS: &[(&str, &str)] =
    &[(GRPO, "k3"), (GRPO, "clipped_surrogate"), (GRPO, "grpo_forward"), (GRPO, "grpo_backward")];

/// The exercises' rotation of every head of `m` (T rows from position `start`) by the mutated
/// table and rotation: forward, or its transpose when `backward`.
fn rope_heads(
    m: &DMatrix<f64>,
    n_heads: usize,
    start: usize,
    base: f64,
    pairing: Pairing,
    backward: bool,
) -> llm_workbook::Result<DMatrix<f64>> {
    use g::ch12_modern_rope as r;
    use r::Ext_ch12_modern_rope_RopeTable_0 as Mutated;
    let heads = split_heads(m, n_heads)?;
    let d_h = heads.first().map_or(0, DMatrix::ncols);
    let table = <RopeTable<f64> as Mutated<f64>>::new(start + m.nrows(), d_h, base)?;
    let at = Positions { seq_len: m.nrows(), start };
    let turned = heads
        .iter()
        .map(|h| {
            if backward {
                r::rope_backward(&table, pairing, h, at)
            } else {
                r::rope_forward(&table, pairing, h, at)
            }
        })
        .collect::<llm_workbook::Result<Vec<_>>>()?;
    concat_heads(&turned)
}

/// The exercises' attention specification: T_q and T_k from Q and K, causal or not.
fn attention_spec(q: &DMatrix<f64>, k: &DMatrix<f64>, causal: bool) -> AttnSpec<f64> {
    AttnSpec { causal, ..AttnSpec::cross(q.nrows(), k.nrows()) }
}

/// The exercises' LayerNorm: γ, β and ε given, ε inside the square root.
fn layer_norm(gamma: &DMatrix<f64>, beta: DMatrix<f64>, eps: f64) -> LayerNorm<f64> {
    LayerNorm { gamma: gamma.clone(), beta, eps, placement: Epsilon::InsideSqrt }
}

/// The judge's verdict on `mutant` (0: none), or a failure if it hangs past [`HANG`].
fn judged(mutant: u32, judge: fn() -> Verdict) -> Verdict {
    g::ACTIVE.store(mutant, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(judge());
    });
    let verdict = rx.recv_timeout(HANG).unwrap_or_else(|e| match e {
        mpsc::RecvTimeoutError::Timeout => Err("a hang".into()),
        mpsc::RecvTimeoutError::Disconnected => Err("the judge itself panicked".into()),
    });
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
    for (_, file, function, roots, _) in g::MUTANTS {
        for root in *roots {
            assert!(
                exercises.iter().any(|(_, uses, _)| uses.contains(&(*file, *root))),
                "no exercise calls the mutated {file}:{root} (through {function})"
            );
        }
    }
    sweep::set_quick(true);
    // The judges whose other seeds or wide draws fail the unmutated copies (a judge whose
    // inputs break the copy's own preconditions there): named, and left out of those re-sweeps.
    let mut unusable = Vec::new();
    for (salt, wide) in RESWEEPS {
        sweep::set_salt(salt);
        sweep::set_wide(wide);
        for (name, _, judge) in &exercises {
            if let Err(m) = judged(0, *judge) {
                println!("re-sweep (salt {salt}, wide {wide}) of `{name}` fails the copy: {m}");
                if !unusable.contains(name) {
                    unusable.push(*name);
                }
            }
        }
    }
    sweep::set_salt(0);
    sweep::set_wide(false);
    let (mut caught, mut equivalent, mut missed) = (0, Vec::new(), Vec::new());
    let mut caught_ids = Vec::new();
    for &(id, file, function, roots, what) in g::MUTANTS {
        let judges: Vec<_> = exercises
            .iter()
            .filter(|(_, uses, _)| roots.iter().any(|r| uses.contains(&(file, *r))))
            .collect();
        if judges.iter().any(|(_, _, judge)| judged(id, *judge).is_err()) {
            caught += 1;
            caught_ids.push(id);
            continue;
        }
        // Passed: is there an input on which it differs? Sweep again with other seeds, then
        // with shapes and edges varied too (wide), on the judges wide mode leaves passing the
        // unmutated copies.
        let mut seen = None;
        for (salt, wide) in RESWEEPS {
            sweep::set_salt(salt);
            sweep::set_wide(wide);
            if let Some((name, _, _)) = judges
                .iter()
                .filter(|(name, _, _)| !unusable.contains(name))
                .find(|(_, _, judge)| judged(id, *judge).is_err())
            {
                seen = Some(*name);
            }
            sweep::set_salt(0);
            sweep::set_wide(false);
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
    if std::env::var_os("LLM_WORKBOOK_EXPLAIN").is_some() {
        print_explanations(&exercises, &caught_ids);
    }
    println!("{} exercises not mutated (constants, not functions):", g::NOT_MUTATED.len());
    for (name, why) in g::NOT_MUTATED {
        println!("  {name}: {why}");
    }
    println!(
        "{} mutants generated: {caught} caught, {} equivalent (no difference on three re-sweeps: \
         another seed, then two with shapes and edges varied), {} missed",
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
    let others = format!("The other {} exercises are not mutated", g::NOT_MUTATED.len());
    assert!(flat(page).contains(&others), "chapters/exercises.md should say: {others}");
    for (name, why) in g::NOT_MUTATED {
        let line = format!("- `{name}`: {why}");
        assert!(flat(page).contains(&flat(&line)), "chapters/exercises.md should list: {line}");
    }
    let all: usize = llm_workbook_exercises::EXERCISES.iter().map(|c| c.exercises.len()).sum();
    assert_eq!(exercises.len() + g::NOT_MUTATED.len(), all, "every exercise, mutated or not");
}

/// For an audit of the judges' diagnoses (`LLM_WORKBOOK_EXPLAIN=1`, with `--nocapture`): each
/// caught mutant's full verdict, as a reader's answer with that change would get it, reduced to
/// what explains it: a known mistake named by the chapter's checks, or none. A mutant is a
/// mistake nobody listed, so a diagnosis printed here must fit the change the mutant makes.
fn print_explanations(exercises: &[Exercise], caught: &[u32]) {
    const NAMED: &str = "explanation, from the chapter's own checks: ";
    for &(id, file, function, roots, what) in g::MUTANTS.iter().filter(|m| caught.contains(&m.0)) {
        for (name, _, judge) in
            exercises.iter().filter(|(_, uses, _)| roots.iter().any(|r| uses.contains(&(file, *r))))
        {
            let Err(m) = judged(id, *judge) else { continue };
            let why = match m.split_once(NAMED) {
                Some((_, e)) => e.lines().next().unwrap_or_default().to_string(),
                None if m.contains("no known mistake explains it") => "(no diagnosis)".into(),
                None => format!("(checks only) {}", m.lines().next().unwrap_or_default()),
            };
            println!("  explained #{id} {function}: {what} | `{name}`: {why}");
        }
    }
}
