//! Chapter 13: the masked cross-entropy of supervised fine-tuning, LoRA, DPO and GRPO — worked
//! numbers computed by hand, gradient checks of every backward on every input tensor (f64), the
//! adapter's start and merge, its cost for GPT-2 124M, and one-line errors for bad input.

use llm_workbook::ch13_finetune::{
    self as ch, ADVANTAGE_EPS, DpoPair, GrpoSample, GrpoSpec, Lora, TokenCache,
};
use llm_workbook::gradcheck::{Config, check};
use llm_workbook::matmul::matmul;
use llm_workbook::rng::Rng;
use nalgebra::DMatrix;
use std::f64::consts::LN_2;

mod common;

fn rand(rng: &mut Rng, r: usize, c: usize, std: f64) -> DMatrix<f64> {
    rng.normal_matrix(r, c, std)
}

fn column(v: &[f64]) -> DMatrix<f64> {
    DMatrix::from_column_slice(v.len(), 1, v)
}

/// An error is one line of at most 100 columns naming its argument.
fn assert_one_line(e: impl std::fmt::Display, arg: &str) {
    let line = e.to_string();
    assert!(!line.contains('\n') && line.chars().count() <= 100, "{line}");
    assert!(line.contains(arg), "{line} does not name {arg}");
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

// ───────────────────────── supervised fine-tuning ─────────────────────────

/// Rows: a prompt row whose target is badly predicted, then two answer rows.
fn three_rows() -> (DMatrix<f64>, Vec<usize>, Vec<bool>) {
    let logits = DMatrix::from_row_slice(3, 2, &[5.0, 0.0, 3.0_f64.ln(), 0.0, 0.0, 0.0]);
    (logits, vec![1, 0, 1], vec![false, true, true])
}

#[test]
fn masked_cross_entropy_of_two_answer_tokens_by_hand() {
    // Row 1: softmax(ln 3, 0) = (3/4, 1/4), target 0: ℓ = ln(3/4). Row 2: (1/2, 1/2), target 1:
    // ℓ = ln(1/2). The prompt's row 0 is left out: L = −(ln(3/4) + ln(1/2))/2 = ln(8/3)/2.
    let (logits, targets, mask) = three_rows();
    let (loss, cache) = ch::masked_cross_entropy_forward(&logits, &targets, &mask).unwrap();
    assert!(close(loss, (8.0_f64 / 3.0).ln() / 2.0, 1e-15), "{loss}");
    // With the prompt counted, row 0 (ℓ = −ln(1 + e⁵) ≈ −5.0067) would dominate: mean ≈ 2.00.
    let unmasked = ((1.0 + 5.0_f64.exp()).ln() + (4.0_f64 / 3.0).ln() + LN_2) / 3.0;
    assert!(unmasked > 1.99 && loss < 0.5);
    // ∂L/∂z_t = m_t (softmax(z_t) − onehot(y_t))/|M|: row 0 is zero, row 1 is (−1/8, 1/8).
    let d = ch::masked_cross_entropy_backward(&cache).unwrap();
    assert_eq!((d[(0, 0)], d[(0, 1)]), (0.0, 0.0));
    assert!(close(d[(1, 0)], -0.125, 1e-15) && close(d[(1, 1)], 0.125, 1e-15));
    assert!(close(d[(2, 0)], 0.25, 1e-15) && close(d[(2, 1)], -0.25, 1e-15));
    let (log_prob, _) = ch::sequence_log_prob_forward(&logits, &targets, &mask).unwrap();
    assert!(close(log_prob, (3.0_f64 / 8.0).ln(), 1e-15));
}

#[test]
fn masked_cross_entropy_backward_passes_gradient_checks() {
    let mut rng = Rng::new(1301);
    let logits = rand(&mut rng, 6, 7, 1.0);
    let targets = [3, 0, 6, 2, 2, 5];
    let mask = [false, false, true, true, false, true];
    let (_, cache) = ch::masked_cross_entropy_forward(&logits, &targets, &mask).unwrap();
    let d = ch::masked_cross_entropy_backward(&cache).unwrap();
    check(Config::default(), &[("logits", logits)], &[d], |t| {
        ch::masked_cross_entropy_forward(&t[0], &targets, &mask).unwrap().0
    })
    .assert_passed();
}

#[test]
fn sequence_log_prob_backward_passes_gradient_checks() {
    let mut rng = Rng::new(1302);
    let logits = rand(&mut rng, 5, 4, 1.5);
    let (targets, mask) = ([1, 3, 0, 0, 2], [false, true, true, false, true]);
    let upstream = -0.7; // L = −0.7 ln π(y)
    let (_, cache) = ch::sequence_log_prob_forward(&logits, &targets, &mask).unwrap();
    let d = ch::sequence_log_prob_backward(&cache, upstream).unwrap();
    check(Config::default(), &[("logits", logits)], &[d], |t| {
        upstream * ch::sequence_log_prob_forward(&t[0], &targets, &mask).unwrap().0
    })
    .assert_passed();
}

#[test]
fn bad_token_inputs_are_refused_in_one_line() {
    let (logits, targets, mask) = three_rows();
    let e = ch::masked_cross_entropy_forward(&logits, &targets[..2], &mask).unwrap_err();
    assert_one_line(&e, "targets");
    assert!(e.to_string().starts_with("masked_cross_entropy_forward: "), "{e}");
    let e = ch::masked_cross_entropy_forward(&logits, &targets, &mask[..1]).unwrap_err();
    assert_one_line(e, "mask");
    let e = ch::masked_cross_entropy_forward(&logits, &[0, 2, 0], &mask).unwrap_err();
    assert_one_line(e, "targets");
    let e = ch::masked_cross_entropy_forward(&logits, &targets, &[false; 3]).unwrap_err();
    assert_one_line(e, "mask");
    let mut nan = logits.clone();
    nan[(2, 1)] = f64::NAN;
    assert_one_line(ch::masked_cross_entropy_forward(&nan, &targets, &mask).unwrap_err(), "logits");
    let empty = DMatrix::<f64>::zeros(0, 2);
    assert_one_line(ch::sequence_log_prob_forward(&empty, &[], &[]).unwrap_err(), "logits");
    let (_, cache) = ch::sequence_log_prob_forward(&logits, &targets, &mask).unwrap();
    assert_one_line(ch::token_log_probs_backward(&cache, &[1.0]).unwrap_err(), "d_ell");
}

// ───────────────────────── LoRA ─────────────────────────

#[test]
fn a_new_adapter_starts_equal_to_its_frozen_weight() {
    let mut rng = Rng::new(1303);
    let (d_in, d_out, rank) = (64, 48, 8);
    let w = rand(&mut rng, d_in, d_out, 0.1);
    let layer = Lora::new(w.clone(), rank, 16.0, 7).unwrap();
    assert_eq!((layer.a.shape(), layer.b.shape()), ((rank, d_in), (d_out, rank)));
    assert_eq!(layer.scale(), 2.0);
    let x = rand(&mut rng, 5, d_in, 1.0);
    let (y, _) = ch::lora_forward(&layer, &x).unwrap();
    assert_eq!(y, matmul(&x, &w).unwrap(), "B = 0: the layer starts as xW exactly");
    assert_eq!(layer.merged().unwrap(), w);
    // A is random with variance 1/d_in: its 512 entries' mean square is near 1/64.
    let mean_square = layer.a.iter().map(|v| v * v).sum::<f64>() / (rank * d_in) as f64;
    assert!((mean_square * d_in as f64 - 1.0).abs() < 0.2, "{mean_square}");
    // Seeded: the same seed gives the same A, another seed another.
    assert_eq!(Lora::new(w.clone(), rank, 16.0, 7).unwrap().a, layer.a);
    assert_ne!(Lora::new(w, rank, 16.0, 8).unwrap().a, layer.a);
}

#[test]
fn lora_forward_of_one_row_by_hand() {
    // W = I (2×2), A = (1 2) (r = 1), B = (1 0)ᵀ, α = 2 so α/r = 2. For x = (1 1):
    // u = xAᵀ = 3, y = xW + 2·u·Bᵀ = (1, 1) + (6, 0) = (7, 1).
    let layer = Lora {
        w: DMatrix::identity(2, 2),
        a: DMatrix::from_row_slice(1, 2, &[1.0, 2.0]),
        b: DMatrix::from_row_slice(2, 1, &[1.0, 0.0]),
        alpha: 2.0,
    };
    let (y, cache) = ch::lora_forward(&layer, &DMatrix::from_row_slice(1, 2, &[1.0, 1.0])).unwrap();
    assert_eq!(cache.u, DMatrix::from_element(1, 1, 3.0));
    assert_eq!(y, DMatrix::from_row_slice(1, 2, &[7.0, 1.0]));
    // Merged: W + 2·AᵀBᵀ = I + 2·(1 2)ᵀ(1 0) = [[3, 0], [4, 1]].
    assert_eq!(layer.merged().unwrap(), DMatrix::from_row_slice(2, 2, &[3.0, 0.0, 4.0, 1.0]));
}

#[test]
fn lora_backward_passes_gradient_checks_on_x_a_and_b() {
    let mut rng = Rng::new(1304);
    let (n, d_in, d_out, rank) = (4, 6, 5, 2);
    let mut layer = Lora::new(rand(&mut rng, d_in, d_out, 0.5), rank, 3.0, 11).unwrap();
    layer.b = rand(&mut rng, d_out, rank, 0.5); // as after some training, so ∂L/∂A ≠ 0
    let x = rand(&mut rng, n, d_in, 1.0);
    let r = rand(&mut rng, n, d_out, 1.0); // L = Σ y ⊙ R
    let (_, cache) = ch::lora_forward(&layer, &x).unwrap();
    let g = ch::lora_backward(&layer, &cache, &r).unwrap();
    let inputs = [("x", x), ("A", layer.a.clone()), ("B", layer.b.clone())];
    check(Config::default(), &inputs, &[g.d_x, g.d_a, g.d_b], |t| {
        let l = Lora { a: t[1].clone(), b: t[2].clone(), ..layer.clone() };
        ch::lora_forward(&l, &t[0]).unwrap().0.component_mul(&r).sum()
    })
    .assert_passed();
}

#[test]
fn at_the_start_only_b_receives_a_gradient() {
    // B = 0 ⇒ ∂L/∂u = s ∂L/∂y B = 0 ⇒ ∂L/∂A = 0, while ∂L/∂B = s (∂L/∂y)ᵀ xAᵀ ≠ 0.
    let mut rng = Rng::new(1305);
    let layer = Lora::new(rand(&mut rng, 6, 4, 1.0), 2, 2.0, 3).unwrap();
    let x = rand(&mut rng, 3, 6, 1.0);
    let (_, cache) = ch::lora_forward(&layer, &x).unwrap();
    let g = ch::lora_backward(&layer, &cache, &rand(&mut rng, 3, 4, 1.0)).unwrap();
    assert!(g.d_a.iter().all(|&v| v == 0.0));
    assert!(g.d_b.iter().all(|&v| v != 0.0));
}

#[test]
fn merging_gives_the_same_outputs() {
    let mut rng = Rng::new(1306);
    let mut layer = Lora::new(rand(&mut rng, 7, 9, 1.0), 3, 6.0, 5).unwrap();
    layer.b = rand(&mut rng, 9, 3, 1.0);
    let x = rand(&mut rng, 4, 7, 1.0);
    let (y, _) = ch::lora_forward(&layer, &x).unwrap();
    let merged = matmul(&x, &layer.merged().unwrap()).unwrap();
    assert!((&y - &merged).amax() < 1e-12, "{}", (&y - &merged).amax());
    assert!((&y - matmul(&x, &layer.w).unwrap()).amax() > 1.0, "the update is not negligible");
}

#[test]
fn the_adapter_s_gradients_from_its_merged_weight_s_are_lora_backward_s() {
    // A model that runs W' = W + s AᵀBᵀ as a plain weight gets G = ∂L/∂W' = xᵀ(∂L/∂y) from its
    // own backward; s BᵀGᵀ and s GᵀAᵀ must be lora_backward's ∂L/∂A and ∂L/∂B.
    let mut rng = Rng::new(1307);
    let mut layer = Lora::new(rand(&mut rng, 6, 5, 0.5), 2, 3.0, 12).unwrap();
    layer.b = rand(&mut rng, 5, 2, 0.5);
    let x = rand(&mut rng, 4, 6, 1.0);
    let d_y = rand(&mut rng, 4, 5, 1.0);
    let (_, cache) = ch::lora_forward(&layer, &x).unwrap();
    let direct = ch::lora_backward(&layer, &cache, &d_y).unwrap();
    let g = x.transpose() * &d_y;
    let (d_a, d_b) = ch::lora_weight_backward(&layer, &g).unwrap();
    assert!((&d_a - &direct.d_a).amax() < 1e-12, "{}", (&d_a - &direct.d_a).amax());
    assert!((&d_b - &direct.d_b).amax() < 1e-12, "{}", (&d_b - &direct.d_b).amax());
    assert!(d_a.amax() > 0.1 && d_b.amax() > 0.1, "both non-zero: a test that can fail");
    let e = ch::lora_weight_backward(&layer, &DMatrix::zeros(5, 6)).unwrap_err();
    assert_one_line(e, "d_merged");
}

#[test]
fn gpt2_small_attention_and_mlp_with_rank_8_by_hand() {
    // Per layer of GPT-2 124M (d = 768): c_attn 768×2304, attn.c_proj 768×768, c_fc 768×3072,
    // mlp.c_proj 3072×768; 12 layers.
    let layer = [(768, 2304), (768, 768), (768, 3072), (3072, 768)];
    let shapes: Vec<(usize, usize)> = (0..12).flat_map(|_| layer).collect();
    // Full: 1 769 472 + 589 824 + 2 359 296 + 2 359 296 = 7 077 888 per layer, × 12.
    let full = ch::fine_tuning_cost(&shapes, 0, ch::BYTES_PER_F32).unwrap();
    assert_eq!(full.trainable, 84_934_656);
    // LoRA r = 8: 8·(768 + 2304) + 8·1536 + 8·3840 + 8·3840 = 24 576 + 12 288 + 61 440 = 98 304
    // per layer, × 12.
    let lora = ch::fine_tuning_cost(&shapes, 8, ch::BYTES_PER_F32).unwrap();
    assert_eq!(lora.trainable, 1_179_648);
    // AdamW keeps m and v in f32: 8 bytes per trainable parameter: 679 MB against 9.4 MB.
    assert_eq!(full.optimizer_bytes, 679_477_248);
    assert_eq!(lora.optimizer_bytes, 9_437_184);
    assert_eq!(full.trainable / lora.trainable, 72);
}

#[test]
fn bad_lora_inputs_are_refused_in_one_line() {
    let w = DMatrix::from_element(4, 3, 0.5);
    assert_one_line(Lora::new(w.clone(), 0, 1.0, 1).unwrap_err(), "rank");
    assert_one_line(Lora::new(w.clone(), 4, 1.0, 1).unwrap_err(), "rank");
    assert_one_line(Lora::new(w.clone(), 2, -1.0, 1).unwrap_err(), "alpha");
    assert_one_line(Lora::new(DMatrix::zeros(0, 3), 1, 1.0, 1).unwrap_err(), "w is empty");
    let layer = Lora::new(w, 2, 1.0, 1).unwrap();
    let e = ch::lora_forward(&layer, &DMatrix::zeros(2, 3)).unwrap_err();
    assert_one_line(e, "x");
    let mut bad = layer.clone();
    bad.b = DMatrix::zeros(2, 2);
    assert_one_line(ch::lora_forward(&bad, &DMatrix::zeros(2, 4)).unwrap_err(), "b (d_out×r)");
    let (_, cache) = ch::lora_forward(&layer, &DMatrix::zeros(2, 4)).unwrap();
    let e = ch::lora_backward(&layer, &cache, &DMatrix::zeros(2, 4)).unwrap_err();
    assert_one_line(e, "d_y");
    assert_one_line(ch::fine_tuning_cost(&[(4, 3)], 4, 4).unwrap_err(), "rank");
    assert_one_line(ch::fine_tuning_cost(&[], 1, 4).unwrap_err(), "shapes");
    assert_one_line(ch::fine_tuning_cost(&[(usize::MAX, 2)], 0, 4).unwrap_err(), "shapes");
}

// ───────────────────────── DPO ─────────────────────────

#[test]
fn dpo_loss_at_margin_zero_is_ln_2() {
    // The policy still equals the reference: m = 0, σ(0) = 1/2, L = ln 2, ∂L/∂ln π(y_w) = −β/2.
    let pair = DpoPair { chosen: -3.0, rejected: -5.0, ref_chosen: -3.0, ref_rejected: -5.0 };
    let (loss, cache) = ch::dpo_forward(&[pair], 0.1).unwrap();
    assert!(close(loss, LN_2, 1e-15));
    assert_eq!(cache.margins, vec![0.0]);
    let g = ch::dpo_backward(&cache);
    assert!(close(g.d_chosen[0], -0.05, 1e-15) && close(g.d_rejected[0], 0.05, 1e-15));
}

#[test]
fn dpo_loss_and_margin_with_the_reference_by_hand() {
    // β = 1/2; the policy gives the chosen answer −2 (reference −1) and the rejected −3
    // (reference −4): m = ½[(−2 + 1) − (−3 + 4)] = −1, L = ln(1 + e) ≈ 1.3132617.
    // Without the reference m would be ½(−2 + 3) = +½: a pair that looks right but is not.
    let pair = DpoPair { chosen: -2.0, rejected: -3.0, ref_chosen: -1.0, ref_rejected: -4.0 };
    let (loss, cache) = ch::dpo_forward(&[pair], 0.5).unwrap();
    assert_eq!(cache.margins, vec![-1.0]);
    assert_eq!(ch::reward_margin(&pair, 0.5), -1.0);
    assert!(close(loss, (1.0 + 1.0_f64.exp()).ln(), 1e-15), "{loss}");
    assert!(close(loss, 1.313_261_687_518_222_8, 1e-15));
    assert_eq!(cache.accuracy(), 0.0);
    // ∂L/∂ln π(y_w) = β(σ(−1) − 1) = −½ · e/(1 + e) ≈ −0.3655293.
    let g = ch::dpo_backward(&cache);
    let expected = -0.5 * 1.0_f64.exp() / (1.0 + 1.0_f64.exp());
    assert!(close(g.d_chosen[0], expected, 1e-15) && close(g.d_rejected[0], -expected, 1e-15));
}

#[test]
fn dpo_backward_passes_gradient_checks() {
    let mut rng = Rng::new(1307);
    let lp = |rng: &mut Rng| -rng.uniform(0.5, 6.0);
    let pairs: Vec<DpoPair> = (0..5)
        .map(|_| DpoPair {
            chosen: lp(&mut rng),
            rejected: lp(&mut rng),
            ref_chosen: lp(&mut rng),
            ref_rejected: lp(&mut rng),
        })
        .collect();
    let beta = 0.7;
    let (_, cache) = ch::dpo_forward(&pairs, beta).unwrap();
    let g = ch::dpo_backward(&cache);
    let chosen = column(&pairs.iter().map(|p| p.chosen).collect::<Vec<_>>());
    let rejected = column(&pairs.iter().map(|p| p.rejected).collect::<Vec<_>>());
    let inputs = [("ln pi(y_w)", chosen), ("ln pi(y_l)", rejected)];
    check(Config::default(), &inputs, &[column(&g.d_chosen), column(&g.d_rejected)], |t| {
        let moved: Vec<DpoPair> = (0..pairs.len())
            .map(|i| DpoPair { chosen: t[0][i], rejected: t[1][i], ..pairs[i] })
            .collect();
        ch::dpo_forward(&moved, beta).unwrap().0
    })
    .assert_passed();
}

#[test]
fn dpo_through_the_sequence_log_probs_to_the_logits_passes_gradient_checks() {
    // One pair: the chosen answer 3 tokens after a 2-token prompt, the rejected one 2 tokens.
    let mut rng = Rng::new(1308);
    let (z_w, z_l) = (rand(&mut rng, 5, 6, 1.0), rand(&mut rng, 4, 6, 1.0));
    let (y_w, m_w) = ([1, 4, 0, 5, 2], [false, false, true, true, true]);
    let (y_l, m_l) = ([1, 4, 3, 3], [false, false, true, true]);
    let (ref_w, ref_l, beta) = (-5.5, -3.9, 0.3);
    let loss = |z_w: &DMatrix<f64>, z_l: &DMatrix<f64>| {
        let (chosen, c_w) = ch::sequence_log_prob_forward(z_w, &y_w, &m_w).unwrap();
        let (rejected, c_l) = ch::sequence_log_prob_forward(z_l, &y_l, &m_l).unwrap();
        let pair = DpoPair { chosen, rejected, ref_chosen: ref_w, ref_rejected: ref_l };
        let (loss, cache) = ch::dpo_forward(&[pair], beta).unwrap();
        (loss, cache, c_w, c_l)
    };
    let (_, cache, c_w, c_l): (f64, _, TokenCache, TokenCache) = loss(&z_w, &z_l);
    let g = ch::dpo_backward(&cache);
    let d_w = ch::sequence_log_prob_backward(&c_w, g.d_chosen[0]).unwrap();
    let d_l = ch::sequence_log_prob_backward(&c_l, g.d_rejected[0]).unwrap();
    check(
        Config::default(),
        &[("chosen logits", z_w), ("rejected logits", z_l)],
        &[d_w, d_l],
        |t| loss(&t[0], &t[1]).0,
    )
    .assert_passed();
}

#[test]
fn bad_dpo_inputs_are_refused_in_one_line() {
    let pair = DpoPair { chosen: -1.0, rejected: -2.0, ref_chosen: -1.0, ref_rejected: -2.0 };
    assert_one_line(ch::dpo_forward(&[], 0.1).unwrap_err(), "pairs");
    assert_one_line(ch::dpo_forward(&[pair], 0.0).unwrap_err(), "beta");
    assert_one_line(ch::dpo_forward(&[pair], f64::NAN).unwrap_err(), "beta");
    let bad = DpoPair { rejected: 0.5, ..pair };
    assert_one_line(ch::dpo_forward(&[pair, bad], 0.1).unwrap_err(), "pair 1");
}

// ───────────────────────── GRPO ─────────────────────────

#[test]
fn group_advantages_by_hand() {
    // Rewards (1, 0, 0, 1): mean ½, std ½, so A = ±½/(½ + ε) = ±1/(1 + 2ε).
    let a = ch::group_advantages(&[1.0, 0.0, 0.0, 1.0], ADVANTAGE_EPS).unwrap();
    let one = 1.0 / (1.0 + 2.0 * ADVANTAGE_EPS);
    for (got, want) in a.iter().zip([one, -one, -one, one]) {
        assert!(close(*got, want, 1e-15), "{a:?}");
    }
    // Normalising removes the scale: rewards ×10 + 3 give the same advantages (with ε = 0).
    let plain = ch::group_advantages(&[2.0, 0.0, 1.0], 0.0).unwrap();
    let scaled = ch::group_advantages(&[23.0, 3.0, 13.0], 0.0).unwrap();
    let sqrt_3_2 = 1.5_f64.sqrt(); // std of (2, 0, 1) is √(2/3)
    assert!(close(plain[0], sqrt_3_2, 1e-15) && close(plain[2], 0.0, 1e-15));
    assert!(plain.iter().zip(&scaled).all(|(p, s)| close(*p, *s, 1e-12)));
}

#[test]
fn a_group_of_equal_rewards_gives_zero_advantage() {
    for eps in [ADVANTAGE_EPS, 0.0] {
        assert_eq!(ch::group_advantages(&[0.7; 5], eps).unwrap(), vec![0.0; 5]);
    }
}

#[test]
fn k3_by_hand_is_never_negative_and_averages_to_the_kl() {
    let (half, quarter) = (0.5_f64.ln(), 0.25_f64.ln());
    assert_eq!(ch::k3(half, half), 0.0, "equal probabilities: no divergence");
    // π_ref = ½, π = ¼: q = π_ref/π = 2, k3 = 2 − ln 2 − 1 = 1 − ln 2 (the reversed ratio would
    // give ½ + ln 2 − 1).
    assert!(close(ch::k3(half, quarter), 1.0 - LN_2, 1e-15));
    for i in 1..40 {
        for j in 1..40 {
            let (r, p) = ((i as f64 / 40.0).ln(), (j as f64 / 40.0).ln());
            assert!(ch::k3(r, p) >= 0.0);
        }
    }
    // Sampled from π, k3 averages to KL(π‖π_ref) = Σ π ln(π/π_ref), computed directly.
    let pi: [f64; 3] = [0.5, 0.3, 0.2];
    let pi_ref: [f64; 3] = [0.2, 0.2, 0.6];
    let expectation: f64 = (0..3).map(|i| pi[i] * ch::k3(pi_ref[i].ln(), pi[i].ln())).sum();
    let kl: f64 = (0..3).map(|i| pi[i] * (pi[i] / pi_ref[i]).ln()).sum();
    assert!(close(expectation, kl, 1e-15), "{expectation} vs {kl}");
}

#[test]
fn the_clipped_surrogate_by_hand() {
    let eps = 0.2;
    // A > 0: a ratio above 1 + ε counts as 1 + ε; one below 1 − ε is not lifted.
    assert!(close(ch::clipped_surrogate(1.5, 2.0, eps), 2.4, 1e-15));
    assert_eq!(ch::clipped_surrogate(0.5, 2.0, eps), 1.0);
    // A < 0: a ratio below 1 − ε counts as 1 − ε; one above 1 + ε is not cut.
    assert!(close(ch::clipped_surrogate(0.5, -1.0, eps), -0.8, 1e-15));
    assert_eq!(ch::clipped_surrogate(1.5, -1.0, eps), -1.5);
    // Inside the range the surrogate is ρA.
    assert_eq!(ch::clipped_surrogate(1.1, 3.0, eps), 1.1 * 3.0);
}

#[test]
fn grpo_loss_and_gradient_of_one_token_by_hand() {
    // One prompt row, one answer row with logits (0, 0) and token 0: ℓ = ln ½. π_old = ¼ gives
    // ρ = 2, clipped to 1.2 for A = 1 (ε = 0.2): s = 1.2. π_ref = ¼ gives q = ½ and
    // k = ½ − ln ½ − 1 = ln 2 − ½. With β = 0.1: L = −(1.2 − 0.1(ln 2 − ½)).
    let logits = DMatrix::from_row_slice(2, 2, &[1.0, -1.0, 0.0, 0.0]);
    let quarter = 0.25_f64.ln();
    let sample = GrpoSample {
        logits: &logits,
        targets: &[1, 0],
        mask: &[false, true],
        old_log_probs: &[-1.0, quarter],
        ref_log_probs: &[-1.0, quarter],
        advantage: 1.0,
    };
    let spec = GrpoSpec { clip_eps: 0.2, kl_beta: 0.1 };
    let (loss, cache) = ch::grpo_forward(spec, sample).unwrap();
    assert!(close(loss, -(1.2 - 0.1 * (LN_2 - 0.5)), 1e-15), "{loss}");
    assert!(close(cache.terms.ratios[1], 2.0, 1e-15) && !cache.terms.unclipped[1]);
    // Clipped: ∂s/∂ℓ = 0; ∂k/∂ℓ = 1 − q = ½: ∂L/∂ℓ = 0.1 · ½ = 0.05 (the penalty pulls ℓ down,
    // back towards ln ¼), and ∂L/∂z = 0.05 (onehot(0) − (½, ½)) = (0.025, −0.025).
    let d = ch::grpo_backward(&cache).unwrap();
    assert_eq!((d[(0, 0)], d[(0, 1)]), (0.0, 0.0));
    assert!(close(d[(1, 0)], 0.025, 1e-15) && close(d[(1, 1)], -0.025, 1e-15), "{d}");
}

#[test]
fn grpo_backward_passes_gradient_checks_away_from_the_clip_kinks() {
    let mut rng = Rng::new(1309);
    let (t, v) = (7, 5);
    let mask = [false, true, true, true, true, true, true];
    let targets = [2, 0, 4, 1, 1, 3, 0];
    // ρ = e^{δ}: δ = ±0.5 lies outside [0.8, 1.2] (ln 1.2 ≈ 0.18, ln 0.8 ≈ −0.22), ±0.1 and 0
    // inside; every ρ is at least 0.08 in log from a kink, far beyond the step 1e-6.
    let deltas = [0.0, 0.5, -0.5, 0.1, -0.1, 0.0, 0.4];
    for advantage in [1.3, -0.7] {
        let logits = rand(&mut rng, t, v, 0.5);
        let (ell, _) = ch::token_log_probs_forward(&logits, &targets, &mask).unwrap();
        let old: Vec<f64> = ell.iter().zip(deltas).map(|(l, d)| (l - d).min(0.0)).collect();
        let reference: Vec<f64> =
            ell.iter().map(|l| (l + rng.uniform(-0.6, 0.6)).min(0.0)).collect();
        let spec = GrpoSpec { clip_eps: 0.2, kl_beta: 0.3 };
        let loss = |z: &DMatrix<f64>| {
            let sample = GrpoSample {
                logits: z,
                targets: &targets,
                mask: &mask,
                old_log_probs: &old,
                ref_log_probs: &reference,
                advantage,
            };
            ch::grpo_forward(spec, sample).unwrap()
        };
        let (_, cache) = loss(&logits);
        let answer = |want: bool| (1..t).any(|i| cache.terms.unclipped[i] == want);
        assert!(answer(true) && answer(false), "both branches of the minimum are checked");
        let d = ch::grpo_backward(&cache).unwrap();
        check(Config::default(), &[("logits", logits)], &[d], |z| loss(&z[0]).0).assert_passed();
    }
}

/// GRPO's per-answer mean 1/|M|: with the same advantage, each token of a 2-token answer gets
/// −∂L/∂ℓ = A/2 and each of a 4-token answer A/4 (ρ = 1, π = π_ref so the KL's part is 0).
#[test]
fn the_length_bias_of_per_answer_means_by_hand() {
    let spec = GrpoSpec { clip_eps: 0.2, kl_beta: 0.04 };
    let weight = |len: usize| {
        let (ell, mask) = (vec![-0.5; len], vec![true; len]);
        let t = ch::GrpoTokens {
            log_probs: &ell,
            mask: &mask,
            old_log_probs: &ell,
            ref_log_probs: &ell,
            advantage: 1.0,
        };
        -ch::grpo_log_prob_gradient(&ch::grpo_tokens_forward(spec, t).unwrap().1)[0]
    };
    assert!(close(weight(2), 0.5, 1e-15) && close(weight(4), 0.25, 1e-15));
    let rows = ch::book::worked().unwrap();
    let row = rows.iter().find(|r| r.test == "the_length_bias_of_per_answer_means_by_hand");
    assert!(row.is_some());
}

/// A group of G = 8 samples each right with probability 0.9 has every reward equal (every
/// advantage 0, no signal) with chance 0.9⁸ + 0.1⁸ = 0.43046721 + 10⁻⁸.
#[test]
fn a_group_of_eight_at_nine_in_ten_is_flat_by_hand() {
    let by_hand = 0.430_467_21 + 1e-8;
    assert!(close(ch::book::flat_group_chance(8, 0.9), by_hand, 1e-15));
    // Counted over every one of the 2⁸ reward patterns, weighted by its chance.
    let mut flat = 0.0;
    for pattern in 0u32..256 {
        let right = pattern.count_ones() as i32;
        let chance = 0.9f64.powi(right) * 0.1f64.powi(8 - right);
        let rewards: Vec<f64> = (0..8).map(|i| f64::from((pattern >> i) & 1)).collect();
        let a = ch::group_advantages(&rewards, ADVANTAGE_EPS).unwrap();
        if a.iter().all(|&x| x == 0.0) {
            flat += chance;
        }
    }
    assert!(close(flat, by_hand, 1e-12), "{flat}");
}

#[test]
fn bad_grpo_inputs_are_refused_in_one_line() {
    assert_one_line(ch::group_advantages(&[1.0], ADVANTAGE_EPS).unwrap_err(), "rewards");
    assert_one_line(ch::group_advantages(&[1.0, f64::NAN], 0.0).unwrap_err(), "rewards");
    assert_one_line(ch::group_advantages(&[1.0, 0.0], -1.0).unwrap_err(), "eps");
    let logits = DMatrix::from_element(2, 3, 0.0);
    let good = GrpoSample {
        logits: &logits,
        targets: &[0, 1],
        mask: &[false, true],
        old_log_probs: &[-1.0, -1.0],
        ref_log_probs: &[-1.0, -1.0],
        advantage: 0.5,
    };
    let spec = GrpoSpec { clip_eps: 0.2, kl_beta: 0.1 };
    assert!(ch::grpo_forward(spec, good).is_ok());
    let e = ch::grpo_forward(GrpoSpec { clip_eps: 1.5, ..spec }, good).unwrap_err();
    assert_one_line(e, "clip_eps");
    let e = ch::grpo_forward(GrpoSpec { kl_beta: -0.1, ..spec }, good).unwrap_err();
    assert_one_line(e, "kl_beta");
    let e = ch::grpo_forward(spec, GrpoSample { advantage: f64::INFINITY, ..good }).unwrap_err();
    assert_one_line(e, "advantage");
    let e = ch::grpo_forward(spec, GrpoSample { old_log_probs: &[-1.0, 0.3], ..good }).unwrap_err();
    assert_one_line(e, "old_log_probs");
    let e = ch::grpo_forward(spec, GrpoSample { ref_log_probs: &[-1.0], ..good }).unwrap_err();
    assert_one_line(e, "ref_log_probs");
    let e = ch::grpo_forward(spec, GrpoSample { mask: &[false, false], ..good }).unwrap_err();
    assert_one_line(e, "mask");
}

// ───────────────────────── the task ─────────────────────────

mod task {
    use super::assert_one_line;
    use llm_workbook::ch08_tokens::Tokenizer;
    use llm_workbook::ch13_finetune::task::{
        ALPHABET, AdditionTask, Format, Problem, accuracy_of, is_correct,
    };

    const TWO: Format = Format { digits: 2, reversed: false };

    fn p(a: u32, b: u32) -> Problem {
        Problem { a, b }
    }

    #[test]
    fn a_problem_s_prompt_answer_and_line() {
        assert_eq!(TWO.prompt(&p(7, 58)), "07+58=");
        assert_eq!(TWO.answer(&p(7, 58)), "065\n");
        assert_eq!(TWO.line(&p(57, 68)), "57+68=125\n");
        assert_eq!(TWO.line(&p(0, 0)), "00+00=000\n");
        let reversed = Format { digits: 2, reversed: true };
        assert_eq!(reversed.line(&p(57, 68)), "57+68=521\n");
        assert_eq!(Format { digits: 3, reversed: false }.line(&p(5, 995)), "005+995=1000\n");
        let t = AdditionTask::new(TWO, 500, 13).unwrap();
        assert_eq!(t.text(&[p(57, 68), p(3, 4)]), "57+68=125\n03+04=007\n");
        assert_eq!(t.answers(&[p(3, 4)]), ["007\n"]);
    }

    #[test]
    fn the_split_is_seeded_disjoint_and_complete() {
        let t = AdditionTask::new(TWO, 500, 13).unwrap();
        assert_eq!((t.train.len(), t.held_out.len()), (9_500, 500));
        let mut all: Vec<(u32, u32)> =
            t.train.iter().chain(&t.held_out).map(|p| (p.a, p.b)).collect();
        all.sort_unstable();
        let every: Vec<(u32, u32)> = (0..100).flat_map(|a| (0..100).map(move |b| (a, b))).collect();
        assert_eq!(all, every, "every problem once, in one of the two sets");
        let again = AdditionTask::new(TWO, 500, 13).unwrap();
        assert_eq!(again.held_out, t.held_out);
        assert_ne!(AdditionTask::new(TWO, 500, 14).unwrap().held_out, t.held_out);
        assert!(t.held_out.iter().any(|p| p.a > 9 && p.b > 9), "not sorted: shuffled");
        assert_eq!(t.tokenizer.chars().iter().collect::<String>(), ALPHABET);
        assert_eq!((t.prompt_len(), t.answer_len(), t.line_len(), t.seq_len()), (6, 4, 10, 9));
    }

    #[test]
    fn an_example_scores_the_answer_only_when_the_prompt_is_masked() {
        let t = AdditionTask::new(TWO, 500, 13).unwrap();
        // ids: '\n' 0, '+' 1, digits 2–11, '=' 12. "07+05=012\n": 9 inputs, targets shifted by one.
        let (inputs, masked) = t.example(&p(7, 5), true).unwrap();
        assert_eq!(inputs, [2, 9, 1, 2, 7, 12, 2, 3, 4]);
        let n = None;
        assert_eq!(masked, [n, n, n, n, n, Some(2), Some(3), Some(4), Some(0)]);
        let (_, all) = t.example(&p(7, 5), false).unwrap();
        let shifted: Vec<Option<u32>> = [9, 1, 2, 7, 12, 2, 3, 4, 0].map(Some).to_vec();
        assert_eq!(all, shifted);
        let b = t.batch_of(&[p(7, 5), p(99, 99)], true).unwrap();
        assert_eq!((b.batch, b.seq_len, b.inputs.len(), b.scored()), (2, 9, 18, 8));
        assert_eq!(t.tokenizer.decode(&b.inputs[9..]).unwrap(), "99+99=198");
    }

    #[test]
    fn the_checker_reads_up_to_the_first_newline() {
        let answer = TWO.answer(&p(57, 68));
        assert!(is_correct(&answer, "125\n"));
        assert!(is_correct(&answer, "125\n3+"), "what follows the newline is not read");
        assert!(!is_correct(&answer, "125"), "no newline: the answer never ended");
        assert!(!is_correct(&answer, "1251"));
        assert!(!is_correct(&answer, "12\n5"));
        assert!(!is_correct(&answer, "0125\n"));
        assert!(!is_correct(&answer, "\n125"));
    }

    #[test]
    fn accuracy_of_four_hand_made_replies_is_one_half() {
        let t = AdditionTask::new(TWO, 500, 13).unwrap();
        let answers = t.answers(&[p(1, 2), p(10, 90), p(5, 5), p(0, 0)]);
        let replies = ["003\n12", "100\n", "011\n", "000"].map(String::from);
        assert_eq!(accuracy_of(&answers, &replies).unwrap(), 0.5);
        assert_one_line(accuracy_of(&answers, &replies[..3]).unwrap_err(), "replies");
        assert_one_line(accuracy_of(&[], &[]).unwrap_err(), "answers");
    }

    #[test]
    fn bad_task_settings_are_refused_in_one_line() {
        let f = |digits| Format { digits, reversed: false };
        assert_one_line(AdditionTask::new(f(0), 5, 1).unwrap_err(), "digits");
        assert_one_line(AdditionTask::new(f(4), 5, 1).unwrap_err(), "digits");
        assert_one_line(AdditionTask::new(f(1), 100, 1).unwrap_err(), "held_out");
        assert_one_line(AdditionTask::new(f(1), 0, 1).unwrap_err(), "held_out");
    }
}

// ───────────────────────── the stages ─────────────────────────

mod stages {
    use super::common::{CHILD_LINE, in_child_process, is_child};
    use llm_workbook::ch09_gpt::model::Gpt;
    use llm_workbook::ch13_finetune::book;
    use llm_workbook::ch13_finetune::stages::{LoraGpt, Recipe, chapter_task};

    #[test]
    fn a_model_with_fresh_adapters_is_its_base_exactly() {
        let task = chapter_task().unwrap();
        let base = Gpt::<f32>::new(Recipe::CHAPTER.model_config(&task), 1).unwrap();
        let lora = LoraGpt::new(base.clone(), 4, 8.0, 7).unwrap();
        assert_eq!(lora.adapters.len(), 4 * base.config.layers);
        assert_eq!(lora.merged().unwrap(), base, "B = 0: the merged weights are the base's");
        // r(d_in + d_out) per matrix: 4·(48 + 144) + 4·96 + 4·(48 + 192) + 4·240 = 3072 a block.
        assert_eq!(lora.cost().unwrap().trainable, 2 * 3_072);
        assert_eq!(lora.cost().unwrap().optimizer_bytes, 8 * 6_144);
    }

    /// The adapters' gradients through the whole GPT (the fused step's ∂L/∂W of each merged
    /// matrix, carried to A and B) against central differences of the model's loss, on every
    /// adapter, an entry of A and of B each, B random so that ∂L/∂A ≠ 0.
    #[test]
    fn the_adapters_gradients_through_the_gpt_pass_finite_differences() {
        use llm_workbook::ch09_gpt::fast::FusedStep;
        use llm_workbook::ch13_finetune::lora_weight_backward;
        let task = chapter_task().unwrap();
        let base = Gpt::<f32>::new(Recipe::CHAPTER.model_config(&task), 1).unwrap();
        let mut lora = LoraGpt::new(base, 4, 8.0, 7).unwrap();
        let mut rng = llm_workbook::rng::Rng::new(5);
        for (_, _, l) in lora.adapters.iter_mut() {
            l.b = rng.normal_matrix(l.b.nrows(), l.b.ncols(), 0.3);
        }
        let batch = task.batch(8, true, &mut rng).unwrap();
        let loss = |l: &LoraGpt| {
            FusedStep::<f32>::new().loss_and_grads(&l.merged().unwrap(), &batch).unwrap().0
        };
        let model = lora.merged().unwrap();
        let mut fused = FusedStep::<f32>::new();
        let (_, grads) = fused.loss_and_grads(&model, &batch).unwrap();
        let mut checked = 0;
        for (k, (p, layer, l)) in lora.adapters.iter().enumerate() {
            let g = grads[model.params.at(*p, *layer)].map(f64::from);
            let (d_a, d_b) = lora_weight_backward(l, &g).unwrap();
            for (which, analytic) in [(0, d_a[(1, 2)]), (1, d_b[(1, 2)])] {
                // f32 losses: a step large enough to be read, small enough to be linear.
                let h = 1e-2;
                let at = |delta: f64| {
                    let mut moved = lora.clone();
                    let m = &mut moved.adapters[k].2;
                    if which == 0 {
                        m.a[(1, 2)] += delta
                    } else {
                        m.b[(1, 2)] += delta
                    }
                    loss(&moved)
                };
                let numeric = (at(h) - at(-h)) / (2.0 * h);
                let tol = 2e-5 + 2e-2 * numeric.abs();
                assert!(
                    (numeric - analytic).abs() <= tol,
                    "{p:?} {layer} {which}: {numeric} {analytic}"
                );
                checked += usize::from(analytic.abs() > 1e-4);
            }
        }
        assert!(checked >= 8, "most entries checked are not zero: {checked}");
    }

    /// The stages at a reduced size, as the main job runs them (portable kernel, in a child
    /// process, so the numbers are the same bits on every CPU): fine-tuning with the prompt
    /// masked lifts the base; from its model part-way, DPO ranks the held-out pairs' chosen
    /// answers above the rejected ones (margin > 0, the log-ratio raised) and GRPO raises the
    /// reward of its own samples. The chapter's full recipe runs in the main job only.
    #[test]
    fn the_stages_at_a_reduced_size_do_what_each_should() {
        use llm_workbook::ch13_finetune::feedback::FeedbackRecipe;
        use llm_workbook::ch13_finetune::stages::{finetune, pretrain};
        const NAME: &str = "stages::the_stages_at_a_reduced_size_do_what_each_should";
        if !is_child() {
            assert_eq!(in_child_process(NAME, &[]), "each stage did what it should");
            return;
        }
        llm_workbook::book::compute_on_the_portable_kernel().unwrap();
        // One-digit sums (100 problems, 20 held out): learned in a few hundred steps.
        let format = llm_workbook::ch13_finetune::task::Format { digits: 1, reversed: false };
        let task = llm_workbook::ch13_finetune::task::AdditionTask::new(format, 20, 13).unwrap();
        let recipe =
            Recipe { pretrain_steps: 300, finetune_steps: 100, start_at: 50, ..Recipe::CHAPTER };
        let base = pretrain(&task, &recipe).unwrap();
        let masked = finetune(&task, &base.model, true, &recipe).unwrap();
        assert!(masked.accuracy > base.accuracy, "{} {}", masked.accuracy, base.accuracy);
        assert_eq!(masked.curve.len(), recipe.finetune_steps / 50 + 1);
        let start = masked.snapshot.as_ref().unwrap();
        let small = FeedbackRecipe {
            dpo_pool: 64,
            dpo_steps: 20,
            grpo_steps: 12,
            curve_problems: 20,
            curve_every: 6,
            ..FeedbackRecipe::CHAPTER
        };
        let f = book::feedback_of(&task, start, &small, &[0.5]).unwrap();
        let d = &f.dpo[0];
        assert!(d.margin > 0.0 && d.ranked > 0.5, "margin {} ranked {}", d.margin, d.ranked);
        assert!(d.log_ratio.1 > d.log_ratio.0, "{:?}", d.log_ratio);
        assert!(d.losses.last() < d.losses.first(), "{:?}", d.losses);
        let s = &f.grpo.steps;
        let mean = |v: &[llm_workbook::ch13_finetune::feedback::GrpoRecord]| {
            v.iter().map(|r| r.reward).sum::<f64>() / v.len() as f64
        };
        let (first, last) = (mean(&s[..4]), mean(&s[s.len() - 4..]));
        eprintln!("accuracy {} {} start {}", base.accuracy, masked.accuracy, f.start_accuracy);
        eprintln!("dpo {} {} {:?}; reward {first} → {last}", d.margin, d.ranked, d.log_ratio);
        assert!(last > first, "reward {first} → {last}");
        assert_eq!(f.grpo.curve.last().unwrap().0, 12 * small.grpo_step_cost());
        // More SFT spent the same compute, to within one of its steps.
        let spent = f.more_sft.curve.last().unwrap().0;
        assert!(
            spent <= 12 * small.grpo_step_cost()
                && spent + small.sft_step_cost() > 12 * small.grpo_step_cost()
        );
        println!("{CHILD_LINE}each stage did what it should");
    }
}

// ─────────────── DPO and GRPO through chapter 9's engine ───────────────

mod through_the_model {
    use super::*;
    use llm_workbook::ch09_gpt::config::Config as GptConfig;
    use llm_workbook::ch09_gpt::data::Batch;
    use llm_workbook::ch09_gpt::fast::FusedStep;
    use llm_workbook::ch09_gpt::model::Gpt;
    use llm_workbook::ch13_finetune::feedback::{
        Pair, answer_batch, dpo_weights, grpo_weights, pair_batch, sequence_sums,
    };
    use llm_workbook::ch13_finetune::stages::chapter_task;
    use llm_workbook::ch13_finetune::task::{AdditionTask, Problem};

    /// A small GPT over the task's 13 characters, its weights moved off their start.
    fn small_model(task: &AdditionTask) -> Gpt<f64> {
        let config = GptConfig::new(task.tokenizer.chars().len(), task.seq_len(), 1, 2, 8);
        let mut m = Gpt::<f64>::new(config, 3).unwrap();
        let mut rng = Rng::new(4);
        for t in m.tensors_mut() {
            let noise: DMatrix<f64> = rng.normal_matrix(t.nrows(), t.ncols(), 0.2);
            *t += noise;
        }
        m
    }

    fn p(a: u32, b: u32) -> Problem {
        Problem { a, b }
    }

    fn three_pairs() -> Vec<Pair> {
        let pair = |a, b, rejected: &str| Pair {
            problem: p(a, b),
            chosen: format!("{:03}\n", a + b),
            rejected: rejected.to_string(),
            own_mistake: false,
        };
        vec![pair(7, 58, "064\n"), pair(31, 4, "35\n0"), pair(99, 99, "198\n")]
    }

    /// The model's tensors named, and the same model with other tensors.
    fn named(model: &Gpt<f64>) -> Vec<(String, DMatrix<f64>)> {
        model.tensors().into_iter().map(|(n, m)| (n, m.clone())).collect()
    }

    fn with(model: &Gpt<f64>, t: &[DMatrix<f64>]) -> Gpt<f64> {
        let mut m = model.clone();
        m.set_tensors(t).unwrap();
        m
    }

    /// Checks `analytic` (gradients in tensor order) against central differences of `loss`.
    fn checked(
        model: &Gpt<f64>,
        analytic: &[DMatrix<f64>],
        loss: impl Fn(&Gpt<f64>) -> f64,
    ) -> llm_workbook::gradcheck::Report {
        checked_with(Config { step: 1e-4, tolerance: 1e-5, floor: 1e-6 }, model, analytic, loss)
    }

    fn checked_with(
        config: Config,
        model: &Gpt<f64>,
        analytic: &[DMatrix<f64>],
        loss: impl Fn(&Gpt<f64>) -> f64,
    ) -> llm_workbook::gradcheck::Report {
        let named = named(model);
        let inputs: Vec<(&str, DMatrix<f64>)> =
            named.iter().map(|(n, m)| (n.as_str(), m.clone())).collect();
        check(config, &inputs, analytic, |t| loss(&with(model, t)))
    }

    #[test]
    fn dpo_through_the_whole_model_passes_the_gradient_check_and_catches_a_flipped_sign() {
        let task = chapter_task().unwrap();
        let model = small_model(&task);
        let pairs = three_pairs();
        let batch = pair_batch(&task, &pairs.iter().collect::<Vec<_>>()).unwrap();
        let refs = [(-9.0, -11.0), (-12.0, -10.5), (-8.0, -8.5)];
        let beta = 0.5;
        let loss = |m: &Gpt<f64>| {
            let ell = FusedStep::new().target_log_probs(m, &batch).unwrap();
            dpo_weights(&batch, &ell, &refs, beta).unwrap().0
        };
        let ell = FusedStep::new().target_log_probs(&model, &batch).unwrap();
        let (l, weights) = dpo_weights(&batch, &ell, &refs, beta).unwrap();
        assert_eq!(l.to_bits(), loss(&model).to_bits());
        let grads = |w: &[f64]| {
            FusedStep::new().weighted_loss_and_grads(&model, &batch, w).unwrap().1.to_vec()
        };
        checked(&model, &grads(&weights), loss).assert_passed();
        // Planted: the weights +∂L/∂ℓ instead of −∂L/∂ℓ (the loss climbed instead of descended).
        let flipped: Vec<f64> = weights.iter().map(|w| -w).collect();
        assert!(!checked(&model, &grads(&flipped), loss).passed(), "a flipped sign passed");
        // The second pair's rejected reply "35⏎0" ends at its newline: 3 scored positions.
        let scored: Vec<usize> = batch
            .targets
            .chunks(batch.seq_len)
            .map(|t| t.iter().filter(|x| x.is_some()).count())
            .collect();
        assert_eq!(scored, [4, 4, 4, 3, 4, 4]);
    }

    #[test]
    fn grpo_through_the_whole_model_passes_the_gradient_check_and_catches_a_flipped_sign() {
        let task = chapter_task().unwrap();
        let model = small_model(&task);
        let problems = [p(7, 58), p(7, 58), p(31, 4), p(31, 4)];
        let answers = ["065\n", "064\n", "035\n", "3\n50"].map(String::from);
        let batch: Batch = answer_batch(&task, &problems, &answers).unwrap();
        let ell = FusedStep::new().target_log_probs(&model, &batch).unwrap();
        // π_old and π_ref a little off π: ratios e^{±0.1} inside the clip, e^{0.5} outside it
        // (A > 0, so that token's surrogate is the clipped constant), no value at a kink.
        let shift = [0.1, -0.1, 0.5, 0.05];
        let old: Vec<f64> = ell
            .iter()
            .enumerate()
            .map(|(r, &l)| if batch.targets[r].is_some() { l - shift[r % 4] } else { 0.0 })
            .collect();
        let reference: Vec<f64> = ell.iter().map(|&l| (l + 0.3).min(0.0)).collect();
        let advantages = [1.0, -1.0, 1.0, -1.0];
        let spec = GrpoSpec { clip_eps: 0.2, kl_beta: 0.1 };
        let loss = |m: &Gpt<f64>| {
            let ell = FusedStep::new().target_log_probs(m, &batch).unwrap();
            grpo_weights(&batch, (&ell, &old, &reference), &advantages, spec).unwrap().0
        };
        let (_, weights) =
            grpo_weights(&batch, (&ell, &old, &reference), &advantages, spec).unwrap();
        let grads = |w: &[f64]| {
            FusedStep::new().weighted_loss_and_grads(&model, &batch, w).unwrap().1.to_vec()
        };
        // The ratios e^{ℓ − ℓ_old} make the loss's third derivative large enough that a step of
        // 10⁻⁴ leaves ~10⁻⁹ of truncation error on entries near 10⁻⁶: a step of 10⁻⁵ cuts it a
        // hundredfold, and entries below 10⁻⁵ are measured absolutely.
        let fine = Config { step: 1e-5, tolerance: 1e-5, floor: 1e-5 };
        checked_with(fine, &model, &grads(&weights), loss).assert_passed();
        let flipped: Vec<f64> = weights.iter().map(|w| -w).collect();
        assert!(!checked_with(fine, &model, &grads(&flipped), loss).passed(), "a flip passed");
        // The first answer (A > 0) has a token on the clipped branch, ρ = e^{0.5} > 1 + ε_c.
        let t = batch.seq_len;
        let mask: Vec<bool> = batch.targets[..t].iter().map(Option::is_some).collect();
        let tokens = ch::GrpoTokens {
            log_probs: &ell[..t],
            mask: &mask,
            old_log_probs: &old[..t],
            ref_log_probs: &reference[..t],
            advantage: 1.0,
        };
        let (_, terms) = ch::grpo_tokens_forward(spec, tokens).unwrap();
        assert!((0..t).any(|i| mask[i] && !terms.unclipped[i]), "no clipped token");
        assert!(sequence_sums(&batch, &ell).iter().all(|&s| s < 0.0));
    }

    #[test]
    fn bad_pairs_and_advantages_are_refused_in_one_line() {
        let task = chapter_task().unwrap();
        let pairs = three_pairs();
        let batch = pair_batch(&task, &pairs.iter().collect::<Vec<_>>()).unwrap();
        let ell = vec![-0.5; batch.inputs.len()];
        assert_one_line(dpo_weights(&batch, &ell, &[(-1.0, -1.0)], 0.5).unwrap_err(), "refs");
        let long = answer_batch(&task, &[p(1, 2)], &["0003\n".to_string()]).unwrap_err();
        assert_one_line(long, "answers");
    }
}

// ───────────────── the page's measured tables ─────────────────

/// `0.974` as the page prints an accuracy: `97.4 %`.
fn percent(v: f64) -> String {
    format!("{:.1} %", 100.0 * v)
}

/// 58032 as the page prints a count: `58 032`.
fn spaced(n: f64) -> String {
    let digits: Vec<char> = format!("{}", n as u64).chars().collect();
    let mut out = String::new();
    for (i, c) in digits.iter().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(*c);
    }
    out
}

