//! Chapter 12: RMSNorm, rotary positions, gated MLPs, grouped-query attention and QK-norm:
//! worked numbers computed by hand, gradient checks of every backward on every tensor (f64),
//! the rotation's relative-position property, the two pairings, MHA against chapter 6, and the
//! key/value cache of published configurations.

use llm_workbook::ch06_attention::{self as ch06, AttnSpec, LayerNorm, MultiHead};
use llm_workbook::ch12_modern::{
    self as ch, BYTES_PER_HALF, Gate, GatedMlp, Gqa, KvCacheShape, LLAMA_HIDDEN_MULTIPLE, Pairing,
    Positions, ROPE_BASE, RmsNorm, RopeTable, Rotary,
};
use llm_workbook::gradcheck::{Config, check};
use llm_workbook::rng::Rng;
use nalgebra::DMatrix;

/// A wider step and an absolute floor for the deeper compositions (attention, norms): the same
/// tolerance, with differences of near-zero entries judged against 1e-3.
const WIDE: Config = Config { step: 1e-5, tolerance: 1e-6, floor: 1e-3 };

fn rand(rng: &mut Rng, r: usize, c: usize) -> DMatrix<f64> {
    rng.normal_matrix(r, c, 1.0)
}

/// L = Σ Y ⊙ R: a scalar loss whose ∂L/∂Y is R.
fn weighted_sum(m: &DMatrix<f64>, r: &DMatrix<f64>) -> f64 {
    m.component_mul(r).sum()
}

fn row(v: &[f64]) -> DMatrix<f64> {
    DMatrix::from_row_slice(1, v.len(), v)
}

// ───────────────────────── RMSNorm ─────────────────────────

#[test]
fn rms_norm_of_one_row_by_hand() {
    // x = (1, −2, 2): mean(x²) = (1 + 4 + 4)/3 = 3; with ε = 1, r = √(3 + 1) = 2, so
    // x̂ = (0.5, −1, 1) and with γ = (1, 2, −1), y = (0.5, −2, −1).
    // (ε outside the root would give r = √3 + 1 ≈ 2.732.)
    let norm = RmsNorm { gamma: row(&[1.0, 2.0, -1.0]), eps: 1.0 };
    let (y, cache) = ch::rms_norm_forward(&norm, &row(&[1.0, -2.0, 2.0])).unwrap();
    assert_eq!(cache.rms, vec![2.0]);
    assert_eq!(y, row(&[0.5, -2.0, -1.0]));
    let outside = 3.0_f64.sqrt() + 1.0;
    assert!((outside - 2.732).abs() < 1e-3 && (cache.rms[0] - outside).abs() > 0.7);
}

#[test]
fn rms_norm_backward_passes_gradient_checks() {
    let mut rng = Rng::new(1201);
    // A large ε makes its place (inside or outside the root) visible to the check.
    for eps in [1e-6, 0.5] {
        let x = rand(&mut rng, 4, 5);
        let gamma = DMatrix::from_element(1, 5, 1.0) + rng.normal_matrix(1, 5, 0.3);
        let norm = RmsNorm { gamma: gamma.clone(), eps };
        let r = rand(&mut rng, 4, 5);
        let (_, cache) = ch::rms_norm_forward(&norm, &x).unwrap();
        let g = ch::rms_norm_backward(&norm, &cache, &r).unwrap();
        check(Config::default(), &[("x", x), ("gamma", gamma)], &[g.d_x, g.d_gamma], |t| {
            let n = RmsNorm { gamma: t[1].clone(), eps };
            weighted_sum(&ch::rms_norm_forward(&n, &t[0]).unwrap().0, &r)
        })
        .assert_passed();
    }
}

#[test]
fn rms_norm_is_layer_norm_without_beta_on_a_centred_row() {
    // An independent computation: chapter 6's LayerNorm (β = 0) on rows whose mean is zero, where
    // the standard deviation is the root mean square.
    let mut rng = Rng::new(1202);
    let mut x = rand(&mut rng, 3, 6);
    for r in 0..3 {
        let mean = x.row(r).mean();
        x.row_mut(r).add_scalar_mut(-mean);
    }
    let gamma = rng.normal_matrix(1, 6, 1.0);
    let eps = 1e-3;
    let rms = RmsNorm { gamma: gamma.clone(), eps };
    let mut ln = LayerNorm::new(6, eps).unwrap();
    ln.gamma = gamma;
    let (a, _) = ch::rms_norm_forward(&rms, &x).unwrap();
    let (b, _) = ch06::layer_norm_forward(&ln, &x).unwrap();
    assert!((a - b).abs().max() < 1e-14);
    // On a row with a mean the two differ: RMSNorm does not centre.
    let shifted = x.add_scalar(1.0);
    let (a, _) = ch::rms_norm_forward(&rms, &shifted).unwrap();
    let (b, _) = ch06::layer_norm_forward(&ln, &shifted).unwrap();
    assert!((a - b).abs().max() > 0.1);
}

#[test]
fn rms_norm_keeps_a_zero_row_zero_and_rejects_bad_input_in_one_line() {
    let norm = RmsNorm::<f64>::new(3, 1e-6).unwrap();
    let (y, _) = ch::rms_norm_forward(&norm, &DMatrix::zeros(2, 3)).unwrap();
    assert_eq!(y, DMatrix::zeros(2, 3));
    let errors = [
        RmsNorm::<f64>::new(3, 0.0).unwrap_err().to_string(),
        ch::rms_norm_forward(&norm, &DMatrix::zeros(2, 4)).unwrap_err().to_string(),
        ch::rms_norm_forward(&norm, &row(&[1.0, f64::NAN, 0.0])).unwrap_err().to_string(),
    ];
    for (e, arg) in errors.iter().zip(["eps", "x and gamma", "x"]) {
        assert!(e.contains(arg) && !e.contains('\n') && e.chars().count() <= 100, "{e}");
    }
}

// ───────────────────────── rotary positions ─────────────────────────

#[test]
fn rope_frequencies_by_hand() {
    // θ_i = base^{−2i/d_h}: d_h = 4 gives 10 000^0 = 1 and 10 000^{−1/2} = 0.01; d_h = 8 gives
    // 1, 10 000^{−1/4} = 0.1, 0.01, 0.001. (An exponent over another width moves them all.)
    let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-15);
    let four = ch::rope_frequencies(4, ROPE_BASE).unwrap();
    assert!(close(&four, &[1.0, 0.01]), "{four:?}");
    let eight = ch::rope_frequencies(8, ROPE_BASE).unwrap();
    assert!(close(&eight, &[1.0, 0.1, 0.01, 0.001]), "{eight:?}");
    // Wavelengths 2π/θ_i: 2π positions for pair 0, 2π·1000 for the last pair of d_h = 8.
    let waves = ch::rope_wavelengths(8, ROPE_BASE).unwrap();
    assert!((waves[3] - std::f64::consts::TAU * 1000.0).abs() < 1e-9);
    // The table holds cos and sin of tθ_i: position 3, pair 1 of d_h = 4 is the angle 0.03.
    let table = RopeTable::<f64>::new(5, 4, ROPE_BASE).unwrap();
    assert_eq!((table.cos[(3, 1)], table.sin[(3, 1)]), (0.03_f64.cos(), 0.03_f64.sin()));
    assert_eq!((table.cos[(0, 0)], table.sin[(0, 0)]), (1.0, 0.0));
}

#[test]
fn rope_wavelengths_against_the_context() {
    // d_h = 128: pair i has wavelength 2π·base^{2i/128}. Pair 32 is 2π·√base (628.3 for base
    // 10 000, 4442.9 for Llama 3's 500 000); pair 63 is 2π·base^{126/128} (54 410 and 2 559 196).
    // A wavelength exceeds 8192 tokens (Llama 3's context) when base^{2i/128} > 8192/2π ≈ 1303.8,
    // i > 64·log 1303.8/log base: i ≥ 50 for 10 000 (14 pairs), i ≥ 35 for 500 000 (29 pairs).
    let tau = std::f64::consts::TAU;
    let paper = ch::rope_wavelengths(128, ROPE_BASE).unwrap();
    let llama3 = ch::rope_wavelengths(128, 500_000.0).unwrap();
    assert_eq!((paper[0], llama3[0]), (tau, tau));
    assert!((paper[32] - tau * 100.0).abs() < 1e-9);
    assert!((llama3[32] - tau * 500_000_f64.sqrt()).abs() < 1e-9);
    assert!((paper[63] - 54_410.143).abs() < 1e-3, "{}", paper[63]);
    assert!((llama3[63] - 2_559_195.517).abs() < 1e-3, "{}", llama3[63]);
    let beyond = |w: &[f64]| w.iter().filter(|&&w| w > 8192.0).count();
    assert_eq!((beyond(&paper), beyond(&llama3)), (14, 29));
}

#[test]
fn one_pair_rotated_by_hand_in_both_pairings() {
    // d_h = 4, base 10 000, position 2: pair 0 turns by 2 rad, pair 1 by 0.02 rad.
    let table = RopeTable::<f64>::new(3, 4, ROPE_BASE).unwrap();
    let x = row(&[1.0, 2.0, 3.0, 4.0]);
    let at = Positions { seq_len: 1, start: 2 };
    let turn = |a: f64, b: f64, angle: f64| {
        (a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos())
    };
    // Adjacent: pairs (x0, x1) and (x2, x3).
    let (a0, a1) = turn(1.0, 2.0, 2.0);
    let (a2, a3) = turn(3.0, 4.0, 0.02);
    let adjacent = ch::rope_forward(&table, Pairing::Adjacent, &x, at).unwrap();
    assert!((adjacent - row(&[a0, a1, a2, a3])).abs().max() < 1e-15);
    // Halves: pairs (x0, x2) and (x1, x3).
    let (h0, h2) = turn(1.0, 3.0, 2.0);
    let (h1, h3) = turn(2.0, 4.0, 0.02);
    let halves = ch::rope_forward(&table, Pairing::Halves, &x, at).unwrap();
    assert!((halves - row(&[h0, h1, h2, h3])).abs().max() < 1e-15);
}

#[test]
fn the_halves_pairing_is_hugging_faces_rotate_half_formula() {
    // An independent computation: x ⊙ [cos, cos] + rotate_half(x) ⊙ [sin, sin].
    let mut rng = Rng::new(1203);
    let (t, d_h) = (7, 8);
    let table = RopeTable::<f64>::new(t, d_h, ROPE_BASE).unwrap();
    let x = rand(&mut rng, 2 * t, d_h);
    let ours = ch::rope_forward(&table, Pairing::Halves, &x, Positions::from_zero(t)).unwrap();
    let half = ch::rotate_half(&x).unwrap();
    let hf = DMatrix::from_fn(2 * t, d_h, |r, j| {
        let (pos, i) = (r % t, j % (d_h / 2));
        x[(r, j)] * table.cos[(pos, i)] + half[(r, j)] * table.sin[(pos, i)]
    });
    assert!((ours - hf).abs().max() < 1e-14);
}

