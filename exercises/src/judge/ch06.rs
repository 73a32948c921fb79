//! Judges of chapter 6's exercises.

use super::{
    Section, Verdict, attempt, attempt_ok, compare, gradient_check, note, random, weighted_sum,
};
use crate::solutions::ch06_attention as solution;
use llm_workbook::Result;
use llm_workbook::ch06_attention as book;
use nalgebra::DMatrix;

const SDPA: Section =
    Section { chapter: "ch06_attention", anchor: "1-scaled-dot-product-attention" };
const BACKWARD: Section = Section { chapter: "ch06_attention", anchor: "backward" };
const HEADS: Section = Section { chapter: "ch06_attention", anchor: "2-multi-head-attention" };
const NORM: Section = Section { chapter: "ch06_attention", anchor: "3-layernorm" };

/// Every entry of the 4×4 and 2×5 masks (the diagonal visible, no future key visible), and errors
/// for T_k < T_q and for 0.
fn causal_mask_checks(f: impl Fn(usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order]);
    super::probe(super::Probe::Batch);
    super::probe(super::Probe::Named);
    for (tq, tk) in [(4, 4), (2, 5), (1, 3)] {
        let m = attempt_ok(SDPA, "causal_mask", || f(tq, tk))?;
        let name = format!("causal_mask({tq}, {tk})");
        super::expect_shape(SDPA, &name, &m, (tq, tk), "queries × keys")?;
        for i in 0..tq {
            for j in 0..tk {
                let visible = j <= i + tk - tq;
                let v = m[(i, j)];
                if visible && v != 0.0 {
                    let why = if j == i + tk - tq {
                        " — the mask is off by one: a query sees its own position"
                    } else {
                        ""
                    };
                    return Err(SDPA.fail(format!(
                        "T_q = {tq}, T_k = {tk}: query {i} must see key {j} (entry 0); yours \
                         has {v}{why}"
                    )));
                }
                if !visible && v != f64::NEG_INFINITY {
                    return Err(SDPA.fail(format!(
                        "T_q = {tq}, T_k = {tk}: query {i} sits at position {} and must not \
                         see key {j}, the future (entry −∞); yours has {v}: a causal leak",
                        i + tk - tq
                    )));
                }
            }
        }
    }
    super::probe(super::Probe::Errors);
    for (tq, tk) in [(3, 2), (0, 2), (0, 0)] {
        if attempt(SDPA, "causal_mask", || f(tq, tk))?.is_ok() {
            return Err(SDPA.fail(format!("causal_mask({tq}, {tk}) should be an Err")));
        }
    }
    Ok(())
}

/// The main crate's O and A on random Q, K, V (bidirectional, causal and with T_q < T_k); rows of
/// A sum to 1; no causal leak (changing a future value row changes no earlier output).
fn attention_forward_checks(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        bool,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    super::probe(super::Probe::Named);
    for (seed, tq, tk, causal) in
        [(60, 4, 4, false), (61, 4, 4, true), (62, 2, 5, false), (63, 3, 5, true)]
    {
        let (q, k, v) = (random(seed, tq, 3), random(seed + 10, tk, 3), random(seed + 20, tk, 2));
        let passed: [(&str, &dyn super::Shaped); 3] = [("Q", &q), ("K", &k), ("V", &v)];
        let (o, a) =
            super::attempt_ok_on(SDPA, "attention_forward", &passed, || f(&q, &k, &v, causal))?;
        let what = if causal { "causal" } else { "bidirectional" };
        for r in 0..a.nrows() {
            let s = a.row(r).sum();
            if (s - 1.0).abs() > 1e-9 {
                return Err(SDPA.fail(format!(
                    "{what}: row {r} of your A sums to {s:.4}: softmax runs along each row (over \
                     the keys)"
                )));
            }
        }
        let (want_o, want_a) =
            solution::attention_forward(&q, &k, &v, causal).map_err(|e| e.to_string())?;
        let unscaled = book::attention_forward(
            &q,
            &k,
            &v,
            &book::AttnSpec { causal, ..book::AttnSpec::cross(tq, tk) }.with_scale(1.0),
        )
        .map_err(|e| e.to_string())?;
        if a.shape() == want_a.shape() && (&a - &unscaled.weights).abs().max() < 1e-9 {
            return Err(SDPA.fail("your scores are QKᵀ: divide by √d_k (the scale 1/√d_k)"));
        }
        if causal {
            let mut later = v.clone();
            later.row_mut(tk - 1).add_scalar_mut(5.0);
            let (o2, _) = super::attempt_ok_on(
                SDPA,
                "attention_forward",
                &[("Q", &q), ("K", &k), ("V", &later)],
                || f(&q, &k, &later, causal),
            )?;
            if o2.shape() == o.shape() && tq > 1 && (o2.row(0) - o.row(0)).abs().max() > 1e-12 {
                return Err(SDPA.fail(format!(
                    "a causal leak: changing key {} 's value changed query 0's output",
                    tk - 1
                )));
            }
        }
        compare(SDPA, &format!("{what} A"), &a, &want_a, 1e-9, &[])?;
        compare(SDPA, &format!("{what} O"), &o, &want_o, 1e-9, &[])?;
    }
    for causal in [false, true] {
        let what = if causal { "causal" } else { "bidirectional" };
        let q = super::rows_scaled(&random(64, 4, 3), &SCORE_SCALES);
        let (k, v) = (random(65, 5, 3), random(66, 5, 2));
        let passed: [(&str, &dyn super::Shaped); 3] = [("Q", &q), ("K", &k), ("V", &v)];
        let (o, a) =
            super::attempt_ok_on(SDPA, "attention_forward", &passed, || f(&q, &k, &v, causal))?;
        let scores = masked_scores(&q, &k, causal);
        let mistake = super::shift_mistake(&a, &scores, |p| p.clone())
            .or_else(|| super::shift_mistake(&o, &scores, |p| p * &v));
        if let Some(mistake) = mistake {
            return Err(SDPA.fail(format!(
                "{what}, Q's rows scaled by {SCORE_SCALES:?} (scores from a few units to \
                 thousands): {mistake}"
            )));
        }
        let (want_o, want_a) =
            solution::attention_forward(&q, &k, &v, causal).map_err(|e| e.to_string())?;
        let large = format!("{what} with large scores");
        compare(SDPA, &format!("{large}: A"), &a, &want_a, 1e-9, &[])?;
        compare(SDPA, &format!("{large}: O"), &o, &want_o, 1e-9, &[])?;
    }
    Ok(())
}

/// The factors by which the scale probes multiply Q's rows: scores of a few units, of ±40 and
/// in the thousands of both signs, in one matrix.
const SCORE_SCALES: [f64; 4] = [1.0, 2000.0, -1500.0, 40.0];