/// The page's measured tables (§3 DPO, §4 GRPO, §6 the stages) print the values the main job
/// measured and keeps at full precision in `chapters/img/ch13_runs.csv`, rounded as printed.
#[test]
fn the_pages_run_tables_are_the_main_jobs() {
    use llm_workbook::ch13_finetune::book::{DPO_BETAS, RUNS_CSV};
    let root = common::repo_root();
    let csv =
        std::fs::read_to_string(root.join("chapters/img").join(RUNS_CSV)).expect("the runs file");
    let value = |table: &str, row: &str| common::runs_value(&csv, table, row);
    let page = common::prose("ch13_finetune");
    let table = |header: &str| common::page_table(&page, header);
    let stages = table("| stage | accuracy |");
    let want_stages = [
        ("base", "—".to_string(), "—".to_string()),
        ("masked", spaced(value("trainable", "full")), spaced(value("adamw_bytes", "full"))),
        ("unmasked", spaced(value("trainable", "full")), spaced(value("adamw_bytes", "full"))),
        ("lora", spaced(value("trainable", "lora")), spaced(value("adamw_bytes", "lora"))),
    ];
    assert_eq!(stages.len(), want_stages.len());
    for (cells, (row, trainable, bytes)) in stages.iter().zip(&want_stages) {
        assert_eq!(cells[1], percent(value("accuracy", row)), "{row}: accuracy");
        assert_eq!(cells[2], *trainable, "{row}: trainable");
        let bytes = if bytes == "—" { bytes.clone() } else { format!("{bytes} bytes") };
        assert_eq!(cells[3], bytes, "{row}: bytes");
    }
    let dpo = table("| DPO | held-out accuracy |");
    assert_eq!(dpo.len(), 1 + DPO_BETAS.len());
    assert_eq!(dpo[0][1], percent(value("accuracy", "start")));
    assert_eq!(dpo[0][4], format!("{:.2}", value("dpo_log_ratio", "start")));
    for (cells, beta) in dpo[1..].iter().zip(DPO_BETAS) {
        let row = format!("beta={beta}");
        assert_eq!(cells[0], format!("$\\beta = {beta}$"));
        assert_eq!(cells[1], percent(value("accuracy", &format!("dpo {row}"))), "{row}");
        assert_eq!(cells[2], format!("{:.2}", value("dpo_margin", &row)), "{row}: margin");
        assert_eq!(cells[3], percent(value("dpo_ranked", &row)), "{row}: ranked");
        assert_eq!(cells[4], format!("{:.2}", value("dpo_log_ratio", &row)), "{row}: log-ratio");
    }
    let runs = table("| from the start | compute |");
    let compute = spaced(value("grpo", "compute"));
    let want = [
        ("start", "0".to_string()),
        ("grpo", compute),
        ("more_sft", spaced(value("sft", "compute"))),
    ];
    assert_eq!(runs.len(), want.len());
    for (cells, (row, spent)) in runs.iter().zip(&want) {
        assert_eq!(cells[1], *spent, "{row}: compute");
        assert_eq!(cells[2], percent(value("accuracy", row)), "{row}: accuracy");
    }
    let grpo = table("| GRPO steps | reward of the samples |");
    for (cells, when) in grpo.iter().zip(["first", "last"]) {
        assert_eq!(cells[1], percent(value("grpo", &format!("reward_{when}"))), "{when}");
        assert_eq!(cells[2], percent(value("grpo", &format!("flat_{when}"))), "{when}");
        assert_eq!(cells[3], format!("{:.2}", value("grpo", &format!("answer_len_{when}"))));
    }
    assert_eq!(grpo.len(), 2);
}
