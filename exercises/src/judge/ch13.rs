//! Judges of chapter 13's exercises: the masked cross-entropy, LoRA's start and backward, DPO's
//! loss and gradient, group advantages, GRPO's loss and gradient and the k3 estimator, each
//! against the main crate on the shared sweep, then the page's worked numbers, the gradient
//! checks and the classic mistakes computed on a discriminating input.

use super::ch12::explain;
use super::sweep::{Gen, Input, Named, SCALES, Tol, explained, outcome, sweep};
use super::{
    Probe, Section, Verdict, attempt, attempt_ok, expect_err, gradient_check, not_applicable,
    probe, random, weighted_sum,
};
use crate::solutions::ch13_finetune as solution;
use llm_workbook::Result;
use llm_workbook::ch13_finetune::{self as book, DpoPair, GrpoSample, GrpoSpec, Lora, LoraGrads};
use nalgebra::DMatrix;

const SFT: Section = Section {
    chapter: "ch13_finetune",
    anchor: "1-supervised-fine-tuning-the-answers-tokens-only",
};
const LORA: Section =
    Section { chapter: "ch13_finetune", anchor: "2-lora-a-frozen-weight-and-a-low-rank-update" };
const DPO: Section = Section { chapter: "ch13_finetune", anchor: "3-preferences-dpo" };
const GRPO: Section = Section { chapter: "ch13_finetune", anchor: "4-verifiable-rewards-grpo" };

/// A main-crate result as a judge's own check needs it: its error is the judge's defect.
fn ours<T>(r: Result<T>) -> std::result::Result<T, String> {
    r.map_err(|e| format!("the judge's own computation failed: {e}"))
}

/// A T-entry mask drawn from `draw`: a prompt of ⌊T/3⌋ positions then the answer, or random
/// entries with at least one true (`kind` 0 or 1).
fn mask(draw: &mut Gen, t: usize, kind: usize) -> Vec<bool> {
    let mut m: Vec<bool> = if kind == 0 {
        (0..t).map(|i| i >= t / 3).collect()
    } else {
        (0..t).map(|_| draw.below(2) == 1).collect()
    };
    if t > 0 && !m.contains(&true) {
        m[t - 1] = true;
    }
    m
}

// ─────────────────────────────── the masked cross-entropy ───────────────────────────────

/// The masked cross-entropy and its gradient with the mean over `rows` (every row, or the
/// answer's rows) and the division by `count` (the rows averaged over, or 1): the slips.
fn sft_slip(
    logits: &DMatrix<f64>,
    targets: &[usize],
    rows: &[bool],
    per_row: bool,
) -> std::result::Result<(f64, DMatrix<f64>), String> {
    let (loss, d) = ours(solution::masked_cross_entropy(logits, targets, rows))?;
    if per_row {
        return Ok((loss, d));
    }
    // The sum: |M| times the mean.
    let m = rows.iter().filter(|&&r| r).count() as f64;
    Ok((loss * m, d * m))
}

/// The exercise's signature.
type SftFn<'a> = dyn Fn(&DMatrix<f64>, &[usize], &[bool]) -> Result<(f64, DMatrix<f64>)> + 'a;

/// The page's three rows (a prompt row predicted at e^{−10}, answer rows at ¾ and ½:
/// L = ½ ln(8/3) = 0.4904); the prompt not masked, the sum in place of the mean and the mean over
/// T named; the gradient check in the logits of 5 rows; rows thousands apart; the error for a
/// mask with no answer position.
fn masked_cross_entropy_checks(f: &SftFn<'_>) -> Verdict {
    not_applicable(&[Probe::Order]);
    const OP: &str = "masked_cross_entropy";
    let z = DMatrix::from_row_slice(3, 2, &[0.0, 10.0, 3f64.ln(), 0.0, 0.0, 0.0]);
    let (targets, mask) = ([0, 0, 1], [false, true, true]);
    let yours = attempt_ok(SFT, OP, || f(&z, &targets, &mask))?;
    let want = ours(solution::masked_cross_entropy(&z, &targets, &mask))?;
    if (want.0 - 0.5 * (8.0f64 / 3.0).ln()).abs() > 1e-12 {
        return Err("the judge's worked number differs from the main crate's".into());
    }
    let slips = |z: &DMatrix<f64>, t: &[usize], m: &[bool]| {
        let every: Vec<bool> = vec![true; m.len()];
        let over_t = ours(solution::masked_cross_entropy(z, t, m)).map(|(l, d)| {
            let share = m.iter().filter(|&&b| b).count() as f64 / m.len() as f64;
            (l * share, d * share)
        });
        Ok::<_, String>(vec![
            (
                "the prompt not masked: the mean runs over every row; only the answer's rows \
                 (m_t true) count, and the prompt's rows get no gradient",
                sft_slip(z, t, &every, true)?,
            ),
            (
                "the sum over the answer's rows: divide by |M|, the answer's length",
                sft_slip(z, t, m, false)?,
            ),
            ("divided by T, every row, instead of |M|, the answer's rows", over_t?),
        ])
    };
    let page = "the page's three rows (a prompt row, answer rows at 3/4 and 1/2)";
    explain(SFT, page, &yours, &want, &slips(&z, &targets, &mask)?)?;
    let z = random(1301, 5, 3) * 2.0;
    super::non_square(&[&z]);
    let (targets, mask) = ([2, 0, 1, 1, 0], [false, false, true, true, true]);
    let yours = super::attempt_ok_on(SFT, OP, &[("logits", &z)], || f(&z, &targets, &mask))?;
    let want = ours(solution::masked_cross_entropy(&z, &targets, &mask))?;
    explain(SFT, "5 rows, the first 2 the prompt's", &yours, &want, &slips(&z, &targets, &mask)?)?;
    gradient_check(
        SFT,
        &[("z", z.clone())],
        &[yours.1],
        |t| {
            book::masked_cross_entropy_forward(&t[0], &targets, &mask)
                .map(|(l, _)| l)
                .unwrap_or(f64::NAN)
        },
        &[],
    )?;
    let apart = super::rows_apart(&z);
    let yours = attempt_ok(SFT, OP, || f(&apart, &targets, &mask))?;
    let want = ours(solution::masked_cross_entropy(&apart, &targets, &mask))?;
    explain(SFT, "rows thousands apart (shift each row by its own maximum)", &yours, &want, &[])?;
    expect_err(SFT, OP, "a mask with no answer position", || f(&z, &targets, &[false; 5]))
}

