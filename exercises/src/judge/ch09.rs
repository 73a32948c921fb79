//! Judges of chapter 9's exercises.

use super::{Section, Verdict, attempt, attempt_ok, close, compare, random};
use crate::solutions::ch09_gpt as solution;
use llm_workbook::Result;
use llm_workbook::ch09_gpt::sample::{Decoding, distribution};
use llm_workbook::optim::AdamConfig;
use nalgebra::DMatrix;

const SAMPLING: Section = Section { chapter: "ch09_gpt", anchor: "5-sampling" };
const TRAINING: Section = Section { chapter: "ch09_gpt", anchor: "4-training" };

type Dist = Vec<(usize, f64)>;

fn same(sec: Section, what: &str, yours: &Dist, want: &Dist) -> Verdict {
    let total: f64 = yours.iter().map(|(_, p)| p).sum();
    if !close(total, 1.0, 1e-9) {
        return Err(sec.fail(format!("{what}: your probabilities sum to {total:.4}, not 1")));
    }
    if yours.len() != want.len() {
        return Err(sec.fail(format!(
            "{what}: {} tokens expected in the distribution; yours has {}",
            want.len(),
            yours.len()
        )));
    }
    for (n, ((t, p), (wt, wp))) in yours.iter().zip(want).enumerate() {
        if t != wt {
            return Err(sec.fail(format!(
                "{what}: entry {n} should be token {wt} (most likely first, ties by token id); \
                 yours is token {t}"
            )));
        }
        if !close(*p, *wp, 1e-9) {
            return Err(
                sec.fail(format!("{what}: P(token {t}): {}", super::yours_expected(*p, *wp)))
            );
        }
    }
    Ok(())
}

const LOGITS: [f64; 6] = [1.0, 3.0, -0.5, 3.0, 2.0, 0.0];

/// T = 1 is the softmax; T = 0.5 sharpens and T = 2 flattens (the main crate's values), tokens 1
/// and 3 tied at the top listed by token id; logits of 1000 do not overflow; T = 0 is an error.
fn temperature_distribution_checks(f: impl Fn(&[f64], f64) -> Result<Dist>) -> Verdict {
    super::not_applicable(&[super::Probe::Batch]);
    // LOGITS ties tokens 1 and 3 at the top: `same` wants token 1 listed first.
    super::probe(super::Probe::Order);
    for t in [1.0, 0.5, 2.0] {
        let yours = attempt_ok(SAMPLING, "temperature_distribution", || f(&LOGITS, t))?;
        let want = distribution(&LOGITS, &Decoding::temperature(t)).map_err(|e| e.to_string())?;
        same(SAMPLING, &format!("T = {t}"), &yours, &want).map_err(|m| {
            let times = distribution(&LOGITS.map(|z| z * t), &Decoding::temperature(1.0));
            if times.is_ok_and(|d| same(SAMPLING, "", &yours, &d).is_ok()) && t != 1.0 {
                SAMPLING.fail(format!("T = {t}: yours is softmax(z·T): divide the logits by T"))
            } else {
                m
            }
        })?;
    }
    super::probe(super::Probe::Scale);
    super::probe(super::Probe::Named);
    let big = [1000.0, 1001.0];
    let yours = attempt_ok(SAMPLING, "temperature_distribution", || f(&big, 1.0))?;
    if yours.iter().any(|(_, p)| !p.is_finite()) {
        return Err(SAMPLING.fail("logits (1000, 1001) gave NaN: subtract the maximum before exp"));
    }
    let name = "temperature_distribution";
    super::expect_err(SAMPLING, name, "T = 0 (greedy decoding is the argmax)", || f(&LOGITS, 0.0))?;
    super::expect_err(SAMPLING, name, "T = −1 (T ≤ 0)", || f(&LOGITS, -1.0))?;
    super::expect_err(SAMPLING, name, "no logits", || f(&[], 1.0))
}

/// Logits of ±900 with ties at the top and at the k-th place: no shift overflows, and equal
/// logits keep the lower token id.
const LARGE_TIED: [f64; 6] = [899.0, 900.0, -900.0, 900.0, 0.0, 899.0];

