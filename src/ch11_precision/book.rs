//! What the book shows about chapter 11: the worked-number table (no source document, so no
//! errata), the walk-through (the formats, one number in each, the rounding rules, the tricks,
//! the sums and the steps) and the two measured figures, which are the same on every machine
//! (IEEE arithmetic, fixed seeds).

use super::bf16_product;
use super::format::{
    BF16, F16, F32, F64, FORMATS, Format, bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16, pow2,
};
use super::mixed::{Precision, ProductInputs};
use super::quant::{BLOCK, QuantMatrix, STORAGES, Storage, is_quantized, storage_losses};
use super::quant_step::QuantGpt;
use super::runs::{
    F16_LOSS_SCALE, MixedRun, RUN_BATCH, RUN_CONTEXT, RUN_STEPS, run_precisions,
    small_gradient_step, train_mixed,
};
use super::steps::{Difference, best_step, checker_step, step_errors, sweep};
use super::summation::{METHODS, kahan_sum, naive_sum, summation_errors};
use super::tricks::{
    bce_through_probability, log_sum_exp_unshifted, one_minus_sigmoid, overflow_threshold,
    relative_error, softmax_unshifted,
};
use crate::ch01_logistic::{bce_from_logit, sigmoid};
use crate::ch02_softmax::{log_sum_exp, softmax};
use crate::errata::Erratum;
use crate::error::Result;
use crate::matmul::Op;
use crate::matmul::lab::{Bf16Path, available_bf16_paths, best_bf16_path, gemm_bf16};
use crate::plot::{Figure, LineChart, LogAxes, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::simd::active_kernel;
use crate::sources::THIS_CRATE;
use nalgebra::{DMatrix, DVector};
use std::path::{Path, PathBuf};

/// No source document, so no errata.
pub const ERRATA: &[Erratum] = &[];

/// The logits of the overflow example: e^{1000} is beyond every format.
pub const BIG_LOGITS: [f64; 3] = [1000.0, 999.0, 998.0];

/// The logit of the cancellation example: σ(40) rounds to 1 in f64.
pub const BIG_LOGIT: f64 = 40.0;

/// The summation example's length (2^{20} values) and seed; the figure's lengths are 2^4 … 2^22.
pub const SUM_TERMS: usize = 1 << 20;
/// The seed of every measured sum (trial t uses seed + t).
pub const SUM_SEED: u64 = 11;
/// Draws averaged (root mean square) per length in the figure and the table.
pub const SUM_TRIALS: usize = 4;

/// Adds `n` ones in f32 left to right and by Kahan's method, without storing them.
pub fn sum_of_ones(n: usize) -> (f32, f32) {
    let ones = || std::iter::repeat_n(1.0f32, n);
    (naive_sum(ones()), kahan_sum(ones()))
}

/// A value as Rust's shortest round-trip scientific form (`2.220446049250313e-16`).
fn sci(x: f64) -> String {
    format!("{x:e}")
}

/// A number as the walk prints it: 0, plain decimals from 10⁻⁴ to 10⁶, else scientific.
fn readable(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-4..1e6).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// The measured relative error of a quotient at one step.
fn error_at<T: crate::float::Float>(kind: Difference, h: f64) -> Result<f64> {
    Ok(step_errors::<T>(kind, &[h])?[0].1)
}

/// The chapter's numbers, recomputed (the prose derives each).
pub fn worked() -> Result<Vec<Worked>> {
    let third = 1.0f32 / 3.0;
    let one = |eighths_of_2_7: f32| 1.0 + eighths_of_2_7 * 2f32.powi(-8);
    let z = DVector::from_row_slice(&BIG_LOGITS);
    let (ones_naive, ones_kahan) = sum_of_ones(1 << 25);
    let errors = summation_errors(SUM_TERMS, SUM_TRIALS, SUM_SEED)?;
    let h = checker_step();
    let central64 = step_errors::<f64>(Difference::Central, &sweep())?;
    let mut rows = Vec::new();
    for (format, printed) in FORMATS.iter().zip([
        "2.220446049250313e-16",
        "1.1920928955078125e-7",
        "7.8125e-3",
        "9.765625e-4",
    ]) {
        rows.push(Worked::text(
            "machine_epsilon_of_each_format",
            THIS_CRATE,
            format!("machine epsilon 2^{{-F}} of {}", format.name),
            printed,
            sci(format.epsilon()),
        ));
    }
    rows.extend([
        Worked::number(
            "the_largest_f16_is_65504",
            THIS_CRATE,
            "largest f16, (2 − 2⁻¹⁰)·2¹⁵",
            "65504",
            F16.max_normal(),
        ),
        Worked::text(
            "the_largest_bf16_is_near_f32_s",
            THIS_CRATE,
            "largest bf16, (2 − 2⁻⁷)·2¹²⁷",
            "3.3895313892515355e38",
            sci(BF16.max_normal()),
        ),
        Worked::text(
            "the_smallest_f16_normal_and_subnormal",
            THIS_CRATE,
            "smallest normal f16, 2⁻¹⁴",
            "6.103515625e-5",
            sci(F16.min_normal()),
        ),
        Worked::text(
            "the_smallest_f16_normal_and_subnormal",
            THIS_CRATE,
            "smallest subnormal f16, 2⁻²⁴",
            "5.960464477539063e-8",
            sci(F16.min_subnormal()),
        ),
        Worked::number(
            "one_third_in_each_format",
            THIS_CRATE,
            "1/3 rounded to bf16",
            "0.333984375",
            f64::from(bf16_to_f32(f32_to_bf16(third))),
        ),
        Worked::number(
            "one_third_in_each_format",
            THIS_CRATE,
            "1/3 rounded to f16",
            "0.333251953125",
            f64::from(f16_to_f32(f32_to_f16(third))),
        ),
        Worked::number(
            "ties_round_to_even",
            THIS_CRATE,
            "1 + 2⁻⁸ to bf16 (halfway; 1 is even)",
            "1",
            f64::from(bf16_to_f32(f32_to_bf16(one(1.0)))),
        ),
        Worked::number(
            "ties_round_to_even",
            THIS_CRATE,
            "1 + 3·2⁻⁸ to bf16 (halfway; 1 + 2⁻⁶ is even)",
            "1.015625",
            f64::from(bf16_to_f32(f32_to_bf16(one(3.0)))),
        ),
        Worked::text(
            "ties_round_to_even",
            THIS_CRATE,
            "65520 to f16 (halfway to 65536; rounds to even, past the largest)",
            "inf",
            f16_to_f32(f32_to_f16(65520.0)).to_string(),
        ),
        Worked::number(
            "exp_overflows_past_the_log_of_the_largest_number",
            THIS_CRATE,
            "ln of the largest f64: e^z overflows above it",
            "709.782712893384",
            overflow_threshold(F64),
        ),
        Worked::number(
            "exp_overflows_past_the_log_of_the_largest_number",
            THIS_CRATE,
            "ln of the largest f32",
            "88.722839",
            overflow_threshold(F32),
        ),
        Worked::number(
            "exp_overflows_past_the_log_of_the_largest_number",
            THIS_CRATE,
            "ln of the largest f16",
            "11.089866",
            overflow_threshold(F16),
        ),
        Worked::text(
            "the_max_shift_saves_softmax",
            THIS_CRATE,
            "softmax(1000, 999, 998) as printed, first entry",
            "NaN",
            softmax_unshifted(&BIG_LOGITS)?[0].to_string(),
        ),
        Worked::number(
            "the_max_shift_saves_softmax",
            THIS_CRATE,
            "the same with the maximum subtracted (chapter 2)",
            "0.665240955775",
            softmax(&z)?[0],
        ),
        Worked::number(
            "the_max_shift_saves_softmax",
            THIS_CRATE,
            "ln(e¹⁰⁰⁰ + e⁹⁹⁹ + e⁹⁹⁸) with the maximum subtracted",
            "1000.407605964",
            log_sum_exp(&z)?,
        ),
        Worked::text(
            "the_max_shift_saves_softmax",
            THIS_CRATE,
            "the same as printed",
            "inf",
            log_sum_exp_unshifted(&BIG_LOGITS)?.to_string(),
        ),
        Worked::number(
            "one_minus_sigmoid_cancels_for_large_z",
            THIS_CRATE,
            "1 − σ(40) as printed, f64",
            "0",
            one_minus_sigmoid(BIG_LOGIT),
        ),
        Worked::text(
            "one_minus_sigmoid_cancels_for_large_z",
            THIS_CRATE,
            "σ(−40), its exact value",
            "4.248354255291589e-18",
            sci(sigmoid(-BIG_LOGIT)),
        ),
        Worked::text(
            "one_minus_sigmoid_cancels_for_large_z",
            THIS_CRATE,
            "BCE of label 0 at z = 40 through σ(z)",
            "inf",
            bce_through_probability(0.0, BIG_LOGIT).to_string(),
        ),
        Worked::number(
            "one_minus_sigmoid_cancels_for_large_z",
            THIS_CRATE,
            "the same from the logit (chapter 1)",
            "40",
            bce_from_logit(0.0, BIG_LOGIT),
        ),
        Worked::number(
            "the_f32_sum_of_ones_stops_at_2_24",
            THIS_CRATE,
            "2²⁵ ones added left to right in f32",
            "16777216",
            f64::from(ones_naive),
        ),
        Worked::number(
            "the_f32_sum_of_ones_stops_at_2_24",
            THIS_CRATE,
            "the same by Kahan's method",
            "33554432",
            f64::from(ones_kahan),
        ),
    ]);
    for (method, printed) in METHODS.iter().zip(["1.5e-5", "1.2e-6", "4.5e-8", "3.7e-8"]) {
        rows.push(Worked::text(
            "summation_error_against_the_exact_sum",
            THIS_CRATE,
            format!("relative error, 2²⁰ values in f32, {}", method.name()),
            printed,
            format!("{:.1e}", errors[*method as usize]),
        ));
    }
    rows.extend([
        Worked::text(
            "the_checker_s_step",
            THIS_CRATE,
            "ε^{1/3} of f64, the balanced central step",
            "6.1e-6",
            format!("{:.1e}", Difference::Central.balanced_step(F64.epsilon())?),
        ),
        Worked::text(
            "the_checker_s_step",
            THIS_CRATE,
            "measured best central step, f64 (steps 10^{-k/4})",
            "5.6e-6",
            format!("{:.1e}", best_step(&central64)?.0),
        ),
        Worked::text(
            "the_checker_s_step",
            THIS_CRATE,
            "central difference at h = 10⁻⁶, f64: relative error",
            "5.1e-11",
            format!("{:.1e}", error_at::<f64>(Difference::Central, h)?),
        ),
        Worked::text(
            "the_checker_s_step",
            THIS_CRATE,
            "forward difference at h = 10⁻⁶, f64",
            "7.8e-7",
            format!("{:.1e}", error_at::<f64>(Difference::Forward, h)?),
        ),
        Worked::text(
            "the_checker_s_step",
            THIS_CRATE,
            "central difference at h = 10⁻⁶, f32",
            "7.1e-3",
            format!("{:.1e}", error_at::<f32>(Difference::Central, h)?),
        ),
    ]);
    rows.extend(mixed_rows()?);
    Ok(rows)
}

/// The bf16 and f16 precisions of the small-gradient example: bf16, f16, f16 scaled by 2^{10}.
fn example_precisions() -> [Precision; 3] {
    [
        Precision { inputs: ProductInputs::Bf16, loss_scale: 1.0 },
        Precision { inputs: ProductInputs::F16, loss_scale: 1.0 },
        Precision { inputs: ProductInputs::F16, loss_scale: F16_LOSS_SCALE },
    ]
}

/// The worked numbers of mixed precision: each product's bound, and one step of the
/// small-gradient example ([`small_gradient_step`]).
fn mixed_rows() -> Result<Vec<Worked>> {
    let mut rows = Vec::new();
    for (inputs, printed) in [(ProductInputs::Bf16, "7.8e-3"), (ProductInputs::F16, "9.8e-4")] {
        let u = inputs.format().unit_roundoff();
        rows.push(Worked::text(
            "a_rounded_product_is_within_its_bound",
            THIS_CRATE,
            format!(
                "bound on a product's error per unit of the sum of its terms' sizes, {} inputs",
                inputs.name()
            ),
            printed,
            format!("{:.1e}", 2.0 * u + u * u),
        ));
    }
    let (loss32, _, _) = small_gradient_step(Precision::F32)?;
    let [bf16, f16, scaled] = example_precisions().map(small_gradient_step);
    let (loss16, _, _) = bf16?;
    rows.push(Worked::text(
        "one_bf16_step_stays_near_the_f32_step",
        THIS_CRATE,
        "one step, small-gradient example: |loss with bf16 inputs − f32 loss|",
        "7.0e-5",
        format!("{:.1e}", (loss16 - loss32).abs()),
    ));
    for (run, printed, what) in
        [(f16?, "3120", "f16 inputs, unscaled"), (scaled?, "0", "f16 inputs, S = 2¹⁰")]
    {
        rows.push(Worked::number(
            "f16_gradients_underflow_without_loss_scaling",
            THIS_CRATE,
            format!("the same step: gradient inputs rounded to 0, {what}"),
            printed,
            run.2.gradients.underflows as f64,
        ));
    }
    rows.extend(bf16_product_rows()?);
    Ok(rows)
}

/// The two worked examples of the bf16 product: the order within a pair
/// ([`bf16_product::pair_order_row`] times ones) and a flushed input
/// ([`bf16_product::flushed_pair`]), each by the widened path and by the instruction's portable
/// statement (the same values as VDPBF16PS where it runs): [order widened, order pairs, flush
/// widened, flush pairs].
fn bf16_examples() -> Result<[f64; 4]> {
    let run = |path: Bf16Path, a: &[u16], b: &[u16]| -> Result<f64> {
        let k = a.len();
        let (a, b) = (DMatrix::from_row_slice(1, k, a), DMatrix::from_row_slice(k, 1, b));
        let mut c = DMatrix::zeros(1, 1);
        gemm_bf16(path, 1.0, &a, Op::N, &b, Op::N, 0.0, &mut c)?;
        Ok(f64::from(c[(0, 0)]))
    };
    let ones = [f32_to_bf16(1.0); 4];
    let row = bf16_product::pair_order_row();
    let (x, y) = bf16_product::flushed_pair();
    Ok([
        run(Bf16Path::widened(active_kernel()), &row, &ones)?,
        run(Bf16Path::PAIRS_PORTABLE, &row, &ones)?,
        run(Bf16Path::widened(active_kernel()), &[x], &[y])?,
        run(Bf16Path::PAIRS_PORTABLE, &[x], &[y])?,
    ])
}

/// The worked-table rows of [`bf16_examples`].
fn bf16_product_rows() -> Result<Vec<Worked>> {
    let [order_widened, order_pairs, flush_widened, flush_pairs] = bf16_examples()?;
    const TEST: &str = "the_pair_instruction_adds_in_its_own_order_and_flushes_subnormals";
    let order = "1, 0, 2⁻²⁴, 2⁻²⁴(1 + 2⁻⁷) summed as a bf16 product";
    let flush = "2⁻¹³⁰ · 2¹⁰⁰ as a bf16 product";
    Ok(vec![
        Worked::number(
            TEST,
            THIS_CRATE,
            format!("{order}, widened to f32"),
            "1.00000012",
            order_widened,
        ),
        Worked::number(TEST, THIS_CRATE, format!("{order}, VDPBF16PS"), "1.00000024", order_pairs),
        Worked::text(
            TEST,
            THIS_CRATE,
            format!("{flush}, widened to f32"),
            "9.3e-10",
            format!("{flush_widened:.1e}"),
        ),
        Worked::number(TEST, THIS_CRATE, format!("{flush}, VDPBF16PS"), "0", flush_pairs),
    ])
}

// ───────────────────────────── the walk-through ─────────────────────────────

/// The pattern as `sign exponent fraction` in binary.
fn fields_text(format: Format, bits: u64) -> Result<String> {
    let f = format.fields(bits)?;
    let (e, w) = (format.exponent_bits as usize, format.fraction_bits as usize);
    Ok(format!("{} {:0e$b} {:0w$b}", f.sign, f.exponent, f.fraction))
}

/// The pattern of `x` (an f32 or narrower value) in `format`.
fn bits_of(format: Format, x: f32) -> u64 {
    match format.name {
        "f64" => f64::from(x).to_bits(),
        "f32" => u64::from(x.to_bits()),
        "bf16" => u64::from(f32_to_bf16(x)),
        _ => u64::from(f32_to_f16(x)),
    }
}

/// The chapter's steps, printed: every number it derives, in order.
pub fn walk(out: &mut Walk) -> Result<()> {
    out.step("1. Four formats: 1 sign bit, E exponent bits, F fraction bits")?;
    out.say("format  E   F   bias   ε = 2^-F          largest     smallest normal  smallest sub.")?;
    for f in FORMATS {
        out.say(&format!(
            "{:<6} {:>2}  {:>2}  {:>5}   {:<16}  {:<10}  {:<15}  {:.3e}",
            f.name,
            f.exponent_bits,
            f.fraction_bits,
            f.bias(),
            format!("2^-{} ≈ {:.1e}", f.fraction_bits, f.epsilon()),
            format!("{:.3e}", f.max_normal()),
            format!("{:.3e}", f.min_normal()),
            f.min_subnormal()
        ))?;
    }
    out.say("One third in each format (sign, exponent, fraction; then the value it stores):")?;
    let third = 1.0f64 / 3.0;
    for f in FORMATS {
        let bits = if f == F64 { third.to_bits() } else { bits_of(f, third as f32) };
        out.say(&format!("{:<5} {}", f.name, fields_text(f, bits)?))?;
        out.say(&format!("      = {:.30}", f.decode(bits)?))?;
    }
    out.say(&format!(
        "f32's 1/3 is 0x{:08X}: bf16 keeps the top 16 bits 0x3EAA and drops 0xAAAB, more than \
         half of 0x10000, so it rounds up to 0x{:04X}.",
        (third as f32).to_bits(),
        f32_to_bf16(third as f32)
    ))?;
    out.step("2. Rounding to nearest, ties to even")?;
    for (x, what) in [
        (1.0 + pow2(-8), "1 + 2^-8, halfway between bf16's 1 and 1 + 2^-7"),
        (1.0 + 3.0 * pow2(-8), "1 + 3·2^-8, halfway between 1 + 2^-7 and 1 + 2^-6"),
        (1.0 + 5.0 * pow2(-10), "1 + 5·2^-10, not a tie"),
    ] {
        let r = bf16_to_f32(f32_to_bf16(x as f32));
        out.say(&format!("bf16({x}) = {r}   ({what})"))?;
    }
    for (x, what) in [
        (65519.0, "below the tie: the largest f16"),
        (65520.0, "the tie above 65504: even is 2^16, past the range, so ∞"),
        (pow2(-25), "half the smallest subnormal: a tie, 0 is even"),
        (3.0 * pow2(-26), "three quarters of it: rounds up to 2^-24"),
    ] {
        let r = f16_to_f32(f32_to_f16(x as f32));
        out.say(&format!("f16({}) = {}   ({what})", readable(x), readable(f64::from(r))))?;
    }
    out.step("3. Overflow: e^z beyond ln(largest), and the maximum shift (chapter 2)")?;
    for f in [F64, F32, F16] {
        out.say(&format!("{:<4} e^z overflows for z > {:.6}", f.name, overflow_threshold(f)))?;
    }
    let z = DVector::from_row_slice(&BIG_LOGITS);
    out.say(&format!("softmax(1000, 999, 998) as printed: {:?}", softmax_unshifted(&BIG_LOGITS)?))?;
    out.say(&format!("with the maximum subtracted:        {:.12?}", softmax(&z)?.as_slice()))?;
    out.say(&format!(
        "ln Σ e^z as printed: {}; shifted: {:.9}",
        log_sum_exp_unshifted(&BIG_LOGITS)?,
        log_sum_exp(&z)?
    ))?;
    out.step("4. Cancellation: 1 − σ(z) against its exact value σ(−z) (chapter 1)")?;
    out.say("  z   1 − σ(z) in f64    σ(−z)              relative error")?;
    for z in [5.0, 10.0, 20.0, 30.0, 37.0, BIG_LOGIT] {
        let (naive, exact) = (one_minus_sigmoid(z), sigmoid(-z));
        out.say(&format!(
            "{z:>3}   {:<17}  {:<17}  {:.2e}",
            format!("{naive:.9e}"),
            format!("{exact:.9e}"),
            relative_error(naive, exact)
        ))?;
    }
    out.say(&format!(
        "BCE of label 0 at z = 40: through σ(z) {}, from the logit {}",
        bce_through_probability(0.0, BIG_LOGIT),
        bce_from_logit(0.0, BIG_LOGIT)
    ))?;
    out.step("5. Summation in f32 against the exact sum (values k/2^24, root mean square of 4)")?;
    let (ones_naive, ones_kahan) = sum_of_ones(1 << 25);
    out.say(&format!("2^25 ones: left to right {ones_naive}, Kahan {ones_kahan}"))?;
    out.say(&format!(
        "      n  {}",
        METHODS.iter().map(|m| format!("{:>20}", m.name())).collect::<String>()
    ))?;
    for k in [10, 16, 20, 22] {
        let e = summation_errors(1 << k, SUM_TRIALS, SUM_SEED)?;
        out.say(&format!(
            "{:>7}  {}",
            1usize << k,
            e.iter().map(|v| format!("{:>20}", format!("{v:.2e}"))).collect::<String>()
        ))?;
    }
    out.step("6. The step of a gradient check: relative error of the derivative of sin at 1")?;
    out.say("      h    forward f64   central f64   forward f32   central f32")?;
    let decades: Vec<f64> = (1..=13).map(|k| 10f64.powi(-k)).collect();
    let columns = [
        step_errors::<f64>(Difference::Forward, &decades)?,
        step_errors::<f64>(Difference::Central, &decades)?,
        step_errors::<f32>(Difference::Forward, &decades)?,
        step_errors::<f32>(Difference::Central, &decades)?,
    ];
    for (i, h) in decades.iter().enumerate() {
        out.say(&format!(
            "{h:>7.0e}{}",
            columns.iter().map(|c| format!("{:>14.2e}", c[i].1)).collect::<String>()
        ))?;
    }
    for (f, eps) in [("f64", F64.epsilon()), ("f32", F32.epsilon())] {
        out.say(&format!(
            "{f}: balanced steps ε^(1/2) = {:.1e} (forward), ε^(1/3) = {:.1e} (central)",
            Difference::Forward.balanced_step(eps)?,
            Difference::Central.balanced_step(eps)?
        ))?;
    }
    out.say(&format!(
        "the gradient checker: central differences in f64 with h = {:e}",
        checker_step()
    ))?;
    walk_mixed(out)
}

/// Step 7 of the walk: the product's bound, the small-gradient step, and the four runs.
fn walk_mixed(out: &mut Walk) -> Result<()> {
    out.step("7. Mixed precision: products of rounded inputs, accumulated in f32")?;
    for inputs in [ProductInputs::Bf16, ProductInputs::F16] {
        let u = inputs.format().unit_roundoff();
        out.say(&format!(
            "{:<4} u = 2^{}: |Σ â b̂ − Σ a b| ≤ (2u + u²) Σ |a||b| = {:.4e} · Σ |a||b|",
            inputs.name(),
            u.log2(),
            2.0 * u + u * u
        ))?;
    }
    out.say("one step of a tiny GPT (192 scored tokens): loss, and what the roundings lost")?;
    out.say("  products         loss        gradient inputs → 0   other inputs → 0   → ±∞")?;
    for p in std::iter::once(Precision::F32).chain(example_precisions()) {
        let (loss, _, r) = small_gradient_step(p)?;
        out.say(&format!(
            "  {:<14} {loss:.7}  {:>20}  {:>17}  {:>4}",
            p.label(),
            r.gradients.underflows,
            r.others.underflows,
            r.gradients.overflows + r.others.overflows
        ))?;
    }
    let paths: Vec<String> = available_bf16_paths().iter().map(|p| p.name()).collect();
    out.say(&format!(
        "a product of bf16 matrices (f32 sums): paths on this CPU {}; fastest {}",
        paths.join(", "),
        best_bf16_path().name()
    ))?;
    let [order_widened, order_pairs, flush_widened, flush_pairs] = bf16_examples()?;
    out.say("  1, 0, 2^-24, 2^-24(1 + 2^-7) times ones, exact 1 + 2^-23 + 2^-31:")?;
    out.say(&format!(
        "    widened, in order {order_widened:.9}; VDPBF16PS, second of a pair first \
         {order_pairs:.9}"
    ))?;
    out.say(&format!(
        "  2^-130 · 2^100 = 2^-30: widened {flush_widened:.3e}; VDPBF16PS {flush_pairs} \
         (2^-130 is a bf16 subnormal, read as 0)"
    ))?;
    out.say("the four runs on the corpus follow with the figures (trained once, then drawn)")?;
    Ok(())
}

/// The four runs' results as the walk and the main job print them.
fn run_lines(runs: &[MixedRun]) -> Vec<String> {
    let f32_loss = runs.first().map_or(f64::NAN, |r| r.validation);
    let mut lines = vec![
        format!(
            "the corpus model, {RUN_STEPS} steps of {RUN_BATCH} windows of {RUN_CONTEXT} tokens \
             from one seed, portable kernel"
        ),
        format!(
            "({:.1} s of training steps in all):",
            runs.iter().map(|r| r.train_seconds).sum::<f64>()
        ),
        "  products        validation   − f32 (nats)   gradient inputs → 0 (per step)  → ±∞"
            .to_string(),
    ];
    for r in runs {
        lines.push(format!(
            "  {:<14} {:>11.4}  {:>13}  {:>14} ({:>7.1})  {:>5}",
            r.precision.label(),
            r.validation,
            change_text(r.validation - f32_loss),
            r.gradient_underflows(),
            r.gradient_underflows() as f64 / r.rounding.len().max(1) as f64,
            r.overflows()
        ));
    }
    lines
}

/// A change of loss as the walk and the page print it: two significant digits and its sign
/// (`+1.4e-4`, `-2.9e-6`), so a change too small for the losses' four decimals is still seen,
/// with its sign; `0` when there is none.
pub fn change_text(change: f64) -> String {
    if change == 0.0 { "0".to_string() } else { format!("{change:+.1e}") }
}

/// The file, written by the main job beside the figures, that keeps at full precision the
/// measured values the page's two run tables print (chapter 9's corpus model's validation loss
/// per storage, and the four precision runs): a change of any of them shows as a changed file,
/// and `the_pages_run_tables_are_the_main_jobs` holds the page's tables to it.
pub const RUNS_CSV: &str = "ch11_runs.csv";

/// The text of [`RUNS_CSV`]: `table,row,value` lines; the tables are `loss` and
/// `loss_with_head` (rows: storages), `validation`, `underflows`, `underflows_per_step` and
/// `overflows` (rows: the runs' labels, without commas).
pub fn runs_csv(quant: &QuantResults, runs: &[MixedRun]) -> String {
    let mut text = String::from("table,row,value\n");
    for (table, losses) in [("loss", &quant.losses), ("loss_with_head", &quant.losses_with_head)] {
        for (storage, loss) in losses {
            text += &format!("{table},{},{loss:?}\n", storage.name());
        }
    }
    for r in runs {
        let row = r.precision.label().replace(", ", " ");
        let per_step = r.gradient_underflows() as f64 / r.rounding.len().max(1) as f64;
        text += &format!("validation,{row},{:?}\n", r.validation);
        text += &format!("underflows,{row},{}\n", r.gradient_underflows());
        text += &format!("underflows_per_step,{row},{per_step:?}\n");
        text += &format!("overflows,{row},{}\n", r.overflows());
    }
    text
}

/// The four corpus runs ([`run_precisions`], [`RUN_STEPS`] steps each), trained once per process
/// (the walk and the figure share them).
pub fn mixed_runs() -> Result<&'static [MixedRun]> {
    static CELL: std::sync::OnceLock<std::result::Result<Vec<MixedRun>, String>> =
        std::sync::OnceLock::new();
    let runs = CELL.get_or_init(|| {
        let tokens = crate::ch09_gpt::experiments::corpus_tokens().map_err(|e| e.to_string())?;
        run_precisions()
            .into_iter()
            .map(|p| train_mixed(&tokens, RUN_STEPS, p, |_| {}).map_err(|e| e.to_string()))
            .collect()
    });
    runs.as_deref().map_err(|e| crate::error::Error::InvalidValue {
        op: "ch11_precision::mixed_runs",
        arg: "training",
        reason: e.clone(),
    })
}