#[test]
fn rope_backward_passes_gradient_checks_in_both_pairings() {
    let mut rng = Rng::new(1204);
    let table = RopeTable::<f64>::new(9, 6, 100.0).unwrap();
    for pairing in [Pairing::Adjacent, Pairing::Halves] {
        for at in [Positions::from_zero(4), Positions { seq_len: 4, start: 5 }] {
            let x = rand(&mut rng, 8, 6);
            let r = rand(&mut rng, 8, 6);
            let d_x = ch::rope_backward(&table, pairing, &r, at).unwrap();
            // WIDE: L is linear in x, so only rounding noise (≈ 1e-9) separates the two, and
            // the default floor of 1e-7 would judge a near-zero entry by that noise.
            check(WIDE, &[("x", x)], &[d_x], |t| {
                weighted_sum(&ch::rope_forward(&table, pairing, &t[0], at).unwrap(), &r)
            })
            .assert_passed();
        }
    }
}

#[test]
fn the_rotation_keeps_lengths_and_its_transpose_undoes_it() {
    // R(tθ) is orthogonal: every row keeps its length, and Rᵀ R = I.
    let mut rng = Rng::new(1212);
    let table = RopeTable::<f64>::new(12, 6, ROPE_BASE).unwrap();
    let at = Positions { seq_len: 5, start: 7 };
    for pairing in [Pairing::Adjacent, Pairing::Halves] {
        let x = rand(&mut rng, 10, 6);
        let y = ch::rope_forward(&table, pairing, &x, at).unwrap();
        for r in 0..10 {
            assert!((y.row(r).norm() - x.row(r).norm()).abs() < 1e-13);
        }
        let back = ch::rope_backward(&table, pairing, &y, at).unwrap();
        assert!((back - &x).abs().max() < 1e-14);
        assert!((y - &x).abs().max() > 0.1, "positions 7 to 11 turn every pair");
    }
}

#[test]
fn rotated_scores_depend_on_the_distance_only() {
    // q_t·k_s = Σ_i (q_a k_a + q_b k_b) cos((s − t)θ_i) + (q_b k_a − q_a k_b) sin((s − t)θ_i),
    // summed over the pairs (a, b) of each pairing: computed here from θ alone, and checked
    // against the rotated vectors at every (t, s) of a 40-position grid.
    let mut rng = Rng::new(1205);
    let (context, d_h) = (40, 8);
    let table = RopeTable::<f64>::new(context, d_h, ROPE_BASE).unwrap();
    let theta = ch::rope_frequencies(d_h, ROPE_BASE).unwrap();
    let (q, k) = (rand(&mut rng, 1, d_h), rand(&mut rng, 1, d_h));
    for (pairing, pairs) in [
        (Pairing::Adjacent, [(0, 1), (2, 3), (4, 5), (6, 7)]),
        (Pairing::Halves, [(0, 4), (1, 5), (2, 6), (3, 7)]),
    ] {
        let at = |t| Positions { seq_len: 1, start: t };
        let rotated: Vec<_> = (0..context)
            .map(|t| {
                let q_t = ch::rope_forward(&table, pairing, &q, at(t)).unwrap();
                let k_t = ch::rope_forward(&table, pairing, &k, at(t)).unwrap();
                (q_t, k_t)
            })
            .collect();
        let mut worst: f64 = 0.0;
        for t in 0..context {
            for s in 0..context {
                let delta = s as f64 - t as f64;
                let formula: f64 = pairs
                    .iter()
                    .zip(&theta)
                    .map(|(&(a, b), th)| {
                        let (c, sn) = ((delta * th).cos(), (delta * th).sin());
                        let same = q[(0, a)] * k[(0, a)] + q[(0, b)] * k[(0, b)];
                        let cross = q[(0, b)] * k[(0, a)] - q[(0, a)] * k[(0, b)];
                        same * c + cross * sn
                    })
                    .sum();
                let score = rotated[t].0.dot(&rotated[s].1);
                worst = worst.max((score - formula).abs());
            }
        }
        assert!(worst < 1e-12, "{pairing:?}: worst difference {worst:e}");
    }
}

#[test]
fn both_pairings_give_the_same_scores_after_the_column_permutation() {
    let mut rng = Rng::new(1206);
    let (t, c, heads, d_h) = (6, 5, 2, 8);
    let perm = ch::halves_from_adjacent(d_h).unwrap();
    assert_eq!(perm, [0, 2, 4, 6, 1, 3, 5, 7]);
    let table = RopeTable::<f64>::new(t, d_h, ROPE_BASE).unwrap();
    let x = rand(&mut rng, t, c);
    let (w_q, w_k) = (rand(&mut rng, c, heads * d_h), rand(&mut rng, c, heads * d_h));
    let scores = |pairing, w_q: &DMatrix<f64>, w_k: &DMatrix<f64>| -> Vec<DMatrix<f64>> {
        let (q, k) = (&x * w_q, &x * w_k);
        (0..heads)
            .map(|h| {
                let at = Positions::from_zero(t);
                let qh = q.columns(h * d_h, d_h).into_owned();
                let kh = k.columns(h * d_h, d_h).into_owned();
                let qr = ch::rope_forward(&table, pairing, &qh, at).unwrap();
                let kr = ch::rope_forward(&table, pairing, &kh, at).unwrap();
                qr * kr.transpose()
            })
            .collect()
    };
    let adjacent = scores(Pairing::Adjacent, &w_q, &w_k);
    let (p_q, p_k) = (
        ch::permute_head_columns(&w_q, &perm).unwrap(),
        ch::permute_head_columns(&w_k, &perm).unwrap(),
    );
    let halves = scores(Pairing::Halves, &p_q, &p_k);
    for (a, h) in adjacent.iter().zip(&halves) {
        assert!((a - h).abs().max() < 1e-12);
    }
    // Without the permutation the halves pairing gives other scores.
    let unpermuted = scores(Pairing::Halves, &w_q, &w_k);
    assert!((&adjacent[0] - &unpermuted[0]).abs().max() > 1e-3);
}

#[test]
fn rope_rejects_bad_input_in_one_line() {
    let table = RopeTable::<f64>::new(4, 4, ROPE_BASE).unwrap();
    let x = DMatrix::<f64>::zeros(4, 4);
    let errors = [
        RopeTable::<f64>::new(4, 5, ROPE_BASE).unwrap_err().to_string(),
        RopeTable::<f64>::new(4, 4, 1.0).unwrap_err().to_string(),
        ch::rope_forward(&table, Pairing::Adjacent, &x, Positions { seq_len: 4, start: 1 })
            .unwrap_err()
            .to_string(),
        ch::rope_forward(&table, Pairing::Adjacent, &x, Positions::from_zero(3))
            .unwrap_err()
            .to_string(),
        ch::permute_head_columns(&x, &[0, 0, 1, 2]).unwrap_err().to_string(),
    ];
    for (e, arg) in errors.iter().zip(["head_dim", "base", "positions", "positions", "perm"]) {
        assert!(e.contains(arg) && !e.contains('\n') && e.chars().count() <= 100, "{e}");
    }
}

// ───────────────────────── gated MLPs ─────────────────────────

#[test]
fn swiglu_of_one_number_by_hand() {
    // x = 1, W_gate = 2, W_up = 3, W_down = 0.5: A = 2, B = 3,
    // H = SiLU(2)·3 = 2σ(2)·3 = 6/(1 + e^{−2}), Y = H/2 = 3/(1 + e^{−2}) ≈ 2.642 391.
    // (The gate on the up branch would give 2·SiLU(3)/2 = 3σ(3) ≈ 2.857 722.)
    let one = |v: f64| DMatrix::from_element(1, 1, v);
    let mlp = GatedMlp { w_gate: one(2.0), w_up: one(3.0), w_down: one(0.5), gate: Gate::Swish };
    let (y, _) = ch::glu_forward(&mlp, &one(1.0)).unwrap();
    assert!((y[(0, 0)] - 3.0 / (1.0 + (-2.0_f64).exp())).abs() < 1e-15);
    assert!((y[(0, 0)] - 2.642_391).abs() < 1e-6);
    let wrong_branch = 2.0 * Gate::Swish.apply(3.0) * 0.5;
    assert!((wrong_branch - 3.0 / (1.0 + (-3.0_f64).exp())).abs() < 1e-15);
    assert!((wrong_branch - 2.857_722).abs() < 1e-6);
}

#[test]
fn glu_backward_passes_gradient_checks_for_both_gates() {
    let mut rng = Rng::new(1207);
    for gate in [Gate::Swish, Gate::Gelu] {
        let (n, c, f) = (5, 4, 7);
        let x = rand(&mut rng, n, c);
        let mlp = GatedMlp {
            w_gate: rand(&mut rng, c, f),
            w_up: rand(&mut rng, c, f),
            w_down: rand(&mut rng, f, c),
            gate,
        };
        let r = rand(&mut rng, n, c);
        let (_, cache) = ch::glu_forward(&mlp, &x).unwrap();
        let g = ch::glu_backward(&mlp, &cache, &r).unwrap();
        let inputs = [
            ("x", x),
            ("w_gate", mlp.w_gate.clone()),
            ("w_up", mlp.w_up.clone()),
            ("w_down", mlp.w_down.clone()),
        ];
        // WIDE: L is linear in W_up, and its rounding noise (≈ 1e-9) would be judged against
        // the default floor of 1e-7 where a gradient entry is near zero.
        check(WIDE, &inputs, &[g.d_x, g.d_w_gate, g.d_w_up, g.d_w_down], |t| {
            let m =
                GatedMlp { w_gate: t[1].clone(), w_up: t[2].clone(), w_down: t[3].clone(), gate };
            weighted_sum(&ch::glu_forward(&m, &t[0]).unwrap().0, &r)
        })
        .assert_passed();
    }
}

/// The decoder's step takes the gated MLP's backward from `glu_backward_one_gate` (the gate
/// evaluated once per entry): the lesson's `glu_backward`, bit for bit, in f64 and f32, for both
/// gates; and `gate_and_slope` is `(apply, derivative)` exactly, over signs and sizes.
#[test]
fn the_steps_glu_backward_is_the_lessons_bit_for_bit() {
    use llm_workbook::ch12_modern::decoder::{gate_and_slope, glu_backward_one_gate};
    for a in [-40.0, -3.5, -1e-3, 0.0, 2e-7, 0.75, 3.0, 25.0] {
        for gate in [Gate::Swish, Gate::Gelu] {
            let want = (gate.apply(a), gate.derivative(a));
            assert_eq!(gate_and_slope(gate, a), want, "{gate:?} at {a}");
        }
    }
    let mut rng = Rng::new(1212);
    for gate in [Gate::Swish, Gate::Gelu] {
        let (n, c, f) = (9, 6, 16);
        let x = rand(&mut rng, n, c);
        let mlp = GatedMlp {
            w_gate: rand(&mut rng, c, f),
            w_up: rand(&mut rng, c, f),
            w_down: rand(&mut rng, f, c),
            gate,
        };
        let r = rand(&mut rng, n, c);
        let (_, cache) = ch::glu_forward(&mlp, &x).unwrap();
        assert_eq!(
            glu_backward_one_gate(&mlp, &cache, &r).unwrap(),
            ch::glu_backward(&mlp, &cache, &r).unwrap()
        );
        let single = |m: &DMatrix<f64>| m.map(|v| v as f32);
        let mlp32 = GatedMlp {
            w_gate: single(&mlp.w_gate),
            w_up: single(&mlp.w_up),
            w_down: single(&mlp.w_down),
            gate,
        };
        let (_, cache) = ch::glu_forward(&mlp32, &single(&x)).unwrap();
        assert_eq!(
            glu_backward_one_gate(&mlp32, &cache, &single(&r)).unwrap(),
            ch::glu_backward(&mlp32, &cache, &single(&r)).unwrap()
        );
        let e = glu_backward_one_gate(&mlp, &cache_of(&mlp, &x), &rand(&mut rng, n, c + 1));
        let e = e.unwrap_err().to_string();
        assert!(e.contains("d_y") && !e.contains('\n') && e.len() <= 100, "{e}");
    }
}

