//! Judges of chapter 5's exercises.

use super::{Section, Verdict, attempt, attempt_ok, close, compare, random};
use llm_workbook::Result;
use llm_workbook::ch05_positions as book;
use nalgebra::DMatrix;

const FORMULA: Section = Section { chapter: "ch05_positions", anchor: "the-formula" };
const WHY: Section = Section { chapter: "ch05_positions", anchor: "why-attention-needs-positions" };

/// ω₀ = 1 for every d; ω₁ = 0.01 for d = 4; the main crate's ωᵢ for d = 8, 16, 512.
pub fn frequency(f: impl Fn(usize, usize) -> f64) -> Verdict {
    super::not_applicable(&[
        super::Probe::Scale,
        super::Probe::Batch,
        super::Probe::Order,
        super::Probe::Errors,
    ]);
    for (i, d) in [(0, 4), (1, 4), (2, 8), (3, 8), (5, 16), (100, 512), (255, 512)] {
        let v = attempt(FORMULA, "frequency", || f(i, d))?;
        let want = book::frequency(i, d);
        if !close(v, want, 1e-12) {
            let hint = if close(v, 1.0 / 10_000f64.powf(i as f64 / d as f64), 1e-12) {
                " — that is 1/10000^(i/d): pair i's exponent is 2i/d"
            } else {
                ""
            };
            return Err(
                FORMULA.fail(format!("ω_{i} for d = {d}: yours {v}, expected {want}{hint}"))
            );
        }
    }
    Ok(())
}

/// The chapter's rows for d = 4: PE(1) = (0.84147, 0.54030, 0.01000, 0.99995),
/// PE(2) = (0.9093, −0.4161, 0.0200, 0.9998) at the printed decimals; PE(0) = (0, 1, 0, 1, …);
/// the main crate's PE for 50×16; an error for odd d.
pub fn sinusoidal(f: impl Fn(usize, usize) -> Result<DMatrix<f64>>) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order]);
    super::probe(super::Probe::Batch);
    let pe = attempt_ok(FORMULA, "sinusoidal", || f(3, 4))?;
    if pe.shape() != (3, 4) {
        return Err(
            FORMULA.fail(format!("sinusoidal(3, 4) should be 3×4; yours is {:?}", pe.shape()))
        );
    }
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
pub fn add_positions(f: impl Fn(&DMatrix<f64>, usize) -> Result<DMatrix<f64>>) -> Verdict {
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