// ───────────────────────────── figures ─────────────────────────────

/// The lengths of the summation figure: 2^4 … 2^22.
pub fn figure_lengths() -> Vec<usize> {
    (4..=22).map(|k| 1usize << k).collect()
}

/// The two figures: the summation error against n for each method, and the difference
/// quotients' error against h in f64 and f32, both on log–log axes in decades.
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let lengths = figure_lengths();
    let mut per_method: Vec<Vec<(f64, f64)>> = vec![Vec::new(); METHODS.len()];
    for &n in &lengths {
        let e = summation_errors(n, SUM_TRIALS, SUM_SEED)?;
        for (points, err) in per_method.iter_mut().zip(e) {
            points.push((n as f64, err));
        }
    }
    let sums = Figure::LogLine(
        LineChart {
            title: "Relative error of an f32 sum of n values in [0, 1), against the exact sum"
                .into(),
            x_label: "n, values summed (log scale)".into(),
            y_label: "relative error, root mean square of 4 draws (log scale)".into(),
            series: METHODS
                .iter()
                .zip(per_method)
                .map(|(m, points)| Series::new(m.name(), points))
                .collect(),
            markers: true,
        },
        LogAxes::Decades,
    );
    let steps = sweep();
    let mut series = Vec::new();
    for (kind, name) in [(Difference::Forward, "forward"), (Difference::Central, "central")] {
        series.push(Series::new(format!("{name}, f64"), step_errors::<f64>(kind, &steps)?));
    }
    for (kind, name) in [(Difference::Forward, "forward"), (Difference::Central, "central")] {
        series.push(Series::new(format!("{name}, f32"), step_errors::<f32>(kind, &steps)?));
    }
    let steps_fig = Figure::LogLine(
        LineChart {
            title: "Error of a difference quotient of sin at 1 against the step h".into(),
            x_label: "h (log scale)".into(),
            y_label: "relative error of the derivative (log scale)".into(),
            series,
            markers: true,
        },
        LogAxes::Decades,
    );
    Ok(vec![("ch11_summation".into(), sums), ("ch11_steps".into(), steps_fig)])
}