/// One masked cross-entropy case: (logits, targets, mask).
type SftCase = (DMatrix<f64>, Vec<usize>, Vec<bool>);

/// **The masked cross-entropy**: T from 1 to 6 rows of V from 1 to 5 logits at every scale and
/// rows apart, a prompt then an answer or random masks; the errors the doc promises (no logits,
/// targets or mask of another length, a target = V, no answer position, a NaN logit); then
/// `masked_cross_entropy_checks`.
pub fn masked_cross_entropy(
    f: impl Fn(&DMatrix<f64>, &[usize], &[bool]) -> Result<(f64, DMatrix<f64>)>,
) -> Verdict {
    masked_cross_entropy_judged(&f)
}

/// [`masked_cross_entropy`]'s judge, compiled once here rather than in every test that calls it.
fn masked_cross_entropy_judged(
    f: &dyn Fn(&DMatrix<f64>, &[usize], &[bool]) -> Result<(f64, DMatrix<f64>)>,
) -> Verdict {
    let mut draw = Gen::new("masked_cross_entropy");
    let mut cases: Vec<SftCase> = Vec::new();
    for (t, v) in [(1, 1), (1, 3), (3, 2), (4, 5), (6, 3)] {
        for (k, &s) in SCALES.iter().enumerate() {
            let z = if k % 2 == 0 { draw.matrix(t, v, s) } else { draw.rows_apart(t, v, s) };
            let m = mask(&mut draw, t, k % 2);
            cases.push((z, draw.tokens(t, v), m));
        }
    }
    let (z, t) = (draw.matrix(3, 4, 1.0), draw.tokens(3, 4));
    cases.push((DMatrix::zeros(0, 4), Vec::new(), Vec::new()));
    cases.push((z.clone(), t[..2].to_vec(), vec![true; 3]));
    cases.push((z.clone(), t.clone(), vec![true; 2]));
    cases.push((z.clone(), vec![0, 4, 1], vec![true; 3]));
    cases.push((z.clone(), t.clone(), vec![false; 3]));
    let mut nan = z;
    nan[(1, 2)] = f64::NAN;
    cases.push((nan, t, vec![true; 3]));
    let found = sweep(
        SFT,
        "masked_cross_entropy",
        Tol::F64,
        &cases,
        |(z, t, m)| outcome(f(z, t, m)),
        |(z, t, m)| outcome(solution::masked_cross_entropy(z, t, m)),
    );
    explained(found, || masked_cross_entropy_checks(&f))
}

// ─────────────────────────────── LoRA ───────────────────────────────

/// A LoRA layer as named parts (W, A, B and α as a 1×1 matrix).
fn lora_named(l: Lora) -> Named {
    Named::of([("W", l.w), ("A", l.a), ("B", l.b), ("α", DMatrix::from_element(1, 1, l.alpha))])
}

/// The exercise's signature.
type LoraNewFn<'a> = dyn Fn(DMatrix<f64>, usize, f64, u64) -> Result<Lora> + 'a;

/// On a 4×6 W with r = 2, α = 16, seed 5: B initialised randomly (A's draw in B's place too),
/// A and B swapped (A zero, B random) and A drawn at variance 1 named; the start xW checked; the
/// error for r = 0.
fn lora_new_checks(f: &LoraNewFn<'_>) -> Verdict {
    not_applicable(&[Probe::Order, Probe::Scale]);
    const OP: &str = "lora_new";
    let w = random(1310, 4, 6);
    super::non_square(&[&w]);
    let yours = attempt_ok(LORA, OP, || f(w.clone(), 2, 16.0, 5))?;
    let want = ours(Lora::new(w.clone(), 2, 16.0, 5))?;
    let draw = |rows: usize, cols: usize, std: f64| {
        llm_workbook::rng::Rng::new(5).normal_matrix::<f64>(rows, cols, std)
    };
    let b_random = Lora { b: draw(6, 2, 0.5), ..want.clone() };
    let slips = [
        (
            "B initialised randomly: B starts at zero, so that the adapted layer starts equal to \
             the frozen W (and only B moves on the first step)",
            b_random,
        ),
        (
            "A and B swapped: A (r×d_in) is the random one, B (d_out×r) the zeros",
            Lora { a: DMatrix::zeros(2, 4), b: draw(6, 2, 0.5), ..want.clone() },
        ),
        (
            "A drawn at variance 1: its entries are N(0, 1/d_in), std 1/√d_in",
            Lora { a: draw(2, 4, 1.0), ..want.clone() },
        ),
    ];
    let named: Vec<(&str, Named)> = slips.into_iter().map(|(n, l)| (n, lora_named(l))).collect();
    let what = "W 4×6, r = 2, α = 16, seed 5";
    let verdict = explain(LORA, what, &lora_named(yours.clone()), &lora_named(want), &named);
    if let Err(m) = &verdict
        && !m.contains("matches a known slip")
        && yours.b.iter().any(|&v| v != 0.0)
    {
        return Err(super::known_slip(LORA, &format!("{} (on {what})", named[0].0)));
    }
    verdict?;
    let x = random(1311, 3, 4);
    let (y, _) = ours(book::lora_forward(&yours, &x))?;
    explain(LORA, "the layer at the start on 3 rows: y = xW", &y, &(&x * &w), &[])?;
    expect_err(LORA, OP, "r = 0", || f(w.clone(), 0, 16.0, 5))
}