fn cache_of(mlp: &GatedMlp<f64>, x: &DMatrix<f64>) -> ch::GluCache<f64> {
    ch::glu_forward(mlp, x).unwrap().1
}

#[test]
fn glu_rejects_bad_shapes_in_one_line() {
    let mlp = GatedMlp {
        w_gate: DMatrix::<f64>::zeros(3, 4),
        w_up: DMatrix::zeros(3, 5),
        w_down: DMatrix::zeros(4, 3),
        gate: Gate::Gelu,
    };
    let e = ch::glu_forward(&mlp, &DMatrix::zeros(2, 3)).unwrap_err().to_string();
    assert!(e.contains("w_up") && !e.contains('\n') && e.chars().count() <= 100, "{e}");
    let good = GatedMlp { w_up: DMatrix::zeros(3, 4), ..mlp };
    let e = ch::glu_forward(&good, &DMatrix::zeros(2, 5)).unwrap_err().to_string();
    assert!(e.contains("x and w_gate") && !e.contains('\n') && e.chars().count() <= 100, "{e}");
    assert_eq!(good.parameter_count(), 36);
}

#[test]
fn the_gated_hidden_width_keeps_the_parameter_count_of_the_4x_mlp() {
    // F = 256·⌈⌊8C/3⌋/256⌉: C = 4096 → ⌊32 768/3⌋ = 10 922 → 43 blocks of 256 = 11 008 (Llama 2
    // 7B); C = 5120 → 13 653 → 54 blocks = 13 824 (Llama 2 13B); C = 768 → 2048 exactly.
    let m = LLAMA_HIDDEN_MULTIPLE;
    assert_eq!(ch::gated_hidden_width(4096, m).unwrap(), 11_008);
    assert_eq!(ch::gated_hidden_width(5120, m).unwrap(), 13_824);
    assert_eq!(ch::gated_hidden_width(768, m).unwrap(), 2048);
    assert_eq!(ch::gated_hidden_width(768, 1).unwrap(), 2048);
    // 3·C·F against the 4× MLP's 2·C·4C = 8C²: within 1 % for C = 4096.
    let (c, f) = (4096_f64, 11_008_f64);
    assert!((3.0 * c * f / (8.0 * c * c) - 1.0).abs() < 0.01);
    let e = ch::gated_hidden_width(0, m).unwrap_err().to_string();
    assert!(e.contains("d_model") && !e.contains('\n'), "{e}");
}

// ───────────────────────── grouped-query attention ─────────────────────────

/// A GQA layer with the weights from `t` (x first, then W_Q, W_K, W_V, W_O and, when QK-norm is
/// on, the two γ) and the rest from `p`.
fn gqa_from(p: &Gqa<f64>, t: &[DMatrix<f64>]) -> Gqa<f64> {
    let mut g = p.clone();
    (g.w_q, g.w_k, g.w_v, g.w_o) = (t[1].clone(), t[2].clone(), t[3].clone(), t[4].clone());
    if let Some((qn, kn)) = &mut g.qk_norm {
        (qn.gamma, kn.gamma) = (t[5].clone(), t[6].clone());
    }
    g
}

fn random_gqa(rng: &mut Rng, c: usize, heads: usize, kv_heads: usize, d_h: usize) -> Gqa<f64> {
    let std = 0.5;
    Gqa {
        n_heads: heads,
        n_kv_heads: kv_heads,
        w_q: rng.normal_matrix(c, heads * d_h, std),
        w_k: rng.normal_matrix(c, kv_heads * d_h, std),
        w_v: rng.normal_matrix(c, kv_heads * d_h, std),
        w_o: rng.normal_matrix(heads * d_h, c, std),
        qk_norm: None,
        rope: None,
        biases: None,
    }
}

#[test]
fn gqa_backward_passes_gradient_checks_for_mha_a_divisor_and_mqa_with_and_without_qk_norm() {
    let mut rng = Rng::new(1208);
    let (batch, t, c, heads, d_h) = (2, 3, 5, 4, 4);
    let table = RopeTable::<f64>::new(t, d_h, 50.0).unwrap();
    for kv_heads in [4, 2, 1] {
        for qk_norm in [false, true] {
            let pairing = if qk_norm { Pairing::Halves } else { Pairing::Adjacent };
            let mut p = random_gqa(&mut rng, c, heads, kv_heads, d_h);
            p.rope = Some(Rotary { table: table.clone(), pairing });
            if qk_norm {
                let gamma = |rng: &mut Rng| rng.normal_matrix(1, d_h, 0.3).add_scalar(1.0);
                p.qk_norm = Some((
                    RmsNorm { gamma: gamma(&mut rng), eps: 1e-2 },
                    RmsNorm { gamma: gamma(&mut rng), eps: 1e-2 },
                ));
            }
            let x = rand(&mut rng, batch * t, c);
            let r = rand(&mut rng, batch * t, c);
            let (_, cache) = ch::gqa_forward(&p, &x, t).unwrap();
            let g = ch::gqa_backward(&p, &cache, &r).unwrap();
            let mut inputs = vec![
                ("x", x),
                ("w_q", p.w_q.clone()),
                ("w_k", p.w_k.clone()),
                ("w_v", p.w_v.clone()),
                ("w_o", p.w_o.clone()),
            ];
            let mut grads = vec![g.d_x, g.d_w_q, g.d_w_k, g.d_w_v, g.d_w_o];
            if let (Some((qn, kn)), Some((dq, dk))) = (&p.qk_norm, g.d_qk_gamma) {
                inputs.extend([("gamma_q", qn.gamma.clone()), ("gamma_k", kn.gamma.clone())]);
                grads.extend([dq, dk]);
            }
            let report = check(WIDE, &inputs, &grads, |tensors| {
                weighted_sum(
                    &ch::gqa_forward(&gqa_from(&p, tensors), &tensors[0], t).unwrap().0,
                    &r,
                )
            });
            assert!(report.passed(), "H_kv = {kv_heads}, QK-norm {qk_norm}:\n{report}");
        }
    }
}

#[test]
fn mha_is_chapter_6s_multi_head_attention_and_gqa_is_mha_with_repeated_key_value_heads() {
    // Without rotation or QK-norm, H_kv = H is chapter 6's causal multi-head attention with zero
    // biases; H_kv < H is the same attention with every key/value head's columns copied into
    // each query head of its group (repeat_kv), computed by chapter 6.
    let mut rng = Rng::new(1209);
    let (batch, t, c, heads, d_h) = (2, 4, 6, 4, 3);
    for kv_heads in [4, 2, 1] {
        let p = random_gqa(&mut rng, c, heads, kv_heads, d_h);
        let x = rand(&mut rng, batch * t, c);
        let (ours, _) = ch::gqa_forward(&p, &x, t).unwrap();
        let repeat = |w: &DMatrix<f64>| {
            DMatrix::from_fn(c, heads * d_h, |r, col| {
                let (h, j) = (col / d_h, col % d_h);
                w[(r, (h / (heads / kv_heads)) * d_h + j)]
            })
        };
        let mha =
            MultiHead::new(heads, p.w_q.clone(), repeat(&p.w_k), repeat(&p.w_v), p.w_o.clone())
                .unwrap();
        let (theirs, _) = ch06::mha_forward(&mha, &x, &x, &AttnSpec::causal(t)).unwrap();
        assert!((ours - theirs).abs().max() < 1e-13, "H_kv = {kv_heads}");
    }
}

#[test]
fn the_pairings_give_the_same_attention_output_after_the_permutation() {
    let mut rng = Rng::new(1210);
    let (t, c, heads, kv_heads, d_h) = (5, 6, 4, 2, 4);
    let table = RopeTable::<f64>::new(t, d_h, ROPE_BASE).unwrap();
    let mut adjacent = random_gqa(&mut rng, c, heads, kv_heads, d_h);
    adjacent.rope = Some(Rotary { table: table.clone(), pairing: Pairing::Adjacent });
    let perm = ch::halves_from_adjacent(d_h).unwrap();
    let halves = Gqa {
        w_q: ch::permute_head_columns(&adjacent.w_q, &perm).unwrap(),
        w_k: ch::permute_head_columns(&adjacent.w_k, &perm).unwrap(),
        rope: Some(Rotary { table, pairing: Pairing::Halves }),
        ..adjacent.clone()
    };
    let x = rand(&mut rng, 2 * t, c);
    let (a, _) = ch::gqa_forward(&adjacent, &x, t).unwrap();
    let (h, _) = ch::gqa_forward(&halves, &x, t).unwrap();
    assert!((a - h).abs().max() < 1e-13);
}

#[test]
fn gqa_rejects_bad_head_counts_and_shapes_in_one_line() {
    let mut rng = Rng::new(1211);
    let mut p = random_gqa(&mut rng, 4, 4, 2, 2);
    let x = DMatrix::<f64>::zeros(6, 4);
    p.n_kv_heads = 3;
    let bad_heads = ch::gqa_forward(&p, &x, 3).unwrap_err().to_string();
    p.n_kv_heads = 2;
    let bad_rows = ch::gqa_forward(&p, &x, 4).unwrap_err().to_string();
    p.rope =
        Some(Rotary { table: RopeTable::new(3, 4, ROPE_BASE).unwrap(), pairing: Pairing::Halves });
    let bad_table = ch::gqa_forward(&p, &x, 3).unwrap_err().to_string();
    for (e, arg) in [(bad_heads, "n_kv_heads"), (bad_rows, "seq_len"), (bad_table, "rope")] {
        assert!(e.contains(arg) && !e.contains('\n') && e.chars().count() <= 100, "{e}");
    }
}

// ───────────────────────── the key/value cache ─────────────────────────