/// The loss curves of the runs on one plot: the running mean of each step's batch loss
/// ([`RunningMean`](crate::ch09_gpt::train::RunningMean)), one series per run, labelled by its
/// precision.
pub fn mixed_figure(runs: &[MixedRun]) -> Figure {
    let series = runs
        .iter()
        .map(|r| {
            let mut mean = crate::ch09_gpt::train::RunningMean::default();
            let points =
                r.history.iter().map(|s| (s.step as f64 + 1.0, mean.add(s.loss))).collect();
            Series::new(r.precision.label(), points)
        })
        .collect();
    Figure::Line(LineChart {
        title: "The corpus model trained with its products' inputs in f32, bf16 and f16".into(),
        x_label: "step".into(),
        y_label: "training loss, running mean (nats per token)".into(),
        series,
        markers: false,
    })
}

/// What [`mixed_figure`] cannot show, its curves lying on top of each other: each run's running
/// mean of the batch loss minus the f32 run's at the same step, one series per run after the
/// first (the f32 run, whose change is zero throughout). Empty when `runs` is.
pub fn mixed_change_figure(runs: &[MixedRun]) -> Figure {
    let means = |r: &MixedRun| {
        let mut mean = crate::ch09_gpt::train::RunningMean::default();
        r.history.iter().map(|s| (s.step as f64 + 1.0, mean.add(s.loss))).collect::<Vec<_>>()
    };
    let base = runs.first().map(means).unwrap_or_default();
    let series = runs
        .iter()
        .skip(1)
        .map(|r| {
            let points =
                means(r).iter().zip(&base).map(|(&(step, l), &(_, b))| (step, l - b)).collect();
            Series::new(format!("{} − f32", r.precision.label()), points)
        })
        .collect();
    Figure::Line(LineChart {
        title: "The same runs: running mean of the training loss minus the f32 run's".into(),
        x_label: "step".into(),
        y_label: "difference from f32 (nats per token)".into(),
        series,
        markers: false,
    })
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    let runs = mixed_runs()?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for line in run_lines(runs) {
            let _ = writeln!(out, " {line}");
        }
    }
    // The quantization table the page carries, as the walk prints it.
    let mut table = Vec::new();
    quant_walk(&mut Walk::new(&mut table), quant_results()?)?;
    {
        use std::io::Write;
        let _ = std::io::stdout().lock().write_all(&table);
    }
    crate::report::write_if_changed(&dir.join(RUNS_CSV), &runs_csv(quant_results()?, runs))?;
    let mut figs = figures()?;
    figs.push(("ch11_mixed_loss".into(), mixed_figure(runs)));
    figs.push(("ch11_mixed_loss_change".into(), mixed_change_figure(runs)));
    figs.extend(quant_figures()?);
    crate::plot::save_all(&figs, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 11,
    stem: "ch11_precision",
    title: "Floating point: the formats, and why the tricks work",
    worked,
    walk: walk_with_quantization,
    plots,
    errata: ERRATA,
};

