//! Judges of chapter 11's exercises: the conversions bit for bit against the main crate's on
//! every case that decides a rounding (ties of both parities, overflow, subnormals, NaN, signed
//! zero), the step against ε^{1/2} and ε^{1/3}, the compensated sum bit for bit.

use super::{Probe, Section, Verdict, attempt, not_applicable, probe};
use crate::solutions::ch11_precision as solution;
use llm_workbook::ch11_precision::{self as ch11, Difference, F32, F64};
use llm_workbook::rng::Rng;

const FORMATS: Section = Section { chapter: "ch11_precision", anchor: "1-four-formats" };
const ROUNDING: Section =
    Section { chapter: "ch11_precision", anchor: "2-rounding-to-nearest-ties-to-even" };
const SUMS: Section =
    Section { chapter: "ch11_precision", anchor: "5-summation-error-grows-with-n" };
const STEPS: Section =
    Section { chapter: "ch11_precision", anchor: "6-the-step-of-a-gradient-check" };
const QUANT: Section =
    Section { chapter: "ch11_precision", anchor: "8-quantized-weights-int8-and-4-bit-blocks" };

/// The f32 patterns a bf16 rounding must get right, with what each one tests.
fn bf16_cases() -> Vec<(u32, &'static str)> {
    let mut cases = vec![
        (0x3f80_8000, "1 + 2⁻⁸, a tie: 1 is even"),
        (0x3f81_8000, "1 + 3·2⁻⁸, a tie: 1 + 2⁻⁶ is even"),
        (0x3f81_7fff, "just under a tie"),
        (0x3eaa_aaab, "1/3"),
        (0xbeaa_aaab, "−1/3"),
        (0x0000_0000, "0"),
        (0x8000_0000, "−0"),
        (0x7f7f_ffff, "the largest f32, past the largest bf16"),
        (0xff7f_ffff, "minus the largest f32"),
        (0x7f7f_8000, "a tie above the largest bf16"),
        (0x7f80_0000, "+∞"),
        (0xff80_0000, "−∞"),
        (0x0000_8000, "2⁻¹³⁴, a subnormal tie: 0 is even"),
        (0x0001_8000, "3·2⁻¹³⁴, a subnormal tie"),
        (0x8001_7fff, "a negative subnormal"),
        (0x7f80_0001, "a signalling NaN"),
        (0xffc0_0000, "a negative quiet NaN"),
        (0x7fa0_1234, "a NaN with a payload"),
    ];
    let mut rng = Rng::new(1111);
    cases.extend((0..20_000).map(|_| (rng.next_u64() as u32, "a random pattern")));
    cases
}

fn is_nan32(bits: u32) -> bool {
    bits & 0x7fff_ffff > 0x7f80_0000
}

/// A bf16 rounding that truncates: the top 16 bits.
fn truncated(bits: u32) -> u16 {
    (bits >> 16) as u16
}

/// A bf16 rounding whose ties go away from zero: add half, then truncate.
fn ties_away(bits: u32) -> u16 {
    if is_nan32(bits) {
        (bits >> 16) as u16 | 0x40
    } else {
        (bits.wrapping_add(0x8000) >> 16) as u16
    }
}