/// One LoRA start case: (W, r, α, seed).
type LoraNewCase = (DMatrix<f64>, usize, f64, u64);

/// **A LoRA adapter at the start**: W from 1×1 to 5×5 at three scales, every rank from 0 to one
/// past min(d_in, d_out), α of 1 and 16, two seeds; the errors the doc promises (W empty or not
/// finite, r = 0 or too large, α = 0, −1, ∞, NaN), exactly; then `lora_new_checks`.
pub fn lora_new(f: impl Fn(DMatrix<f64>, usize, f64, u64) -> Result<Lora>) -> Verdict {
    lora_new_judged(&f)
}

/// [`lora_new`]'s judge, compiled once here rather than in every test that calls it.
fn lora_new_judged(f: &dyn Fn(DMatrix<f64>, usize, f64, u64) -> Result<Lora>) -> Verdict {
    let mut draw = Gen::new("lora_new");
    let mut cases: Vec<LoraNewCase> = Vec::new();
    for (k, (i, o)) in [(1, 1), (2, 3), (4, 2), (5, 5)].into_iter().enumerate() {
        let w = draw.matrix(i, o, [1.0, 1e-4, 30.0][k % 3]);
        for r in 0..=i.min(o) + 1 {
            for (alpha, seed) in [(1.0, 0), (16.0, 7)] {
                cases.push((w.clone(), r, alpha, seed));
            }
        }
    }
    let w = draw.matrix(3, 4, 1.0);
    for alpha in [0.0, -1.0, f64::INFINITY, f64::NAN] {
        cases.push((w.clone(), 2, alpha, 1));
    }
    let mut nan = w;
    nan[(0, 1)] = f64::NAN;
    cases.extend([(DMatrix::zeros(0, 3), 1, 1.0, 1), (nan, 1, 1.0, 1)]);
    let found = sweep(
        LORA,
        "lora_new",
        Tol::EXACT,
        &cases,
        |(w, r, a, s)| outcome(f(w.clone(), *r, *a, *s).map(lora_named)),
        |(w, r, a, s)| outcome(Lora::new(w.clone(), *r, *a, *s).map(lora_named)),
    );
    explained(found, || lora_new_checks(&f))
}

/// LoRA's gradients as named parts.
fn lora_grads(g: LoraGrads) -> Named {
    Named::of([("∂L/∂x", g.d_x), ("∂L/∂A", g.d_a), ("∂L/∂B", g.d_b)])
}

/// The exercise's signature.
type LoraFn<'a> = dyn Fn(&Lora, &DMatrix<f64>, &DMatrix<f64>) -> Result<LoraGrads> + 'a;

/// A 4×3 W with r = 2, α = 6 (s = 3) and a B that has moved: the scale α/r dropped, α in place
/// of α/r and ∂L/∂x without the adapter's path named; the gradient check of Σ G ⊙ y in x, A and
/// B; at the start (B = 0) ∂L/∂A = 0; the error for x of another width.
fn lora_backward_checks(f: &LoraFn<'_>) -> Verdict {
    not_applicable(&[Probe::Order, Probe::Scale]);
    const OP: &str = "lora_backward";
    let layer =
        Lora { w: random(1320, 4, 3), a: random(1321, 2, 4), b: random(1322, 3, 2), alpha: 6.0 };
    let (x, g) = (random(1323, 5, 4), random(1324, 5, 3));
    super::non_square(&[&x, &g, &layer.w]);
    let yours = super::attempt_ok_on(LORA, OP, &[("x", &x), ("d_y", &g)], || f(&layer, &x, &g))?;
    let want = ours(solution::lora_backward(&layer, &x, &g))?;
    let scaled = |alpha: f64| {
        let l = Lora { alpha, ..layer.clone() };
        ours(solution::lora_backward(&l, &x, &g)).map(lora_grads)
    };
    let no_path = {
        let mut w = ours(solution::lora_backward(&layer, &x, &g))?;
        w.d_x = &g * layer.w.transpose();
        lora_grads(w)
    };
    let slips = [
        ("the scale α/r dropped: the update is multiplied by s = α/r", scaled(2.0)?),
        ("α in place of α/r: divide α by the rank r", scaled(12.0)?),
        ("∂L/∂x without the adapter's path: add (∂L/∂u) A to ∂L/∂y Wᵀ", no_path),
    ];
    let what = "W 4×3, r = 2, α = 6, 5 rows";
    explain(LORA, what, &lora_grads(yours.clone()), &lora_grads(want), &slips)?;
    gradient_check(
        LORA,
        &[("x", x.clone()), ("A", layer.a.clone()), ("B", layer.b.clone())],
        &[yours.d_x, yours.d_a, yours.d_b],
        |t| {
            let l = Lora { a: t[1].clone(), b: t[2].clone(), ..layer.clone() };
            book::lora_forward(&l, &t[0]).map(|(y, _)| weighted_sum(&g, &y)).unwrap_or(f64::NAN)
        },
        &[],
    )?;
    let start = Lora { b: DMatrix::zeros(3, 2), ..layer.clone() };
    let yours = attempt_ok(LORA, OP, || f(&start, &x, &g))?;
    let want = ours(solution::lora_backward(&start, &x, &g))?;
    explain(LORA, "the start, B = 0 (∂L/∂A = 0)", &lora_grads(yours), &lora_grads(want), &[])?;
    expect_err(LORA, OP, "x with 3 columns for d_in = 4", || f(&layer, &g, &g))
}

/// One LoRA backward case: (W, A, B, α, x, ∂L/∂y).
type LoraCase = (DMatrix<f64>, DMatrix<f64>, DMatrix<f64>, f64, DMatrix<f64>, DMatrix<f64>);

