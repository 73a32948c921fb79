//! Judges of chapter 5's exercises.

use super::{Section, Verdict, attempt, attempt_ok, compare, random};
use llm_workbook::Result;
use llm_workbook::ch05_positions as book;
use nalgebra::DMatrix;

const FORMULA: Section = Section { chapter: "ch05_positions", anchor: "the-formula" };
const WHY: Section = Section { chapter: "ch05_positions", anchor: "why-attention-needs-positions" };

/// The base of the encoding's geometric ladder of frequencies, ωᵢ = 1/BASE^(2i/d).
const BASE: f64 = 10_000.0;

/// The slips of ωᵢ = 1/10000^(2i/d), each as a function of (i, d), named as the message names
/// them.
type FrequencySlip = (&'static str, fn(usize, usize) -> f64);

/// The classic slips of ωᵢ, tried in this order on every (i, d) the judge asks for.
const FREQUENCY_SLIPS: [FrequencySlip; 5] = [
    (
        "2i/d computed in integers, so it rounds down to 0 and every ω is 1: convert i and d to \
      f64 before dividing",
        |i, d| BASE.powf(-((2 * i / d) as f64)),
    ),
    ("the exponent i/d, the column index's reading: pair i's exponent is 2i/d", |i, d| {
        BASE.powf(-(i as f64) / d as f64)
    }),
    (
        "10000^(2i/d) without the reciprocal: ω falls from 1 as i grows, it is 1/10000^(2i/d)",
        |i, d| BASE.powf(2.0 * i as f64 / d as f64),
    ),
    ("the exponent 2i/d applied to e, not to 10000", |i, d| (-2.0 * i as f64 / d as f64).exp()),
    ("a period, not an angular frequency: 2π/10000^(2i/d) has a 2π too many", |i, d| {
        std::f64::consts::TAU * BASE.powf(-2.0 * i as f64 / d as f64)
    }),
];

/// ω₀ = 1 for every d; ω₁ = 0.01 for d = 4; the main crate's ωᵢ for d = 8, 16, 512 (relatively:
/// ω₂₅₅ for d = 512 is about 1.04·10⁻⁴); the slips of `FREQUENCY_SLIPS` named.
fn frequency_checks(f: impl Fn(usize, usize) -> f64) -> Verdict {
    super::not_applicable(&[
        super::Probe::Scale,
        super::Probe::Batch,
        super::Probe::Order,
        super::Probe::Errors,
    ]);
    super::probe(super::Probe::Named);
    let asked = [(0, 4), (1, 4), (2, 8), (3, 8), (5, 16), (100, 512), (255, 512)];
    let mut yours = Vec::with_capacity(asked.len());
    for (i, d) in asked {
        yours.push(attempt(FORMULA, "frequency", || f(i, d))?);
    }
    let agrees = |slip: fn(usize, usize) -> f64| {
        asked.iter().zip(&yours).all(|(&(i, d), &v)| close_relative(v, slip(i, d)))
    };
    for ((i, d), v) in asked.into_iter().zip(yours.iter().copied()) {
        let want = book::frequency(i, d);
        if !close_relative(v, want) {
            let wrong = format!("ω_{i} for d = {d}: {}", super::yours_expected(v, want));
            return Err(match FREQUENCY_SLIPS.iter().find(|(_, slip)| agrees(*slip)) {
                Some((slip, _)) => super::known_slip(FORMULA, &format!("{wrong}; {slip}")),
                None => FORMULA.fail(wrong),
            });
        }
    }
    Ok(())
}

/// |a − b| ≤ 10⁻¹² |b|: ω is compared relatively (the last pairs' ω are near 10⁻⁴).
fn close_relative(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs()
}

/// The chapter's rows for d = 4: PE(1) = (0.84147, 0.54030, 0.01000, 0.99995),
/// PE(2) = (0.9093, −0.4161, 0.0200, 0.9998) at the printed decimals; PE(0) = (0, 1, 0, 1, …);
/// the main crate's PE for 50×16; an error for odd d.
fn sinusoidal_checks(f: impl Fn(usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order]);
    super::probe(super::Probe::Batch);
    let pe = attempt_ok(FORMULA, "sinusoidal", || f(3, 4))?;
    super::expect_shape(FORMULA, "sinusoidal(3, 4)", &pe, (3, 4), "positions × columns")?;
    let row = |r: usize, d: usize| -> Vec<String> {
        (0..4).map(|c| format!("{:.d$}", pe[(r, c)])).collect()
    };
    for (r, d, want) in [
        (1, 5, ["0.84147", "0.54030", "0.01000", "0.99995"]),
        (2, 4, ["0.9093", "-0.4161", "0.0200", "0.9998"]),
    ] {
        if row(r, d) != want {
            let hint = if row(r, d)[0] == want[1] {
                " — sin and cos are swapped: column 2i holds sin, 2i + 1 cos"
            } else {
                ""
            };
            return Err(FORMULA.fail(format!(
                "PE({r}) for d = 4 should print as {want:?}; yours is {:?}{hint}",
                row(r, d)
            )));
        }
    }
    let big = attempt_ok(FORMULA, "sinusoidal", || f(50, 16))?;
    let want = book::sinusoidal::<f64>(50, 16).map_err(|e| e.to_string())?;
    compare(FORMULA, "PE", &big, &want, 1e-12, &[])?;
    super::probe(super::Probe::Errors);
    match attempt(FORMULA, "sinusoidal", || f(4, 5))? {
        Err(_) => Ok(()),
        Ok(_) => {
            Err(FORMULA.fail("d = 5 is odd: the columns come in (sin, cos) pairs; return an Err"))
        }
    }
}

