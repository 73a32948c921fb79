//! Judges of chapter 9's exercises.

use super::{Section, Verdict, attempt, attempt_ok, close, compare, random};
use crate::ch09_gpt::solution;
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
            return Err(sec.fail(format!("{what}: P(token {t}): yours {p:.6}, expected {wp:.6}")));
        }
    }
    Ok(())
}

const LOGITS: [f64; 6] = [1.0, 3.0, -0.5, 3.0, 2.0, 0.0];

/// T = 1 is the softmax; T = 0.5 sharpens and T = 2 flattens (the main crate's values); logits
/// of 1000 do not overflow; T = 0 is an error.
pub fn temperature_distribution(f: impl Fn(&[f64], f64) -> Result<Dist>) -> Verdict {
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
    let big = [1000.0, 1001.0];
    let yours = attempt_ok(SAMPLING, "temperature_distribution", || f(&big, 1.0))?;
    if yours.iter().any(|(_, p)| !p.is_finite()) {
        return Err(SAMPLING.fail("logits (1000, 1001) gave NaN: subtract the maximum before exp"));
    }
    match attempt(SAMPLING, "temperature_distribution", || f(&LOGITS, 0.0))? {
        Err(_) => Ok(()),
        Ok(_) => Err(SAMPLING.fail("T = 0 should be an Err (greedy decoding is the argmax)")),
    }
}

/// k = 1 is the argmax with probability 1; k = 3 keeps tokens 1, 3, 4 and renormalises; k = 0 is
/// an error.
pub fn top_k_distribution(f: impl Fn(&[f64], usize, f64) -> Result<Dist>) -> Verdict {
    for (k, t) in [(1, 1.0), (3, 1.0), (3, 0.7), (6, 1.0)] {
        let yours = attempt_ok(SAMPLING, "top_k_distribution", || f(&LOGITS, k, t))?;
        let spec = Decoding::Sample { temperature: t, top_k: Some(k), top_p: None };
        let want = distribution(&LOGITS, &spec).map_err(|e| e.to_string())?;
        same(SAMPLING, &format!("k = {k}, T = {t}"), &yours, &want).map_err(|m| {
            super::note(m, "keep the k largest logits, then softmax over those alone")
        })?;
    }
    match attempt(SAMPLING, "top_k_distribution", || f(&LOGITS, 0, 1.0))? {
        Err(_) => Ok(()),
        Ok(_) => Err(SAMPLING.fail("k = 0 keeps nothing: return an Err")),
    }
}

/// The first step moves every entry by α (bias correction makes m̂/√v̂ = ±1); three steps with
/// decay match the main crate's θ, m and v.
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
    let config = AdamConfig { learning_rate: 0.01, ..AdamConfig::default() };
    let theta0 = random(130, 3, 2);
    let g = random(131, 3, 2);
    let (mut theta, mut m, mut v) = (theta0.clone(), DMatrix::zeros(3, 2), DMatrix::zeros(3, 2));
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
