//! Judges of chapter 6's exercises.

use super::{
    Section, Verdict, attempt, attempt_ok, compare, gradient_check, note, random, weighted_sum,
};
use crate::ch06_attention::solution;
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
pub fn causal_mask(f: impl Fn(usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
    for (tq, tk) in [(4, 4), (2, 5), (1, 3)] {
        let m = attempt_ok(SDPA, "causal_mask", || f(tq, tk))?;
        if m.shape() != (tq, tk) {
            return Err(SDPA.fail(format!(
                "causal_mask({tq}, {tk}) should be {tq}×{tk} (queries × keys); yours is {}×{}",
                m.nrows(),
                m.ncols()
            )));
        }
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
    for (tq, tk) in [(3, 2), (0, 2)] {
        if attempt(SDPA, "causal_mask", || f(tq, tk))?.is_ok() {
            return Err(SDPA.fail(format!("causal_mask({tq}, {tk}) should be an Err")));
        }
    }
    Ok(())
}

/// The main crate's O and A on random Q, K, V (bidirectional, causal and with T_q < T_k); rows of
/// A sum to 1; no causal leak (changing a future value row changes no earlier output).
pub fn attention_forward(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        bool,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    for (seed, tq, tk, causal) in
        [(60, 4, 4, false), (61, 4, 4, true), (62, 2, 5, false), (63, 3, 5, true)]
    {
        let (q, k, v) = (random(seed, tq, 3), random(seed + 10, tk, 3), random(seed + 20, tk, 2));
        let (o, a) = attempt_ok(SDPA, "attention_forward", || f(&q, &k, &v, causal))?;
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
            let (o2, _) = attempt_ok(SDPA, "attention_forward", || f(&q, &k, &later, causal))?;
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
    Ok(())
}

/// The gradient check of L = Σ G ⊙ O(Q, K, V) in Q, K and V, bidirectional and causal.
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
    for (seed, tq, tk, causal) in [(70, 3, 4, false), (71, 4, 4, true)] {
        let (q, k, v) = (random(seed, tq, 3), random(seed + 10, tk, 3), random(seed + 20, tk, 2));
        let g = random(seed + 30, tq, 2);
        let (_, a) = solution::attention_forward(&q, &k, &v, causal).map_err(|e| e.to_string())?;
        let (d_q, d_k, d_v) =
            attempt_ok(BACKWARD, "attention_backward", || f(&q, &k, &v, &a, &g, causal))?;
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
/// per row with γ = 1, β = 0; the main crate's LayerNorm with random γ, β.
pub fn layer_norm_forward(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>, &DMatrix<f64>, f64) -> Result<DMatrix<f64>>,
) -> Verdict {
    let (ones, zeros) = (DMatrix::from_element(1, 4, 1.0), DMatrix::zeros(1, 4));
    let x = DMatrix::from_row_slice(1, 4, &[1.0, 2.0, 3.0, 4.0]);
    let y = attempt_ok(NORM, "layer_norm_forward", || f(&x, &ones, &zeros, 1e-12))?;
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
    let y = attempt_ok(NORM, "layer_norm_forward", || f(&x, &ones, &zeros, 1e-6))?;
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
    let y = attempt_ok(NORM, "layer_norm_forward", || f(&x, &gamma, &beta, 1e-6))?;
    let want = solution::layer_norm_forward(&x, &gamma, &beta, 1e-6).map_err(|e| e.to_string())?;
    compare(NORM, "LayerNorm(X)", &y, &want, 1e-9, &[])
}

/// The gradient check of L = Σ G ⊙ LayerNorm(X) in X, γ and β.
pub fn layer_norm_backward(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
        f64,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    let (x, gamma, beta, g) =
        (random(83, 4, 5), random(84, 1, 5), random(85, 1, 5), random(86, 4, 5));
    let (d_x, d_gamma, d_beta) =
        attempt_ok(NORM, "layer_norm_backward", || f(&x, &gamma, &g, 1e-5))?;
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
            note(m, "x̂ depends on x through μ and σ as well: ∂L/∂x has three terms, g, −mean(g) and −x̂·mean(g ⊙ x̂)")
        } else {
            m
        }
    })
}

/// Three heads of width 2 from a 3×6 matrix: head h is columns 2h, 2h + 1; an error for 4 heads.
pub fn split_heads(f: impl Fn(&DMatrix<f64>, usize) -> Result<Vec<DMatrix<f64>>>) -> Verdict {
    let m = DMatrix::from_fn(3, 6, |r, c| (10 * r + c) as f64);
    let parts = attempt_ok(HEADS, "split_heads", || f(&m, 3))?;
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
    match attempt(HEADS, "split_heads", || f(&m, 4))? {
        Err(_) => Ok(()),
        Ok(_) => Err(HEADS.fail("6 columns do not split into 4 equal heads: return an Err")),
    }
}

/// Three 2×2 heads side by side give the 2×6 matrix; an error for no parts.
pub fn concat_heads(f: impl Fn(&[DMatrix<f64>]) -> Result<DMatrix<f64>>) -> Verdict {
    let parts: Vec<DMatrix<f64>> = (0..3).map(|h| random(90 + h, 2, 2)).collect();
    let m = attempt_ok(HEADS, "concat_heads", || f(&parts))?;
    let want = book::concat_heads(&parts).map_err(|e| e.to_string())?;
    if m.shape() == (6, 2) {
        return Err(HEADS.fail("yours stacks the heads as rows: they go side by side, N×(H·w)"));
    }
    compare(HEADS, "concat", &m, &want, 0.0, &[])?;
    match attempt(HEADS, "concat_heads", || f(&[]))? {
        Err(_) => Ok(()),
        Ok(_) => Err(HEADS.fail("no parts to concatenate: return an Err")),
    }
}