#[test]
fn kv_cache_bytes_per_token_of_published_configurations() {
    // layers · 2 (a key and a value) · H_kv · d_h · 2 bytes (bf16/fp16), by hand:
    // GPT-2 124M: 12 layers, 12 heads of 64, one key/value head each:
    //   12 · 2 · 12 · 64 · 2 = 36 864 bytes = 36 KiB per token.
    // Llama 3 8B: 32 layers, 32 query heads, 8 key/value heads of 128:
    //   32 · 2 · 8 · 128 · 2 = 131 072 = 128 KiB (MHA would need 4× that, 512 KiB).
    // Qwen3-8B: 36 layers, 32 query heads, 8 key/value heads of 128:
    //   36 · 2 · 8 · 128 · 2 = 147 456 = 144 KiB.
    // nanochat d20: 20 layers, width 1280 in 10 heads of 128, a key/value head each:
    //   20 · 2 · 10 · 128 · 2 = 102 400 = 100 KiB.
    let gpt2 = KvCacheShape { layers: 12, n_heads: 12, n_kv_heads: 12, head_dim: 64 };
    let llama3 = KvCacheShape { layers: 32, n_heads: 32, n_kv_heads: 8, head_dim: 128 };
    let qwen3 = KvCacheShape { layers: 36, n_heads: 32, n_kv_heads: 8, head_dim: 128 };
    assert_eq!(gpt2.bytes_per_token(BYTES_PER_HALF).unwrap(), 36_864);
    assert_eq!(llama3.bytes_per_token(BYTES_PER_HALF).unwrap(), 131_072);
    assert_eq!(llama3.as_mha().bytes_per_token(BYTES_PER_HALF).unwrap(), 524_288);
    assert_eq!(qwen3.bytes_per_token(BYTES_PER_HALF).unwrap(), 147_456);
    let nanochat = KvCacheShape { layers: 20, n_heads: 10, n_kv_heads: 10, head_dim: 128 };
    assert_eq!(nanochat.bytes_per_token(BYTES_PER_HALF).unwrap(), 102_400);
    // MQA: one key/value head, a 32nd of Llama 3 8B's MHA cache.
    let mqa = KvCacheShape { n_kv_heads: 1, ..llama3 };
    assert_eq!(mqa.bytes_per_token(BYTES_PER_HALF).unwrap(), 16_384);
    // In f32, twice as much.
    assert_eq!(gpt2.bytes_per_token(4).unwrap(), 73_728);
    let e = KvCacheShape { n_kv_heads: 5, ..llama3 }.bytes_per_token(2).unwrap_err().to_string();
    assert!(e.contains("n_kv_heads") && !e.contains('\n') && e.chars().count() <= 100, "{e}");
}

// ───────────────────────── the composed decoder ─────────────────────────

use llm_workbook::ch09_gpt::config::Config as GptConfig;
use llm_workbook::ch09_gpt::data::Batch;
use llm_workbook::ch09_gpt::model::Gpt;
use llm_workbook::ch12_modern::{Decoder, DecoderConfig, MlpKind, NormKind, PositionKind};

/// B = 2 sequences of T = 4 tokens below V = 7, two positions unscored.
fn small_batch() -> Batch {
    let inputs = vec![1, 4, 2, 6, 0, 3, 3, 5];
    let targets = vec![Some(4), Some(2), None, Some(0), Some(3), Some(3), Some(5), None];
    Batch { inputs, targets, batch: 2, seq_len: 4 }
}

/// Every tensor of `m` drawn again, large enough that every path carries a gradient: weights
/// N(0, 0.4²), γ = 1 + N(0, 0.2²).
fn randomise(m: &mut Decoder<f64>, rng: &mut Rng) {
    for (name, t) in m.tensors_mut() {
        let (r, c) = t.shape();
        *t = if name.ends_with("gamma") {
            rng.normal_matrix(r, c, 0.2).add_scalar(1.0)
        } else {
            rng.normal_matrix(r, c, 0.4)
        };
    }
}

/// The small shapes the decoder is checked on: V = 7, n_ctx = 6, 2 blocks, H = 4, C = 8
/// (d_h = 2), F = 12; `f` sets the switches.
fn small(f: impl Fn(&mut DecoderConfig)) -> DecoderConfig {
    let mut c = DecoderConfig::gpt2(7, 6, 2, 4, 8);
    c.hidden = 12;
    f(&mut c);
    c
}

fn llama_like(c: &mut DecoderConfig) {
    c.positions = PositionKind::Rotary { base: 50.0, pairing: Pairing::Halves };
    (c.norm, c.mlp, c.n_kv_heads) = (NormKind::Rms, MlpKind::Gated(Gate::Swish), 2);
    (c.qk_norm, c.biases, c.tied, c.eps) = (true, false, false, 1e-3);
}

/// The combinations checked end to end: GPT-2-like, Llama-like (GQA, QK-norm, untied), MQA with
/// GeGLU and adjacent pairs (tied), and a mixture (LayerNorm, rotary, GELU MLP, biases, GQA).
fn combinations() -> Vec<(&'static str, DecoderConfig)> {
    vec![
        ("GPT-2-like", small(|_| {})),
        ("Llama-like", small(llama_like)),
        (
            "MQA, GeGLU, tied",
            small(|c| {
                llama_like(c);
                c.positions = PositionKind::Rotary { base: 10.0, pairing: Pairing::Adjacent };
                (c.n_kv_heads, c.mlp, c.qk_norm, c.tied) =
                    (1, MlpKind::Gated(Gate::Gelu), false, true);
            }),
        ),
        (
            "LayerNorm with rotary and GQA",
            small(|c| {
                c.positions = PositionKind::Rotary { base: 20.0, pairing: Pairing::Halves };
                (c.n_kv_heads, c.qk_norm, c.tied) = (2, true, false);
            }),
        ),
    ]
}

#[test]
fn the_decoder_passes_gradient_checks_end_to_end_on_every_tensor_for_several_combinations() {
    let batch = small_batch();
    for (k, (what, config)) in combinations().into_iter().enumerate() {
        let mut model = Decoder::<f64>::new(config, 1212).unwrap();
        randomise(&mut model, &mut Rng::new(1300 + k as u64));
        let g = model.loss_and_grads(&batch).unwrap();
        assert!((g.loss - model.loss(&batch).unwrap()).abs() < 1e-12, "{what}");
        let named = model.tensors();
        let grads: Vec<DMatrix<f64>> = g.grads.tensors().into_iter().map(|(_, m)| m).collect();
        let inputs: Vec<(&str, DMatrix<f64>)> =
            named.iter().map(|(n, m)| (n.as_str(), m.clone())).collect();
        let report = check(WIDE, &inputs, &grads, |tensors| {
            let mut m = model.clone();
            m.set_tensors(tensors).unwrap();
            m.loss(&batch).unwrap()
        });
        assert!(report.passed(), "{what}:\n{report}");
        assert_eq!(report.tensors.len(), named.len(), "{what}");
    }
}

#[test]
fn the_decoder_lists_exactly_the_tensors_its_switches_call_for() {
    let [gpt2, llama, mqa, _] = combinations().try_into().unwrap();
    let names = |c: DecoderConfig| -> Vec<String> {
        Decoder::<f64>::zeros(c).unwrap().tensors().into_iter().map(|(n, _)| n).collect()
    };
    let (g, l, m) = (names(gpt2.1), names(llama.1), names(mqa.1));
    // GPT-2: wte, wpe, 16 a block (2 norms × 2, 4 W, 4 b, w1 b1 w2 b2), norm_f γ β.
    assert_eq!(g.len(), 2 + 2 * 16 + 2, "{g:?}");
    // Llama: wte, 11 a block (2 γ, 4 W, 2 QK-norm γ, 3 MLP), norm_f γ, lm_head.
    assert_eq!(l.len(), 1 + 2 * 11 + 2, "{l:?}");
    assert!(l.contains(&"l1.attn.k_norm.gamma".to_string()) && !l.contains(&"wpe".to_string()));
    assert_eq!(m.len(), 1 + 2 * 9 + 1, "{m:?}");
    // MQA: W_K is C×d_h; parameters 1·C·d_h rather than H·C·d_h.
    let mqa_model = Decoder::<f64>::zeros(mqa.1).unwrap();
    assert_eq!(mqa_model.layers[0].attn.w_k.shape(), (8, 2));
}

/// AdamW decays the weight matrices and no γ, β or bias: in every combination, and for chapter
/// 9's GPT-2, the flags the trainer gets with the tensors are set exactly on the tensors of more
/// than one row (the γs, βs and biases are single rows; every matrix here has several), in the
/// order of the tensors themselves.
#[test]
fn the_trainer_decays_exactly_the_matrices_in_one_walk() {
    use llm_workbook::ch09_gpt::trainable::Trainable;
    fn expect<M: Trainable<f64>>(name: &str, model: &mut M) {
        let (params, decays) = model.parameters_mut_and_decays();
        let rows: Vec<bool> = params.iter().map(|m| m.nrows() > 1).collect();
        assert_eq!(decays, rows, "{name}");
    }
    for (name, c) in combinations() {
        expect(name, &mut Decoder::<f64>::new(c, 1).unwrap());
    }
    expect("chapter 9's GPT-2", &mut Gpt::<f64>::new(GptConfig::new(7, 6, 2, 4, 8), 1).unwrap());
}

#[test]
fn with_gpt2s_choices_the_decoder_is_chapter_9s_gpt_loss_and_every_gradient() {
    // Chapter 9's model computes through chapter 6's multi-head block with W_QKV fused; the
    // decoder through the lesson's GQA with H_kv = H: two computations of the same function.
    let batch = small_batch();
    for tied in [true, false] {
        let mut config = GptConfig::new(7, 6, 2, 4, 8);
        config.tied = tied;
        let mut gpt = Gpt::<f64>::new(config, 9).unwrap();
        let mut rng = Rng::new(1214);
        for t in gpt.tensors_mut() {
            let (r, c) = t.shape();
            *t = rng.normal_matrix(r, c, 0.4).add_scalar(if r == 1 { 0.5 } else { 0.0 });
        }
        let theirs = gpt.loss_and_grads(&batch).unwrap();
        let ours = Decoder::from_gpt_tensors(&config, &gpt.params).unwrap();
        assert_eq!(ours.config.tied, tied);
        let g = ours.loss_and_grads(&batch).unwrap();
        assert!((g.loss - theirs.loss).abs() < 1e-13, "tied {tied}: {} {}", g.loss, theirs.loss);
        let expected = Decoder::from_gpt_tensors(&config, &theirs.grads).unwrap();
        let mut compared = 0;
        for ((name, a), (_, b)) in g.grads.tensors().into_iter().zip(expected.tensors()) {
            let scale = b.abs().max().max(1e-3);
            assert!((a - &b).abs().max() / scale < 1e-11, "tied {tied}: {name}");
            compared += b.len();
        }
        assert_eq!(compared, gpt.parameter_count(), "tied {tied}: every gradient compared");
    }
}