/// Rounding f32 → bf16 bit for bit against the main crate's `f32_to_bf16`, naming truncation,
/// ties away from zero, a lost sign and a NaN turned into ∞.
fn f32_to_bf16_checks(f: impl Fn(f32) -> u16) -> Verdict {
    not_applicable(&[Probe::Batch, Probe::Errors]);
    probe(Probe::Scale);
    probe(Probe::Order);
    probe(Probe::Named);
    let cases = bf16_cases();
    let mut yours = Vec::with_capacity(cases.len());
    for &(bits, _) in &cases {
        yours.push(attempt(ROUNDING, "f32_to_bf16", || f(f32::from_bits(bits)))?);
    }
    let want: Vec<u16> = cases.iter().map(|&(b, _)| ch11::f32_to_bf16(f32::from_bits(b))).collect();
    for ((&(bits, what), &y), &w) in cases.iter().zip(&yours).zip(&want) {
        if is_nan32(bits) && y & 0x7fff == 0x7f80 {
            return Err(ROUNDING.fail(format!(
                "{what} ({bits:#010x}): yours {y:#06x} is ∞ — a NaN turned into ∞ (adding the \
                 rounding bias carried into the exponent): test for NaN first, keep its top 16 \
                 bits and set the quiet bit 0x0040"
            )));
        }
        if is_nan32(bits) && y != w && y & 0x7fff == w & 0x7fff {
            return Err(ROUNDING.fail(format!(
                "{what} ({bits:#010x}): yours {y:#06x}, expected {w:#06x} — the sign is lost: \
                 bf16 keeps f32's sign bit, a NaN's too"
            )));
        }
        if is_nan32(bits) && y != w {
            return Err(ROUNDING.fail(format!(
                "{what} ({bits:#010x}): yours {y:#06x}, expected {w:#06x} — a NaN stays a NaN of \
                 the same sign: its top 16 bits with the quiet bit 0x0040 set"
            )));
        }
    }
    for ((&(bits, what), &y), &w) in cases.iter().zip(&yours).zip(&want) {
        if bits >> 31 == 1 && y >> 15 == 0 && w >> 15 == 1 {
            return Err(ROUNDING.fail(format!(
                "{what} ({bits:#010x}): yours {y:#06x} is positive — the sign is lost: bf16 keeps \
                 f32's sign bit"
            )));
        }
    }
    let matches = |slip: fn(u32) -> u16| {
        cases.iter().zip(&yours).all(|(&(b, _), &y)| is_nan32(b) || y == slip(b))
    };
    let first = cases.iter().zip(&yours).zip(&want).find(|((_, y), w)| y != w);
    let Some(((&(bits, what), &y), &w)) = first else { return Ok(()) };
    let why = if matches(truncated) {
        " — truncating instead of rounding: the 16 bits dropped decide whether to round up"
    } else if matches(ties_away) {
        " — ties away from zero: on an exact tie (dropped bits 0x8000) round to the even \
         pattern, the one whose last bit is 0"
    } else {
        ""
    };
    Err(ROUNDING.fail(format!("{what} ({bits:#010x}): yours {y:#06x}, expected {w:#06x}{why}")))
}