/// Top-k's tokens: the same set as `want`'s (else a tie broken the wrong way, when as many were
/// kept) in the same order.
fn kept_as_wanted(what: &str, yours: &Dist, want: &Dist) -> Verdict {
    super::probe(super::Probe::Order);
    super::probe(super::Probe::Named);
    let kept: Vec<usize> = yours.iter().map(|(t, _)| *t).collect();
    let order: Vec<usize> = want.iter().map(|(t, _)| *t).collect();
    let (mut kept_set, mut want_set) = (kept.clone(), order.clone());
    kept_set.sort_unstable();
    want_set.sort_unstable();
    if kept_set != want_set && kept.len() == order.len() {
        return Err(SAMPLING.fail(format!(
            "{what}: yours keeps tokens {kept_set:?}, the k largest are {want_set:?} — a tie \
             broken the wrong way: among equal logits the lower token id is kept"
        )));
    }
    if kept_set == want_set && kept != order {
        return Err(SAMPLING.fail(format!(
            "{what}: yours lists the tokens as {kept:?}, expected {order:?} — most likely \
             first, and equal probabilities in the order of their token ids"
        )));
    }
    Ok(())
}

/// k = 1 is the argmax with probability 1; k = 3 keeps tokens 1, 3, 4 and renormalises; k = 0 is
/// an error.
fn top_k_distribution_checks(f: impl Fn(&[f64], usize, f64) -> Result<Dist>) -> Verdict {
    super::not_applicable(&[super::Probe::Batch]);
    for (k, t) in [(1, 1.0), (3, 1.0), (3, 0.7), (6, 1.0)] {
        let yours = attempt_ok(SAMPLING, "top_k_distribution", || f(&LOGITS, k, t))?;
        let spec = Decoding::Sample { temperature: t, top_k: Some(k), top_p: None };
        let want = distribution(&LOGITS, &spec).map_err(|e| e.to_string())?;
        let what = format!("logits {LOGITS:?}, k = {k}, T = {t}");
        kept_as_wanted(&what, &yours, &want)?;
        let total: f64 = yours.iter().map(|(_, p)| p).sum();
        if !close(total, 1.0, 1e-9) {
            return Err(SAMPLING.fail(format!(
                "{what}: your probabilities sum to {total:.4}, not 1 — not renormalised: keep the \
                 k largest logits, then softmax over those alone"
            )));
        }
        same(SAMPLING, &what, &yours, &want)?;
    }
    super::probe(super::Probe::Scale);
    super::probe(super::Probe::Order);
    for k in [1, 2, 3, 4] {
        let yours = attempt_ok(SAMPLING, "top_k_distribution", || f(&LARGE_TIED, k, 1.0))?;
        let what = format!("logits {LARGE_TIED:?}, k = {k}");
        if yours.iter().any(|(_, p)| !p.is_finite()) {
            return Err(SAMPLING.fail(format!("{what}: yours has NaN or ∞ — {}", super::NO_SHIFT)));
        }
        let spec = Decoding::Sample { temperature: 1.0, top_k: Some(k), top_p: None };
        let want = distribution(&LARGE_TIED, &spec).map_err(|e| e.to_string())?;
        kept_as_wanted(&what, &yours, &want)?;
        same(SAMPLING, &what, &yours, &want)?;
    }
    super::expect_err(SAMPLING, "top_k_distribution", "k = 0 (it keeps nothing)", || {
        f(&LOGITS, 0, 1.0)
    })
}