/// QKᵀ/√d_k with the causal mask (−∞ where key j is after query i's position i + T_k − T_q).
fn masked_scores(q: &DMatrix<f64>, k: &DMatrix<f64>, causal: bool) -> DMatrix<f64> {
    let (tq, tk) = (q.nrows(), k.nrows());
    let s = q * k.transpose() / (q.ncols() as f64).sqrt();
    DMatrix::from_fn(
        tq,
        tk,
        |i, j| {
            if causal && j > i + tk - tq { f64::NEG_INFINITY } else { s[(i, j)] }
        },
    )
}

/// The gradient check of L = Σ G ⊙ O(Q, K, V) in Q, K and V, bidirectional and causal.
fn attention_backward_checks(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        bool,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    for (seed, tq, tk, causal) in [(70, 3, 4, false), (71, 4, 4, true)] {
        let (q, k, v) = (random(seed, tq, 3), random(seed + 10, tk, 3), random(seed + 20, tk, 2));
        let g = random(seed + 30, tq, 2);
        let (_, a) = solution::attention_forward(&q, &k, &v, causal).map_err(|e| e.to_string())?;
        let (d_q, d_k, d_v) = super::attempt_ok_on(
            BACKWARD,
            "attention_backward",
            &[("Q", &q), ("K", &k), ("V", &v), ("weights", &a), ("d_out", &g)],
            || f(&q, &k, &v, &a, &g, causal),
        )?;
        gradient_check(
            BACKWARD,
            &[("Q", q.clone()), ("K", k.clone()), ("V", v.clone())],
            &[d_q, d_k, d_v],
            |t| {
                solution::attention_forward(&t[0], &t[1], &t[2], causal)
                    .map(|(o, _)| weighted_sum(&g, &o))
                    .unwrap_or(f64::NAN)
            },
            &[(3f64.sqrt(), "a missing 1/√d_k (d_k = 3): the scores were scaled in the forward")],
        )
        .map_err(|m| if causal { format!("causal: {m}") } else { m })?;
    }
    Ok(())
}

/// The chapter's (1, 2, 3, 4) → (−1.3416, −0.4472, 0.4472, 1.3416); zero mean and unit variance
/// per row with γ = 1, β = 0; the main crate's LayerNorm with random γ, β, and the same values
/// for rows shifted by 10⁸.
fn layer_norm_forward_checks(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>, &DMatrix<f64>, f64) -> Result<DMatrix<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    super::probe(super::Probe::Named);
    let (ones, zeros) = (DMatrix::from_element(1, 4, 1.0), DMatrix::zeros(1, 4));
    let x = DMatrix::from_row_slice(1, 4, &[1.0, 2.0, 3.0, 4.0]);
    let y = super::attempt_ok_on(
        NORM,
        "layer_norm_forward",
        &[("x", &x), ("γ", &ones), ("β", &zeros)],
        || f(&x, &ones, &zeros, 1e-12),
    )?;
    let printed: Vec<String> = y.iter().map(|v| format!("{v:.4}")).collect();
    if printed != ["-1.3416", "-0.4472", "0.4472", "1.3416"] {
        let why = if printed.first().is_some_and(|p| p == "-1.1619") {
            " — that divides by C − 1: LayerNorm uses the population variance (divide by C)"
        } else {
            ""
        };
        return Err(NORM.fail(format!(
            "LayerNorm of (1, 2, 3, 4) should print as (−1.3416, −0.4472, 0.4472, 1.3416); yours \
             is {printed:?}{why}"
        )));
    }
    let x = random(80, 5, 6) * 3.0;
    let (ones, zeros) = (DMatrix::from_element(1, 6, 1.0), DMatrix::zeros(1, 6));
    let y = super::attempt_ok_on(
        NORM,
        "layer_norm_forward",
        &[("x", &x), ("γ", &ones), ("β", &zeros)],
        || f(&x, &ones, &zeros, 1e-6),
    )?;
    if y.shape() == x.shape() {
        for r in 0..5 {
            let mean = y.row(r).mean();
            if mean.abs() > 1e-9 {
                return Err(NORM.fail(format!(
                    "with γ = 1, β = 0 row {r} should have mean 0; yours has {mean:.4}"
                )));
            }
        }
    }
    let (gamma, beta) = (random(81, 1, 6), random(82, 1, 6));
    let y = super::attempt_ok_on(
        NORM,
        "layer_norm_forward",
        &[("x", &x), ("γ", &gamma), ("β", &beta)],
        || f(&x, &gamma, &beta, 1e-6),
    )?;
    let want = solution::layer_norm_forward(&x, &gamma, &beta, 1e-6).map_err(|e| e.to_string())?;
    compare(NORM, "LayerNorm(X)", &y, &want, 1e-9, &[])?;
    // Scale: every row shifted by 10⁸. The mean absorbs the shift, so the answer is LayerNorm(X)
    // again, to the 10⁻⁸ that rounding X + 10⁸ costs.
    let shifted = super::shifted_far(&x);
    let y = super::attempt_ok_on(
        NORM,
        "layer_norm_forward",
        &[("x", &shifted), ("γ", &gamma), ("β", &beta)],
        || f(&shifted, &gamma, &beta, 1e-6),
    )?;
    compare(NORM, "LayerNorm(X + 10⁸)", &y, &want, SHIFTED_TOLERANCE, &[])
        .map_err(|m| far_shift_failure("normalise to the same values", &m))
}

/// How close an answer on rows shifted by [`super::FAR_SHIFT`] must come to the unshifted one:
/// rounding X + 10⁸ moves x − μ by about 10⁻⁸, and E\[x²\] − μ² misses σ² by about 1.
const SHIFTED_TOLERANCE: f64 = 1e-5;

/// The failure of a LayerNorm answer that is right on X and wrong on X + 10⁸ (`what` it should
/// do there, `m` the comparison's message): the variance computed as E\[x²\] − μ².
fn far_shift_failure(what: &str, m: &str) -> String {
    let first = m.lines().next().unwrap_or_default();
    NORM.fail_hint(
        format!("rows shifted by 10⁸ should {what}: {first}"),
        "yours is right on the same rows unshifted, so rounding is at fault: the shift cancels \
         in x − μ, but not in E[x²] − μ² (both terms near 10¹⁶, their difference lost) — take σ² \
         as the mean of (x − μ)²",
    )
}