/// Decoding every f16 pattern against the main crate's `f16_to_f32` (a NaN must be a NaN of the
/// pattern's sign), naming lost subnormals, a lost sign, a wrong bias and a NaN turned into ∞.
fn f16_to_f32_checks(f: impl Fn(u16) -> f32) -> Verdict {
    not_applicable(&[Probe::Batch, Probe::Errors, Probe::Order]);
    probe(Probe::Scale);
    probe(Probe::Named);
    let mut yours = Vec::with_capacity(1 << 16);
    for bits in 0..=u16::MAX {
        yours.push(attempt(FORMATS, "f16_to_f32", || f(bits))?);
    }
    let is_nan16 = |b: u16| b & 0x7fff > 0x7c00;
    for (bits, &y) in (0..=u16::MAX).zip(&yours) {
        if is_nan16(bits) && y.is_infinite() {
            return Err(FORMATS.fail(format!(
                "{bits:#06x} (e = 31, f ≠ 0): yours {y} — a NaN turned into ∞: with the exponent \
                 all ones, a fraction that is not 0 means NaN"
            )));
        }
        if is_nan16(bits) && y.is_nan() && y.is_sign_negative() != (bits >> 15 == 1) {
            return Err(FORMATS.fail(format!(
                "{bits:#06x} (e = 31, f ≠ 0): yours a NaN of the other sign — the sign is lost: \
                 a NaN keeps the pattern's sign bit"
            )));
        }
        if is_nan16(bits) && !y.is_nan() {
            return Err(FORMATS.fail(format!(
                "{bits:#06x} (e = 31, f ≠ 0): yours {y} — with the exponent all ones and a \
                 fraction that is not 0, the pattern is a NaN"
            )));
        }
    }
    let negative_lost = (0x8001..0xfc00u16).any(|b| yours[usize::from(b)] > 0.0);
    if negative_lost {
        return Err(FORMATS.fail(
            "a pattern with the sign bit set decodes positive in yours — the sign is lost: \
             multiply by (−1)^s",
        ));
    }
    let one = yours[0x3c00];
    if one != 1.0 {
        // A power of two other than 1 is what a wrong bias gives; anything else is said as is.
        let power_of_two = one > 0.0 && one.is_finite() && one.log2().fract() == 0.0;
        let why = if power_of_two { " — the bias of f16 is 15:" } else { ";" };
        return Err(FORMATS.fail(format!(
            "0x3c00 (e = 15, f = 0): yours {one}, expected 1{why} the value is \
             2^(e − 15)·(1 + f/1024)"
        )));
    }
    for bits in (0..=u16::MAX).filter(|b| !is_nan16(*b)) {
        let (y, w) = (yours[usize::from(bits)], ch11::f16_to_f32(bits));
        if y.to_bits() == w.to_bits() {
            continue;
        }
        // Each cause is named only where yours is what that slip gives on this pattern.
        let hidden_one = w.signum() * 2f32.powi(-14) * (1.0 + f32::from(bits & 0x3ff) / 1024.0);
        let why = if bits & 0x7c00 == 0 && bits & 0x3ff != 0 {
            if y == 0.0 {
                " — the subnormals flushed to 0: for e = 0 the value is 2⁻¹⁴·f/1024"
            } else if y == hidden_one {
                " — a hidden 1 added to a subnormal: for e = 0 the value is 2⁻¹⁴·f/1024"
            } else {
                " — for e = 0 the value is 2⁻¹⁴·f/1024, with no hidden 1"
            }
        } else if bits & 0x7fff == 0x7c00 {
            " — e = 31 with f = 0 is ±∞"
        } else if bits & 0x7fff == 0 && y == 0.0 {
            " — the sign of zero is kept: 0x8000 is −0"
        } else if bits & 0x7fff == 0 {
            " — e = 0 with f = 0 is ±0"
        } else {
            ""
        };
        return Err(FORMATS.fail(format!("{bits:#06x}: yours {y:e}, expected {w:e}{why}")));
    }
    Ok(())
}

/// ε^{1/2} forward and ε^{1/3} central for f64's and f32's ε, naming the forward step where the
/// central one is asked (and the reverse), and ε itself; errors for ε outside (0, 1).
fn balanced_step_checks(f: impl Fn(Difference, f64) -> llm_workbook::Result<f64>) -> Verdict {
    not_applicable(&[Probe::Batch, Probe::Scale, Probe::Order]);
    probe(Probe::Named);
    for eps in [F64.epsilon(), F32.epsilon(), 0.25] {
        for kind in [Difference::Central, Difference::Forward] {
            let y = attempt(STEPS, "balanced_step", || f(kind, eps))?.map_err(|e| {
                STEPS.fail(format!("your `balanced_step` returned an error for ε = {eps:e}: {e}"))
            })?;
            let w = kind.balanced_step(eps).map_err(|e| e.to_string())?;
            if (y - w).abs() <= 1e-12 * w || (y - with_constants(kind, eps)).abs() <= 1e-12 * y {
                continue;
            }
            let close = |v: f64| (y - v).abs() <= 1e-12 * v;
            let why = if kind == Difference::Central && close(eps.sqrt()) {
                " — a forward difference's step ε^(1/2) where the central one is asked: the \
                 central difference's truncation error is ∝ h², so balance h² against ε/h"
            } else if kind == Difference::Forward && close(eps.cbrt()) {
                " — the central difference's step ε^(1/3) for a forward difference: its \
                 truncation error is ∝ h, so balance h against ε/h"
            } else if close(eps) {
                " — the step ε itself: the rounding error ε/h is then of order 1"
            } else {
                ""
            };
            return Err(STEPS.fail(format!(
                "{} difference, ε = {eps:e}: yours {y:e}, expected {w:e} (or {:e} with the \
                 section's constant){why}",
                kind.name(),
                with_constants(kind, eps)
            )));
        }
    }
    for bad in [0.0, 1.0, -1e-3, 2.0, f64::NAN] {
        let r = attempt(STEPS, "balanced_step", || f(Difference::Central, bad))?;
        probe(Probe::Errors);
        if r.is_ok() {
            return Err(STEPS.fail(format!(
                "balanced_step(Central, {bad}) should be an Err naming epsilon: a machine \
                 epsilon lies between 0 and 1"
            )));
        }
    }
    Ok(())
}