/// The first step moves every entry by α (bias correction makes m̂/√v̂ = ±1); three steps with
/// decay match the main crate's θ, m and v.
fn adamw_step_checks(
    f: impl Fn(
        &mut DMatrix<f64>,
        &DMatrix<f64>,
        &mut DMatrix<f64>,
        &mut DMatrix<f64>,
        u64,
        &AdamConfig,
        f64,
    ) -> Result<()>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    super::probe(super::Probe::Named);
    let config = AdamConfig { learning_rate: 0.01, ..AdamConfig::default() };
    let theta0 = random(130, 3, 2);
    let g = random(131, 3, 2);
    let (mut theta, mut m, mut v) = (theta0.clone(), DMatrix::zeros(3, 2), DMatrix::zeros(3, 2));
    super::passing(&[("theta", &theta), ("grad", &g), ("m", &m), ("v", &v)]);
    attempt_ok(TRAINING, "adamw_step", || f(&mut theta, &g, &mut m, &mut v, 0, &config, 0.0))?;
    let moved = &theta0 - &theta;
    let first = moved.zip_map(&g, |d, g| d * g.signum());
    if first.iter().any(|d| !close(*d, 0.01, 1e-4)) {
        let why = if first.iter().all(|d| close(*d, 0.01 * 0.1 / 0.001f64.sqrt(), 1e-3)) {
            " = 3.16α: without bias correction m = 0.1g and √v = 0.032|g| — divide m by 1 − β₁ᵗ \
             and v by 1 − β₂ᵗ (the bias correction)"
        } else {
            ""
        };
        return Err(TRAINING.fail(format!(
            "the first step (no decay) should move every entry of θ by α = 0.01 against its \
             gradient (m̂/√v̂ = ±1); yours moved θ[0,0] by {:.6}{why}",
            first[(0, 0)]
        )));
    }
    let (mut theta, mut m, mut v) = (theta0.clone(), DMatrix::zeros(3, 2), DMatrix::zeros(3, 2));
    let (mut wt, mut wm, mut wv) = (theta0.clone(), DMatrix::zeros(3, 2), DMatrix::zeros(3, 2));
    for step in 0..3u64 {
        let g = random(140 + step, 3, 2);
        super::passing(&[("theta", &theta), ("grad", &g), ("m", &m), ("v", &v)]);
        attempt_ok(TRAINING, "adamw_step", || {
            f(&mut theta, &g, &mut m, &mut v, step, &config, 0.5)
        })?;
        solution::adamw_step(&mut wt, &g, &mut wm, &mut wv, step, &config, 0.5)
            .map_err(|e| e.to_string())?;
        let at = |m: String| {
            super::note(
                format!("after step {} with λ = 0.5: {m}", step + 1),
                "AdamW's decay is decoupled: θ ← θ − αλθ, outside the moments (not λθ added to g)",
            )
        };
        compare(TRAINING, "m", &m, &wm, 1e-10, &[]).map_err(at)?;
        compare(TRAINING, "v", &v, &wv, 1e-10, &[]).map_err(at)?;
        compare(TRAINING, "θ", &theta, &wt, 1e-10, &[]).map_err(at)?;
    }
    Ok(())
}

const BACKWARD: Section = Section { chapter: "ch09_gpt", anchor: "3-the-backward-pass" };