/// The gradient check of L = Σ G ⊙ LayerNorm(X) in X, γ and β.
fn layer_norm_backward_checks(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        f64,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    let (x, gamma, beta, g) =
        (random(83, 4, 5), random(84, 1, 5), random(85, 1, 5), random(86, 4, 5));
    let (d_x, d_gamma, d_beta) = super::attempt_ok_on(
        NORM,
        "layer_norm_backward",
        &[("x", &x), ("γ", &gamma), ("d_y", &g)],
        || f(&x, &gamma, &g, 1e-5),
    )?;
    gradient_check(
        NORM,
        &[("X", x.clone()), ("γ", gamma.clone()), ("β", beta.clone())],
        &[d_x, d_gamma, d_beta],
        |t| {
            solution::layer_norm_forward(&t[0], &t[1], &t[2], 1e-5)
                .map(|y| weighted_sum(&g, &y))
                .unwrap_or(f64::NAN)
        },
        &[],
    )
    .map_err(|m| {
        if m.contains("∂L/∂X") {
            note(
                m,
                "x̂ depends on x through μ and σ as well: ∂L/∂x has three terms, g, −mean(g) \
                 and −x̂·mean(g ⊙ x̂)",
            )
        } else {
            m
        }
    })?;
    // Scale: the same rows shifted by 10⁸ have the same gradients (LayerNorm ignores a shift).
    let shifted = super::shifted_far(&x);
    let far = super::attempt_ok_on(
        NORM,
        "layer_norm_backward",
        &[("x", &shifted), ("γ", &gamma), ("d_y", &g)],
        || f(&shifted, &gamma, &g, 1e-5),
    )?;
    let want = solution::layer_norm_backward(&x, &gamma, &g, 1e-5).map_err(|e| e.to_string())?;
    let names = ["∂L/∂X at X + 10⁸", "∂L/∂γ at X + 10⁸", "∂L/∂β at X + 10⁸"];
    for ((name, yours), want) in
        names.iter().zip([&far.0, &far.1, &far.2]).zip([&want.0, &want.1, &want.2])
    {
        compare(NORM, name, yours, want, SHIFTED_TOLERANCE, &[])
            .map_err(|m| far_shift_failure("have the same gradients", &m))?;
    }
    Ok(())
}

/// Three heads of width 2 from a 3×6 matrix: head h is columns 2h, 2h + 1; an error for 4 heads.
fn split_heads_checks(f: impl Fn(&DMatrix<f64>, usize) -> Result<Vec<DMatrix<f64>>>) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order]);
    super::probe(super::Probe::Batch);
    let m = DMatrix::from_fn(3, 6, |r, c| (10 * r + c) as f64);
    let parts = super::attempt_ok_on(HEADS, "split_heads", &[("m", &m)], || f(&m, 3))?;
    if parts.len() != 3 {
        return Err(HEADS.fail(format!("3 heads asked for; yours returned {}", parts.len())));
    }
    for (h, p) in parts.iter().enumerate() {
        let want = m.columns(2 * h, 2).into_owned();
        if p.shape() == want.shape() && p != &want && p[(0, 1)] == m[(0, h + 3)] {
            return Err(HEADS.fail(
                "your heads take every H-th column: head h takes the contiguous block of columns \
                 h·w … (h+1)·w − 1",
            ));
        }
        compare(HEADS, &format!("head {h}"), p, &want, 0.0, &[])?;
    }
    super::probe(super::Probe::Errors);
    match attempt(HEADS, "split_heads", || f(&m, 4))? {
        Err(_) => Ok(()),
        Ok(_) => Err(HEADS.fail("6 columns do not split into 4 equal heads: return an Err")),
    }
}

/// Three 2×3 heads (N = 2 rows, width w = 3, unequal contents) side by side give the 2×9
/// matrix; an error for no parts.
fn concat_heads_checks(f: impl Fn(&[DMatrix<f64>]) -> Result<DMatrix<f64>>) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order]);
    let (heads, n, w) = (3, 2, 3);
    let parts: Vec<DMatrix<f64>> = (0..heads).map(|h| random(90 + h as u64, n, w)).collect();
    super::non_square(&parts.iter().collect::<Vec<_>>());
    let m = super::attempt_ok_on(HEADS, "concat_heads", &[("parts[0]", &parts[0])], || f(&parts))?;
    let want = book::concat_heads(&parts).map_err(|e| e.to_string())?;
    if m.shape() == (heads * n, w) {
        return Err(HEADS.fail("yours stacks the heads as rows: they go side by side, N×(H·w)"));
    }
    if m.shape() == (n, heads * n) {
        return Err(HEADS.fail(format!(
            "yours is {n}×{}, as if each head were N×N: a head's width w is its column count \
             ({w} here), so the merged matrix is N×(H·w) = {n}×{}",
            heads * n,
            heads * w
        )));
    }
    compare(HEADS, "concat", &m, &want, 0.0, &[])?;
    super::probe(super::Probe::Errors);
    match attempt(HEADS, "concat_heads", || f(&[]))? {
        Err(_) => Ok(()),
        Ok(_) => Err(HEADS.fail("no parts to concatenate: return an Err")),
    }
}

const FFN: Section = Section { chapter: "ch06_attention", anchor: "4-the-feed-forward-net" };
const BLOCK: Section =
    Section { chapter: "ch06_attention", anchor: "5-the-block-residuals-pre-ln-and-post-ln" };

/// Multi-head attention's tensors in the order its backward pass reaches them.
pub(crate) const MHA_NAMES: [&str; 8] = ["W_O", "b_O", "W_V", "b_V", "W_K", "b_K", "W_Q", "b_Q"];

pub(crate) fn mha_tensors(p: &book::MultiHead<f64>) -> [DMatrix<f64>; 8] {
    [
        p.w_o.clone(),
        p.b_o.clone(),
        p.w_v.clone(),
        p.b_v.clone(),
        p.w_k.clone(),
        p.b_k.clone(),
        p.w_q.clone(),
        p.b_q.clone(),
    ]
}

fn mha_grads(g: book::MhaGrads<f64>) -> [DMatrix<f64>; 8] {
    [g.d_w_o, g.d_b_o, g.d_w_v, g.d_b_v, g.d_w_k, g.d_b_k, g.d_w_q, g.d_b_q]
}

pub(crate) fn mha_from(heads: usize, t: &[DMatrix<f64>]) -> book::MultiHead<f64> {
    book::MultiHead {
        heads,
        w_o: t[0].clone(),
        b_o: t[1].clone(),
        w_v: t[2].clone(),
        b_v: t[3].clone(),
        w_k: t[4].clone(),
        b_k: t[5].clone(),
        w_q: t[6].clone(),
        b_q: t[7].clone(),
    }
}

/// Random multi-head weights with random (non-zero) biases.
pub(crate) fn random_mha(
    seed: u64,
    heads: usize,
    (c_q, c_kv, d_head, c_out): (usize, usize, usize, usize),
) -> Result<book::MultiHead<f64>> {
    let mut rng = llm_workbook::rng::Rng::new(seed);
    let mut p = book::MultiHead::random(heads, c_q, c_kv, d_head, c_out, 0.7, &mut rng)?;
    for (i, b) in [&mut p.b_q, &mut p.b_k, &mut p.b_v, &mut p.b_o].into_iter().enumerate() {
        *b = random(seed + 1 + i as u64, 1, b.ncols()) * 0.3;
    }
    Ok(p)
}

/// The sequences of the batch [`mha_backward`]'s judge passes.
const MHA_SEQUENCES: usize = 2;