/// Kahan's sum bit for bit against the main crate's: no values, 2²⁴ followed by ones (where the
/// running sum stalls), and uniform values; naming the compensation dropped.
fn kahan_sum_checks(f: impl Fn(&[f32]) -> f32) -> Verdict {
    not_applicable(&[Probe::Batch, Probe::Errors, Probe::Order]);
    probe(Probe::Scale);
    probe(Probe::Named);
    let mut stall = vec![16_777_216.0f32];
    stall.extend(std::iter::repeat_n(1.0f32, 4096));
    let uniform = ch11::grid_values(10_000, 7).map_err(|e| e.to_string())?.0;
    let mixed: Vec<f32> =
        uniform.iter().enumerate().map(|(i, &x)| if i % 3 == 0 { x * 1e4 } else { -x }).collect();
    let cases: [(&str, &[f32]); 4] = [
        ("no values", &[]),
        ("2²⁴ then 4096 ones", &stall),
        ("10000 values in [0, 1)", &uniform),
        ("10000 values of mixed sign and size", &mixed),
    ];
    for (what, xs) in cases {
        let y = attempt(SUMS, "kahan_sum", || f(xs))?;
        let w = solution::kahan_sum(xs);
        if y.to_bits() == w.to_bits() {
            continue;
        }
        let naive = ch11::naive_sum(xs.iter().copied());
        let why = if y == naive {
            " — the compensation dropped: that is the running sum's result; carry c, the \
             error of each addition, into the next term"
        } else {
            " — follow the steps in f32 exactly: y = x − c, t = s + y, c = (t − s) − y, s = t"
        };
        return Err(SUMS.fail(format!("{what}: yours {y}, expected {w}{why}")));
    }
    Ok(())
}

/// The blocks a quantization judge tries, with what each one tests: the page's worked 4-bit
/// block (three ties), a block whose largest magnitude is negative, zeros, tiny and huge
/// weights, a short block and random ones.
fn quant_blocks() -> Vec<(Vec<f32>, i32, &'static str)> {
    let mut blocks = vec![
        (vec![3.5, -1.25, 0.75, 0.0, -0.25, 2.0], 7, "the page's 4-bit block, with three ties"),
        (vec![1.984375, -1.0, 0.5078125, 0.0078125, -0.00390625], 127, "an int8 block with ties"),
        (vec![-2.0, 1.0, 0.5, -0.25], 127, "a block whose largest magnitude is negative"),
        (vec![-2.0, 1.0, 0.5, -0.25], 7, "the same in 4-bit"),
        (vec![0.0; 32], 127, "a block of zeros"),
        (vec![1e-30, -3e-30, 2e-31], 7, "tiny weights"),
        (vec![1e30, -3e30, 2e31], 127, "huge weights"),
    ];
    let mut rng = Rng::new(37);
    for (n, l) in [(32, 127), (32, 7), (13, 127)] {
        let w: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
        blocks.push((w, l, "random weights"));
    }
    blocks
}