/// W_U = 0 scores ln V (the chapter's "a model that knows nothing"); the loss is chapter 2's mean
/// cross-entropy of z = h W_Uᵀ; the gradient check in h and W_U (S = 4, d = 3, V = 5, so a
/// misplaced transpose shows in the shapes); an error for a target ≥ V.
fn lm_head_backward_checks(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>, &[usize]) -> Result<(f64, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Order]);
    super::probe(super::Probe::Named);
    super::probe(super::Probe::Batch);
    let name = "lm_head_backward";
    let (h, targets) = (random(170, 4, 3), [4, 0, 2, 2]);
    let zero = DMatrix::zeros(5, 3);
    let passed: [(&str, &dyn super::Shaped); 3] =
        [("h", &h), ("w_u", &zero), ("targets", &targets)];
    let (loss, _, _) = super::attempt_ok_on(BACKWARD, name, &passed, || f(&h, &zero, &targets))?;
    if format!("{loss:.4}") != format!("{:.4}", 5f64.ln()) {
        let why = if close(loss, 4.0 * 5f64.ln(), 1e-9) {
            ": that is the sum over the S = 4 rows; L is their mean"
        } else {
            ""
        };
        return Err(BACKWARD.fail(format!(
            "with W_U = 0 every logit is 0 and the model predicts the uniform distribution: L \
             should be ln V = ln 5 = {:.4}; yours is {loss:.4}{why}",
            5f64.ln()
        )));
    }
    let w_u = random(171, 5, 3);
    let (loss, d_h, d_w) = super::attempt_ok_on(
        BACKWARD,
        name,
        &[("h", &h), ("w_u", &w_u), ("targets", &targets)],
        || f(&h, &w_u, &targets),
    )?;
    let ce = |h: &DMatrix<f64>, w: &DMatrix<f64>| {
        llm_workbook::ch02_softmax::cross_entropy_from_logits(&(h * w.transpose()), &targets)
            .unwrap_or(f64::NAN)
    };
    let want = ce(&h, &w_u);
    if !close(loss, want, 1e-9) {
        let why = if close(loss, want * 4.0, 1e-9) {
            ": that is the sum over the S = 4 rows; L is their mean"
        } else {
            ""
        };
        return Err(BACKWARD.fail(format!(
            "L = mean cross-entropy of z = h W_Uᵀ should be {want:.6}; yours is {loss:.6}{why}"
        )));
    }
    super::gradient_check(
        BACKWARD,
        &[("h", h.clone()), ("W_U", w_u.clone())],
        &[d_h, d_w],
        |t| ce(&t[0], &t[1]),
        &[(4.0, "a missing 1/S: ∂L/∂z = (softmax(z) − onehot)/S, L is the mean over S = 4 rows")],
    )
    .map_err(|m| match super::failed_tensor(&m) {
        Some("W_U") => super::note(m, "z = h W_Uᵀ, so ∂L/∂W_U = (∂L/∂z)ᵀ h, V×d like W_U"),
        _ => super::note(m, "z = h W_Uᵀ, so ∂L/∂h = ∂L/∂z W_U, S×d like h"),
    })?;
    // Logits of ±900 and more: rows of h on very different scales.
    let big_h = super::rows_scaled(&h, &[1.0, 500.0, -400.0, 60.0]);
    let (loss, d_h, d_w) = super::attempt_ok_on(
        BACKWARD,
        name,
        &[("h", &big_h), ("w_u", &w_u), ("targets", &targets)],
        || f(&big_h, &w_u, &targets),
    )?;
    let (want, want_h, want_w) =
        solution::lm_head_backward(&big_h, &w_u, &targets).map_err(|e| e.to_string())?;
    let what = "h's rows scaled by (1, 500, −400, 60), logits up to about ±900";
    if !loss.is_finite() || d_h.iter().chain(d_w.iter()).any(|v| !v.is_finite()) {
        return Err(
            BACKWARD.fail(format!("{what}: yours has NaN or ∞ (L = {loss}) — {}", super::NO_SHIFT))
        );
    }
    if (loss - want).abs() > 1e-9 * want.abs().max(1.0) {
        return Err(BACKWARD.fail(format!("{what}: L {}", super::yours_expected(loss, want))));
    }
    compare(BACKWARD, &format!("{what}: ∂L/∂h"), &d_h, &want_h, 1e-9, &[])?;
    compare(BACKWARD, &format!("{what}: ∂L/∂W_U"), &d_w, &want_w, 1e-9, &[])?;
    let bad = [4, 0, 5, 2];
    super::expect_err(BACKWARD, name, "target 5 with V = 5 tokens (ids 0 … 4)", || {
        f(&h, &w_u, &bad)
    })?;
    super::expect_err(BACKWARD, name, "no rows (h 0×3, no targets)", || {
        f(&DMatrix::zeros(0, 3), &w_u, &[])
    })?;
    super::expect_err(BACKWARD, name, "h 4×3 with W_U 5×2 (a width mismatch)", || {
        f(&h, &random(172, 5, 2), &targets)
    })
}

const CACHE: Section = Section { chapter: "ch09_gpt", anchor: "5-sampling" };

/// Softmax over p < n of q·K[p]/√d (times `scale_by`), then Σ a_p V[p]: one head's attention of q
/// over the first n rows (the judge's own arithmetic, for naming a wrong answer's slip).
fn attend(
    q: &[f64],
    keys: &DMatrix<f64>,
    values: &DMatrix<f64>,
    n: usize,
    scaled: bool,
) -> Vec<f64> {
    let d = keys.ncols();
    let scale = if scaled { 1.0 / (d as f64).sqrt() } else { 1.0 };
    let s: Vec<f64> =
        (0..n).map(|p| (0..d).map(|c| q[c] * keys[(p, c)]).sum::<f64>() * scale).collect();
    let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = s.iter().map(|v| (v - max).exp()).collect();
    let total: f64 = e.iter().sum();
    (0..d).map(|c| (0..n).map(|p| e[p] / total * values[(p, c)]).sum()).collect()
}

fn same_row(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| close(*x, *y, 1e-9))
}

/// What the cache-step judge passes, named as the exercise names it.
fn cache_passed<'a>(
    keys: &'a DMatrix<f64>,
    values: &'a DMatrix<f64>,
    q: &'a Vec<f64>,
    k: &'a Vec<f64>,
    v: &'a Vec<f64>,
) -> [(&'static str, &'a dyn super::Shaped); 5] {
    [("keys", keys), ("values", values), ("q", q), ("k", k), ("v", v)]
}