// ───────────────────────────── quantized weights: what they cost ─────────────────────────────

/// Tokens the quantized samples add after chapter 9's prompt (its first 20 validation tokens).
pub const QUANT_SAMPLE_TOKENS: usize = 40;

/// What the quantization section measures on chapter 9's trained corpus model.
#[derive(Clone, Debug)]
pub struct QuantResults {
    /// Validation nats per token for each storage, block matrices quantized:
    /// (storage, loss).
    pub losses: Vec<(Storage, f64)>,
    /// The same with the unembedding (W_U = W_E, tied) quantized too.
    pub losses_with_head: Vec<(Storage, f64)>,
    /// The prompt and, per storage, the continuation (block matrices quantized).
    pub samples: (String, Vec<(Storage, String)>),
    /// The model's bytes of weights read per cached token, per storage (blocks quantized).
    pub bytes_per_token: Vec<(Storage, usize)>,
    /// Every block-matrix weight of the model.
    pub weights: Vec<f32>,
    /// (w − ŵ)/s for every block-matrix weight with s > 0: the error in steps, int8 then 4-bit.
    pub errors_in_steps: [Vec<f64>; 2],
    /// Wall-clock seconds of the section's measurements.
    pub seconds: f64,
}

/// The section's measurements, once per process (the walk and the plots share them); chapter 9's
/// corpus model from [`crate::ch09_gpt::book::results`], not trained again.
pub fn quant_results() -> Result<&'static QuantResults> {
    static CELL: std::sync::OnceLock<std::result::Result<QuantResults, String>> =
        std::sync::OnceLock::new();
    CELL.get_or_init(|| compute_quant_results().map_err(|e| e.to_string())).as_ref().map_err(|e| {
        crate::error::Error::InvalidValue {
            op: "ch11_precision::quant_results",
            arg: "chapter 9's corpus model",
            reason: e.clone(),
        }
    })
}