#[test]
fn the_cached_step_gives_the_full_forwards_last_row_at_every_position() {
    let tokens = [3u32, 0, 6, 2, 2, 5];
    for (k, (what, config)) in combinations().into_iter().enumerate() {
        let mut model = Decoder::<f64>::new(config, 1215).unwrap();
        randomise(&mut model, &mut Rng::new(1400 + k as u64));
        let mut kv = model.new_kv();
        for (p, &u) in tokens.iter().enumerate() {
            let step = model.step(&mut kv, u).unwrap();
            let full = model.logits(&tokens[..=p], p + 1).unwrap();
            let last: Vec<f64> = full.row(p).iter().copied().collect();
            let diff = step.iter().zip(&last).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(diff < 1e-12, "{what}, position {p}: {diff:e}");
        }
        let full = model.step(&mut kv, 1).unwrap_err().to_string();
        assert!(full.contains("kv") && !full.contains('\n'), "{full}");
    }
}

#[test]
fn the_decoders_cache_holds_the_bytes_per_token_the_table_counts() {
    for (what, c) in combinations() {
        let kv = Decoder::<f64>::zeros(c).unwrap().new_kv();
        let shape = KvCacheShape {
            layers: c.layers,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim(),
        };
        let bytes = shape.bytes_per_token(std::mem::size_of::<f64>()).unwrap();
        assert_eq!(kv.bytes_per_token() as u64, bytes, "{what}");
    }
}

#[test]
fn the_decoder_rejects_bad_configurations_and_input_in_one_line() {
    let bad = |f: fn(&mut DecoderConfig)| Decoder::<f64>::zeros(small(f)).unwrap_err().to_string();
    let model = Decoder::<f64>::zeros(small(llama_like)).unwrap();
    let long = Batch { inputs: vec![0; 7], targets: vec![Some(0); 7], batch: 1, seq_len: 7 };
    let id = Batch { inputs: vec![7, 0], targets: vec![Some(0); 2], batch: 1, seq_len: 2 };
    for (e, arg) in [
        (bad(|c| c.n_kv_heads = 3), "n_kv_heads"),
        (bad(|c| c.mlp = MlpKind::Gated(Gate::Swish)), "biases"),
        (
            bad(|c| {
                (c.width, c.n_heads, c.n_kv_heads) = (6, 2, 2);
                c.positions = PositionKind::Rotary { base: 1e4, pairing: Pairing::Halves };
            }),
            "width",
        ),
        (bad(|c| c.eps = 0.0), "eps"),
        (model.loss(&long).unwrap_err().to_string(), "seq_len"),
        (model.loss(&id).unwrap_err().to_string(), "inputs"),
    ] {
        assert!(e.contains(arg) && !e.contains('\n') && e.chars().count() <= 100, "{arg}: {e}");
    }
}

#[test]
fn chapter_9s_sampler_generates_with_the_decoder_and_its_gqa_cache() {
    use llm_workbook::ch09_gpt::sample::{Decoding, generate, generate_with};
    let prompt = [2u32, 5, 1];
    // The Llama-like decoder: the cached path (GQA cache, rebuilt when the window of 6 slides)
    // chooses the tokens the uncached one does, from the same draws.
    let mut model = Decoder::<f64>::new(small(llama_like), 1216).unwrap();
    randomise(&mut model, &mut Rng::new(1217));
    let decoding = Decoding::temperature(0.8);
    let run = |cache: bool| {
        generate_with(&mut &model, &prompt, 9, &decoding, &mut Rng::new(5), cache).unwrap()
    };
    let (cached, uncached) = (run(true), run(false));
    assert_eq!(cached.tokens, uncached.tokens);
    assert_eq!(cached.tokens.len(), prompt.len() + 9);
    assert!(cached.rebuilds > 0 && uncached.rebuilds == 0, "{cached:?}");
    // GPT-2's choices: the decoder holding a GPT's weights continues greedily as the GPT does.
    let config = GptConfig::new(7, 6, 2, 4, 8);
    let mut gpt = Gpt::<f64>::new(config, 10).unwrap();
    let mut rng = Rng::new(1218);
    for t in gpt.tensors_mut() {
        let (r, c) = t.shape();
        *t = rng.normal_matrix(r, c, 0.4).add_scalar(if r == 1 { 0.5 } else { 0.0 });
    }
    let ours = Decoder::from_gpt_tensors(&config, &gpt.params).unwrap();
    let greedy = Decoding::Greedy;
    let a = generate_with(&mut &ours, &prompt, 5, &greedy, &mut Rng::new(1), true).unwrap();
    let b = generate(&gpt, &prompt, 5, &greedy, &mut Rng::new(1), true).unwrap();
    assert_eq!(a.tokens, b.tokens);
}

// ─────────────── trained, stored and sampled through chapter 9's code ───────────────

mod common;

use llm_workbook::ch09_gpt::checkpoint::{trainer_files, trainer_from_state};
use llm_workbook::ch09_gpt::safetensors::SafeTensors;
use llm_workbook::ch09_gpt::schedule::Schedule;
use llm_workbook::ch09_gpt::train::{Data, TrainConfig, Trainer};
use llm_workbook::ch12_modern::llama::{
    decoder_from_llama, llama_config_from_json, llama_files, llama_refusal,
};

/// The Llama-like decoder without QK-norm: what the Llama layout holds.
fn llama_holdable(c: &mut DecoderConfig) {
    llama_like(c);
    c.qk_norm = false;
}

/// The file of `files` named `name`.
fn file_named(files: &[(String, Vec<u8>)], name: &str) -> Vec<u8> {
    files.iter().find(|f| f.0 == name).map(|f| f.1.clone()).unwrap()
}

#[test]
fn the_llama_layout_has_hugging_faces_names_shapes_and_config_keys() {
    let model = Decoder::<f32>::new(small(llama_holdable), 51).unwrap();
    let files = llama_files(&model, &[("step".into(), "0".into())]).unwrap();
    let f = SafeTensors::parse(file_named(&files, "model.safetensors"), "m").unwrap();
    // C = 8, H = 4 of d_h = 2, H_kv = 2, F = 12, V = 7: each Linear out×in.
    let mut want = vec![("model.embed_tokens.weight".to_string(), vec![7, 8])];
    for i in 0..2 {
        let p = |s: &str| format!("model.layers.{i}.{s}.weight");
        want.push((p("input_layernorm"), vec![8]));
        want.push((p("self_attn.q_proj"), vec![8, 8]));
        want.push((p("self_attn.k_proj"), vec![4, 8]));
        want.push((p("self_attn.v_proj"), vec![4, 8]));
        want.push((p("self_attn.o_proj"), vec![8, 8]));
        want.push((p("post_attention_layernorm"), vec![8]));
        want.push((p("mlp.gate_proj"), vec![12, 8]));
        want.push((p("mlp.up_proj"), vec![12, 8]));
        want.push((p("mlp.down_proj"), vec![8, 12]));
    }
    want.push(("model.norm.weight".into(), vec![8]));
    want.push(("lm_head.weight".into(), vec![7, 8]));
    let mut got: Vec<(String, Vec<usize>)> =
        f.tensors.iter().map(|t| (t.name.clone(), t.shape.clone())).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert!(f.tensors.iter().all(|t| t.dtype == "F32"));
    // q_proj holds W_Qᵀ: its row j is W_Q's column j.
    let q = f.matrix::<f32>("model.layers.1.self_attn.q_proj.weight", 8, 8).unwrap();
    assert_eq!(q, model.layers[1].attn.w_q.transpose());
    let down = f.matrix::<f32>("model.layers.0.mlp.down_proj.weight", 8, 12).unwrap();
    assert_eq!(down.transpose().shape(), (12, 8));
    // config.json: LlamaConfig's keys and values.
    let text = String::from_utf8(file_named(&files, "config.json")).unwrap();
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    let keys: std::collections::BTreeSet<&str> =
        j.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    let expected = [
        "architectures",
        "attention_bias",
        "head_dim",
        "hidden_act",
        "hidden_size",
        "intermediate_size",
        "max_position_embeddings",
        "mlp_bias",
        "model_type",
        "num_attention_heads",
        "num_hidden_layers",
        "num_key_value_heads",
        "rms_norm_eps",
        "rope_theta",
        "tie_word_embeddings",
        "torch_dtype",
        "vocab_size",
    ];
    assert_eq!(keys, expected.into_iter().collect());
    let number = |k: &str| j[k].as_f64().unwrap();
    assert_eq!(j["architectures"][0], "LlamaForCausalLM");
    assert_eq!((j["model_type"].as_str(), j["hidden_act"].as_str()), (Some("llama"), Some("silu")));
    let sizes = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers"];
    assert_eq!(sizes.map(number), [7.0, 8.0, 12.0, 2.0]);
    let heads = ["num_attention_heads", "num_key_value_heads", "head_dim"];
    assert_eq!(heads.map(number), [4.0, 2.0, 2.0]);
    let rest = ["rms_norm_eps", "rope_theta", "max_position_embeddings"];
    assert_eq!(rest.map(number), [1e-3, 50.0, 6.0]);
    assert_eq!(
        (j["tie_word_embeddings"].as_bool(), j["attention_bias"].as_bool()),
        (Some(false), Some(false))
    );
    assert_eq!(llama_config_from_json(text.as_bytes(), "config.json").unwrap(), model.config);
}

#[test]
fn a_llama_folder_loads_back_equal_tensors_tied_and_untied() {
    for tied in [false, true] {
        let config = small(|c| {
            llama_holdable(c);
            c.tied = tied;
        });
        let model = Decoder::<f32>::new(config, 52).unwrap();
        let files = llama_files(&model, &[]).unwrap();
        let f = SafeTensors::parse(file_named(&files, "model.safetensors"), "m").unwrap();
        assert_eq!(f.info("lm_head.weight").is_some(), !tied);
        let c = llama_config_from_json(&file_named(&files, "config.json"), "config.json").unwrap();
        let back = decoder_from_llama::<f32>(c, &f).unwrap();
        assert_eq!(back, model, "tied {tied}");
    }
}

#[test]
fn adjacent_pairs_are_stored_in_halves_and_score_the_same() {
    let config = small(|c| {
        llama_holdable(c);
        c.positions = PositionKind::Rotary { base: 50.0, pairing: Pairing::Adjacent };
        // Heads of d_h = 4: with d_h = 2 the two pairings are one.
        (c.n_heads, c.n_kv_heads) = (2, 1);
    });
    let mut model = Decoder::<f64>::new(config, 53).unwrap();
    randomise(&mut model, &mut Rng::new(54));
    let files = llama_files(&model, &[]).unwrap();
    let f = SafeTensors::parse(file_named(&files, "model.safetensors"), "m").unwrap();
    let c = llama_config_from_json(&file_named(&files, "config.json"), "config.json").unwrap();
    let back = decoder_from_llama::<f64>(c, &f).unwrap();
    assert_eq!(
        back.config.positions,
        PositionKind::Rotary { base: 50.0, pairing: Pairing::Halves }
    );
    let tokens = [3u32, 0, 6, 2, 2, 5];
    let (a, b) = (model.logits(&tokens, 6).unwrap(), back.logits(&tokens, 6).unwrap());
    assert!((&a - &b).abs().max() < 1e-12);
    // Stored without the permutation, the halves decoder scores otherwise (the check's plant).
    let mut unpermuted = back.clone();
    for (u, m) in unpermuted.layers.iter_mut().zip(&model.layers) {
        (u.attn.w_q, u.attn.w_k) = (m.attn.w_q.clone(), m.attn.w_k.clone());
    }
    assert!((unpermuted.logits(&tokens, 6).unwrap() - a).abs().max() > 1e-3);
}