/// Two sequences of length 3 stacked: row r gets PE(r mod 3); an error for 5 rows.
fn add_positions_checks(f: impl Fn(&DMatrix<f64>, usize) -> Result<DMatrix<f64>>) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order]);
    super::batch_probe(super::BatchInput { sequences: 2, t_q: 3, t_k: 3, width: 4 });
    let x = random(50, 6, 4);
    let yours = super::attempt_ok_on(WHY, "add_positions", &[("x", &x)], || f(&x, 3))?;
    let want = book::add_positions(&x, 3).map_err(|e| e.to_string())?;
    if yours.shape() == want.shape() {
        let pe6 = book::sinusoidal::<f64>(6, 4).map_err(|e| e.to_string())?;
        if (&yours - (&x + pe6)).abs().max() < 1e-12 {
            return Err(WHY.fail(
                "row 3 got PE(3): each of the B sequences starts again at position 0 (r mod T)",
            ));
        }
    }
    let same = book::add_positions(&super::first_for_all(&x, 3), 3).map_err(|e| e.to_string())?;
    let rows = super::BatchRows { t: 3, want: &want, first_for_all: &same, untouched: Some(&x) };
    if let Some(slip) = super::batch_slip(&yours, rows, 1e-12) {
        return Err(super::known_slip(WHY, slip));
    }
    compare(WHY, "X + PE", &yours, &want, 1e-12, &[])?;
    super::probe(super::Probe::Errors);
    match attempt(WHY, "add_positions", || f(&random(51, 5, 4), 3))? {
        Err(_) => Ok(()),
        Ok(_) => {
            Err(WHY.fail("5 rows are not a whole number of sequences of length 3: return an Err"))
        }
    }
}

// ───────────── the judges: the sweep against the main crate, then the checks above ─────────────

use super::sweep::{Gen, SCALES, Tol, explained, outcome, sweep};

/// **ωᵢ**: every pair i of widths d = 2 … 512; then `frequency_checks`.
pub fn frequency(f: impl Fn(usize, usize) -> f64) -> Verdict {
    frequency_judged(&f)
}

/// [`frequency`]'s judge, compiled once here rather than in every test that calls it.
fn frequency_judged(f: &dyn Fn(usize, usize) -> f64) -> Verdict {
    let mut cases = Vec::new();
    for d in [2, 4, 6, 8, 10, 16, 64, 512] {
        cases.extend((0..d / 2).map(|i| (i, d)));
    }
    let found = sweep(
        FORMULA,
        "frequency",
        Tol::F64,
        &cases,
        |&(i, d)| Ok(f(i, d)),
        |&(i, d)| Ok(book::frequency(i, d)),
    );
    explained(found, || frequency_checks(f))
}

/// **The n×d encoding**: n from 1 to 50, d from 0 to 16 (0 and the odd ones are the errors the
/// doc promises); then `sinusoidal_checks`.
pub fn sinusoidal(f: impl Fn(usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
    sinusoidal_judged(&f)
}

/// [`sinusoidal`]'s judge, compiled once here rather than in every test that calls it.
fn sinusoidal_judged(f: &dyn Fn(usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
    let mut cases = Vec::new();
    for n in [1, 2, 5, 50] {
        for d in [0, 1, 2, 3, 4, 6, 7, 16] {
            cases.push((n, d));
        }
    }
    let found = sweep(
        FORMULA,
        "sinusoidal",
        Tol::F64,
        &cases,
        |&(n, d)| outcome(f(n, d)),
        |&(n, d)| outcome(book::sinusoidal::<f64>(n, d)),
    );
    explained(found, || sinusoidal_checks(f))
}

/// **X + PE**: B from 1 to 3 sequences of T from 1 to 4 rows, d = 2, 4, 6, values at every scale,
/// and rows that are not a multiple of T (the promised error); then `add_positions_checks`.
pub fn add_positions(f: impl Fn(&DMatrix<f64>, usize) -> Result<DMatrix<f64>>) -> Verdict {
    add_positions_judged(&f)
}

/// [`add_positions`]'s judge, compiled once here rather than in every test that calls it.
fn add_positions_judged(f: &dyn Fn(&DMatrix<f64>, usize) -> Result<DMatrix<f64>>) -> Verdict {
    let mut draw = Gen::new("add_positions");
    let mut cases = Vec::new();
    for (b, t, d) in [(1, 1, 2), (2, 3, 4), (3, 2, 6), (1, 4, 2), (2, 4, 4)] {
        for &s in &SCALES {
            cases.push((draw.matrix(b * t, d, s), t));
        }
        cases.push((draw.matrix(b * t + 1, d, 1.0), t));
    }
    let found = sweep(
        WHY,
        "add_positions",
        Tol::F64,
        &cases,
        |(x, t)| outcome(f(x, *t)),
        |(x, t)| outcome(book::add_positions(x, *t)),
    );
    explained(found, || add_positions_checks(f))
}