/// **LoRA backward**: d_in, d_out, r and N from 1 to 6, x at three scales, B at zero (the start)
/// and moved, α of 1 and 8; the errors the doc promises (r = 0, shapes that disagree, α = 0, no
/// rows, x or ∂L/∂y of another shape); then `lora_backward_checks`.
pub fn lora_backward(
    f: impl Fn(&Lora, &DMatrix<f64>, &DMatrix<f64>) -> Result<LoraGrads>,
) -> Verdict {
    lora_backward_judged(&f)
}

/// [`lora_backward`]'s judge, compiled once here rather than in every test that calls it.
fn lora_backward_judged(
    f: &dyn Fn(&Lora, &DMatrix<f64>, &DMatrix<f64>) -> Result<LoraGrads>,
) -> Verdict {
    let mut draw = Gen::new("lora_backward");
    let mut cases: Vec<LoraCase> = Vec::new();
    for (i, o, r, n) in [(1, 1, 1, 1), (3, 2, 1, 2), (4, 5, 2, 3), (6, 3, 3, 1)] {
        for s in [1.0, 1e-4, 30.0] {
            for (alpha, moved) in [(1.0, false), (8.0, true)] {
                let b = if moved { draw.matrix(o, r, 1.0) } else { DMatrix::zeros(o, r) };
                cases.push((
                    draw.matrix(i, o, 1.0),
                    draw.matrix(r, i, 1.0),
                    b,
                    alpha,
                    draw.matrix(n, i, s),
                    draw.matrix(n, o, 1.0),
                ));
            }
        }
    }
    let (w, a, b, x, d) = (
        draw.matrix(3, 2, 1.0),
        draw.matrix(2, 3, 1.0),
        draw.matrix(2, 2, 1.0),
        draw.matrix(2, 3, 1.0),
        draw.matrix(2, 2, 1.0),
    );
    cases.push((w.clone(), DMatrix::zeros(0, 3), DMatrix::zeros(2, 0), 1.0, x.clone(), d.clone()));
    cases.push((w.clone(), a.clone(), draw.matrix(2, 1, 1.0), 1.0, x.clone(), d.clone()));
    cases.push((w.clone(), a.clone(), b.clone(), 0.0, x.clone(), d.clone()));
    cases.push((w.clone(), a.clone(), b.clone(), 1.0, DMatrix::zeros(0, 3), DMatrix::zeros(0, 2)));
    cases.push((w.clone(), a.clone(), b.clone(), 1.0, draw.matrix(2, 4, 1.0), d.clone()));
    cases.push((w, a, b, 1.0, x, draw.matrix(3, 2, 1.0)));
    fn run(g: &LoraFn<'_>, (w, a, b, alpha, x, d): &LoraCase) -> super::Outcome<Named> {
        let layer = Lora { w: w.clone(), a: a.clone(), b: b.clone(), alpha: *alpha };
        outcome(g(&layer, x, d).map(lora_grads))
    }
    let found = sweep(
        LORA,
        "lora_backward",
        Tol::F64,
        &cases,
        |c| run(&f, c),
        |c| run(&solution::lora_backward, c),
    );
    explained(found, || lora_backward_checks(&f))
}

// ─────────────────────────────── DPO ───────────────────────────────

impl Input for DpoPair {
    fn kind() -> String {
        "pair".into()
    }
    fn show(&self) -> String {
        format!(
            "(π: {}, {}; π_ref: {}, {})",
            self.chosen.show(),
            self.rejected.show(),
            self.ref_chosen.show(),
            self.ref_rejected.show()
        )
    }
    fn shrink(&self) -> Vec<Self> {
        let s = |v: f64| v.shrink().into_iter().next().unwrap_or(v);
        let simple = DpoPair {
            chosen: s(self.chosen),
            rejected: s(self.rejected),
            ref_chosen: s(self.ref_chosen),
            ref_rejected: s(self.ref_rejected),
        };
        if simple == *self { Vec::new() } else { vec![simple] }
    }
}

/// A pair at `scale`: four log-probabilities −|N(0, scale²)|.
fn pair(draw: &mut Gen, scale: f64) -> DpoPair {
    let mut lp = || -(scale * draw.uniform(0.0, 1.0) + scale * draw.uniform(0.0, 1.0) / 4.0);
    DpoPair { chosen: lp(), rejected: lp(), ref_chosen: lp(), ref_rejected: lp() }
}

/// The exercise's signature.
type DpoFn<'a> = dyn Fn(&[DpoPair], f64) -> Result<(f64, Vec<f64>, Vec<f64>)> + 'a;