/// The gradient check of L = Σ G ⊙ MHA(X_q, X_kv) in both inputs and all eight weights and
/// biases, each on `MHA_SEQUENCES` (2) sequences of unequal content: cross-attention (3 queries
/// over 5 keys, widths 4 and 3, 2 heads, C_out = 5) and causal self-attention shaped inputs (4
/// tokens, 2 heads), X_q ≠ X_kv so each input's path is checked; an ignored batch loop named.
fn mha_backward_checks(
    f: impl Fn(
        &book::MultiHead<f64>,
        &book::MhaCache<f64>,
        &DMatrix<f64>,
    ) -> Result<book::MhaGrads<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Named);
    let cases = [
        ("cross-attention", 120, (3, 5), (4, 3, 2, 5), book::AttnSpec::cross(3, 5)),
        ("causal", 130, (4, 4), (4, 4, 2, 4), book::AttnSpec::causal(4)),
    ];
    for (what, seed, (tq, tk), dims, spec) in cases {
        super::batch_probe(super::BatchInput {
            sequences: MHA_SEQUENCES,
            t_q: tq,
            t_k: tk,
            width: dims.0,
        });
        let p = random_mha(seed, 2, dims).map_err(|e| e.to_string())?;
        let (x_q, x_kv) = (
            random(seed + 10, MHA_SEQUENCES * tq, dims.0),
            random(seed + 11, MHA_SEQUENCES * tk, dims.1),
        );
        let g = random(seed + 12, MHA_SEQUENCES * tq, dims.3);
        let (_, cache) = book::mha_forward(&p, &x_q, &x_kv, &spec).map_err(|e| e.to_string())?;
        let grads = super::attempt_ok_on(
            HEADS,
            "mha_backward",
            &[("p", &p), ("cache", &cache), ("d_out", &g)],
            || f(&p, &cache, &g),
        )?;
        let reference = |x_q: &DMatrix<f64>, x_kv: &DMatrix<f64>| {
            let (_, cache) = book::mha_forward(&p, x_q, x_kv, &spec)?;
            book::mha_backward(&p, &cache, &g)
        };
        let want = reference(&x_q, &x_kv).map_err(|e| e.to_string())?;
        let (q0, kv0) = (super::first_for_all(&x_q, tq), super::first_for_all(&x_kv, tk));
        let same = reference(&q0, &kv0).map_err(|e| e.to_string())?;
        super::batch_slips(
            HEADS,
            &[
                (&grads.d_x_q, &want.d_x_q, &same.d_x_q, tq),
                (&grads.d_x_kv, &want.d_x_kv, &same.d_x_kv, tk),
            ],
            1e-9,
        )
        .map_err(|m| format!("{what}: {m}"))?;
        let (d_x_q, d_x_kv) = (grads.d_x_q.clone(), grads.d_x_kv.clone());
        let mut inputs: Vec<(String, DMatrix<f64>)> =
            MHA_NAMES.iter().map(|n| n.to_string()).zip(mha_tensors(&p)).collect();
        inputs.push(("X_q".into(), x_q.clone()));
        inputs.push(("X_kv".into(), x_kv.clone()));
        let mut analytic = mha_grads(grads).to_vec();
        analytic.extend([d_x_q, d_x_kv]);
        super::gradient_check_named(
            HEADS,
            &inputs,
            &analytic,
            |t| {
                book::mha_forward(&mha_from(2, &t[..8]), &t[8], &t[9], &spec)
                    .map(|(o, _)| weighted_sum(&g, &o))
                    .unwrap_or(f64::NAN)
            },
            &[],
        )
        .map_err(|m| {
            let why = match super::failed_tensor(&m) {
                Some("W_O" | "b_O") => "out = C W_O + b_O: ∂W_O = Cᵀ ∂out (C is cache.concat)",
                Some("X_kv") => {
                    "X_kv feeds both K and V: ∂X_kv = ∂K W_Kᵀ + ∂V W_Vᵀ, the sum of the two paths"
                }
                Some("X_q") => "∂X_q = ∂Q W_Qᵀ",
                _ => {
                    "W_O and b_O are right, so look after them: split ∂C = ∂out W_Oᵀ into the \
                     heads' columns, run each head's attention backward, put ∂Q_h, ∂K_h, ∂V_h \
                     side by side, then ∂W = Xᵀ ∂(Q, K or V) and ∂b = their column sums"
                }
            };
            format!("{what}: {}", note(m, why))
        })?;
    }
    Ok(())
}

pub(crate) fn ffn_tensors(f: &book::Ffn<f64>) -> [DMatrix<f64>; 4] {
    [f.w2.clone(), f.b2.clone(), f.w1.clone(), f.b1.clone()]
}

pub(crate) fn ffn_from(
    act: llm_workbook::ch03_mlp::Activation,
    t: &[DMatrix<f64>],
) -> book::Ffn<f64> {
    book::Ffn { w2: t[0].clone(), b2: t[1].clone(), w1: t[2].clone(), b1: t[3].clone(), act }
}

/// The gradient check of L = Σ G ⊙ FFN(x) in W₂, b₂, W₁, b₁ and x (the order the backward pass
/// reaches them), with ReLU (D3) and GELU (GPT-2).
fn ffn_backward_checks(
    f: impl Fn(&book::Ffn<f64>, &book::FfnCache<f64>, &DMatrix<f64>) -> Result<book::FfnGrads<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    use llm_workbook::ch03_mlp::Activation;
    for (seed, act) in [(140, Activation::Relu), (141, Activation::GeluTanh)] {
        let mut rng = llm_workbook::rng::Rng::new(seed);
        let mut ffn = book::Ffn::random(3, 5, act, 0.8, &mut rng);
        ffn.b1 = random(seed + 1, 1, 5) * 0.3;
        ffn.b2 = random(seed + 2, 1, 3) * 0.3;
        let (x, g) = (random(seed + 3, 4, 3), random(seed + 4, 4, 3));
        let (_, cache) = book::ffn_forward(&ffn, &x).map_err(|e| e.to_string())?;
        let d = super::attempt_ok_on(
            FFN,
            "ffn_backward",
            &[("ffn", &ffn), ("cache", &cache), ("d_y", &g)],
            || f(&ffn, &cache, &g),
        )?;
        let names = ["W₂", "b₂", "W₁", "b₁", "x"];
        let mut inputs: Vec<(String, DMatrix<f64>)> =
            names.iter().map(|n| n.to_string()).zip(ffn_tensors(&ffn)).collect();
        inputs.push(("x".into(), x.clone()));
        super::gradient_check_named(
            FFN,
            &inputs,
            &[d.d_w2, d.d_b2, d.d_w1, d.d_b1, d.d_x],
            |t| {
                book::ffn_forward(&ffn_from(act, &t[..4]), &t[4])
                    .map(|(y, _)| weighted_sum(&g, &y))
                    .unwrap_or(f64::NAN)
            },
            &[(0.25, "∂b is the column sums of the incoming gradient, not their mean")],
        )
        .map_err(|m| {
            let m = note(m, &format!("with f = {act:?}"));
            match super::failed_tensor(&m) {
                Some("W₁" | "b₁" | "x") => note(
                    m,
                    "W₂ and b₂ are right, so the slip is after them: ∂a₁ = ∂y W₂ᵀ, then \
                     ∂z₁ = f′(z₁) ⊙ ∂a₁ with f′ at z₁ (cache.z1), not at a₁, then z₁'s dense \
                     backward",
                ),
                _ => m,
            }
        })?;
    }
    Ok(())
}