#[test]
fn the_llama_layout_refuses_what_it_cannot_hold_in_one_line() {
    type Change = fn(&mut DecoderConfig);
    let cases: [(&str, Change); 5] = [
        ("learned positions", |c| c.positions = PositionKind::Learned),
        ("LayerNorm", |c| c.norm = NormKind::Layer),
        ("GELU MLP", |c| c.mlp = MlpKind::Gelu),
        ("QK-norm", |c| c.qk_norm = true),
        ("biases", |c| {
            (c.mlp, c.biases) = (MlpKind::Gelu, true);
        }),
    ];
    for (what, change) in cases {
        let config = small(|c| {
            llama_holdable(c);
            change(c);
        });
        assert!(llama_refusal(&config).is_some(), "{what}");
        let model = Decoder::<f32>::new(config, 55).unwrap();
        let e = llama_files(&model, &[]).unwrap_err().to_string();
        assert!(!e.contains('\n') && e.len() <= 100, "{what}: {e}");
    }
    assert!(llama_refusal(&small(llama_holdable)).is_none());
}

#[test]
fn chapter_9s_trainer_trains_the_decoder_and_resumes_it_bit_for_bit_from_its_files() {
    let config = small(llama_holdable);
    let model = Decoder::<f32>::new(config, 56).unwrap();
    let tokens: Vec<u32> = (0..200u32).map(|i| (i * 5 + i / 7) % 7).collect();
    let data = Data::Stream { tokens: &tokens, seq_len: 6 };
    let tc = TrainConfig::new(4, Schedule::new(1e-2, 1e-3, 2, 20).unwrap());
    let mut trainer = Trainer::new(model, &tc, 57).unwrap();
    trainer.run(&data, &tc, 12, |_| {}).unwrap();
    let h = &trainer.history;
    assert!(h[11].loss < h[0].loss - 0.2, "{} → {}", h[0].loss, h[11].loss);
    let files = trainer_files(&trainer).unwrap();
    let m = SafeTensors::parse(file_named(&files, "model.safetensors"), "m").unwrap();
    let s = SafeTensors::parse(file_named(&files, "training_state.safetensors"), "s").unwrap();
    let c = llama_config_from_json(&file_named(&files, "config.json"), "config.json").unwrap();
    let fresh = Trainer::new(Decoder::<f32>::new(config, 0).unwrap(), &tc, 0).unwrap();
    let mut back = trainer_from_state(decoder_from_llama(c, &m).unwrap(), &m, &s, &fresh).unwrap();
    assert_eq!((back.step, &back.model), (trainer.step, &trainer.model));
    trainer.run(&data, &tc, 15, |_| {}).unwrap();
    back.run(&data, &tc, 15, |_| {}).unwrap();
    assert_eq!(back.model, trainer.model);
    assert_eq!(back.history, trainer.history);
}

/// `gpt train --arch llama` writes a Llama folder that `gpt sample` and `gpt resume` read
/// (`gpt quantize` too: `tests/ch11_precision.rs`); the flags of the other architecture are
/// refused in one line.
#[test]
fn gpt_train_arch_llama_samples_resumes_and_refuses_what_it_cannot_do() {
    use std::process::Command;
    let dir = common::temp_dir("ch12_arch_llama");
    let cli = |args: &[&str]| {
        let r = Command::new(env!("CARGO_BIN_EXE_llm-workbook"))
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr).to_string();
        (r.status.success(), String::from_utf8_lossy(&r.stdout).to_string(), err)
    };
    let text = dir.path().join("my.txt");
    std::fs::write(&text, "the cat sat on the mat. ".repeat(20)).unwrap();
    let ck = dir.path().join("ck");
    let (t, c) = (text.to_str().unwrap(), ck.to_str().unwrap());
    let shape = ["--layers", "1", "--heads", "4", "--kv-heads", "2", "--width", "16"];
    let mut args = vec!["gpt", "train", "--arch", "llama", "--data", t, "--out", c];
    args.extend(shape);
    args.extend(["--context", "8", "--steps", "2", "--batch", "2"]);
    let (ok, out, err) = cli(&args);
    assert!(ok, "{err}");
    assert!(out.contains("model: llama, 1 layers, 4 heads (2 key/value)"), "{out}");
    let here = llm_workbook::workshop::folder::resolve(&ck).unwrap().path;
    let config = std::fs::read_to_string(here.join("config.json")).unwrap();
    assert!(
        config.contains("\"LlamaForCausalLM\"") && config.contains("\"num_key_value_heads\": 2")
    );
    let sample = ["gpt", "sample", "--checkpoint", c, "--prompt", "the ", "--tokens", "5"];
    let (ok, out, err) = cli(&[&sample[..], &["--greedy"]].concat());
    assert!(ok && out.starts_with("the "), "{err}");
    let (ok, out, err) = cli(&["gpt", "resume", "--checkpoint", c, "--steps", "3"]);
    assert!(ok && out.contains("resuming"), "{err}");
    let q = dir.path().join("q").to_str().unwrap().to_string();
    let refusals = [
        vec!["gpt", "train", "--data", t, "--kv-heads", "2", "--out", &q],
        vec!["gpt", "train", "--arch", "llama", "--precision", "bf16", "--data", t, "--out", &q],
        vec!["gpt", "train", "--arch", "llama", "--heads", "4", "--kv-heads", "3", "--out", &q],
    ];
    for args in refusals {
        let (ok, _, err) = cli(&args);
        let line = err.trim_end();
        assert!(!ok && !line.contains('\n') && line.len() <= 100, "{args:?}: {err}");
    }
}

// ─────────────── measured: GPT-2's block against today's (benches/ch12_compare.rs) ───────────────

use llm_workbook::ch12_modern::book::{COMPARISON_FILE, committed_comparison, comparison_figure};
use llm_workbook::ch12_modern::compare::{
    Arm, CompareRow, compare_csv_text, compare_run, gaps_to_gpt2, parameter_count,
    parse_compare_csv, summarize,
};

/// Chapter 9's corpus model as GPT-2's block: V = 512, context 64, 3 blocks, H = 4, C = 96.
fn corpus_gpt2() -> DecoderConfig {
    DecoderConfig::gpt2(512, 64, 3, 4, 96)
}

#[test]
fn the_comparisons_arms_switch_their_parts_and_match_gpt2s_parameter_count() {
    let base = corpus_gpt2();
    let p0 = parameter_count(&base).unwrap();
    assert_eq!(Arm::Gpt2.config(&base).unwrap(), base);
    let rope = |c: &DecoderConfig| matches!(c.positions, PositionKind::Rotary { .. });
    let gated = |c: &DecoderConfig| matches!(c.mlp, MlpKind::Gated(_));
    // (arm, rotary, RMSNorm, gated, H_kv, QK-norm, biases): one part each, all for today's.
    let want = [
        (Arm::Modern, true, true, true, 2, true, false),
        (Arm::Rope, true, false, false, 4, false, true),
        (Arm::RmsNorm, false, true, false, 4, false, true),
        (Arm::SwiGlu, false, false, true, 4, false, false),
        (Arm::Gqa, false, false, false, 2, false, true),
        (Arm::QkNorm, false, false, false, 4, true, true),
    ];
    for (arm, r, rms, g, kv, qk, b) in want {
        let c = arm.config(&base).unwrap();
        let got = (rope(&c), c.norm == NormKind::Rms, gated(&c), c.n_kv_heads, c.qk_norm, c.biases);
        assert_eq!(got, (r, rms, g, kv, qk, b), "{arm:?}");
        assert!(c.tied && (c.width, c.layers, c.n_heads, c.context) == (96, 3, 4, 64), "{arm:?}");
        // No other hidden width comes nearer GPT-2's count.
        let gap =
            |f: usize| parameter_count(&DecoderConfig { hidden: f, ..c }).unwrap().abs_diff(p0);
        let here = gap(c.hidden);
        assert!(
            here <= gap(c.hidden - 1) && here <= gap(c.hidden + 1),
            "{arm:?}: F = {}",
            c.hidden
        );
    }
    // By hand: SwiGLU drops every bias, 4·96 in the attention and 384 + 96 in the MLP of each of
    // the 3 blocks, 2 592 in all; one more unit of F costs 3·96 per block, 864: F = 256 + 3 holds
    // GPT-2's count exactly (8C/3 = 256 holds the 4× MLP's weights).
    let swiglu = Arm::SwiGlu.config(&base).unwrap();
    assert_eq!(swiglu.hidden, 259);
    assert_eq!(parameter_count(&swiglu).unwrap(), p0);
}