/// The page's pairs: margin 0 (L = ln 2) and, at β = ½, the policy (−2, −3) against the
/// reference (−1, −4), m = −1, L = ln(1 + e) = 1.3133; π_ref left out, the 1/P dropped and the
/// rejected gradient's sign named; the gradient check over three pairs; a margin of −1000 (no
/// overflow); the error for β = 0.
fn dpo_checks(f: &DpoFn<'_>) -> Verdict {
    not_applicable(&[Probe::Order]);
    const OP: &str = "dpo_loss_and_gradient";
    let page = [
        DpoPair { chosen: -2.0, rejected: -3.0, ref_chosen: -2.0, ref_rejected: -3.0 },
        DpoPair { chosen: -2.0, rejected: -3.0, ref_chosen: -1.0, ref_rejected: -4.0 },
    ];
    for (pairs, what) in [
        (&page[..1], "a pair at margin 0 (L = ln 2)"),
        (&page[1..], "the page's pair at β = 0.5, m = −1"),
    ] {
        let yours = attempt_ok(DPO, OP, || f(pairs, 0.5))?;
        let want = ours(solution::dpo_loss_and_gradient(pairs, 0.5))?;
        let no_ref: Vec<DpoPair> =
            pairs.iter().map(|p| DpoPair { ref_chosen: 0.0, ref_rejected: 0.0, ..*p }).collect();
        let flipped = (want.0, want.1.clone(), want.1.clone());
        let slips = [
            (
                "π_ref's log-probabilities left out: m = β[(ln π(y_w) − ln π_ref(y_w)) − \
                 (ln π(y_l) − ln π_ref(y_l))]",
                ours(solution::dpo_loss_and_gradient(&no_ref, 0.5))?,
            ),
            (
                "the rejected answer's gradient with the chosen one's sign: ∂m/∂ln π(y_l) = −β",
                flipped,
            ),
        ];
        explain(DPO, what, &yours, &want, &slips)?;
    }
    probe(Probe::Batch);
    let mut draw = Gen::new("dpo_checks");
    let pairs: Vec<DpoPair> = (0..3).map(|_| pair(&mut draw, 2.0)).collect();
    let yours = attempt_ok(DPO, OP, || f(&pairs, 0.8))?;
    let want = ours(solution::dpo_loss_and_gradient(&pairs, 0.8))?;
    let summed = (
        want.0 * 3.0,
        want.1.iter().map(|d| d * 3.0).collect(),
        want.2.iter().map(|d| d * 3.0).collect(),
    );
    explain(
        DPO,
        "3 pairs at β = 0.8",
        &yours,
        &want,
        &[("the 1/P dropped: L is the mean over the pairs", summed)],
    )?;
    let as_rows = |v: &[f64]| DMatrix::from_row_slice(1, v.len(), v);
    let chosen: Vec<f64> = pairs.iter().map(|p| p.chosen).collect();
    let rejected: Vec<f64> = pairs.iter().map(|p| p.rejected).collect();
    gradient_check(
        DPO,
        &[("ln π(y_w)", as_rows(&chosen)), ("ln π(y_l)", as_rows(&rejected))],
        &[as_rows(&yours.1), as_rows(&yours.2)],
        |t| {
            let moved: Vec<DpoPair> = pairs
                .iter()
                .enumerate()
                .map(|(i, p)| DpoPair {
                    chosen: t[0][(0, i)].min(0.0),
                    rejected: t[1][(0, i)].min(0.0),
                    ..*p
                })
                .collect();
            book::dpo_forward(&moved, 0.8).map(|(l, _)| l).unwrap_or(f64::NAN)
        },
        &[],
    )?;
    probe(Probe::Scale);
    let far = [DpoPair { chosen: -1000.0, rejected: 0.0, ref_chosen: 0.0, ref_rejected: 0.0 }];
    let yours = attempt_ok(DPO, OP, || f(&far, 1.0))?;
    let want = ours(solution::dpo_loss_and_gradient(&far, 1.0))?;
    explain(DPO, "a margin of −1000 (L = 1000: ln(1 + e^{1000}) overflows)", &yours, &want, &[])?;
    expect_err(DPO, OP, "β = 0", || f(&pairs, 0.0))
}

/// **DPO's loss and gradient**: 1 to 5 pairs at scales from 10⁻⁴ to 10³ (margins past ±700),
/// pairs whose policy equals the reference, β from 0.1 to 2; the errors the doc promises (no
/// pair, β = 0, −1, NaN, a log-probability > 0 or NaN); then `dpo_checks`.
pub fn dpo_loss_and_gradient(
    f: impl Fn(&[DpoPair], f64) -> Result<(f64, Vec<f64>, Vec<f64>)>,
) -> Verdict {
    dpo_loss_and_gradient_judged(&f)
}

/// [`dpo_loss_and_gradient`]'s judge, compiled once here rather than in every test that calls it.
fn dpo_loss_and_gradient_judged(
    f: &dyn Fn(&[DpoPair], f64) -> Result<(f64, Vec<f64>, Vec<f64>)>,
) -> Verdict {
    let mut draw = Gen::new("dpo_loss_and_gradient");
    let mut cases: Vec<(Vec<DpoPair>, f64)> = Vec::new();
    for p in [1, 2, 5] {
        for s in [1.0, 1e-4, 30.0, 1e3] {
            for beta in [0.1, 0.5, 2.0] {
                cases.push(((0..p).map(|_| pair(&mut draw, s)).collect(), beta));
            }
        }
    }
    let same = DpoPair { chosen: -1.5, rejected: -0.5, ref_chosen: -1.5, ref_rejected: -0.5 };
    cases.push((vec![same, pair(&mut draw, 1.0)], 0.3));
    let ok = vec![pair(&mut draw, 1.0)];
    cases.extend([
        (Vec::new(), 0.5),
        (ok.clone(), 0.0),
        (ok.clone(), -1.0),
        (ok.clone(), f64::NAN),
    ]);
    cases.push((vec![DpoPair { chosen: 0.5, ..ok[0] }], 0.5));
    cases.push((vec![DpoPair { ref_rejected: f64::NAN, ..ok[0] }], 0.5));
    let found = sweep(
        DPO,
        "dpo_loss_and_gradient",
        Tol::F64,
        &cases,
        |(p, b)| outcome(f(p, *b)),
        |(p, b)| outcome(solution::dpo_loss_and_gradient(p, *b)),
    );
    explained(found, || dpo_checks(&f))
}

// ─────────────────────────────── group advantages ───────────────────────────────

/// The advantages without the division (`divide` false) or with the sample's 1/(G − 1)
/// standard deviation: the slips.
fn advantage_slip(r: &[f64], eps: f64, divide: bool) -> Vec<f64> {
    let g = r.len() as f64;
    let mean = r.iter().sum::<f64>() / g;
    let std = (r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (g - 1.0)).sqrt();
    r.iter().map(|v| if divide { (v - mean) / (std + eps) } else { v - mean }).collect()
}

/// The exercise's signature.
type AdvFn<'a> = dyn Fn(&[f64], f64) -> Result<Vec<f64>> + 'a;