/// Quantization of one block, scale and codes exactly as the main crate's; naming the max in
/// place of the largest magnitude and rounding toward zero.
fn quantize_block_checks(f: impl Fn(&[f32], i32) -> (f32, Vec<i8>)) -> Verdict {
    not_applicable(&[Probe::Batch, Probe::Errors]);
    probe(Probe::Scale);
    probe(Probe::Order);
    probe(Probe::Named);
    for (w, l, what) in quant_blocks() {
        let (s, q) = attempt(QUANT, "quantize_block", || f(&w, l))?;
        let (ws, wq) = solution::quantize_block(&w, l);
        if s.to_bits() == ws.to_bits() && q == wq {
            continue;
        }
        let max = w.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) / l as f32;
        let truncated: Vec<i8> = w
            .iter()
            .map(|&x| if ws == 0.0 { 0 } else { (x / ws).trunc().clamp(-l as f32, l as f32) as i8 })
            .collect();
        let why = if s == max && s != ws {
            " — the scale from the largest value, not the largest magnitude: a negative weight \
             larger in size falls outside −L … L; take max |w_i|"
        } else if s == ws && q == truncated {
            " — the codes rounded toward zero: that leaves errors up to a whole step; round to \
             nearest (ties away from zero, f32::round)"
        } else {
            ""
        };
        return Err(QUANT.fail(format!(
            "{what} (L = {l}): yours s = {s:e}, q = {q:?}; expected s = {ws:e}, q = {wq:?}{why}"
        )));
    }
    Ok(())
}

/// Dequantization bit for bit; naming the scale forgotten.
fn dequantize_block_checks(f: impl Fn(f32, &[i8]) -> Vec<f32>) -> Verdict {
    not_applicable(&[Probe::Batch, Probe::Errors, Probe::Order, Probe::Scale]);
    probe(Probe::Named);
    for (w, l, what) in quant_blocks() {
        let (s, q) = solution::quantize_block(&w, l);
        let y = attempt(QUANT, "dequantize_block", || f(s, &q))?;
        let want = solution::dequantize_block(s, &q);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        if bits(&y) == bits(&want) {
            continue;
        }
        let codes: Vec<f32> = q.iter().map(|&c| f32::from(c)).collect();
        let why =
            if y == codes { " — the codes returned without the scale: ŵ = s·q" } else { "" };
        return Err(QUANT.fail(format!("{what}: yours {y:?}, expected {want:?}{why}")));
    }
    Ok(())
}

/// The dot of an int8 block with f32 activations, to a relative 10⁻⁵ of Σ|s·q·x| (the order of
/// the additions is yours); naming the scale forgotten.
fn int8_block_dot_checks(f: impl Fn(&[f32], f32, &[i8]) -> f32) -> Verdict {
    not_applicable(&[Probe::Batch, Probe::Errors, Probe::Order]);
    probe(Probe::Scale);
    probe(Probe::Named);
    let mut rng = Rng::new(38);
    for (w, l, what) in quant_blocks().into_iter().filter(|b| b.1 == 127) {
        let (s, q) = solution::quantize_block(&w, l);
        for x_scale in [1.0f32, 1e6] {
            let x: Vec<f32> = (0..w.len()).map(|_| rng.normal() as f32 * x_scale).collect();
            let y = attempt(QUANT, "int8_block_dot", || f(&x, s, &q))?;
            let want = solution::int8_block_dot(&x, s, &q);
            let size: f64 =
                x.iter().zip(&q).map(|(&a, &c)| f64::from(a * s).abs() * f64::from(c).abs()).sum();
            if (f64::from(y) - f64::from(want)).abs() <= 1e-5 * size && y.is_finite() {
                continue;
            }
            let unscaled: f32 = x.iter().zip(&q).map(|(&a, &c)| a * f32::from(c)).sum();
            let why = if s != 1.0 && (y - unscaled).abs() <= 1e-5 * unscaled.abs().max(1e-30) {
                " — the scale forgotten: the codes are the weights divided by s; multiply the sum \
                 by s"
            } else {
                ""
            };
            return Err(QUANT.fail(format!(
                "{what}, activations of size {x_scale:e}: yours {y:e}, expected {want:e}{why}"
            )));
        }
    }
    Ok(())
}