/// Five tokens fed one at a time into a 6-row cache whose unused rows hold stale values: after
/// each step, row len holds the new k and v, no earlier row changed, and the output equals the
/// last row of chapter 6's causal attention over the whole sequence so far; changing the rows
/// past len changes nothing (no future position is read); a full cache is an error.
fn kv_cache_step_checks<F>(f: F) -> Verdict
where
    F: Fn(&mut DMatrix<f64>, &mut DMatrix<f64>, usize, &[f64], &[f64], &[f64]) -> Result<Vec<f64>>,
{
    super::not_applicable(&[super::Probe::Order]);
    super::probe(super::Probe::Batch);
    super::probe(super::Probe::Named);
    let name = "kv_cache_step";
    let (n_ctx, d, steps) = (6, 3, 5);
    let (q, k, v) = (random(180, steps, d), random(181, steps, d), random(182, steps, d));
    let row = |m: &DMatrix<f64>, r: usize| -> Vec<f64> { m.row(r).iter().copied().collect() };
    // Stale rows of an earlier sequence: a step that reads them is using the future.
    let (mut keys, mut values) = (random(183, n_ctx, d) * 2.0, random(184, n_ctx, d) * 2.0);
    for t in 0..steps {
        let (before_k, before_v) = (keys.clone(), values.clone());
        let (qt, kt, vt) = (row(&q, t), row(&k, t), row(&v, t));
        super::passing(&cache_passed(&keys, &values, &qt, &kt, &vt));
        let out = attempt_ok(CACHE, name, || f(&mut keys, &mut values, t, &qt, &kt, &vt))?;
        for (name, m) in [("keys", &keys), ("values", &values)] {
            let name = format!("after step {t}, the cache's {name}");
            super::expect_shape(CACHE, &name, m, (n_ctx, d), "n_ctx rows, written in place")?;
        }
        if row(&keys, t) != kt || row(&values, t) != vt {
            return Err(CACHE.fail(format!(
                "step {t} (len = {t}): row {t} of the keys and values should now hold the new \
                 token's k and v: append at row len"
            )));
        }
        for r in (0..n_ctx).filter(|&r| r != t) {
            if row(&keys, r) != row(&before_k, r) || row(&values, r) != row(&before_v, r) {
                return Err(CACHE.fail(format!(
                    "step {t}: your step changed row {r} of the cache; only row len = {t} is \
                     written (earlier keys and values never change)"
                )));
            }
        }
        // Chapter 6's causal attention over the whole sequence so far: its last row.
        let n = t + 1;
        let (full, _) = crate::solutions::ch06_attention::attention_forward(
            &q.rows(0, n).into_owned(),
            &k.rows(0, n).into_owned(),
            &v.rows(0, n).into_owned(),
            true,
        )
        .map_err(|e| e.to_string())?;
        let want = row(&full, t);
        if !same_row(&out, &want) {
            let why = if same_row(&out, &attend(&qt, &keys, &values, n_ctx, true)) {
                format!(
                    " — a causal leak: yours attends over all {n_ctx} rows of the cache; rows \
                     past len = {t} are positions not yet fed (the future)"
                )
            } else if t > 0 && same_row(&out, &attend(&qt, &keys, &values, t, true)) {
                " — the mask is off by one: the new token attends to itself too (rows 0 … len, \
                 len included)"
                    .to_string()
            } else if same_row(&out, &attend(&qt, &keys, &values, n, false)) {
                " — your scores are q·K[p]: divide by √d".to_string()
            } else {
                String::new()
            };
            return Err(CACHE.fail(format!(
                "step {t}: your output {out:.4?} should be the last row of causal attention over \
                 tokens 0 … {t}, {want:.4?}{why}"
            )));
        }
        // Rows past len changed: the output must not move.
        let (mut k2, mut v2) = (before_k.clone(), before_v.clone());
        for r in n..n_ctx {
            k2.row_mut(r).add_scalar_mut(3.0);
            v2.row_mut(r).add_scalar_mut(-3.0);
        }
        super::passing(&cache_passed(&k2, &v2, &qt, &kt, &vt));
        let again = attempt_ok(CACHE, name, || f(&mut k2, &mut v2, t, &qt, &kt, &vt))?;
        if !same_row(&again, &out) {
            return Err(CACHE.fail(format!(
                "step {t}: changing the unused rows {n} … {} changed your output: a causal leak \
                 (rows past len are the future)",
                n_ctx - 1
            )));
        }
    }
    // Large scores: the query's entries in the hundreds give q·k/√d beyond ±709.
    let big_q = &q * 800.0;
    let (mut keys2, mut values2) = (DMatrix::zeros(n_ctx, d), DMatrix::zeros(n_ctx, d));
    super::probe(super::Probe::Scale);
    for t in 0..steps {
        let (qt, kt, vt) = (row(&big_q, t), row(&k, t), row(&v, t));
        super::passing(&cache_passed(&keys2, &values2, &qt, &kt, &vt));
        let out = attempt_ok(CACHE, name, || f(&mut keys2, &mut values2, t, &qt, &kt, &vt))?;
        let n = t + 1;
        let (full, _) = crate::solutions::ch06_attention::attention_forward(
            &big_q.rows(0, n).into_owned(),
            &k.rows(0, n).into_owned(),
            &v.rows(0, n).into_owned(),
            true,
        )
        .map_err(|e| e.to_string())?;
        let want = row(&full, t);
        if out.iter().any(|v| !v.is_finite()) {
            return Err(CACHE.fail(format!(
                "step {t} with q 800 times larger (scores in the hundreds and thousands): your \
                 output is {out:?} — {}",
                super::NO_SHIFT
            )));
        }
        if !same_row(&out, &want) {
            return Err(CACHE.fail(format!(
                "step {t} with q 800 times larger: your output {out:?} should be {want:?}"
            )));
        }
    }
    let (qt, kt, vt) = (row(&q, 0), row(&k, 0), row(&v, 0));
    super::probe(super::Probe::Errors);
    let full =
        attempt(CACHE, name, || f(&mut keys, &mut values, n_ctx, &qt, &kt, &vt)).map_err(|m| {
            super::note(
                m,
                &format!(
                    "that was len = {n_ctx} with a {n_ctx}-row cache: the cache is full, so \
                     return an Err before writing row len"
                ),
            )
        })?;
    super::probe(super::Probe::Errors);
    match full {
        Err(_) => Ok(()),
        Ok(_) => Err(CACHE.fail(format!(
            "len = {n_ctx} with a {n_ctx}-row cache: the cache is full, return an Err"
        ))),
    }
}