/// The names and values of a block's sixteen tensors, FFN first (the order a pre-LN block's
/// backward pass reaches them).
fn block_tensors(b: &book::Block<f64>) -> Vec<(String, DMatrix<f64>)> {
    let mut out: Vec<(String, DMatrix<f64>)> = ["FFN.W₂", "FFN.b₂", "FFN.W₁", "FFN.b₁"]
        .iter()
        .map(|n| n.to_string())
        .zip(ffn_tensors(&b.ffn))
        .collect();
    out.push(("LN₂.γ".into(), b.ln2.gamma.clone()));
    out.push(("LN₂.β".into(), b.ln2.beta.clone()));
    out.extend(MHA_NAMES.iter().map(|n| format!("MHA.{n}")).zip(mha_tensors(&b.attn)));
    out.push(("LN₁.γ".into(), b.ln1.gamma.clone()));
    out.push(("LN₁.β".into(), b.ln1.beta.clone()));
    out
}

fn block_from(template: &book::Block<f64>, t: &[DMatrix<f64>]) -> book::Block<f64> {
    let mut b = template.clone();
    b.ffn = ffn_from(b.ffn.act, &t[..4]);
    b.ln2.gamma = t[4].clone();
    b.ln2.beta = t[5].clone();
    b.attn = mha_from(b.attn.heads, &t[6..14]);
    b.ln1.gamma = t[14].clone();
    b.ln1.beta = t[15].clone();
    b
}

fn block_grads(g: book::BlockGrads<f64>) -> Vec<DMatrix<f64>> {
    let mut out = vec![g.ffn.d_w2, g.ffn.d_b2, g.ffn.d_w1, g.ffn.d_b1, g.ln2.d_gamma, g.ln2.d_beta];
    out.extend(mha_grads(g.attn));
    out.extend([g.ln1.d_gamma, g.ln1.d_beta, g.d_x]);
    out
}

/// What to look at when a block's gradient check fails at `tensor`.
fn block_hint(order: book::NormOrder, tensor: &str) -> &'static str {
    let pre = order == book::NormOrder::Pre;
    match tensor.split('.').next().unwrap_or_default() {
        "FFN" | "LN₂" if pre => "y = h + FFN(LN₂(h)): FFN's backward takes ∂L/∂y, then LN₂'s",
        "LN₂" => "y = LN₂(h + f): LN₂'s backward takes ∂L/∂y first",
        "FFN" => "f = FFN(h) and y = LN₂(h + f): FFN's backward takes LN₂'s ∂x",
        "MHA" if pre => {
            "∂L/∂h is ∂L/∂y (the residual's direct path) plus LN₂'s backward of FFN's ∂x: \
             the two paths add, and MHA's backward takes ∂L/∂h"
        }
        "MHA" => "h = LN₁(x + MHA(x, x)): MHA's backward takes LN₁'s ∂x",
        "LN₁" if pre => {
            "self-attention reads n₁ = LN₁(x) as queries and as keys/values: LN₁'s backward takes \
             d_x_q + d_x_kv"
        }
        "LN₁" => {
            "∂L/∂h is LN₂'s ∂x (the residual's direct path) plus FFN's ∂x: LN₁'s backward takes \
             their sum"
        }
        _ if pre => "∂L/∂x is ∂L/∂h (the residual's direct path) plus LN₁'s ∂x: the two paths add",
        _ => {
            "∂L/∂x is LN₁'s ∂x (the residual's direct path) plus d_x_q + d_x_kv (self-attention \
             reads x twice)"
        }
    }
}

/// The gradient check of L = Σ G ⊙ block(x) in x and all sixteen tensors, pre-LN and post-LN,
/// causal self-attention over 2 sequences of 3 tokens, width 4, 2 heads, GELU.
fn block_backward_checks(
    f: impl Fn(
        &book::Block<f64>,
        &book::BlockCache<f64>,
        &DMatrix<f64>,
    ) -> Result<book::BlockGrads<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    use llm_workbook::ch03_mlp::Activation;
    super::batch_probe(super::BatchInput { sequences: 2, t_q: 3, t_k: 3, width: 4 });
    let spec = book::AttnSpec::causal(3);
    for (seed, order) in [(150, book::NormOrder::Pre), (160, book::NormOrder::Post)] {
        let mut rng = llm_workbook::rng::Rng::new(seed);
        let mut blk = book::Block::random(4, 2, 6, Activation::GeluTanh, order, 0.6, &mut rng)
            .map_err(|e| e.to_string())?;
        blk.attn = random_mha(seed + 1, 2, (4, 4, 2, 4)).map_err(|e| e.to_string())?;
        blk.ln1.gamma = random(seed + 10, 1, 4).add_scalar(1.0);
        blk.ln1.beta = random(seed + 11, 1, 4) * 0.3;
        blk.ln2.gamma = random(seed + 12, 1, 4).add_scalar(1.0);
        blk.ln2.beta = random(seed + 13, 1, 4) * 0.3;
        blk.ffn.b1 = random(seed + 14, 1, 6) * 0.3;
        blk.ffn.b2 = random(seed + 15, 1, 4) * 0.3;
        let (x, g) = (random(seed + 20, 6, 4), random(seed + 21, 6, 4));
        let (_, cache) = book::block_forward(&blk, &x, &spec).map_err(|e| e.to_string())?;
        let grads = super::attempt_ok_on(
            BLOCK,
            "block_backward",
            &[("blk", &blk), ("cache", &cache), ("d_y", &g)],
            || f(&blk, &cache, &g),
        )?;
        let reference = |x: &DMatrix<f64>| {
            let (_, cache) = book::block_forward(&blk, x, &spec)?;
            book::block_backward(&blk, &cache, &g)
        };
        let want = reference(&x).map_err(|e| e.to_string())?;
        let same = reference(&super::first_for_all(&x, 3)).map_err(|e| e.to_string())?;
        super::batch_slips(BLOCK, &[(&grads.d_x, &want.d_x, &same.d_x, 3)], 1e-9)
            .map_err(|m| format!("{order:?}-LN block: {m}"))?;
        let mut inputs = block_tensors(&blk);
        inputs.push(("x".into(), x.clone()));
        super::gradient_check_named(
            BLOCK,
            &inputs,
            &block_grads(grads),
            |t| {
                book::block_forward(&block_from(&blk, &t[..16]), &t[16], &spec)
                    .map(|(y, _)| weighted_sum(&g, &y))
                    .unwrap_or(f64::NAN)
            },
            &[],
        )
        .map_err(|m| {
            let hint = block_hint(order, super::failed_tensor(&m).unwrap_or_default());
            format!("{order:?}-LN block: {}", note(m, hint))
        })?;
    }
    Ok(())
}