/// The group (1, 0, 0, 0) with ε = 0: A = (√3, −1/√3, −1/√3, −1/√3); the advantages not
/// normalised and the sample's 1/(G − 1) named; an all-equal group (zeros, not 0/0); rewards
/// near 10⁸; the error for one reward.
fn group_advantages_checks(f: &AdvFn<'_>) -> Verdict {
    not_applicable(&[Probe::Order, Probe::Batch]);
    const OP: &str = "group_advantages";
    let r = [1.0, 0.0, 0.0, 0.0];
    let yours = attempt_ok(GRPO, OP, || f(&r, 0.0))?;
    let third = 1.0 / 3f64.sqrt();
    let want = vec![3f64.sqrt(), -third, -third, -third];
    let slips = [
        (
            "the advantages not normalised: divide r_i − mean(r) by the group's std(r) + ε",
            advantage_slip(&r, 0.0, false),
        ),
        (
            "the sample's std, 1/(G − 1): the group's std divides by G",
            advantage_slip(&r, 0.0, true),
        ),
    ];
    explain(GRPO, "the group (1, 0, 0, 0) with ε = 0", &yours, &want, &slips)?;
    let equal = [0.5; 5];
    let yours = attempt_ok(GRPO, OP, || f(&equal, 0.0))?;
    explain(
        GRPO,
        "a group of equal rewards with ε = 0 (no signal: A = 0, not 0/0)",
        &yours,
        &vec![0.0; 5],
        &[],
    )?;
    probe(Probe::Scale);
    let far = [1e8 + 1.0, 1e8, 1e8 + 2.0, 1e8];
    let yours = attempt_ok(GRPO, OP, || f(&far, 1e-4))?;
    let want = ours(book::group_advantages(&far, 1e-4))?;
    explain(
        GRPO,
        "rewards near 10⁸ (take the mean first, then the squares of r − mean)",
        &yours,
        &want,
        &[],
    )?;
    expect_err(GRPO, OP, "a group of one reward", || f(&[1.0], 1e-4))
}

/// **Group advantages**: groups of 2 to 16 rewards from the shared generator (verdicts in
/// {0, 1}, all equal, graded, near 10⁸) at three scales, ε of 0, 10⁻⁴ and 1; the errors the doc
/// promises (G of 0 and 1, a NaN or ∞ reward, ε of −10⁻³, NaN, ∞); to 10⁻⁶, since rewards near
/// 10⁸ keep r − mean only to the rounding of the mean; then `group_advantages_checks`.
pub fn group_advantages(f: impl Fn(&[f64], f64) -> Result<Vec<f64>>) -> Verdict {
    group_advantages_judged(&f)
}

/// [`group_advantages`]'s judge, compiled once here rather than in every test that calls it.
fn group_advantages_judged(f: &dyn Fn(&[f64], f64) -> Result<Vec<f64>>) -> Verdict {
    let mut draw = Gen::new("group_advantages");
    let mut cases: Vec<(Vec<f64>, f64)> = Vec::new();
    for n in [2, 3, 5, 8, 16] {
        for s in [1.0, 1e-3, 1e3] {
            for eps in [0.0, 1e-4, 1.0] {
                cases.push((draw.rewards(n, s), eps));
            }
        }
    }
    let r = draw.rewards(4, 1.0);
    cases.extend([
        (Vec::new(), 1e-4),
        (vec![1.0], 1e-4),
        (vec![1.0, f64::NAN], 1e-4),
        (vec![f64::INFINITY, 0.0], 1e-4),
    ]);
    cases.extend([(r.clone(), -1e-3), (r.clone(), f64::NAN), (r, f64::INFINITY)]);
    let found = sweep(
        GRPO,
        "group_advantages",
        Tol::CHAIN,
        &cases,
        |(r, e)| outcome(f(r, *e)),
        |(r, e)| outcome(book::group_advantages(r, *e)),
    );
    explained(found, || group_advantages_checks(&f))
}

// ─────────────────────────────── GRPO ───────────────────────────────

/// One GRPO case: (logits, tokens, mask, ℓ_old, ℓ_ref, A, ε_c, β).
type GrpoCase = (DMatrix<f64>, Vec<usize>, Vec<bool>, Vec<f64>, Vec<f64>, f64, f64, f64);

/// The exercise's call on a case.
fn grpo_call(
    f: &GrpoFn<'_>,
    (z, t, m, old, reference, a, clip, beta): &GrpoCase,
) -> Result<(f64, DMatrix<f64>)> {
    let sample = GrpoSample {
        logits: z,
        targets: t,
        mask: m,
        old_log_probs: old,
        ref_log_probs: reference,
        advantage: *a,
    };
    f(GrpoSpec { clip_eps: *clip, kl_beta: *beta }, sample)
}

/// Log-probabilities near the policy's own: ℓ_t + δ_t with δ ~ N(0, spread²), at most 0 (the
/// policy's ℓ_t from the main crate; any values ≤ 0 where its inputs are invalid).
fn near(draw: &mut Gen, z: &DMatrix<f64>, t: &[usize], spread: f64) -> Vec<f64> {
    let ell: Vec<f64> = match llm_workbook::ch02_softmax::log_softmax_rows(z) {
        Ok(l) if t.len() == z.nrows() && t.iter().all(|&y| y < z.ncols()) => {
            t.iter().enumerate().map(|(r, &y)| l[(r, y)]).collect()
        }
        _ => vec![-1.0; t.len()],
    };
    ell.iter().map(|l| (l + spread * draw.uniform(-1.0, 1.0)).min(0.0)).collect()
}