/// Equal to 12 decimals.
fn near(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

fn measured(arm: Arm, seed: u64, step: usize, validation: f64) -> CompareRow {
    let parameters = 1000;
    CompareRow { arm, seed, parameters, step, tokens: 512 * step, validation, seconds: 2.0 }
}

#[test]
fn the_comparisons_summary_and_gaps_by_hand() {
    let rows = vec![
        measured(Arm::Gpt2, 1, 10, 3.0),
        measured(Arm::Gpt2, 1, 20, 2.0),
        measured(Arm::Modern, 1, 10, 2.5),
        measured(Arm::Modern, 1, 20, 1.9),
        measured(Arm::Gpt2, 2, 10, 3.2),
        measured(Arm::Gpt2, 2, 20, 2.2),
        measured(Arm::Modern, 2, 10, 3.1),
        measured(Arm::Modern, 2, 20, 2.0),
        measured(Arm::Rope, 1, 20, 2.5),
    ];
    let s = summarize(&rows).unwrap();
    assert_eq!(s.iter().map(|a| a.arm).collect::<Vec<_>>(), [Arm::Gpt2, Arm::Modern, Arm::Rope]);
    // GPT-2: finals 2.0 and 2.2, mean 2.1, sample deviation √((0.01 + 0.01)/1) = 0.141421.
    assert!(near(s[0].mean, 2.1), "{} against {}", s[0].mean, 2.1);
    assert!(
        near(s[0].spread.unwrap(), 0.02f64.sqrt()),
        "{} against {}",
        s[0].spread.unwrap(),
        0.02f64.sqrt()
    );
    // Today's: finals 1.9 and 2.0; against GPT-2 seed by seed −0.1 and −0.2, mean −0.15.
    assert!(near(s[1].mean, 1.95), "{} against {}", s[1].mean, 1.95);
    assert!(
        near(s[1].against_gpt2.unwrap(), -0.15),
        "{} against {}",
        s[1].against_gpt2.unwrap(),
        -0.15
    );
    assert_eq!((s[2].spread, s[2].finals.clone()), (None, vec![(1, 2.5)]));
    assert!(
        near(s[2].against_gpt2.unwrap(), 0.5),
        "{} against {}",
        s[2].against_gpt2.unwrap(),
        0.5
    );
    assert_eq!((s[1].steps, s[1].tokens), (20, 10240));
    // During training: at step 10, (−0.5 + −0.1)/2 = −0.3; at step 20, −0.15.
    let gaps = gaps_to_gpt2(&rows);
    assert_eq!(gaps[0].0, Arm::Modern);
    let [(x1, y1), (x2, y2)] = gaps[0].1[..] else { panic!("two points: {:?}", gaps[0].1) };
    assert_eq!((x1, x2), (10.0, 20.0));
    assert!(near(y1, -0.3), "{} against {}", y1, -0.3);
    assert!(near(y2, -0.15), "{} against {}", y2, -0.15);
    assert_eq!(gaps[1].1.len(), 1);
    // Runs of one arm that differ in size are refused, and no rows at all.
    let mut odd = rows.clone();
    odd[3].parameters = 999;
    assert!(summarize(&odd).is_err() && summarize(&[]).is_err());
}

#[test]
fn the_comparison_csv_reads_back_and_refuses_bad_lines_in_one_line() {
    let rows = vec![measured(Arm::Gpt2, 1, 10, 3.25), measured(Arm::QkNorm, 3, 20, 2.5)];
    let text = compare_csv_text(&rows);
    assert_eq!(parse_compare_csv(&text, "x.csv").unwrap(), rows);
    let header = text.lines().next().unwrap();
    let bad = [
        "configuration,seed\n".to_string(),
        format!("{header}\ngpt2,1,1000,10,5120,3.25\n"),
        format!("{header}\ngpt3,1,1000,10,5120,3.25,2.0\n"),
        format!("{header}\ngpt2,one,1000,10,5120,3.25,2.0\n"),
        format!("{header}\ngpt2,1,1000,10,5120,NaN,2.0\n"),
    ];
    for (i, b) in bad.iter().enumerate() {
        let e = parse_compare_csv(b, "x.csv").expect_err(b).to_string();
        assert!(!e.contains('\n') && e.len() <= 100 && e.contains("x.csv"), "{i}: {e}");
    }
}

#[test]
fn a_comparison_run_measures_at_its_steps_and_stops_early_with_the_same_bits() {
    let tokens = llm_workbook::ch09_gpt::experiments::corpus_tokens().unwrap();
    let mut seen = 0;
    let full = compare_run(&tokens, (Arm::Gqa, 1), (4, 2, 4), |_| seen += 1).unwrap();
    assert_eq!(seen, 2);
    let steps: Vec<(usize, usize)> = full.iter().map(|r| (r.step, r.tokens)).collect();
    assert_eq!(steps, [(2, 1024), (4, 2048)]);
    let gqa = Arm::Gqa.config(&corpus_gpt2()).unwrap();
    assert_eq!(full[0].parameters, parameter_count(&gqa).unwrap());
    assert!(full[1].validation < full[0].validation && full[0].validation < 512f64.ln());
    let early = compare_run(&tokens, (Arm::Gqa, 1), (4, 2, 2), |_| {}).unwrap();
    assert_eq!(early.len(), 1);
    assert_eq!(early[0].validation.to_bits(), full[0].validation.to_bits());
    for plan in [(4, 0, 4), (4, 2, 5)] {
        let e = compare_run(&tokens, (Arm::Gqa, 1), plan, |_| {}).unwrap_err().to_string();
        assert!(!e.contains('\n') && e.len() <= 100, "{plan:?}: {e}");
    }
}

/// A count as the page writes it: 391 008.
fn grouped(n: usize) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

#[test]
fn the_pages_comparison_table_is_the_committed_csvs() {
    let csv = std::fs::read_to_string(common::repo_root().join(COMPARISON_FILE)).unwrap();
    // The last measurement of each (configuration, seed), read from the lines themselves.
    let mut finals: Vec<(String, u64, usize, usize, f64, f64)> = Vec::new();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (arm, seed, params, step) = (f[0].to_string(), f[1].parse().unwrap(), f[2], f[3]);
        let (val, secs) = (f[5].parse::<f64>().unwrap(), f[6].parse::<f64>().unwrap());
        let rec = (arm, seed, params.parse().unwrap(), step.parse().unwrap(), val, secs);
        finals.retain(|r| (&r.0, r.1) != (&rec.0, rec.1));
        finals.push(rec);
    }
    let of = |arm: Arm| -> Vec<&(String, u64, usize, usize, f64, f64)> {
        let mut v: Vec<_> = finals.iter().filter(|r| r.0 == arm.key()).collect();
        v.sort_by_key(|r| r.1);
        v
    };
    let gpt2 = of(Arm::Gpt2);
    let page = common::prose("ch12_modern");
    let table = common::page_table(&page, "| configuration | parameters |");
    let arms: Vec<Arm> = Arm::ALL.into_iter().filter(|&a| !of(a).is_empty()).collect();
    assert_eq!(table.len(), arms.len(), "one row per configuration measured");
    for (cells, arm) in table.iter().zip(arms) {
        let runs = of(arm);
        let n = runs.len() as f64;
        let mean = runs.iter().map(|r| r.4).sum::<f64>() / n;
        let loss = if runs.len() > 1 {
            let var = runs.iter().map(|r| (r.4 - mean) * (r.4 - mean)).sum::<f64>() / (n - 1.0);
            format!("{mean:.4} ± {:.4}", var.sqrt())
        } else {
            format!("{mean:.4}")
        };
        let gap = if arm == Arm::Gpt2 {
            "—".to_string()
        } else {
            let d = runs
                .iter()
                .map(|r| r.4 - gpt2.iter().find(|g| g.1 == r.1).expect("GPT-2, same seed").4)
                .sum::<f64>()
                / n;
            format!("{}{:.4}", if d < 0.0 { "−" } else { "+" }, d.abs())
        };
        let secs = runs.iter().map(|r| r.5).sum::<f64>() / n;
        let want = [
            arm.label().to_string(),
            grouped(runs[0].2),
            runs.len().to_string(),
            loss,
            gap,
            format!("{secs:.0}"),
        ];
        assert_eq!(cells, &want, "{arm:?}");
    }
    // The steps and tokens the page states are the runs'.
    let (steps, tokens) = (finals[0].3, finals[0].3 * 512);
    let said = format!("{steps} steps of 8 windows of 64 tokens ({} tokens", grouped(tokens));
    assert!(page.contains(&said), "the page says {said:?}");
    // The figure: GPT-2's zero line and one curve per other configuration.
    let fig = comparison_figure(&committed_comparison().unwrap());
    let llm_workbook::plot::Figure::Line(chart) = fig else { panic!("a line chart") };
    assert_eq!(chart.series.len(), table.len());
}

// ─────────────── generation from stored projections (the decoder's step seam) ───────────────

mod stored_decoder {
    use crate::common;
    use llm_workbook::ch09_gpt::safetensors::SafeTensors;
    use llm_workbook::ch09_gpt::sample::{Decoding, argmax, generate_with};
    use llm_workbook::ch11_precision::bf16_weights::Bf16Matrix;
    use llm_workbook::ch11_precision::quant::{QuantMatrix, Storage};
    use llm_workbook::ch11_precision::quant_step::StoredMatrix;
    use llm_workbook::ch12_modern::decoder::StepProduct;
    use llm_workbook::ch12_modern::glu::Gate;
    use llm_workbook::ch12_modern::gqa::AttnProduct;
    use llm_workbook::ch12_modern::llama::{decoder_from_stored_llama, llama_stored_files};
    use llm_workbook::ch12_modern::quant_decoder::{
        QuantDecoder, STORED_PRODUCTS, SamplingDecoder,
    };
    use llm_workbook::ch12_modern::rope::Pairing;
    use llm_workbook::ch12_modern::{Decoder, DecoderConfig, Mlp, MlpKind, NormKind, PositionKind};
    use llm_workbook::rng::Rng;
    use llm_workbook::simd::{Kernel, available_kernels};
    use nalgebra::DMatrix;

    const STORAGES: [Storage; 3] = [Storage::Bf16, Storage::Int8, Storage::Q4];

    /// A Llama decoder: 2 blocks, H = 4 query heads sharing H_kv = 2 key/value heads, C = 64
    /// (two blocks of 32 along the width), F = 88 (a column of W_down padded to 3 blocks),
    /// V = 29, context 12; its weights drawn 10 times chapter 9's size so that the logits spread.
    fn llama(tied: bool) -> Decoder<f32> {
        let c = DecoderConfig {
            n_kv_heads: 2,
            hidden: 88,
            positions: PositionKind::Rotary { base: 10_000.0, pairing: Pairing::Halves },
            norm: NormKind::Rms,
            mlp: MlpKind::Gated(Gate::Swish),
            biases: false,
            tied,
            ..DecoderConfig::gpt2(29, 12, 2, 4, 64)
        };
        let mut m = Decoder::new(c, 3).unwrap();
        for (name, w) in m.tensors_mut() {
            if !name.ends_with("gamma") {
                *w *= 10.0;
            }
        }
        m
    }

    fn is_projection(name: &str) -> bool {
        ["w_q", "w_k", "w_v", "w_o", "w_gate", "w_up", "w_down"]
            .iter()
            .any(|p| name.ends_with(&format!(".{p}")))
    }

    /// The stated bound on |z_stored − z_widened|: each logit's inputs pass through 2 blocks of
    /// f32 dot products of at most 88 terms summed in another order (the stored products by
    /// blocks of 32 with fused multiply-adds, the f32 step by chapter 10's kernel), each off by
    /// at most γ₈₈·Σ|x·ŵ| ≈ 10⁻⁵ of its terms' sizes; measured, a few 10⁻⁶ at logits of size 10.
    const STORED_STEP_TOLERANCE: f32 = 1e-4;

    /// The largest |z_q − z_reference| over the steps of `tokens`, each decoder fed one token
    /// at a time from an empty cache.
    fn worst_gap(q: &QuantDecoder, reference: &Decoder<f32>, tokens: &[u32]) -> f32 {
        let (mut a, mut b) = (reference.new_kv(), q.new_kv());
        let mut worst = 0f32;
        for &t in tokens {
            let (want, got) = (reference.step(&mut a, t).unwrap(), q.step(&mut b, t).unwrap());
            worst = got.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(worst, f32::max);
        }
        worst
    }