/// The step with the constants section 6 derives for |f| = |f″| = |f‴| = 1: h* = 2ε^{1/2}
/// forward and (3ε)^{1/3} central. The exercise asks for ε^{1/2} and ε^{1/3} (the constants
/// change h by a factor under 2, which moves the error along the flat bottom of its curve); the
/// judge accepts either.
fn with_constants(kind: Difference, eps: f64) -> f64 {
    match kind {
        Difference::Forward => 2.0 * eps.sqrt(),
        Difference::Central => (3.0 * eps).cbrt(),
    }
}

// ───────────── the judges: the sweep against the main crate, then the checks above ─────────────

use super::sweep::{Fixed, Gen, Tol, explained, sweep};

/// **f32 → bf16**: every pattern of `bf16_cases` (ties of both parities, just under and over a
/// tie, overflow, subnormals, signed zeros, NaNs) and 20 000 random ones, bit for bit; then
/// `f32_to_bf16_checks`.
pub fn f32_to_bf16(f: impl Fn(f32) -> u16) -> Verdict {
    f32_to_bf16_judged(&f)
}

/// [`f32_to_bf16`]'s judge, compiled once here rather than in every test that calls it.
fn f32_to_bf16_judged(f: &dyn Fn(f32) -> u16) -> Verdict {
    let cases: Vec<u32> = bf16_cases().into_iter().map(|(b, _)| b).collect();
    let found = sweep(
        ROUNDING,
        "f32_to_bf16",
        Tol::EXACT,
        &cases,
        |&b| Ok(f(f32::from_bits(b))),
        |&b| Ok(ch11::f32_to_bf16(f32::from_bits(b))),
    );
    explained(found, || f32_to_bf16_checks(f))
}

/// **f16 → f32**: all 65 536 patterns, bit for bit (a NaN matches any NaN here; its sign is
/// checked after); then `f16_to_f32_checks`.
pub fn f16_to_f32(f: impl Fn(u16) -> f32) -> Verdict {
    f16_to_f32_judged(&f)
}

/// [`f16_to_f32`]'s judge, compiled once here rather than in every test that calls it.
fn f16_to_f32_judged(f: &dyn Fn(u16) -> f32) -> Verdict {
    let cases: Vec<u16> = (0..=u16::MAX).collect();
    let found = sweep(
        FORMATS,
        "f16_to_f32",
        Tol::EXACT,
        &cases,
        |&b| Ok(f(b)),
        |&b| Ok(ch11::f16_to_f32(b)),
    );
    explained(found, || f16_to_f32_checks(f))
}

/// **The balanced step**: both kinds at the machine epsilons of f64, f32 and bf16, at 0.25 and at
/// the smallest positive f64, and the errors the doc promises with the first values past each
/// bound (0, −0, 1, the f64 just above 1, −10⁻³, 2, ∞, NaN). An answer with section 6's
/// constants (2ε^{1/2}, (3ε)^{1/3}) is taken as the chapter's step; then `balanced_step_checks`.
pub fn balanced_step(f: impl Fn(Difference, f64) -> llm_workbook::Result<f64>) -> Verdict {
    balanced_step_judged(&f)
}

/// [`balanced_step`]'s judge, compiled once here rather than in every test that calls it.
fn balanced_step_judged(f: &dyn Fn(Difference, f64) -> llm_workbook::Result<f64>) -> Verdict {
    let mut cases = Vec::new();
    let epsilons = [
        F64.epsilon(),
        F32.epsilon(),
        2f64.powi(-7),
        0.25,
        f64::from_bits(1),
        1.0 - f64::EPSILON / 2.0,
        0.0,
        -0.0,
        1.0,
        1.0 + f64::EPSILON,
        -1e-3,
        2.0,
        f64::INFINITY,
        f64::NAN,
    ];
    for kind in [Difference::Forward, Difference::Central] {
        cases.extend(epsilons.iter().map(|&e| (Fixed(kind), e)));
    }
    let yours = |(kind, eps): &(Fixed<Difference>, f64)| {
        let y = f(kind.0, *eps).map_err(|e| e.to_string())?;
        let c = with_constants(kind.0, *eps);
        // The version with the section's constants is the same step (see `with_constants`).
        Ok(if (y - c).abs() <= 1e-12 * c { kind.0.balanced_step(*eps).unwrap_or(y) } else { y })
    };
    let found = sweep(STEPS, "balanced_step", Tol::F64, &cases, yours, |(kind, eps)| {
        kind.0.balanced_step(*eps).map_err(|e| e.to_string())
    });
    explained(found, || balanced_step_checks(f))
}