/// The GRPO cases: T from 1 to 6 rows of V from 2 to 5 logits at three scales, answers sampled
/// at ρ = 1 and away from it (within and beyond the clip), advantages of both signs and 0, β of
/// 0, 0.04 and 1; the errors the doc promises.
fn grpo_cases(draw: &mut Gen) -> Vec<GrpoCase> {
    let mut cases: Vec<GrpoCase> = Vec::new();
    let mut k = 0;
    for (t, v) in [(1, 2), (3, 4), (4, 3), (6, 5)] {
        for s in [1.0, 1e-3, 30.0] {
            for spread in [0.0, 0.15, 1.0] {
                let z = draw.matrix(t, v, s);
                let tokens = draw.tokens(t, v);
                let m = mask(draw, t, k % 2);
                let old = near(draw, &z, &tokens, spread);
                let reference = near(draw, &z, &tokens, 0.5);
                let a = [1.0, -0.7, 0.0, 2.5][k % 4];
                let (clip, beta) = ([0.2, 0.1][k % 2], [0.0, 0.04, 1.0][k % 3]);
                cases.push((z, tokens, m, old, reference, a, clip, beta));
                k += 1;
            }
        }
    }
    let base = cases[10].clone();
    let with = |edit: &dyn Fn(&mut GrpoCase)| {
        let mut c = base.clone();
        edit(&mut c);
        c
    };
    cases.extend([
        with(&|c: &mut GrpoCase| c.6 = 0.0),
        with(&|c: &mut GrpoCase| c.6 = 1.0),
        with(&|c: &mut GrpoCase| c.7 = -1.0),
        with(&|c: &mut GrpoCase| c.5 = f64::NAN),
        with(&|c: &mut GrpoCase| c.3[0] = 0.5),
        with(&|c: &mut GrpoCase| c.4.truncate(1)),
        with(&|c: &mut GrpoCase| c.2 = vec![false; c.2.len()]),
        with(&|c: &mut GrpoCase| c.1[0] = c.0.ncols()),
    ]);
    cases
}

/// The exercise's signature.
type GrpoFn<'a> = dyn Fn(GrpoSpec, GrpoSample) -> Result<(f64, DMatrix<f64>)> + 'a;

/// One answer token at p = ½ sampled by the policy itself (ρ = 1, π_ref = π, A = 1: L = −1,
/// ∂L/∂z = (−½, ½)); then, on 5 rows with ratios beyond the clip, the ratio unclipped, the KL's
/// sign and the advantage's sign named; the gradient check in the logits; rows thousands apart;
/// the error for ε_c = 1.
fn grpo_checks(f: &GrpoFn<'_>) -> Verdict {
    not_applicable(&[Probe::Order]);
    const OP: &str = "grpo_loss_and_gradient";
    let half = 0.5f64.ln();
    let one: GrpoCase =
        (DMatrix::zeros(1, 2), vec![0], vec![true], vec![half], vec![half], 1.0, 0.2, 0.04);
    let yours = attempt_ok(GRPO, OP, || grpo_call(f, &one))?;
    let want = (-1.0, DMatrix::from_row_slice(1, 2, &[-0.5, 0.5]));
    explain(GRPO, "one answer token at p = 1/2 with ρ = 1, π_ref = π, A = 1", &yours, &want, &[])?;
    let z = random(1330, 5, 4);
    super::non_square(&[&z]);
    let tokens = vec![1, 3, 0, 2, 2];
    let mask = vec![false, true, true, true, true];
    let ell: Vec<f64> = {
        let l = ours(llm_workbook::ch02_softmax::log_softmax_rows(&z))?;
        tokens.iter().enumerate().map(|(r, &y)| l[(r, y)]).collect()
    };
    // Ratios 1.5, 0.6, 1.1 and 1.35: two beyond the clip of 0.2 in the advantage's direction.
    let old: Vec<f64> = ell
        .iter()
        .zip([1.0, 1.5, 0.6, 1.1, 1.35])
        .map(|(l, r)| (l - f64::ln(r)).min(0.0))
        .collect();
    let reference: Vec<f64> = ell.iter().map(|l| (l - 0.3).min(0.0)).collect();
    let case: GrpoCase =
        (z.clone(), tokens.clone(), mask.clone(), old.clone(), reference.clone(), 1.3, 0.2, 0.5);
    let yours = super::attempt_ok_on(GRPO, OP, &[("logits", &z)], || grpo_call(f, &case))?;
    let want = ours(grpo_call(&solution::grpo_loss_and_gradient, &case))?;
    let variant = |edit: &dyn Fn(&mut GrpoCase)| {
        let mut c = case.clone();
        edit(&mut c);
        ours(grpo_call(&solution::grpo_loss_and_gradient, &c))
    };
    let unclipped = variant(&|c: &mut GrpoCase| c.6 = 0.99)?;
    // L is linear in β: the penalty with its sign flipped is 2L(β = 0) − L(β).
    let no_kl = variant(&|c: &mut GrpoCase| c.7 = 0.0)?;
    let kl_sign = (2.0 * no_kl.0 - want.0, no_kl.1.clone() * 2.0 - &want.1);
    let slips = [
        (
            "the ratio unclipped: s = min(ρA, clip(ρ, 1 − ε_c, 1 + ε_c)A), whose gradient is 0 \
             where the clipped term is the smaller",
            unclipped,
        ),
        ("the KL's sign: the penalty is subtracted from the surrogate, L = −mean(s − βk)", kl_sign),
        (
            "the advantage's sign: L is minus the objective",
            variant(&|c: &mut GrpoCase| c.5 = -1.3)?,
        ),
    ];
    explain(
        GRPO,
        "5 rows, ratios of 0.6 to 1.5, A = 1.3, ε_c = 0.2, β = 0.5",
        &yours,
        &want,
        &slips,
    )?;
    gradient_check(
        GRPO,
        &[("z", z.clone())],
        &[yours.1],
        |t| {
            let sample = GrpoSample {
                logits: &t[0],
                targets: &tokens,
                mask: &mask,
                old_log_probs: &old,
                ref_log_probs: &reference,
                advantage: 1.3,
            };
            book::grpo_forward(GrpoSpec { clip_eps: 0.2, kl_beta: 0.5 }, sample)
                .map(|(l, _)| l)
                .unwrap_or(f64::NAN)
        },
        &[],
    )?;
    let apart = super::rows_apart(&z);
    let far: GrpoCase = (apart, tokens, mask, vec![-1.0; 5], vec![-2.0; 5], 1.3, 0.2, 0.5);
    let yours = attempt_ok(GRPO, OP, || grpo_call(f, &far))?;
    let want = ours(grpo_call(&solution::grpo_loss_and_gradient, &far))?;
    explain(GRPO, "rows thousands apart (shift each row by its own maximum)", &yours, &want, &[])?;
    let bad = (case.0, case.1, case.2, case.3, case.4, 1.3, 1.0, 0.5);
    expect_err(GRPO, OP, "ε_c = 1", || grpo_call(f, &bad))
}