fn compute_quant_results() -> Result<QuantResults> {
    let model = &crate::ch09_gpt::book::results()?.corpus.model;
    quant_results_of(model, &crate::ch09_gpt::corpus_tokens()?)
}

/// The section's measurements on a corpus model and chapter 9's corpus tokens (its validation
/// part, and its tokenizer for the samples). Errors on a model the tokens do not fit.
pub fn quant_results_of(
    model: &crate::ch09_gpt::model::Gpt<f32>,
    tokens: &crate::ch09_gpt::CorpusTokens,
) -> Result<QuantResults> {
    use crate::ch08_tokens::Tokenizer;
    use crate::ch09_gpt::{book::CORPUS_PROMPT_TOKENS, data, sample};
    let t0 = std::time::Instant::now();
    let batches = data::covering_windows(&tokens.validation, model.config.context, 32);
    let losses = storage_losses(model, &batches, false)?;
    let losses_with_head = storage_losses(model, &batches, true)?;
    let prompt = tokens.validation[..CORPUS_PROMPT_TOKENS].to_vec();
    let mut samples = Vec::new();
    let mut bytes_per_token = Vec::new();
    for s in STORAGES {
        let stored = QuantGpt::new(model, s, false)?;
        bytes_per_token.push((s, stored.weight_bytes_per_token()));
        let g = sample::generate(
            &stored.widened(),
            &prompt,
            QUANT_SAMPLE_TOKENS,
            &sample::Decoding::temperature(0.8),
            &mut crate::rng::Rng::new(1),
            true,
        )?;
        samples.push((s, tokens.tokenizer.decode_lossy(g.new_tokens())?));
    }
    let mut weights = Vec::new();
    let mut errors_in_steps = [Vec::new(), Vec::new()];
    let order = model.shape().order();
    for ((s, _), m) in order.into_iter().zip(model.params.iter()) {
        if !is_quantized(s, false, model.config.tied) {
            continue;
        }
        weights.extend(m.iter().copied());
        for (errors, storage) in errors_in_steps.iter_mut().zip([Storage::Int8, Storage::Q4]) {
            let q = QuantMatrix::quantize(m, storage)?;
            let w_hat = q.dequantize();
            for (k, (w, v)) in m.iter().zip(w_hat.iter()).enumerate() {
                let scale = q.scales[(k / q.rows) * q.blocks() + (k % q.rows) / BLOCK];
                if scale > 0.0 {
                    errors.push((f64::from(*w) - f64::from(*v)) / f64::from(scale));
                }
            }
        }
    }
    Ok(QuantResults {
        losses,
        losses_with_head,
        samples: (tokens.tokenizer.decode_lossy(&prompt)?, samples),
        bytes_per_token,
        weights,
        errors_in_steps,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// The chapter's walk: [`walk`], then the quantization section ([`quant_walk`]) on chapter 9's
/// trained corpus model.
pub fn walk_with_quantization(out: &mut Walk) -> Result<()> {
    walk(out)?;
    out.step("8. Quantized weights: blocks of 32, one scale each (chapter 9's corpus model)")?;
    out.say(
        "The model quantized here is chapter 9's trained corpus model, so chapter 9's two \
         models are trained first, as `chapter 9` trains them (on the portable kernel, the same \
         bits on every CPU; the main job trains them once for both chapters).",
    )?;
    quant_walk(out, quant_results()?)
}

/// The quantization section of the walk: bytes, losses and samples per storage.
pub fn quant_walk(out: &mut Walk, r: &QuantResults) -> Result<()> {
    out.say(
        "Bytes a token reads: each storage's step reads its matrices as stored (bf16 as 2-byte \
         patterns, widened per dot: half of f32's bytes; int8 and 4-bit as codes and scales).",
    )?;
    out.say("storage  bytes/weight  MB read/token  val. loss  change   with W_U too  change")?;
    let (base, base_head) = (r.losses[0].1, r.losses_with_head[0].1);
    for (((s, loss), (_, loss_head)), (_, bytes)) in
        r.losses.iter().zip(&r.losses_with_head).zip(&r.bytes_per_token)
    {
        out.say(&format!(
            "{:<7}  {:>12.4}  {:>13.3}  {loss:>9.4}  {:>8}  {loss_head:>12.4}  {:>8}",
            s.name(),
            s.bytes_per_weight(),
            *bytes as f64 / 1e6,
            change_text(loss - base),
            change_text(loss_head - base_head)
        ))?;
    }
    out.say(&format!("sample prompt: {:?}", r.samples.0))?;
    for (s, text) in &r.samples.1 {
        out.say(&format!("{:<5} {text:?}", s.name()))?;
    }
    out.say(&format!("(measured in {:.1} s)", r.seconds))?;
    Ok(())
}

/// A histogram of `values` over `bins` equal bins from `lo` to `hi`: (bin centre, share of the
/// values in the bin), values outside left out.
pub fn histogram(values: &[f64], lo: f64, hi: f64, bins: usize) -> Vec<(f64, f64)> {
    let width = (hi - lo) / bins.max(1) as f64;
    let mut counts = vec![0usize; bins.max(1)];
    for &v in values {
        if v >= lo && v <= hi {
            counts[(((v - lo) / width) as usize).min(bins.max(1) - 1)] += 1;
        }
    }
    let n = values.len().max(1) as f64;
    counts.iter().enumerate().map(|(i, &c)| (lo + (i as f64 + 0.5) * width, c as f64 / n)).collect()
}

/// Bins of the histograms.
pub const HISTOGRAM_BINS: usize = 40;

/// The section's figures: the loss each storage costs, the block weights' histogram and the
/// rounding error's, in steps.
pub fn quant_figures() -> Result<Vec<(String, Figure)>> {
    quant_figures_of(quant_results()?)
}

/// [`quant_figures`] of the measurements `r`.
pub fn quant_figures_of(r: &QuantResults) -> Result<Vec<(String, Figure)>> {
    let change = |l: &[(Storage, f64)]| l.iter().map(|(_, v)| v - l[0].1).collect::<Vec<_>>();
    let loss = Figure::Bars(crate::plot::BarChart {
        title: "What the storage costs: change of validation loss from f32".into(),
        x_label: "storage of the weights".into(),
        y_label: "change in nats per token".into(),
        categories: r.losses.iter().map(|(s, _)| s.name().to_string()).collect(),
        series: vec![
            ("block matrices".into(), change(&r.losses)),
            ("block matrices and W_U".into(), change(&r.losses_with_head)),
        ],
    });
    let w: Vec<f64> = r.weights.iter().map(|&x| f64::from(x)).collect();
    let top = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let weights = Figure::Line(LineChart {
        title: "The block matrices' weights".into(),
        x_label: "weight".into(),
        y_label: "share of the weights per bin".into(),
        series: vec![Series::new("weights", histogram(&w, -top, top, HISTOGRAM_BINS))],
        markers: false,
    });
    let errors = Figure::Line(LineChart {
        title: "Rounding error w − ŵ in steps s: within half a step".into(),
        x_label: "(w − ŵ)/s".into(),
        y_label: "share of the weights per bin".into(),
        series: ["int8", "4-bit"]
            .into_iter()
            .zip(&r.errors_in_steps)
            .map(|(name, e)| Series::new(name, histogram(e, -0.5, 0.5, HISTOGRAM_BINS)))
            .collect(),
        markers: false,
    });
    Ok(vec![
        ("ch11_quant_loss".into(), loss),
        ("ch11_quant_weights".into(), weights),
        ("ch11_quant_error".into(), errors),
    ])
}