// ───────────── the judges: the sweep against the main crate, then the checks above ─────────────

use super::sweep::{Fixed, Gen, Named, Tol, explained, outcome, sweep};

/// Logits of 1 to 9 tokens at scales 1, 30 and 10³, with ties, and the empty list.
fn logit_lists(draw: &mut Gen) -> Vec<Vec<f64>> {
    let mut lists = vec![Vec::new()];
    for n in [1, 2, 5, 9] {
        for s in [1.0, 30.0, 1e3] {
            lists.push(draw.logits(n, s));
        }
    }
    lists
}

/// **softmax(z/T)**: the sweep's logits (ties, scales up to 10³, where e^{z/T − max z} over- or
/// underflows for T ≠ 1) at T from 0.05 to 10, and the errors the doc promises (T = 0, T < 0,
/// empty logits); then `temperature_distribution_checks`.
pub fn temperature_distribution(f: impl Fn(&[f64], f64) -> Result<Dist>) -> Verdict {
    temperature_distribution_judged(&f)
}

/// [`temperature_distribution`]'s judge, compiled once here rather than in every test that calls it.
fn temperature_distribution_judged(f: &dyn Fn(&[f64], f64) -> Result<Dist>) -> Verdict {
    let mut cases = Vec::new();
    for z in logit_lists(&mut Gen::new("temperature_distribution")) {
        for t in [1.0, 0.05, 0.5, 2.0, 10.0, 0.0, -1.0] {
            cases.push((z.clone(), t));
        }
    }
    let found = sweep(
        SAMPLING,
        "temperature_distribution",
        Tol::F64,
        &cases,
        |(z, t)| outcome(f(z, *t)),
        |(z, t)| outcome(distribution(z, &Decoding::temperature(*t))),
    );
    explained(found, || temperature_distribution_checks(f))
}

/// **Top-k**: the sweep's non-empty logits with k from 0 (the promised error) to past the
/// vocabulary's size (k = V and V + 1 keep every token), T from 0.5 to 2; then
/// `top_k_distribution_checks`.
pub fn top_k_distribution(f: impl Fn(&[f64], usize, f64) -> Result<Dist>) -> Verdict {
    top_k_distribution_judged(&f)
}