/// **Kahan's sum**: no values, one value, 2²⁴ then ones (where the running sum stalls), values
/// of mixed sign and size from 10⁻⁶ to 10⁶, cancelling pairs, bit for bit (the doc prescribes
/// every step, so there is one right answer); then `kahan_sum_checks`.
pub fn kahan_sum(f: impl Fn(&[f32]) -> f32) -> Verdict {
    kahan_sum_judged(&f)
}

/// [`kahan_sum`]'s judge, compiled once here rather than in every test that calls it.
fn kahan_sum_judged(f: &dyn Fn(&[f32]) -> f32) -> Verdict {
    let mut draw = Gen::new("kahan_sum");
    let mut cases: Vec<Vec<f32>> = vec![Vec::new(), vec![1.5], vec![16_777_216.0, 1.0, 1.0, 1.0]];
    for n in [2, 7, 100, 1000] {
        for s in [1.0f32, 1e-6, 1e6] {
            cases.push(draw.weights(n, s));
        }
        let mixed: Vec<f32> = (0..n)
            .map(|i| draw.uniform(0.0, 1.0) as f32 * if i % 3 == 0 { 1e4 } else { -1.0 })
            .collect();
        cases.push(mixed);
    }
    cases.push(vec![1e8, 1.0, -1e8, 1.0]);
    let found =
        sweep(SUMS, "kahan_sum", Tol::EXACT, &cases, |x| Ok(f(x)), |x| Ok(solution::kahan_sum(x)));
    explained(found, || kahan_sum_checks(f))
}

/// Blocks at the rounding boundaries of the codes: for a block whose largest magnitude is L·s,
/// weights at (k + ½)·s (the ties) and one f32 step either side, of both signs.
fn boundary_blocks(draw: &mut Gen) -> Vec<(Vec<f32>, i32)> {
    let mut blocks = Vec::new();
    for l in [7, 127] {
        for s in [0.25f32, 0.1, 3e-3] {
            let mut w = vec![l as f32 * s];
            for k in [0, 1, 2, l / 2, l - 1] {
                let tie = (k as f32 + 0.5) * s;
                for x in [tie, f32::from_bits(tie.to_bits() + 1), f32::from_bits(tie.to_bits() - 1)]
                {
                    w.extend([x, -x]);
                }
            }
            w.truncate(32);
            blocks.push((w, l));
        }
        for n in [1, 3, 32] {
            for s in [1.0f32, 1e-30, 1e30] {
                blocks.push((draw.weights(n, s), l));
            }
        }
    }
    blocks
}

/// **Quantizing a block**: `quant_blocks` and blocks at every rounding boundary of the codes
/// (ties and one f32 step either side), blocks of 1 to 32 weights from 10⁻³⁰ to 10³⁰ with the
/// largest magnitude tied between a negative and a positive weight, both levels; scale and codes
/// bit for bit; then `quantize_block_checks`.
pub fn quantize_block(f: impl Fn(&[f32], i32) -> (f32, Vec<i8>)) -> Verdict {
    quantize_block_judged(&f)
}