/// **GRPO's loss and gradient**: `grpo_cases` against the main crate's forward and backward, to
/// 10⁻⁶; then `grpo_checks`.
pub fn grpo_loss_and_gradient(
    f: impl Fn(GrpoSpec, GrpoSample) -> Result<(f64, DMatrix<f64>)>,
) -> Verdict {
    grpo_loss_and_gradient_judged(&f)
}

/// [`grpo_loss_and_gradient`]'s judge, compiled once here rather than in every test that calls it.
fn grpo_loss_and_gradient_judged(
    f: &dyn Fn(GrpoSpec, GrpoSample) -> Result<(f64, DMatrix<f64>)>,
) -> Verdict {
    let cases = grpo_cases(&mut Gen::new("grpo_loss_and_gradient"));
    let found = sweep(
        GRPO,
        "grpo_loss_and_gradient",
        Tol::CHAIN,
        &cases,
        |c| outcome(grpo_call(&f, c)),
        |c| outcome(grpo_call(&solution::grpo_loss_and_gradient, c)),
    );
    explained(found, || grpo_checks(&f))
}

// ─────────────────────────────── k3 ───────────────────────────────

/// Units of rounding allowed per term of k3 (q, ln q and 1 each rounded once, then two
/// subtractions).
const K3_ULPS: f64 = 4.0;

/// Whether `y` is k3(ln π_ref, ln π) to the rounding of its three terms:
/// |y − k3| ≤ 4·2⁻⁵²·(q + |ln q| + 1).
fn k3_close(y: f64, log_ref: f64, log_pi: f64) -> bool {
    let log_q = log_ref - log_pi;
    let want = book::k3(log_ref, log_pi);
    let size = log_q.exp() + log_q.abs() + 1.0;
    y == want || (y - want).abs() <= K3_ULPS * f64::EPSILON * size
}

/// The exercise's signature.
type K3Fn<'a> = dyn Fn(f64, f64) -> f64 + 'a;

/// k3(ln ½, ln ½) = 0 and k3(0, ln ½) = 1 − ln 2 (q = 2); the KL's sign (q = π/π_ref, giving
/// ½ + ln 2 − 1) and k1 (ln q, ln π_ref − ln π, or its negative) named; never negative over a
/// grid; a log ratio of 30 compared relatively.
fn k3_checks(f: &K3Fn<'_>) -> Verdict {
    not_applicable(&[Probe::Batch, Probe::Order, Probe::Errors]);
    const OP: &str = "k3";
    let half = 0.5f64.ln();
    let yours = attempt(GRPO, OP, || f(half, half))?;
    explain(GRPO, "k3(ln 1/2, ln 1/2), π = π_ref", &yours, &0.0, &[])?;
    let yours = attempt(GRPO, OP, || f(0.0, half))?;
    let want = 1.0 - 2f64.ln();
    let slips = [
        (
            "the KL's sign: q = π_ref/π, so ln q = ln π_ref − ln π, not ln π − ln π_ref",
            0.5 + 2f64.ln() - 1.0,
        ),
        ("k1 in place of k3: k3 = q − ln q − 1, never negative", 2f64.ln()),
        ("k1 in place of k3: k3 = q − ln q − 1, never negative", -(2f64.ln())),
    ];
    explain(GRPO, "k3(0, ln 1/2): π_ref = 1, π = 1/2, q = 2", &yours, &want, &slips)?;
    for i in 0..40 {
        let (a, b) = (-(i as f64) * 0.37, -((i * 7) % 40) as f64 * 0.29);
        let y = attempt(GRPO, OP, || f(a, b))?;
        if y < 0.0 && !k3_close(y, a, b) {
            return Err(GRPO.fail(format!(
                "k3({a}, {b}) is {y} in yours: k3 = q − ln q − 1 is never negative (ln q ≤ q − 1)"
            )));
        }
    }
    probe(Probe::Scale);
    let yours = attempt(GRPO, OP, || f(0.0, -30.0))?;
    explain(GRPO, "ln q = 30 (q = e^30)", &yours, &book::k3(0.0, -30.0), &[])
}

/// **k3**: ln π_ref and ln π equal, and apart by 10⁻⁹ to 700 either way at several levels, to
/// the rounding of the three terms (`k3_close`: an answer that close is taken as the main
/// crate's); then `k3_checks`.
pub fn k3(f: impl Fn(f64, f64) -> f64) -> Verdict {
    k3_judged(&f)
}

/// [`k3`]'s judge, compiled once here rather than in every test that calls it.
fn k3_judged(f: &dyn Fn(f64, f64) -> f64) -> Verdict {
    let mut draw = Gen::new("k3");
    let mut cases: Vec<(f64, f64)> = Vec::new();
    for level in [0.0, -0.5, -3.0, -40.0] {
        cases.push((level, level));
        for gap in [1e-9, 1e-4, 0.1, 1.0, 5.0, 30.0, 700.0] {
            let jitter = draw.uniform(0.5, 1.5);
            cases.push((level, level - gap * jitter));
            cases.push((level - gap * jitter, level));
        }
    }
    let yours = |&(r, p): &(f64, f64)| {
        let y = f(r, p);
        Ok(if k3_close(y, r, p) { book::k3(r, p) } else { y })
    };
    let found = sweep(GRPO, "k3", Tol::F64, &cases, yours, |&(r, p)| Ok(book::k3(r, p)));
    explained(found, || k3_checks(&f))
}