/// [`top_k_distribution`]'s judge, compiled once here rather than in every test that calls it.
fn top_k_distribution_judged(f: &dyn Fn(&[f64], usize, f64) -> Result<Dist>) -> Verdict {
    let mut cases = Vec::new();
    for z in logit_lists(&mut Gen::new("top_k_distribution")).into_iter().filter(|z| !z.is_empty())
    {
        let n = z.len();
        for k in [0, 1, 2, n.saturating_sub(1).max(1), n, n + 1, n + 5] {
            for t in [1.0, 0.5, 2.0] {
                cases.push((z.clone(), k, t));
            }
        }
    }
    let found = sweep(
        SAMPLING,
        "top_k_distribution",
        Tol::F64,
        &cases,
        |(z, k, t)| outcome(f(z, *k, *t)),
        |(z, k, t)| {
            let spec = Decoding::Sample { temperature: *t, top_k: Some(*k), top_p: None };
            outcome(distribution(z, &spec))
        },
    );
    explained(found, || top_k_distribution_checks(f))
}

/// An AdamW step as the sweep calls it.
type AdamStep<'a> = &'a dyn Fn(
    &mut DMatrix<f64>,
    &DMatrix<f64>,
    &mut DMatrix<f64>,
    &mut DMatrix<f64>,
    u64,
    &AdamConfig,
    f64,
) -> Result<()>;

/// One AdamW case: (θ, g, m, v, steps, the configuration, λ).
type AdamCase =
    (DMatrix<f64>, DMatrix<f64>, DMatrix<f64>, DMatrix<f64>, u64, Fixed<AdamConfig>, f64);

/// **One AdamW step**: steps 0 (m and v zero), 1, 9 and 10⁴ (the bias corrections near 1),
/// gradients from 10⁻⁹ (where ε dominates √v̂) to 10³, λ = 0 and 0.1, three configurations;
/// θ, m and v compared after the step; then `adamw_step_checks`.
pub fn adamw_step(
    f: impl Fn(
        &mut DMatrix<f64>,
        &DMatrix<f64>,
        &mut DMatrix<f64>,
        &mut DMatrix<f64>,
        u64,
        &AdamConfig,
        f64,
    ) -> Result<()>,
) -> Verdict {
    adamw_step_judged(&f)
}

/// [`adamw_step`]'s judge, compiled once here rather than in every test that calls it.
fn adamw_step_judged(
    f: &dyn Fn(
        &mut DMatrix<f64>,
        &DMatrix<f64>,
        &mut DMatrix<f64>,
        &mut DMatrix<f64>,
        u64,
        &AdamConfig,
        f64,
    ) -> Result<()>,
) -> Verdict {
    let mut draw = Gen::new("adamw_step");
    let configs = [
        AdamConfig::default(),
        AdamConfig { learning_rate: 0.1, beta1: 0.5, beta2: 0.9, epsilon: 1e-3 },
        AdamConfig { learning_rate: 0.01, beta1: 0.0, beta2: 0.99, epsilon: 1e-8 },
    ];
    let mut cases: Vec<AdamCase> = Vec::new();
    for config in configs {
        for steps in [0, 1, 9, 10_000] {
            for (s, wd) in [(1.0, 0.0), (1e-9, 0.1), (1e3, 0.1)] {
                let (r, c) = (2, 3);
                let (m, v) = if steps == 0 {
                    (DMatrix::zeros(r, c), DMatrix::zeros(r, c))
                } else {
                    (draw.matrix(r, c, s), draw.matrix(r, c, s * s).abs())
                };
                cases.push((
                    draw.matrix(r, c, 1.0),
                    draw.matrix(r, c, s),
                    m,
                    v,
                    steps,
                    Fixed(config),
                    wd,
                ));
            }
        }
    }
    let run = |(theta, g, m, v, steps, config, wd): &AdamCase, step: AdamStep| {
        let (mut theta, mut m, mut v) = (theta.clone(), m.clone(), v.clone());
        outcome(step(&mut theta, g, &mut m, &mut v, *steps, &config.0, *wd))?;
        Ok(Named::of([("θ", theta), ("m", m), ("v", v)]))
    };
    let found = sweep(
        TRAINING,
        "adamw_step",
        Tol::F64,
        &cases,
        |c| run(c, &f),
        |c| run(c, &solution::adamw_step),
    );
    explained(found, || adamw_step_checks(f))
}