    const TOKENS: [u32; 12] = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8];

    /// bf16, int8 and 4-bit, tied and untied, GQA with H_kv < H: the stored step's logits are
    /// the f32 step's on the widened weights within the bound, on every column path with the
    /// reference path's bits; the widened decoder is chapter 11's rounding of each projection
    /// alone, every other tensor as it was; and the stored step is not the f32 decoder's.
    #[test]
    fn the_stored_step_gives_the_widened_decoders_logits_in_every_storage() {
        for tied in [true, false] {
            let m = llama(tied);
            assert!(m.config.n_kv_heads < m.config.n_heads);
            for storage in STORAGES {
                let q = QuantDecoder::new(&m, storage).unwrap();
                let widened = q.widened();
                for ((name, w), (_, got)) in m.tensors().into_iter().zip(widened.tensors()) {
                    let want = match storage {
                        _ if !is_projection(&name) => w,
                        Storage::Bf16 => Bf16Matrix::round(&w).widen(),
                        _ => QuantMatrix::quantize(&w, storage).unwrap().dequantize(),
                    };
                    assert_eq!(got, want, "{storage:?} {name}");
                }
                let worst = worst_gap(&q, &widened, &TOKENS);
                let moved = worst_gap(&q, &m, &TOKENS);
                eprintln!(
                    "{storage:?} tied {tied}: {worst:.2e} from ŵ's step, {moved:.2e} from f32"
                );
                assert!(worst < STORED_STEP_TOLERANCE, "{storage:?} tied {tied}: {worst}");
                assert!(moved > 10.0 * STORED_STEP_TOLERANCE, "{storage:?} tied {tied}: {moved}");
                let logits = |q: QuantDecoder| {
                    let mut kv = q.new_kv();
                    let steps = TOKENS.iter().map(|&t| q.step(&mut kv, t).unwrap());
                    steps.flatten().map(f32::to_bits).collect::<Vec<u32>>()
                };
                let reference = logits(q.clone().with_kernel(Kernel::Scalar));
                for path in available_kernels() {
                    assert_eq!(logits(q.clone().with_kernel(path)), reference, "{path:?}");
                }
            }
        }
    }

    /// Greedy decoding past the context (the window slides and the cache is rebuilt one stored
    /// step a token) chooses the widened decoder's tokens; along the first context of them each
    /// choice is decided by a gap larger than twice the bound, so it must.
    #[test]
    fn the_stored_decoder_chooses_the_widened_decoders_greedy_tokens() {
        for tied in [true, false] {
            let m = llama(tied);
            for storage in STORAGES {
                let q = QuantDecoder::new(&m, storage).unwrap();
                let widened = q.widened();
                let (mut a, mut b) = (widened.new_kv(), q.new_kv());
                let (mut token, mut smallest_gap) = (3u32, f32::INFINITY);
                for _ in 0..m.config.context {
                    let (want, got) =
                        (widened.step(&mut a, token).unwrap(), q.step(&mut b, token).unwrap());
                    let best = argmax(&want).unwrap();
                    let second = want
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != best)
                        .fold(f32::NEG_INFINITY, |s, (_, &z)| s.max(z));
                    smallest_gap = smallest_gap.min(want[best] - second);
                    assert_eq!(argmax(&got).unwrap(), best, "{storage:?}");
                    token = best as u32;
                }
                assert!(smallest_gap > 2.0 * STORED_STEP_TOLERANCE, "{storage:?}: {smallest_gap}");
                let prompt = [1u32, 4, 1, 5];
                let greedy = |g: &mut dyn FnMut(&mut Rng) -> Vec<u32>| g(&mut Rng::new(1));
                let want = greedy(&mut |r| {
                    let g = generate_with(&mut &widened, &prompt, 30, &Decoding::Greedy, r, true);
                    g.unwrap().tokens
                });
                let got = greedy(&mut |r| {
                    let g = generate_with(&mut &q, &prompt, 30, &Decoding::Greedy, r, true);
                    g.unwrap().tokens
                });
                assert_eq!(got, want, "{storage:?} tied {tied}");
            }
        }
    }

    /// The decoder's tensors but its projections (each 0×0), and its stored matrices with
    /// `swap` exchanged in every block.
    fn parts(
        q: &QuantDecoder,
        swap: (StepProduct, StepProduct),
    ) -> (Decoder<f32>, Vec<Vec<StoredMatrix>>) {
        let mut rest = q.widened();
        for layer in &mut rest.layers {
            let a = &mut layer.attn;
            for w in [&mut a.w_q, &mut a.w_k, &mut a.w_v, &mut a.w_o] {
                *w = DMatrix::zeros(0, 0);
            }
            let Mlp::Gated(g) = &mut layer.mlp else { panic!("a gated MLP") };
            for w in [&mut g.w_gate, &mut g.w_up, &mut g.w_down] {
                *w = DMatrix::zeros(0, 0);
            }
        }
        let pick = |p: StepProduct| match p {
            p if p == swap.0 => swap.1,
            p if p == swap.1 => swap.0,
            p => p,
        };
        let blocks = (0..q.config().layers)
            .map(|l| STORED_PRODUCTS.map(|p| q.matrix(pick(p), l).unwrap().clone()).to_vec())
            .collect();
        (rest, blocks)
    }

    /// The check catches a projection read from the wrong stored matrix: with K and V (or gate
    /// and up) exchanged, shapes that fit, the logits leave the widened decoder's by far more
    /// than the bound; a matrix of the wrong shape is refused in one line.
    #[test]
    fn a_projection_read_from_the_wrong_stored_matrix_is_caught() {
        let m = llama(false);
        let q = QuantDecoder::new(&m, Storage::Int8).unwrap();
        let widened = q.widened();
        let same = (StepProduct::Up, StepProduct::Up);
        let (rest, blocks) = parts(&q, same);
        let again = QuantDecoder::from_parts(rest, Storage::Int8, blocks).unwrap();
        assert_eq!(worst_gap(&again, &widened, &TOKENS), worst_gap(&q, &widened, &TOKENS));
        let k_v = (StepProduct::Attn(AttnProduct::K), StepProduct::Attn(AttnProduct::V));
        for swap in [k_v, (StepProduct::Gate, StepProduct::Up)] {
            let (rest, blocks) = parts(&q, swap);
            let planted = QuantDecoder::from_parts(rest, Storage::Int8, blocks).unwrap();
            let worst = worst_gap(&planted, &widened, &TOKENS);
            assert!(worst > 100.0 * STORED_STEP_TOLERANCE, "{swap:?}: {worst}");
        }
        let (rest, blocks) = parts(&q, (StepProduct::Attn(AttnProduct::Q), k_v.0));
        let e = QuantDecoder::from_parts(rest, Storage::Int8, blocks).unwrap_err().to_string();
        assert!(!e.contains('\n') && e.len() <= 100 && e.contains("matrices"), "{e}");
        let e = QuantDecoder::new(&m, Storage::F32).unwrap_err().to_string();
        assert!(e.contains("storage") && !e.contains('\n'), "{e}");
    }

    /// A stored Llama file loads as stored: the matrices the step reads are those quantizing
    /// the f32 decoder gives (the widened loader's, bit for bit), held in their stored bytes.
    #[test]
    fn a_stored_llama_file_loads_as_stored_without_an_f32_copy_of_its_projections() {
        let m = llama(false);
        for storage in STORAGES {
            let files = llama_stored_files(&m, storage).unwrap();
            let bytes = files.iter().find(|f| f.0 == "model.safetensors").unwrap().1.clone();
            let f = SafeTensors::parse(bytes, "model.safetensors").unwrap();
            let q = QuantDecoder::from_llama_file(m.config, storage, &f).unwrap();
            let widened = decoder_from_stored_llama::<f32>(m.config, storage, &f).unwrap();
            assert_eq!(q.widened(), widened, "{storage:?}");
            let built = QuantDecoder::new(&m, storage).unwrap();
            assert_eq!(built.widened(), widened, "{storage:?}");
            assert_eq!(q.resident_bytes(), built.resident_bytes(), "{storage:?}");
            // By hand: per block, W_Q and W_O 64×64, W_K and W_V 64×32, W_gate and W_up 64×88,
            // W_down 88×64: 2·64 + 2·2·32 + 2·64 + 2·2·88 + 3·64 = 928 blocks of 32 along the
            // input, 2 blocks in all; 36 bytes a block in int8, 20 in 4-bit, 2 bytes a weight in
            // bf16. The rest in f32: W_E and W_U (29×64 each) and 5 γ of 64.
            let weights = 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 88);
            let stored = match storage {
                Storage::Bf16 => 2 * weights,
                Storage::Int8 => 2 * 928 * 36,
                _ => 2 * 928 * 20,
            };
            let rest = 4 * (2 * 29 * 64 + 5 * 64);
            assert_eq!(q.resident_bytes(), stored + rest, "{storage:?}");
            assert_eq!(q.f32_bytes(), 4 * m.parameter_count());
            let e = QuantDecoder::from_llama_file(m.config, Storage::F32, &f).unwrap_err();
            assert!(!e.to_string().contains('\n'), "{e}");
        }
    }

    /// `gpt sample` of a `gpt quantize` output of a `gpt train --arch llama` folder runs the
    /// stored decoder, says so, and writes the text greedy decoding of the widened decoder gives
    /// (past the context of 16: the window slides).
    #[test]
    fn gpt_sample_runs_a_stored_llama_folder_as_stored_with_the_widened_decoders_text() {
        use std::process::Command;
        let dir = common::temp_dir("ch12_sample_stored_llama");
        let cli = |args: &[&str]| {
            let r = Command::new(env!("CARGO_BIN_EXE_llm-workbook"))
                .current_dir(dir.path())
                .args(args)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&r.stderr).to_string();
            assert!(r.status.success(), "{args:?}: {err}");
            (String::from_utf8_lossy(&r.stdout).to_string(), err)
        };
        let text = dir.path().join("my.txt");
        std::fs::write(&text, "the cat sat on the mat. the dog sat on the log. ".repeat(40))
            .unwrap();
        let ck = dir.path().join("ck");
        let (t, c) = (text.to_str().unwrap(), ck.to_str().unwrap());
        let shape = ["--layers", "2", "--heads", "4", "--kv-heads", "2", "--width", "64"];
        let mut args = vec!["gpt", "train", "--arch", "llama", "--data", t, "--out", c];
        args.extend(shape);
        args.extend(["--context", "16", "--steps", "30", "--batch", "4"]);
        cli(&args);
        let prompt = "the cat ";
        for storage in STORAGES {
            let out = dir.path().join(storage.name());
            let o = out.to_str().unwrap();
            cli(&["gpt", "quantize", "--checkpoint", c, "--to", storage.name(), "--out", o]);
            let sample = ["gpt", "sample", "--checkpoint", o, "--prompt", prompt, "--greedy"];
            let (said, err) = cli(&[&sample[..], &["--tokens", "24", "--stats"]].concat());
            assert!(err.contains("sampled as stored") && err.contains("as stored, llama"), "{err}");
            let loaded = llm_workbook::workshop::run::load_llama_for_sampling(&out, u64::MAX);
            let (tok, model, _, _) = loaded.unwrap();
            let SamplingDecoder::Stored(q) = model else { panic!("{storage:?} loaded as f32") };
            assert_eq!(q.storage(), storage);
            let widened = q.widened();
            let ids = tok.encode(prompt).unwrap();
            let d = Decoding::Greedy;
            let g = generate_with(&mut &widened, &ids, 24, &d, &mut Rng::new(1), true).unwrap();
            let want = format!("{prompt}{}", tok.decode_lossy(g.new_tokens()).unwrap());
            assert_eq!(said.trim_end_matches('\n'), want, "{storage:?}");
        }
    }
}