/// [`quantize_block`]'s judge, compiled once here rather than in every test that calls it.
fn quantize_block_judged(f: &dyn Fn(&[f32], i32) -> (f32, Vec<i8>)) -> Verdict {
    let mut cases: Vec<(Vec<f32>, i32)> =
        quant_blocks().into_iter().map(|(w, l, _)| (w, l)).collect();
    cases.extend(boundary_blocks(&mut Gen::new("quantize_block")));
    let found = sweep(
        QUANT,
        "quantize_block",
        Tol::EXACT,
        &cases,
        |(w, l)| Ok(f(w, *l)),
        |(w, l)| Ok(solution::quantize_block(w, *l)),
    );
    explained(found, || quantize_block_checks(f))
}

/// **Dequantizing a block**: the codes of every block the quantization sweep tries, with its
/// scale, bit for bit; then `dequantize_block_checks`.
pub fn dequantize_block(f: impl Fn(f32, &[i8]) -> Vec<f32>) -> Verdict {
    dequantize_block_judged(&f)
}

/// [`dequantize_block`]'s judge, compiled once here rather than in every test that calls it.
fn dequantize_block_judged(f: &dyn Fn(f32, &[i8]) -> Vec<f32>) -> Verdict {
    let mut blocks: Vec<(Vec<f32>, i32)> =
        quant_blocks().into_iter().map(|(w, l, _)| (w, l)).collect();
    blocks.extend(boundary_blocks(&mut Gen::new("dequantize_block")));
    let cases: Vec<(f32, Vec<i8>)> =
        blocks.iter().map(|(w, l)| solution::quantize_block(w, *l)).collect();
    let found = sweep(
        QUANT,
        "dequantize_block",
        Tol::EXACT,
        &cases,
        |(s, q)| Ok(f(*s, q)),
        |(s, q)| Ok(solution::dequantize_block(*s, q)),
    );
    explained(found, || dequantize_block_checks(f))
}

/// The tolerance of the int8 dot: the order of the additions is yours, so two right answers
/// differ by a few f32 roundings of the running sum, each at most 2⁻²⁴ of Σ|s·qᵢ·xᵢ|; 10⁻⁵ of
/// that sum leaves room for 160 of them over a block of 32.
const DOT_TOLERANCE: f64 = 1e-5;

/// **The int8 dot**: every int8 block of the quantization sweep against activations at 1 and
/// 10⁶, within `DOT_TOLERANCE` of Σ|s·qᵢ·xᵢ| (an answer that close is taken as the main
/// crate's); then `int8_block_dot_checks`.
pub fn int8_block_dot(f: impl Fn(&[f32], f32, &[i8]) -> f32) -> Verdict {
    int8_block_dot_judged(&f)
}

/// [`int8_block_dot`]'s judge, compiled once here rather than in every test that calls it.
fn int8_block_dot_judged(f: &dyn Fn(&[f32], f32, &[i8]) -> f32) -> Verdict {
    let mut draw = Gen::new("int8_block_dot");
    let mut blocks: Vec<(Vec<f32>, i32)> =
        quant_blocks().into_iter().map(|(w, l, _)| (w, l)).collect();
    blocks.extend(boundary_blocks(&mut draw));
    let mut cases: Vec<(Vec<f32>, f32, Vec<i8>)> = Vec::new();
    for (w, l) in blocks.into_iter().filter(|b| b.1 == 127) {
        let (s, q) = solution::quantize_block(&w, l);
        for x_scale in [1.0f32, 1e6] {
            cases.push((draw.weights(q.len(), x_scale), s, q.clone()));
        }
    }
    let yours = |(x, s, q): &(Vec<f32>, f32, Vec<i8>)| {
        let y = f(x, *s, q);
        let w = solution::int8_block_dot(x, *s, q);
        let size: f64 =
            x.iter().zip(q).map(|(&a, &c)| f64::from(a * s).abs() * f64::from(c).abs()).sum();
        let close = (f64::from(y) - f64::from(w)).abs() <= DOT_TOLERANCE * size && y.is_finite();
        Ok(if close { w } else { y })
    };
    let found = sweep(QUANT, "int8_block_dot", Tol::EXACT, &cases, yours, |(x, s, q)| {
        Ok(solution::int8_block_dot(x, *s, q))
    });
    explained(found, || int8_block_dot_checks(f))
}