/// **The unembedding's backward**: S from 1 to 4 rows, d ≠ V, h at every scale up to 30 (logits
/// in the hundreds), and the errors the doc promises (no rows, a width mismatch, a target equal
/// to V); then `lm_head_backward_checks`.
pub fn lm_head_backward(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>, &[usize]) -> Result<(f64, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    lm_head_backward_judged(&f)
}

/// [`lm_head_backward`]'s judge, compiled once here rather than in every test that calls it.
fn lm_head_backward_judged(
    f: &dyn Fn(&DMatrix<f64>, &DMatrix<f64>, &[usize]) -> Result<(f64, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    let mut draw = Gen::new("lm_head_backward");
    let mut cases = Vec::new();
    for (s, d, v) in [(1, 1, 2), (3, 2, 5), (4, 3, 3), (2, 5, 4)] {
        for scale in [1.0, 1e-3, 30.0] {
            cases.push((draw.matrix(s, d, scale), draw.matrix(v, d, 1.0), draw.tokens(s, v)));
        }
        cases.push((draw.matrix(0, d, 1.0), draw.matrix(v, d, 1.0), Vec::new()));
        cases.push((draw.matrix(s, d + 1, 1.0), draw.matrix(v, d, 1.0), draw.tokens(s, v)));
        let mut bad = draw.tokens(s, v);
        bad[0] = v;
        cases.push((draw.matrix(s, d, 1.0), draw.matrix(v, d, 1.0), bad));
    }
    let found = sweep(
        BACKWARD,
        "lm_head_backward",
        Tol::F64,
        &cases,
        |(h, w, t)| outcome(f(h, w, t)),
        |(h, w, t)| outcome(solution::lm_head_backward(h, w, t)),
    );
    explained(found, || lm_head_backward_checks(f))
}

/// One cache step: (keys, values, len, q, k, v).
type CacheCase = (DMatrix<f64>, DMatrix<f64>, usize, Vec<f64>, Vec<f64>, Vec<f64>);

/// **A key/value-cache step**: caches of 1 to 6 rows holding stale rows past len, every len
/// from 0 to n_ctx (n_ctx: the promised error), q at 1, 30 and 800 (scores in the thousands),
/// and a q of the wrong length (an error); the output and both caches after the step compared;
/// then `kv_cache_step_checks`.
pub fn kv_cache_step<F>(f: F) -> Verdict
where
    F: Fn(&mut DMatrix<f64>, &mut DMatrix<f64>, usize, &[f64], &[f64], &[f64]) -> Result<Vec<f64>>,
{
    let mut draw = Gen::new("kv_cache_step");
    let mut cases: Vec<CacheCase> = Vec::new();
    let vec = |draw: &mut Gen, n: usize, s: f64| draw.vector(n, s).as_slice().to_vec();
    for (n_ctx, d) in [(1, 1), (3, 2), (6, 3)] {
        for len in 0..=n_ctx {
            for s in [1.0, 30.0, 800.0] {
                let (keys, values) = (draw.matrix(n_ctx, d, 2.0), draw.matrix(n_ctx, d, 2.0));
                let (q, k, v) =
                    (vec(&mut draw, d, s), vec(&mut draw, d, 1.0), vec(&mut draw, d, 1.0));
                cases.push((keys, values, len, q, k, v));
            }
        }
        let (keys, values) = (draw.matrix(n_ctx, d, 1.0), draw.matrix(n_ctx, d, 1.0));
        let (q, k, v) =
            (vec(&mut draw, d + 1, 1.0), vec(&mut draw, d, 1.0), vec(&mut draw, d, 1.0));
        cases.push((keys, values, 0, q, k, v));
    }
    type Step<'a> = &'a dyn Fn(
        &mut DMatrix<f64>,
        &mut DMatrix<f64>,
        usize,
        &[f64],
        &[f64],
        &[f64],
    ) -> Result<Vec<f64>>;
    let run = |(keys, values, len, q, k, v): &CacheCase, step: Step| {
        let (mut keys, mut values) = (keys.clone(), values.clone());
        let out = outcome(step(&mut keys, &mut values, *len, q, k, v))?;
        let out = DMatrix::from_row_slice(1, out.len(), &out);
        Ok(Named::of([
            ("the output", out),
            ("keys after the step", keys),
            ("values after the step", values),
        ]))
    };
    let found = sweep(
        CACHE,
        "kv_cache_step",
        Tol::F64,
        &cases,
        |c| run(c, &f),
        |c| run(c, &solution::kv_cache_step),
    );
    explained(found, || kv_cache_step_checks(&f))
}