// ───────────── the judges: the sweep against the main crate, then the checks above ─────────────

use super::sweep::{Gen, Named, SCALES, Tol, explained, outcome, sweep};

/// **The causal mask**: every T_q ≤ T_k up to 6, and the errors the doc promises (T_q or T_k
/// = 0, T_k < T_q) with the first value past each bound; then `causal_mask_checks`.
pub fn causal_mask(f: impl Fn(usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
    causal_mask_judged(&f)
}

/// [`causal_mask`]'s judge, compiled once here rather than in every test that calls it.
fn causal_mask_judged(f: &dyn Fn(usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
    let cases: Vec<(usize, usize)> = (0..=6).flat_map(|q| (0..=6).map(move |k| (q, k))).collect();
    let found = sweep(
        SDPA,
        "causal_mask",
        Tol::EXACT,
        &cases,
        |&(q, k)| outcome(f(q, k)),
        |&(q, k)| outcome(book::causal_mask(q, k)),
    );
    explained(found, || causal_mask_checks(f))
}

/// One attention case: (Q, K, V, ∂L/∂O, causal).
type AttentionCase = (DMatrix<f64>, DMatrix<f64>, DMatrix<f64>, DMatrix<f64>, bool);

/// (Q, K, V, ∂L/∂O, causal) at T_q ≤ T_k (causal) or any T_q, T_k (not), widths d_k ≠ d_v, every
/// scale (scores of 10⁶ at scale 10³: a softmax without its shift overflows), and ties.
fn attention_cases(draw: &mut Gen) -> Vec<AttentionCase> {
    let mut cases = Vec::new();
    for (tq, tk, dk, dv) in [(1, 1, 1, 1), (2, 3, 2, 4), (3, 3, 4, 2), (4, 4, 3, 3), (1, 5, 2, 1)] {
        for causal in [false, true] {
            for &s in &SCALES {
                cases.push((
                    draw.rows_apart(tq, dk, s),
                    draw.matrix(tk, dk, s.sqrt()),
                    draw.matrix(tk, dv, 1.0),
                    draw.matrix(tq, dv, 1.0),
                    causal,
                ));
            }
        }
    }
    cases.extend([(3, 2, 2, 2, false)].map(|(tq, tk, dk, dv, c)| {
        (
            draw.matrix(tq, dk, 1.0),
            draw.matrix(tk, dk, 1.0),
            draw.matrix(tk, dv, 1.0),
            draw.matrix(tq, dv, 1.0),
            c,
        )
    }));
    cases
}

/// **Attention forward**: the sweep's (Q, K, V) with and without the causal mask; then
/// `attention_forward_checks`.
pub fn attention_forward(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        bool,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    attention_forward_judged(&f)
}

/// [`attention_forward`]'s judge, compiled once here rather than in every test that calls it.
fn attention_forward_judged(
    f: &dyn Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        bool,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    let cases = attention_cases(&mut Gen::new("attention_forward"));
    let found = sweep(
        SDPA,
        "attention_forward",
        Tol::F64,
        &cases,
        |(q, k, v, _, c)| outcome(f(q, k, v, *c)),
        |(q, k, v, _, c)| outcome(solution::attention_forward(q, k, v, *c)),
    );
    explained(found, || attention_forward_checks(f))
}

/// **Attention backward**: the sweep's (Q, K, V, ∂L/∂O) with the forward's A from the main crate;
/// then `attention_backward_checks`.
pub fn attention_backward(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        bool,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    attention_backward_judged(&f)
}

/// [`attention_backward`]'s judge, compiled once here rather than in every test that calls it.
fn attention_backward_judged(
    f: &dyn Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        bool,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    let cases = attention_cases(&mut Gen::new("attention_backward"));
    let weights = |q: &DMatrix<f64>, k: &DMatrix<f64>, v: &DMatrix<f64>, c: bool| {
        outcome(solution::attention_forward(q, k, v, c)).map(|(_, a)| a)
    };
    let found = sweep(
        BACKWARD,
        "attention_backward",
        Tol::F64,
        &cases,
        |(q, k, v, d, c)| outcome(f(q, k, v, &weights(q, k, v, *c)?, d, *c)),
        |(q, k, v, d, c)| {
            outcome(solution::attention_backward(q, k, v, &weights(q, k, v, *c)?, d, *c))
        },
    );
    explained(found, || attention_backward_checks(f))
}

/// One LayerNorm case: (X, γ, β or ∂L/∂Y, ε).
type NormCase = (DMatrix<f64>, DMatrix<f64>, DMatrix<f64>, f64);

/// (X, γ, β or ∂L/∂Y, ε) for LayerNorm: rows of 1 to 5 entries at every scale, rows shifted by
/// 10⁸, ε from 0 to 10⁻².
fn norm_cases(draw: &mut Gen) -> Vec<NormCase> {
    let mut cases = Vec::new();
    for (n, c) in [(1, 2), (3, 4), (2, 5), (4, 3)] {
        for &s in &SCALES {
            for eps in [1e-5, 1e-2] {
                let x = draw.rows_apart(n, c, s);
                cases.push((x, draw.matrix(1, c, 1.0), draw.matrix(n, c, 1.0), eps));
            }
        }
        let far = draw.matrix(n, c, 1.0).add_scalar(super::FAR_SHIFT);
        cases.push((far, draw.matrix(1, c, 1.0), draw.matrix(n, c, 1.0), 1e-5));
    }
    cases
}

/// LayerNorm's tolerance: rows shifted by 10⁸ keep x − μ only to the rounding of μ
/// (ulp(10⁸) ≈ 1.5·10⁻⁸ of a σ near 1), so two right answers agree to about 10⁻⁸ there and
/// [`Tol::CHAIN`]'s 10⁻⁶ is the bound; E\[x²\] − μ² misses σ² by about 2 there.
const NORM_TOL: Tol = Tol::CHAIN;

/// **LayerNorm forward**: the sweep's rows (shifted by 10⁸ too); then
/// `layer_norm_forward_checks`.
pub fn layer_norm_forward(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>, &DMatrix<f64>, f64) -> Result<DMatrix<f64>>,
) -> Verdict {
    layer_norm_forward_judged(&f)
}

/// [`layer_norm_forward`]'s judge, compiled once here rather than in every test that calls it.
fn layer_norm_forward_judged(
    f: &dyn Fn(&DMatrix<f64>, &DMatrix<f64>, &DMatrix<f64>, f64) -> Result<DMatrix<f64>>,
) -> Verdict {
    let cases = norm_cases(&mut Gen::new("layer_norm_forward"));
    let found = sweep(
        NORM,
        "layer_norm_forward",
        NORM_TOL,
        &cases,
        |(x, g, b, e)| outcome(f(x, g, &b.rows(0, 1).into_owned(), *e)),
        |(x, g, b, e)| outcome(solution::layer_norm_forward(x, g, &b.rows(0, 1).into_owned(), *e)),
    );
    explained(found, || layer_norm_forward_checks(f))
}

/// **LayerNorm backward**: the sweep's rows with ∂L/∂Y; then `layer_norm_backward_checks`.
pub fn layer_norm_backward(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        f64,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    layer_norm_backward_judged(&f)
}

/// [`layer_norm_backward`]'s judge, compiled once here rather than in every test that calls it.
fn layer_norm_backward_judged(
    f: &dyn Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        f64,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    let cases = norm_cases(&mut Gen::new("layer_norm_backward"));
    let found = sweep(
        NORM,
        "layer_norm_backward",
        NORM_TOL,
        &cases,
        |(x, g, d, e)| outcome(f(x, g, d, *e)),
        |(x, g, d, e)| outcome(solution::layer_norm_backward(x, g, d, *e)),
    );
    explained(found, || layer_norm_backward_checks(f))
}

/// **Splitting into heads**: widths 1 to 12, H from 0 to 5 (H = 0 and widths not a multiple of
/// H are the promised errors); then `split_heads_checks`.
pub fn split_heads(f: impl Fn(&DMatrix<f64>, usize) -> Result<Vec<DMatrix<f64>>>) -> Verdict {
    split_heads_judged(&f)
}

/// [`split_heads`]'s judge, compiled once here rather than in every test that calls it.
fn split_heads_judged(f: &dyn Fn(&DMatrix<f64>, usize) -> Result<Vec<DMatrix<f64>>>) -> Verdict {
    let mut draw = Gen::new("split_heads");
    let mut cases = Vec::new();
    for (n, w) in [(1, 1), (2, 4), (3, 6), (1, 12), (4, 5)] {
        for h in 0..=5 {
            cases.push((draw.matrix(n, w, 1.0), h));
        }
    }
    let found = sweep(
        HEADS,
        "split_heads",
        Tol::EXACT,
        &cases,
        |(m, h)| outcome(f(m, *h)),
        |(m, h)| outcome(book::split_heads(m, *h)),
    );
    explained(found, || split_heads_checks(f))
}

/// **Merging heads**: one to four parts of unequal widths, no parts and unequal rows (the
/// promised errors); then `concat_heads_checks`.
pub fn concat_heads(f: impl Fn(&[DMatrix<f64>]) -> Result<DMatrix<f64>>) -> Verdict {
    concat_heads_judged(&f)
}

/// [`concat_heads`]'s judge, compiled once here rather than in every test that calls it.
fn concat_heads_judged(f: &dyn Fn(&[DMatrix<f64>]) -> Result<DMatrix<f64>>) -> Verdict {
    let mut draw = Gen::new("concat_heads");
    let mut cases: Vec<Vec<DMatrix<f64>>> = vec![Vec::new()];
    for (n, widths) in [(1, vec![1]), (2, vec![2, 3]), (3, vec![1, 1, 1, 2]), (2, vec![4, 4])] {
        cases.push(widths.iter().map(|&w| draw.matrix(n, w, 1.0)).collect());
        let mut unequal: Vec<DMatrix<f64>> =
            widths.iter().map(|&w| draw.matrix(n, w, 1.0)).collect();
        unequal.push(draw.matrix(n + 1, 2, 1.0));
        cases.push(unequal);
    }
    let found = sweep(
        HEADS,
        "concat_heads",
        Tol::EXACT,
        &cases,
        |p| outcome(f(p)),
        |p| outcome(book::concat_heads(p)),
    );
    explained(found, || concat_heads_checks(f))
}

/// Multi-head attention's gradients by name.
pub(crate) fn mha_named(g: book::MhaGrads<f64>) -> Named {
    Named::of([
        ("∂X_q", g.d_x_q),
        ("∂X_kv", g.d_x_kv),
        ("∂W_Q", g.d_w_q),
        ("∂b_Q", g.d_b_q),
        ("∂W_K", g.d_w_k),
        ("∂b_K", g.d_b_k),
        ("∂W_V", g.d_w_v),
        ("∂b_V", g.d_b_v),
        ("∂W_O", g.d_w_o),
        ("∂b_O", g.d_b_o),
    ])
}

/// One multi-head case: (seed, H, B, T_q, T_k, causal, the scale of the inputs).
type MhaSpec = (u64, usize, usize, usize, usize, bool, f64);

/// The weights, cache and upstream gradient of a multi-head case (widths C_q = 3, C_kv = 4,
/// d_k = 2 per head, C_out = 5).
fn mha_inputs(
    &(seed, heads, b, tq, tk, causal, scale): &MhaSpec,
) -> Result<(book::MultiHead<f64>, book::MhaCache<f64>, DMatrix<f64>)> {
    let p = random_mha(seed, heads, (3, 4, 2, 5))?;
    let x_q = random(seed + 20, b * tq, 3) * scale;
    let x_kv = random(seed + 21, b * tk, 4) * scale;
    let spec = book::AttnSpec { causal, ..book::AttnSpec::cross(tq, tk) };
    let (_, cache) = book::mha_forward(&p, &x_q, &x_kv, &spec)?;
    Ok((p, cache, random(seed + 22, b * tq, 5)))
}

/// **Multi-head backward**: 1 to 3 heads, 1 to 3 sequences, T_q ≠ T_k, causal or not, inputs at
/// 10⁻³ to 30 (scores in the hundreds); then `mha_backward_checks`.
pub fn mha_backward(
    f: impl Fn(
        &book::MultiHead<f64>,
        &book::MhaCache<f64>,
        &DMatrix<f64>,
    ) -> Result<book::MhaGrads<f64>>,
) -> Verdict {
    mha_backward_judged(&f)
}

/// [`mha_backward`]'s judge, compiled once here rather than in every test that calls it.
fn mha_backward_judged(
    f: &dyn Fn(
        &book::MultiHead<f64>,
        &book::MhaCache<f64>,
        &DMatrix<f64>,
    ) -> Result<book::MhaGrads<f64>>,
) -> Verdict {
    let mut cases: Vec<MhaSpec> = Vec::new();
    let mut seed = 600;
    for (h, b, tq, tk) in [(1, 1, 1, 1), (2, 2, 3, 5), (3, 1, 2, 2), (2, 3, 2, 3), (1, 2, 4, 4)] {
        for causal in [false, true] {
            for scale in [1.0, 1e-3, 30.0] {
                seed += 40;
                cases.push((seed, h, b, tq, tk, causal, scale));
            }
        }
    }
    let found = sweep(
        HEADS,
        "mha_backward",
        Tol::F64,
        &cases,
        |s| {
            let (p, cache, g) = outcome(mha_inputs(s))?;
            outcome(f(&p, &cache, &g)).map(mha_named)
        },
        |s| {
            let (p, cache, g) = outcome(mha_inputs(s))?;
            outcome(book::mha_backward(&p, &cache, &g)).map(mha_named)
        },
    );
    explained(found, || mha_backward_checks(f))
}

/// The feed-forward net's gradients by name.
pub(crate) fn ffn_named(g: book::FfnGrads<f64>) -> Named {
    Named::of([("∂x", g.d_x), ("∂W₁", g.d_w1), ("∂b₁", g.d_b1), ("∂W₂", g.d_w2), ("∂b₂", g.d_b2)])
}

/// One feed-forward case: (seed, activation, N, C, F, the scale of x).
type FfnSpec =
    (u64, super::sweep::Fixed<llm_workbook::ch03_mlp::Activation>, usize, usize, usize, f64);

fn ffn_inputs(
    (seed, act, n, c, hidden, scale): &FfnSpec,
) -> Result<(book::Ffn<f64>, book::FfnCache<f64>, DMatrix<f64>)> {
    let mut rng = llm_workbook::rng::Rng::new(*seed);
    let mut ffn = book::Ffn::random(*c, *hidden, act.0, 0.8, &mut rng);
    ffn.b1 = random(seed + 1, 1, *hidden) * 0.3;
    ffn.b2 = random(seed + 2, 1, *c) * 0.3;
    let x = random(seed + 3, *n, *c) * *scale;
    let (_, cache) = book::ffn_forward(&ffn, &x)?;
    Ok((ffn, cache, random(seed + 4, *n, *c)))
}

/// **The feed-forward backward**: every activation (both GELU forms), N from 1 to 4, C ≠ F,
/// x at 10⁻³ to 30; then `ffn_backward_checks`.
pub fn ffn_backward(
    f: impl Fn(&book::Ffn<f64>, &book::FfnCache<f64>, &DMatrix<f64>) -> Result<book::FfnGrads<f64>>,
) -> Verdict {
    ffn_backward_judged(&f)
}

/// [`ffn_backward`]'s judge, compiled once here rather than in every test that calls it.
fn ffn_backward_judged(
    f: &dyn Fn(&book::Ffn<f64>, &book::FfnCache<f64>, &DMatrix<f64>) -> Result<book::FfnGrads<f64>>,
) -> Verdict {
    let mut cases: Vec<FfnSpec> = Vec::new();
    let mut seed = 700;
    for act in llm_workbook::ch03_mlp::Activation::ALL {
        for (n, c, hidden) in [(1, 1, 1), (4, 3, 5), (2, 4, 2)] {
            for scale in [1.0, 1e-3, 30.0] {
                seed += 10;
                cases.push((seed, super::sweep::Fixed(act), n, c, hidden, scale));
            }
        }
    }
    let found = sweep(
        FFN,
        "ffn_backward",
        Tol::F64,
        &cases,
        |s| {
            let (ffn, cache, g) = outcome(ffn_inputs(s))?;
            outcome(f(&ffn, &cache, &g)).map(ffn_named)
        },
        |s| {
            let (ffn, cache, g) = outcome(ffn_inputs(s))?;
            outcome(book::ffn_backward(&ffn, &cache, &g)).map(ffn_named)
        },
    );
    explained(found, || ffn_backward_checks(f))
}

/// A block's gradients by name.
fn block_named(g: book::BlockGrads<f64>) -> Named {
    let mut parts = vec![("∂x".to_string(), g.d_x)];
    parts.extend(mha_named(g.attn).0.into_iter().map(|(n, m)| (format!("MHA {n}"), m)));
    parts.extend(ffn_named(g.ffn).0.into_iter().map(|(n, m)| (format!("FFN {n}"), m)));
    parts.push(("LN₁ ∂γ".into(), g.ln1.d_gamma));
    parts.push(("LN₁ ∂β".into(), g.ln1.d_beta));
    parts.push(("LN₂ ∂γ".into(), g.ln2.d_gamma));
    parts.push(("LN₂ ∂β".into(), g.ln2.d_beta));
    Named(parts)
}

/// One block case: (seed, pre-LN, activation, B, T, the scale of x).
type BlockSpec =
    (u64, bool, super::sweep::Fixed<llm_workbook::ch03_mlp::Activation>, usize, usize, f64);

fn block_inputs(
    (seed, pre, act, b, t, scale): &BlockSpec,
) -> Result<(book::Block<f64>, book::BlockCache<f64>, DMatrix<f64>)> {
    let order = if *pre { book::NormOrder::Pre } else { book::NormOrder::Post };
    let mut rng = llm_workbook::rng::Rng::new(*seed);
    let mut blk = book::Block::random(4, 2, 6, act.0, order, 0.6, &mut rng)?;
    blk.attn = random_mha(seed + 1, 2, (4, 4, 2, 4))?;
    blk.ln1.gamma = random(seed + 10, 1, 4).add_scalar(1.0);
    blk.ln1.beta = random(seed + 11, 1, 4) * 0.3;
    blk.ln2.gamma = random(seed + 12, 1, 4).add_scalar(1.0);
    blk.ln2.beta = random(seed + 13, 1, 4) * 0.3;
    blk.ffn.b1 = random(seed + 14, 1, 6) * 0.3;
    blk.ffn.b2 = random(seed + 15, 1, 4) * 0.3;
    let x = random(seed + 20, b * t, 4) * *scale;
    let (_, cache) = book::block_forward(&blk, &x, &book::AttnSpec::causal(*t))?;
    Ok((blk, cache, random(seed + 21, b * t, 4)))
}

/// **The block backward**: pre-LN and post-LN, GELU (tanh) and ReLU, 1 to 3 sequences of 1 to 4
/// tokens, x at 0.1 to 10 ([`Tol::CHAIN`]: a chain of two LayerNorms, attention and the FFN);
/// then `block_backward_checks`.
pub fn block_backward(
    f: impl Fn(
        &book::Block<f64>,
        &book::BlockCache<f64>,
        &DMatrix<f64>,
    ) -> Result<book::BlockGrads<f64>>,
) -> Verdict {
    block_backward_judged(&f)
}

/// [`block_backward`]'s judge, compiled once here rather than in every test that calls it.
fn block_backward_judged(
    f: &dyn Fn(
        &book::Block<f64>,
        &book::BlockCache<f64>,
        &DMatrix<f64>,
    ) -> Result<book::BlockGrads<f64>>,
) -> Verdict {
    use llm_workbook::ch03_mlp::Activation;
    let mut cases: Vec<BlockSpec> = Vec::new();
    let mut seed = 800;
    for pre in [true, false] {
        for act in [Activation::GeluTanh, Activation::Relu] {
            for (b, t, scale) in [(1, 1, 1.0), (2, 3, 1.0), (3, 2, 10.0), (1, 4, 0.1)] {
                seed += 30;
                cases.push((seed, pre, super::sweep::Fixed(act), b, t, scale));
            }
        }
    }
    let found = sweep(
        BLOCK,
        "block_backward",
        Tol::CHAIN,
        &cases,
        |s| {
            let (blk, cache, g) = outcome(block_inputs(s))?;
            outcome(f(&blk, &cache, &g)).map(block_named)
        },
        |s| {
            let (blk, cache, g) = outcome(block_inputs(s))?;
            outcome(book::block_backward(&blk, &cache, &g)).map(block_named)
        },
    );
    explained(found, || block_backward_checks(f))
}
