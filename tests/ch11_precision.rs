//! Chapter 11: the floating-point formats and why the earlier chapters' tricks work.
//!
//! Our conversions are compared bit for bit with the `half` crate (a dev-dependency, the oracle)
//! on every f16 pattern and on millions of f32 patterns chosen to hit every rounding case: ties,
//! their neighbours, subnormals, overflow, ±∞ and NaN. The worked numbers of the page are pinned
//! by the tests named in its table.

mod common;

use half::{bf16, f16};
use llm_workbook::ch11_precision::book::{self as ch11_book, BIG_LOGIT, BIG_LOGITS, SUM_TERMS};
use llm_workbook::ch11_precision::{
    BF16, Difference, F16, F32, F64, FORMATS, bce_through_probability, best_step, bf16_to_f32,
    checker_step, f16_to_f32, f32_to_bf16, f32_to_f16, grid_values, kahan_sum, naive_sum,
    one_minus_sigmoid, overflow_threshold, pairwise_roundings, pairwise_sum, pow2, round_to_bf16,
    round_to_f16, softmax_unshifted, step_errors, summation_errors, sweep,
};
use llm_workbook::rng::Rng;

// ───────────────────────────── the oracle, bit for bit ─────────────────────────────

/// Every f16 pattern: the f32 we widen it to has the bits `half` gives (NaNs included).
#[test]
fn every_f16_pattern_widens_as_half_does() {
    let mut wrong = Vec::new();
    for b in 0..=u16::MAX {
        let (ours, theirs) = (f16_to_f32(b), f16::from_bits(b).to_f32());
        if ours.to_bits() != theirs.to_bits() {
            wrong.push(format!(
                "{b:#06x}: ours {:#010x}, half {:#010x}",
                ours.to_bits(),
                theirs.to_bits()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} patterns differ, first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

/// Every f16 value survives the trip to f32 and back unchanged; every NaN comes back a quiet NaN
/// of the same sign.
#[test]
fn every_f16_value_narrows_back_to_itself() {
    for b in 0..=u16::MAX {
        let back = f32_to_f16(f16_to_f32(b));
        if f16::from_bits(b).is_nan() {
            assert_eq!(back, b | 0x0200, "{b:#06x}: a NaN comes back quiet, sign and payload kept");
        } else {
            assert_eq!(back, b, "{b:#06x}");
        }
    }
}

/// The f32 patterns that decide a rounding to a format with F fraction bits: for every pattern
/// `top` of the format's upper bits, the f32s whose dropped bits are 0, 1, just under half, half
/// (a tie), just over half and all ones — both signs.
fn rounding_cases(dropped_bits: u32) -> Vec<f32> {
    let half = 1u32 << (dropped_bits - 1);
    let lows = [0, 1, half - 1, half, half + 1, (half << 1) - 1];
    let mut out = Vec::new();
    for top in 0..(1u32 << (32 - dropped_bits)) {
        for low in lows {
            out.push(f32::from_bits(top << dropped_bits | low));
        }
    }
    out
}

/// A sample of f32 patterns: every 4099th pattern (all signs, exponents and NaN payloads), and a
/// million random ones.
fn sampled_f32() -> Vec<f32> {
    let mut rng = Rng::new(36);
    let strided = (0..=u32::MAX).step_by(4099).map(f32::from_bits);
    strided.chain((0..1_000_000).map(|_| f32::from_bits(rng.next_u64() as u32))).collect()
}

/// The f16 neighbourhood of every f16 value: the f32 midpoints between consecutive f16 values
/// (exact ties), one f32 ulp on each side of them, and the values themselves, both signs; with
/// the range's edges (65504, 65519.996, 65520, 2⁻²⁵, 3·2⁻²⁶ …) among them.
fn f16_ties() -> Vec<f32> {
    let mut out = Vec::new();
    for b in 0..0x7c00u16 {
        let lo = f64::from(f16_to_f32(b));
        // Past 65504 the next value would be 2¹⁶, were there one: the tie 65520 rounds to ∞.
        let hi = if b == 0x7bff { 65536.0 } else { f64::from(f16_to_f32(b + 1)) };
        let mid = ((lo + hi) / 2.0) as f32;
        for x in
            [lo as f32, mid, f32::from_bits(mid.to_bits() - 1), f32::from_bits(mid.to_bits() + 1)]
        {
            out.extend([x, -x]);
        }
    }
    out
}

fn differences(cases: &[f32], ours: fn(f32) -> u16, theirs: fn(f32) -> u16) -> Vec<String> {
    cases
        .iter()
        .filter(|x| ours(**x) != theirs(**x))
        .map(|x| format!("{:#010x}: ours {:#06x}, half {:#06x}", x.to_bits(), ours(*x), theirs(*x)))
        .collect()
}

#[test]
fn f32_to_f16_matches_half_bit_for_bit() {
    let theirs = |x: f32| f16::from_f32(x).to_bits();
    let mut cases = sampled_f32();
    cases.extend(f16_ties());
    cases.extend(rounding_cases(13).into_iter().step_by(7));
    let wrong = differences(&cases, f32_to_f16, theirs);
    assert!(
        wrong.is_empty(),
        "{} of {} differ, first: {:?}",
        wrong.len(),
        cases.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(cases.len() > 2_700_000, "{} cases", cases.len());
}

#[test]
fn f32_to_bf16_matches_half_bit_for_bit() {
    let theirs = |x: f32| bf16::from_f32(x).to_bits();
    let mut cases = sampled_f32();
    cases.extend(rounding_cases(16));
    let wrong = differences(&cases, f32_to_bf16, theirs);
    assert!(
        wrong.is_empty(),
        "{} of {} differ, first: {:?}",
        wrong.len(),
        cases.len(),
        &wrong[..wrong.len().min(5)]
    );
    // Every bf16 widens as half widens it, too.
    for b in 0..=u16::MAX {
        assert_eq!(bf16_to_f32(b).to_bits(), bf16::from_bits(b).to_f32().to_bits(), "{b:#06x}");
    }
}

/// NaN: the sign kept, the quiet bit set, the top of the payload kept; a signalling NaN comes
/// out quiet. ±∞ stay ±∞; overflow gives ±∞, never NaN or the largest number.
#[test]
fn nan_stays_a_quiet_nan_with_its_sign_and_overflow_gives_infinity() {
    let signalling = f32::from_bits(0x7f80_0001);
    let negative_quiet = f32::from_bits(0xffc0_0000);
    assert_eq!(f32_to_f16(signalling), 0x7e00);
    assert_eq!(f32_to_f16(negative_quiet), 0xfe00);
    assert_eq!(f32_to_bf16(signalling), 0x7fc0);
    assert_eq!(f32_to_bf16(negative_quiet), 0xffc0);
    assert_eq!(f32_to_bf16(f32::from_bits(0x7fa0_0000)), 0x7fe0, "payload 0x20 kept");
    assert_eq!(f16_to_f32(0x7c01).to_bits(), 0x7fc0_2000);
    assert_eq!(f32_to_f16(f32::INFINITY), 0x7c00);
    assert_eq!(f32_to_f16(f32::NEG_INFINITY), 0xfc00);
    assert_eq!(f32_to_bf16(f32::NEG_INFINITY), 0xff80);
    assert_eq!(f32_to_f16(65519.0), 0x7bff, "65519 rounds down to 65504");
    assert_eq!(f32_to_f16(65520.0), 0x7c00, "the tie above 65504 rounds to even: ∞");
    assert_eq!(f32_to_f16(-1e6), 0xfc00);
    assert_eq!(f32_to_bf16(f32::MAX), 0x7f80, "f32's largest rounds up past bf16's");
    assert_eq!(f32_to_bf16(-0.0), 0x8000, "the sign of zero is kept");
}

/// Subnormals: f16's smallest is 2⁻²⁴; half of it is a tie that rounds to 0 (even), three
/// quarters round up to it; bf16 rounds f32's subnormals to its own, 7 bits wide.
#[test]
fn subnormals_keep_their_value_and_their_sign() {
    assert_eq!(f32_to_f16(2f32.powi(-24)), 0x0001);
    assert_eq!(f32_to_f16(2f32.powi(-25)), 0x0000);
    assert_eq!(f32_to_f16(-(2f32.powi(-25))), 0x8000);
    assert_eq!(f32_to_f16(3.0 * 2f32.powi(-26)), 0x0001);
    assert_eq!(f32_to_f16(3.0 * 2f32.powi(-25)), 0x0002, "1.5 quanta: a tie, 2 is even");
    assert_eq!(f32_to_f16(1023.0 * 2f32.powi(-24)), 0x03ff, "the largest f16 subnormal");
    assert_eq!(f32_to_f16(2047.5 * 2f32.powi(-25)), 0x0400, "rounds up into the normals");
    // bf16's subnormals have 7 bits: its smallest is 2⁻¹³³, and f32's below half of it vanish.
    let smallest = f32::from_bits(0x0001_0000);
    assert_eq!((round_to_bf16(smallest), round_to_bf16(-smallest)), (smallest, -smallest));
    assert_eq!(f64::from(smallest), BF16.min_subnormal());
    assert_eq!(round_to_bf16(f32::from_bits(3)), 0.0, "3·2⁻¹⁴⁹ is far below half of 2⁻¹³³");
    assert_eq!(round_to_bf16(f32::from_bits(0x8000)), 0.0, "2⁻¹³⁴, a tie: 0 is even");
    assert_eq!(round_to_bf16(f32::from_bits(0x8001)), smallest);
}

// ───────────────────────────── the formats ─────────────────────────────

#[test]
fn the_format_constants_are_rust_s_own() {
    assert_eq!(F64.epsilon(), f64::EPSILON);
    assert_eq!(F64.max_normal(), f64::MAX);
    assert_eq!(F64.min_normal(), f64::MIN_POSITIVE);
    assert_eq!(F64.min_subnormal(), f64::from_bits(1));
    assert_eq!(F32.epsilon(), f64::from(f32::EPSILON));
    assert_eq!(F32.max_normal(), f64::from(f32::MAX));
    assert_eq!(F32.min_normal(), f64::from(f32::MIN_POSITIVE));
    assert_eq!(F32.min_subnormal(), f64::from(f32::from_bits(1)));
    assert_eq!(F16.max_normal(), f64::from(f16::MAX.to_f32()));
    assert_eq!(BF16.max_normal(), f64::from(bf16::MAX.to_f32()));
    assert_eq!(F16.min_normal(), f64::from(f16::MIN_POSITIVE.to_f32()));
    assert_eq!(BF16.epsilon(), f64::from(bf16::EPSILON.to_f32()));
    assert_eq!(FORMATS.map(|f| f.bits()), [64, 32, 16, 16]);
    assert_eq!(FORMATS.map(|f| f.bias()), [1023, 127, 127, 15]);
    assert_eq!((pow2(-1074), pow2(-1075), pow2(1023)), (f64::from_bits(1), 0.0, 2f64.powi(1023)));
}

/// Decoding a pattern by the definition gives the value Rust's own `from_bits` gives, for f64
/// and f32, on random patterns and on the special ones.
#[test]
fn decoding_by_the_definition_agrees_with_from_bits() {
    let mut rng = Rng::new(11);
    let specials = [0u64, 1, 0x7ff0_0000_0000_0000, 0x000f_ffff_ffff_ffff, 0x8010_0000_0000_0000];
    for bits in specials.into_iter().chain((0..100_000).map(|_| rng.next_u64())) {
        let (ours, rust) = (F64.decode(bits).expect("64 bits"), f64::from_bits(bits));
        assert!(ours.to_bits() == rust.to_bits() || ours.is_nan() && rust.is_nan(), "{bits:#x}");
        let b32 = bits as u32;
        let (ours, rust) = (F32.decode(u64::from(b32)).expect("32 bits"), f32::from_bits(b32));
        assert!(ours == f64::from(rust) || ours.is_nan() && rust.is_nan(), "{b32:#x}");
    }
    let f = F16.fields(0xbc00).expect("16 bits");
    assert_eq!((f.sign, f.exponent, f.fraction), (1, 15, 0));
}

/// The ulp is the gap to the next number up: checked against the next f32 pattern.
#[test]
fn the_ulp_is_the_gap_to_the_next_number() {
    let mut rng = Rng::new(12);
    for _ in 0..100_000 {
        let x = f32::from_bits(rng.next_u64() as u32 & 0x7f7f_fffe);
        let next = f32::from_bits(x.to_bits() + 1);
        let gap = f64::from(next) - f64::from(x);
        assert_eq!(F32.ulp(f64::from(x)).expect("finite"), gap, "{x:e}");
    }
    assert_eq!(F16.ulp(1.0).expect("1"), pow2(-10));
    assert_eq!(F16.ulp(65504.0).expect("largest"), 32.0);
    assert_eq!(F16.ulp(0.0).expect("0"), pow2(-24));
    assert_eq!(BF16.ulp(256.0).expect("256"), 2.0, "bf16 cannot count past 256 in steps of 1");
}

#[test]
fn machine_epsilon_of_each_format() {
    let eps = FORMATS.map(|f| f.epsilon());
    assert_eq!(eps, [pow2(-52), pow2(-23), pow2(-7), pow2(-10)]);
    // ε is the gap from 1 to the next number: 1 + ε is stored, 1 + ε/2 rounds back to 1 (a tie,
    // 1 is even).
    assert_eq!(round_to_bf16(1.0 + 2f32.powi(-7)), 1.0 + 2f32.powi(-7));
    assert_eq!(round_to_bf16(1.0 + 2f32.powi(-8)), 1.0);
    assert_eq!(round_to_f16(1.0 + 2f32.powi(-11)), 1.0);
    assert_ne!(round_to_f16(1.0 + 2f32.powi(-10)), 1.0);
}

#[test]
fn the_largest_f16_is_65504() {
    assert_eq!(F16.max_normal(), 65504.0);
    assert_eq!(f16_to_f32(0x7bff), 65504.0);
    assert_eq!(F16.decode(0x7bff).expect("16 bits"), 65504.0);
}

#[test]
fn the_largest_bf16_is_near_f32_s() {
    assert_eq!(BF16.max_normal(), f64::from(bf16_to_f32(0x7f7f)));
    assert!((BF16.max_normal() / F32.max_normal() - 1.0).abs() < 2.0 * BF16.epsilon());
}

/// bf16 does not hold all of f32's range: at the top, from the midpoint (2 − 2⁻⁸)·2¹²⁷ between
/// bf16's largest number and 2¹²⁸ up to f32's largest, every f32 rounds to ∞; at the bottom,
/// every f32 up to half of bf16's smallest subnormal 2⁻¹³³ rounds to 0 (2⁻¹³⁴ itself is a tie,
/// and 0 is the even neighbour), and the f32 subnormals below go on to 2⁻¹⁴⁹.
#[test]
fn bf16_loses_the_ends_of_f32s_range() {
    let midpoint = (2.0 - pow2(-8)) * pow2(127);
    assert_eq!(format!("{midpoint:.4e}"), "3.3962e38");
    assert_eq!(format!("{:.4e}", BF16.max_normal()), "3.3895e38");
    let at_midpoint = midpoint as f32;
    assert_eq!(f64::from(at_midpoint), midpoint, "the midpoint is an f32");
    for x in [at_midpoint, f32::MAX, f32::from_bits(at_midpoint.to_bits() + 1)] {
        assert_eq!(f32_to_bf16(x), 0x7f80, "{x:e} rounds to +∞");
        assert_eq!(f32_to_bf16(x), bf16::from_f32(x).to_bits(), "{x:e}: the oracle agrees");
    }
    let below = f32::from_bits(at_midpoint.to_bits() - 1);
    assert_eq!(f64::from(bf16_to_f32(f32_to_bf16(below))), BF16.max_normal(), "{below:e}");
    assert_eq!(BF16.min_subnormal(), pow2(-133));
    let half_smallest = pow2(-134) as f32;
    for x in [half_smallest, f32::from_bits(1), pow2(-140) as f32] {
        assert_eq!(f32_to_bf16(x), 0x0000, "{x:e} rounds to 0");
        assert_eq!(f32_to_bf16(-x), 0x8000, "−{x:e} rounds to −0");
    }
    let just_over = f32::from_bits(half_smallest.to_bits() + 1);
    assert_eq!(f64::from(bf16_to_f32(f32_to_bf16(just_over))), pow2(-133), "{just_over:e}");
    assert_eq!(F32.min_subnormal(), pow2(-149));
}

#[test]
fn the_smallest_f16_normal_and_subnormal() {
    assert_eq!(F16.min_normal(), pow2(-14));
    assert_eq!(f64::from(f16_to_f32(0x0400)), pow2(-14));
    assert_eq!(F16.min_subnormal(), pow2(-24));
    assert_eq!(f64::from(f16_to_f32(0x0001)), pow2(-24));
}

#[test]
fn one_third_in_each_format() {
    let third = 1.0f32 / 3.0;
    assert_eq!(f32_to_bf16(third), 0x3eab);
    assert_eq!(f64::from(round_to_bf16(third)), 0.333_984_375);
    assert_eq!(f32_to_f16(third), 0x3555);
    assert_eq!(f64::from(round_to_f16(third)), 0.333_251_953_125);
}

#[test]
fn ties_round_to_even() {
    assert_eq!(round_to_bf16(1.0 + 2f32.powi(-8)), 1.0, "halfway to 1 + 2⁻⁷: 1 is even");
    assert_eq!(round_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 1.015_625, "halfway: 1 + 2⁻⁶ is even");
    assert_eq!(round_to_bf16(1.0 + 3.0 * 2f32.powi(-8) - 2f32.powi(-23)), 1.0 + 2f32.powi(-7));
    assert_eq!(round_to_f16(2049.0), 2048.0, "f16 counts by 2 above 2048; 2049 is a tie");
    assert_eq!(round_to_f16(2051.0), 2052.0);
    assert_eq!(round_to_f16(65520.0), f32::INFINITY);
}

// ───────────────────────────── the tricks ─────────────────────────────

#[test]
fn exp_overflows_past_the_log_of_the_largest_number() {
    let t64 = overflow_threshold(F64);
    assert!(t64.exp().is_finite() && (t64 + 1e-9).exp().is_infinite(), "{t64}");
    let t32 = overflow_threshold(F32) as f32;
    assert!((t32 - 1e-5).exp().is_finite() && (t32 + 1e-5).exp().is_infinite(), "{t32}");
    let t16 = overflow_threshold(F16) as f32;
    assert!(round_to_f16((t16 - 1e-3).exp()).is_finite(), "{t16}");
    assert!(round_to_f16((t16 + 1e-3).exp()).is_infinite());
    assert!(1000f64.exp().is_infinite());
}

#[test]
fn the_max_shift_saves_softmax() {
    use llm_workbook::ch02_softmax::{log_sum_exp, softmax};
    let naive = softmax_unshifted(&BIG_LOGITS).expect("three logits");
    assert!(naive.iter().all(|p| p.is_nan()), "∞/∞ is NaN: {naive:?}");
    let z = nalgebra::DVector::from_row_slice(&BIG_LOGITS);
    let p = softmax(&z).expect("finite");
    // The shift leaves the value alone: softmax(z) = softmax(z − 1000), computed directly.
    let small = softmax_unshifted(&[0.0, -1.0, -2.0]).expect("three");
    for (a, b) in p.iter().zip(&small) {
        assert!((a - b).abs() < 1e-15, "{a} {b}");
    }
    assert!((p[0] - 0.665_240_955_775).abs() < 1e-12);
    let lse = log_sum_exp(&z).expect("finite");
    assert!((lse - (1000.0 + (1.0 + (-1f64).exp() + (-2f64).exp()).ln())).abs() < 1e-12);
    assert_eq!(
        llm_workbook::ch11_precision::log_sum_exp_unshifted(&BIG_LOGITS).expect("3"),
        f64::INFINITY
    );
}

#[test]
fn one_minus_sigmoid_cancels_for_large_z() {
    use llm_workbook::ch01_logistic::{bce_from_logit, sigmoid};
    assert_eq!(one_minus_sigmoid(BIG_LOGIT), 0.0);
    assert!((sigmoid(-BIG_LOGIT) - (-BIG_LOGIT).exp()).abs() < 1e-33);
    assert_eq!(bce_through_probability(0.0, BIG_LOGIT), f64::INFINITY);
    assert_eq!(bce_from_logit(0.0, BIG_LOGIT), BIG_LOGIT);
    // Before it reaches 0 it loses digits: at z = 20 about ε/e⁻²⁰ of it is wrong.
    let (naive, exact) = (one_minus_sigmoid(20.0f64), sigmoid(-20.0f64));
    let relative = ((naive - exact) / exact).abs();
    assert!(relative > 1e-10 && relative < 1e-6, "{relative}");
    // σ(z) = 1/(1 + e^{−z}) is 1 once 1 + e^{−z} rounds to 1, from z ≈ ln(2/ε): 36.7 in f64,
    // 16.6 in f32.
    let first_zero = |eps: f64, f: &dyn Fn(f64) -> f64| {
        (0..1000).map(|i| f64::from(i) / 10.0).find(|&z| f(z) == 0.0).map(|z| (z, (2.0 / eps).ln()))
    };
    let (z64, predicted64) = first_zero(F64.epsilon(), &one_minus_sigmoid::<f64>).expect("zero");
    let (z32, predicted32) =
        first_zero(F32.epsilon(), &|z| f64::from(one_minus_sigmoid(z as f32))).expect("zero");
    assert!((z64 - predicted64).abs() < 0.5 && (z32 - predicted32).abs() < 0.5, "{z64} {z32}");
}

// ───────────────────────────── summation ─────────────────────────────

#[test]
fn the_f32_sum_of_ones_stops_at_2_24() {
    let (naive, kahan) = ch11_book::sum_of_ones(1 << 25);
    assert_eq!(naive, 16_777_216.0);
    assert_eq!(kahan, 33_554_432.0);
    assert_eq!(16_777_216f32 + 1.0, 16_777_216.0);
    let ones = vec![1.0f32; 1 << 25];
    assert_eq!(pairwise_sum(&ones), 33_554_432.0);
}

/// Pairwise summation stops halving at blocks of 8 added one by one, so a term passes through up
/// to 7 additions in its block and ⌈log₂(n/8)⌉ above it: ⌈log₂ n⌉ + 4 roundings for n > 8, not
/// the ⌈log₂ n⌉ of halving down to single terms. The recursion's count against the closed form.
#[test]
fn pairwise_summation_rounds_each_term_at_most_log2_n_plus_4_times() {
    for n in 0..=8 {
        assert_eq!(pairwise_roundings(n), n.saturating_sub(1), "n = {n}");
    }
    for n in 9usize..=5000 {
        let log2_ceil = n.next_power_of_two().trailing_zeros() as usize;
        let bound = log2_ceil + 4;
        let exact_at_powers = (n / 8).is_power_of_two() && n % 8 == 0;
        assert!(pairwise_roundings(n) <= bound, "n = {n}: {} > {bound}", pairwise_roundings(n));
        if exact_at_powers {
            assert_eq!(pairwise_roundings(n), bound, "n = {n}");
        }
    }
    assert_eq!(pairwise_roundings(1 << 20), 24);
    assert_eq!(pairwise_roundings(9), 5, "halves of 4 and 5: 4 additions in a block, 1 above");
}

/// At n = 2²⁰: the running sum's error is far above the others; pairwise stays under its bound
/// (⌈log₂ n⌉ + 4)·u, Kahan under 2u; and the running sum's error grows with n.
#[test]
fn summation_error_against_the_exact_sum() {
    let u = F32.unit_roundoff();
    let [naive, lanes, pairwise, kahan] =
        summation_errors(SUM_TERMS, ch11_book::SUM_TRIALS, ch11_book::SUM_SEED).expect("sizes");
    assert!(naive > 30.0 * pairwise && naive > lanes, "{naive} {lanes} {pairwise}");
    assert!(pairwise < pairwise_roundings(SUM_TERMS) as f64 * u, "{pairwise}");
    assert!(kahan <= 2.0 * u, "{kahan}");
    let small = summation_errors(1 << 10, 4, 1).expect("sizes")[0];
    assert!(naive > 30.0 * small, "{small} at 2¹⁰, {naive} at 2²⁰");
    // The reference is exact: the f64 sum of these values agrees with it to f64's rounding.
    let (xs, exact) = grid_values(1000, 3).expect("1000");
    let f64_sum: f64 = xs.iter().map(|&x| f64::from(x)).sum();
    assert!(((f64_sum - exact) / exact).abs() < 1e-13);
    assert_eq!(naive_sum(xs.iter().copied()), xs.iter().copied().fold(0.0, |s, x| s + x));
    assert!(((f64::from(kahan_sum(xs.iter().copied())) - exact) / exact).abs() <= 2.0 * u);
}

// ───────────────────────────── the step of a difference ─────────────────────────────

/// The grid step of least error, leaving out an isolated dip: a point whose error is under a
/// tenth of both its neighbours', where the rounding errors of the two values of f happen to
/// cancel (luck, not the trend of the curve).
fn least_error_step_of_the_trend(errors: &[(f64, f64)]) -> (f64, f64) {
    let dip = |i: usize| {
        i > 0 && i + 1 < errors.len() && 10.0 * errors[i].1 < errors[i - 1].1.min(errors[i + 1].1)
    };
    let kept: Vec<(f64, f64)> =
        errors.iter().enumerate().filter(|&(i, _)| !dip(i)).map(|(_, &e)| e).collect();
    best_step(&kept).expect("steps")
}

/// Each measured curve bottoms out within a factor 3 of its balanced step ε^{1/(p+1)} (the
/// constants the step drops are 2 and 3^{1/3}); to the right of it the error falls as h
/// (forward) and h² (central): a decade of h is one decade of error forward and two central.
/// The f32 central curve's least error on the grid is an isolated dip at 5.6·10⁻⁴, more than ten
/// times under both neighbours; the curve's trend bottoms out at 5.6·10⁻³, next to 4.9·10⁻³.
#[test]
fn each_difference_is_best_near_its_balanced_step() {
    let steps = sweep();
    assert_eq!((steps[0], *steps.last().expect("steps")), (0.1, 1e-13));
    let mut bests = Vec::new();
    for kind in [Difference::Forward, Difference::Central] {
        for (eps, errors) in [
            (F64.epsilon(), step_errors::<f64>(kind, &steps).expect("steps")),
            (F32.epsilon(), step_errors::<f32>(kind, &steps).expect("steps")),
        ] {
            let (h, _) = least_error_step_of_the_trend(&errors);
            let balanced = kind.balanced_step(eps).expect("ε");
            assert!(h > balanced / 3.0 && h < balanced * 3.0, "{kind:?} ε={eps:e}: best h {h:e}");
            bests.push((
                format!("{:.1e}", best_step(&errors).expect("steps").0),
                format!("{h:.1e}"),
            ));
        }
        let e = step_errors::<f64>(kind, &[1e-2, 1e-3]).expect("steps");
        let decades = (e[0].1 / e[1].1).log10();
        assert!((decades - f64::from(kind.order())).abs() < 0.1, "{kind:?}: {decades}");
    }
    // The page's minima: f64 forward, f32 forward, f64 central, f32 central (grid, trend).
    let pairs: Vec<(&str, &str)> = bests.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(
        pairs,
        [("5.6e-9", "5.6e-9"), ("3.2e-4", "3.2e-4"), ("5.6e-6", "5.6e-6"), ("5.6e-4", "5.6e-3")]
    );
    // 10⁻³, 10^{−13/4} ≈ 5.6·10⁻⁴ and 10^{−14/4} ≈ 3.2·10⁻⁴ (the dip between its neighbours), and
    // 10^{−9/4} ≈ 5.6·10⁻³ (the trend's least).
    let at = [steps[8], steps[9], steps[10], steps[5]];
    let central32 = step_errors::<f32>(Difference::Central, &at).expect("steps");
    assert_eq!(
        central32.iter().map(|(_, e)| format!("{e:.1e}")).collect::<Vec<_>>(),
        ["2.6e-5", "1.3e-6", "1.6e-4", "8.7e-6"]
    );
}

/// The checker's step 10⁻⁶ is within a decade of f64's balanced central step, and its error
/// there is far under the checker's tolerance; in f32 the same step would fail it.
#[test]
fn the_checker_s_step() {
    let config = llm_workbook::gradcheck::Config::default();
    let h = checker_step();
    assert_eq!(h, config.step);
    let balanced = Difference::Central.balanced_step(F64.epsilon()).expect("ε");
    assert!(h > balanced / 10.0 && h < balanced * 10.0, "{h:e} against {balanced:e}");
    let central = step_errors::<f64>(Difference::Central, &[h]).expect("h")[0].1;
    assert!(central < config.tolerance / 1000.0, "{central:e}");
    let forward = step_errors::<f64>(Difference::Forward, &[h]).expect("h")[0].1;
    assert!(forward > 100.0 * central, "{forward:e} {central:e}");
    let in_f32 = step_errors::<f32>(Difference::Central, &[h]).expect("h")[0].1;
    assert!(in_f32 > config.tolerance, "{in_f32:e}");
}

// ───────────────────────────── bad input ─────────────────────────────

#[test]
fn bad_sizes_steps_and_patterns_are_refused_naming_the_argument() {
    let named = |e: llm_workbook::Error, arg: &str| {
        let text = e.to_string();
        assert!(text.contains(arg) && !text.contains('\n'), "{text}");
    };
    named(grid_values(0, 1).unwrap_err(), "n");
    named(grid_values(usize::MAX, 1).unwrap_err(), "n");
    named(summation_errors(8, 0, 1).unwrap_err(), "trials");
    for bad in [0.0, -1e-6, f64::NAN, f64::INFINITY] {
        named(step_errors::<f64>(Difference::Central, &[1e-3, bad]).unwrap_err(), "steps");
    }
    named(best_step(&[]).unwrap_err(), "errors");
    for bad in [0.0, 1.0, -0.1, f64::NAN] {
        named(Difference::Central.balanced_step(bad).unwrap_err(), "epsilon");
    }
    named(F16.fields(0x1_0000).unwrap_err(), "bits");
    named(F16.decode(0x1_0000).unwrap_err(), "bits");
    named(F16.ulp(70000.0).unwrap_err(), "x");
    named(F64.ulp(f64::NAN).unwrap_err(), "x");
    named(softmax_unshifted::<f64>(&[]).unwrap_err(), "z");
    named(llm_workbook::ch11_precision::log_sum_exp_unshifted::<f32>(&[]).unwrap_err(), "z");
}

// ───────────────────────────── the book ─────────────────────────────

#[test]
fn the_figures_show_what_the_prose_says() {
    use llm_workbook::plot::{Figure, LogAxes};
    let figs = ch11_book::figures().expect("figures");
    let names: Vec<&str> = figs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["ch11_summation", "ch11_steps"]);
    let Figure::LogLine(sums, LogAxes::Decades) = &figs[0].1 else { panic!("log–log") };
    let labels: Vec<&str> = sums.series.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, ["left to right", "16 lanes (lane_sum)", "pairwise", "Kahan"]);
    let last = |i: usize| sums.series[i].points.last().expect("points").1;
    // At 2²²: the running sum is the worst and Kahan the best, by orders of magnitude.
    assert!(last(0) > 100.0 * last(2) && last(2) > last(3), "{:?}", sums.series);
    assert_eq!(sums.series[0].points[0].0, 16.0);
    let Figure::LogLine(steps, LogAxes::Decades) = &figs[1].1 else { panic!("log–log") };
    assert_eq!(steps.series.len(), 4);
    assert!(steps.series.iter().all(|s| s.points.len() == 49));
    let dir = common::temp_dir("ch11-figures");
    for (stem, fig) in &figs {
        let files = fig.save(&dir, stem).expect("drawn");
        assert!(
            files.iter().all(|f| std::fs::metadata(f).map(|m| m.len() > 1000).unwrap_or(false))
        );
    }
}

#[test]
fn the_walk_prints_every_step_within_the_terminal() {
    // The walk up to the quantized weights (that section needs chapter 9's trained model; the
    // test of the section walks it on a smaller one).
    let formats = llm_workbook::report::Chapter { walk: ch11_book::walk, ..ch11_book::CHAPTER };
    let text = common::walk_text(&formats);
    for step in ["1. Four formats", "2. Rounding to nearest", "6. The step", "7. Mixed precision"] {
        assert!(text.contains(step), "no step {step}");
    }
    // Each numbered step of the walk is the page's section of that number: same number, same
    // first word of the title (and no TeX braces reach the terminal).
    let page = common::prose(ch11_book::CHAPTER.stem);
    let steps: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("── ")).collect();
    assert_eq!(steps.len(), 7, "{steps:?}");
    for step in &steps {
        let (number, title) = step.split_once(". ").expect("a numbered step");
        let first = title.split_whitespace().next().unwrap_or_default();
        let first = first.trim_end_matches(|c: char| !c.is_alphanumeric());
        let heading = format!("## {number}. {first}");
        assert!(page.lines().any(|l| l.starts_with(&heading)), "{step}: no page section {heading}");
    }
    assert!(!text.contains("^{") && !text.contains("_{"), "TeX braces in the walk");
    assert!(text.contains("0.333984375"), "bf16's 1/3");
    let wide: Vec<&str> = text.lines().filter(|l| l.chars().count() > 100).collect();
    assert!(wide.is_empty(), "{}", wide.join("\n"));
}

#[test]
fn the_chapter_prose_carries_the_worked_table() {
    common::check_chapter_prose(&ch11_book::CHAPTER);
}

// ───────────────────────────── mixed precision ─────────────────────────────

use llm_workbook::ch09_gpt::config::Config;
use llm_workbook::ch09_gpt::fast::FusedStep;
use llm_workbook::ch09_gpt::model::Gpt;
use llm_workbook::ch11_precision::mixed::{self, MAX_LOSS_SCALE};
use llm_workbook::ch11_precision::runs::{
    self, F16_LOSS_SCALE, MixedRun, small_gradient_batch, small_gradient_step,
};
use llm_workbook::ch11_precision::{Precision, ProductInputs, Rounding};
use llm_workbook::matmul::{Op, Settings};
use nalgebra::DMatrix;

const BF16_INPUTS: Precision = Precision { inputs: ProductInputs::Bf16, loss_scale: 1.0 };
const F16_INPUTS: Precision = Precision { inputs: ProductInputs::F16, loss_scale: 1.0 };
const F16_SCALED: Precision = Precision { inputs: ProductInputs::F16, loss_scale: F16_LOSS_SCALE };

/// The largest |x − y| of a tensor over the largest |y|, the worst tensor's.
fn worst_relative(a: &[DMatrix<f64>], b: &[DMatrix<f64>]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs().max() / y.abs().max().max(1e-30)).fold(0.0, f64::max)
}

/// The tiny model of the small-gradient example, and one step of it with `precision`.
fn step_bits(model: &Gpt<f32>, precision: Precision) -> (u64, Vec<Vec<u32>>) {
    let mut step = FusedStep::new();
    step.set_precision(precision);
    let (loss, grads) = step.loss_and_grads(model, &small_gradient_batch().unwrap()).unwrap();
    (loss.to_bits(), grads.iter().map(|g| g.iter().map(|v| v.to_bits()).collect()).collect())
}

#[test]
fn f32_products_leave_the_step_bit_for_bit() {
    let model = Gpt::<f32>::new(Config::new(runs::SMALL_VOCAB, 32, 2, 4, 64), 3).unwrap();
    let fresh = step_bits(&model, FusedStep::<f32>::new().precision());
    let explicit = Precision::new(ProductInputs::F32, 1.0).unwrap();
    assert!(step_bits(&model, explicit) == fresh, "explicit f32 changed the step's bits");
    // A workspace that took a bf16 step and is set back to f32 gives the same bits again.
    let mut step = FusedStep::new();
    step.set_precision(BF16_INPUTS);
    let batch = small_gradient_batch().unwrap();
    let rounded = step.loss_and_grads(&model, &batch).unwrap().0;
    step.set_precision(Precision::F32);
    let again = step.loss_and_grads(&model, &batch).unwrap().0;
    assert_eq!(again.to_bits(), fresh.0);
    assert_ne!(rounded.to_bits(), fresh.0, "bf16 inputs must change the loss");
    assert_eq!(step.rounding(), Default::default(), "f32 rounds nothing");
}

/// sign·[0.25, 4): every value in the normal range of both formats.
fn normal_values(rows: usize, cols: usize, rng: &mut Rng) -> DMatrix<f32> {
    DMatrix::from_fn(rows, cols, |_, _| {
        let sign = if rng.below(2) == 0 { -1.0 } else { 1.0 };
        sign * rng.uniform(0.25, 4.0) as f32
    })
}

/// A value rounded by the `half` crate, the oracle.
fn half_round(inputs: ProductInputs, x: f32) -> f64 {
    f64::from(match inputs {
        ProductInputs::F32 => x,
        ProductInputs::Bf16 => half::bf16::from_f32(x).to_f32(),
        ProductInputs::F16 => half::f16::from_f32(x).to_f32(),
    })
}

#[test]
fn a_rounded_product_is_within_its_bound() {
    let mut rng = Rng::new(21);
    for inputs in [ProductInputs::Bf16, ProductInputs::F16] {
        let u = inputs.format().unit_roundoff();
        for (m, k, n, ta, tb) in [
            (5, 7, 3, Op::N, Op::N),
            (33, 65, 17, Op::T, Op::N),
            (1, 129, 9, Op::N, Op::T),
            (40, 3, 31, Op::T, Op::T),
        ] {
            let a = match ta {
                Op::N => normal_values(m, k, &mut rng),
                Op::T => normal_values(k, m, &mut rng),
            };
            let b = match tb {
                Op::N => normal_values(k, n, &mut rng),
                Op::T => normal_values(n, k, &mut rng),
            };
            let mut c = DMatrix::zeros(m, n);
            let ours = Settings::default();
            let tally = mixed::gemm(inputs, ours, 1.0, &a, ta, &b, tb, 0.0, &mut c).unwrap();
            assert_eq!(tally, (Rounding::default(), Rounding::default()));
            let at = |x: &DMatrix<f32>, op: Op, i: usize, j: usize| match op {
                Op::N => x[(i, j)],
                Op::T => x[(j, i)],
            };
            let gamma = k as f64 * 2f64.powi(-24) / (1.0 - k as f64 * 2f64.powi(-24));
            for i in 0..m {
                for j in 0..n {
                    let (mut exact, mut rounded, mut size, mut rounded_size) = (0.0, 0.0, 0.0, 0.0);
                    for p in 0..k {
                        let (x, y) = (at(&a, ta, i, p), at(&b, tb, p, j));
                        let (rx, ry) = (half_round(inputs, x), half_round(inputs, y));
                        exact += f64::from(x) * f64::from(y);
                        rounded += rx * ry;
                        size += f64::from(x).abs() * f64::from(y).abs();
                        rounded_size += (rx * ry).abs();
                    }
                    let got = f64::from(c[(i, j)]);
                    // The f32 product of the rounded inputs: only the accumulation's error.
                    assert!(
                        (got - rounded).abs() <= gamma * rounded_size,
                        "{} {m}×{k}×{n} ({i}, {j}): {got} against {rounded}",
                        inputs.name()
                    );
                    // Against the unrounded inputs: (2u + u²) Σ|a||b| more.
                    let bound = (2.0 * u + u * u) * size + gamma * rounded_size;
                    assert!((got - exact).abs() <= bound, "{got} against {exact}");
                }
            }
        }
    }
    // What the tally counts: f16 flushes 10⁻⁸ to 0 and overflows 7·10⁴; 3·10⁻⁸ is just over
    // half the smallest subnormal and rounds up to it; a zero is not an underflow.
    let mut values = [1e-8f32, 7e4, 3e-8, 0.0, -1e-9];
    let tally = mixed::round_entries(ProductInputs::F16, &mut values);
    assert_eq!(tally, Rounding { underflows: 2, overflows: 1 });
    assert_eq!(values[2], 2f32.powi(-24));
    assert_eq!(values[4].to_bits(), (-0.0f32).to_bits(), "the sign of an underflow is kept");
}

/// Below the normal range the rounding error is absolute, not relative: up to half the subnormal
/// spacing, η = 2⁻²⁵ for f16 and 2⁻¹³⁴ for bf16, so |â − a| ≤ u|a| + η and the bound of one
/// product gains η(1 + u)Σ(|a_p| + |b_p|) + kη². Here every a_p is 1.375 times the smallest
/// subnormal, which rounds down to it (an error of 0.375 of it, 27 % of the value, against a
/// relative u of 0.05 % in f16), times positive b_p: the relative bound alone fails, the whole
/// one holds.
#[test]
fn the_product_bound_gains_an_absolute_term_below_the_normal_range() {
    let mut rng = Rng::new(23);
    for (inputs, eta, smallest) in
        [(ProductInputs::F16, pow2(-25), pow2(-24)), (ProductInputs::Bf16, pow2(-134), pow2(-133))]
    {
        let u = inputs.format().unit_roundoff();
        let k = 257;
        let a = vec![(1.375 * smallest) as f32; k];
        assert_eq!(half_round(inputs, a[0]), smallest, "{}", inputs.name());
        let b: Vec<f32> = (0..k).map(|_| rng.uniform(0.25, 4.0) as f32).collect();
        let (mut exact, mut rounded, mut size, mut sides) = (0.0, 0.0, 0.0, 0.0);
        for (&x, &y) in a.iter().zip(&b) {
            exact += f64::from(x) * f64::from(y);
            rounded += half_round(inputs, x) * half_round(inputs, y);
            size += f64::from(x).abs() * f64::from(y).abs();
            sides += f64::from(x).abs() + f64::from(y).abs();
        }
        let relative = (2.0 * u + u * u) * size;
        let whole = relative + eta * (1.0 + u) * sides + k as f64 * eta * eta;
        let error = (rounded - exact).abs();
        assert!(error > relative, "{}: {error:e} within {relative:e}", inputs.name());
        assert!(error <= whole, "{}: {error:e} past {whole:e}", inputs.name());
    }
}

/// The products' rounding ([`ProductInputs::round`], bit operations in `matmul`) is the
/// chapter's conversion ([`round_to_bf16`], [`round_to_f16`], written from the formats'
/// definitions) bit for bit: on every pattern of f32's top 16 bits, each with the low 16 bits
/// at the places rounding decides (a tie, one above and one below it at f16's kept bits 13, 14
/// and 15 and at bf16's bit 16), so zeros, subnormals of both formats, the overflow to ∞, ∞ and
/// NaNs are all met.
#[test]
fn the_products_rounding_is_the_chapters_conversion_bit_for_bit() {
    use llm_workbook::ch11_precision::{round_to_bf16, round_to_f16};
    const LOW: [u32; 19] = [
        0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2001, 0x3000, 0x3fff, 0x4000, 0x4001,
        0x6000, 0x7fff, 0x8000, 0x8001, 0xa000, 0xc000, 0xffff,
    ];
    type Lesson = fn(f32) -> f32;
    let lessons: [(ProductInputs, Lesson); 2] =
        [(ProductInputs::Bf16, round_to_bf16), (ProductInputs::F16, round_to_f16)];
    let mut checked = 0;
    for top in 0..=u32::from(u16::MAX) {
        for low in LOW {
            let x = f32::from_bits(top << 16 | low);
            for (inputs, lesson) in lessons {
                let (ours, reference) = (inputs.round(x).to_bits(), lesson(x).to_bits());
                assert!(
                    ours == reference,
                    "{} of {:#010x}: {ours:#010x}",
                    inputs.name(),
                    x.to_bits()
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * 65_536 * LOW.len());
    assert_eq!(ProductInputs::F32.round(0.1), 0.1, "f32 inputs are not rounded");
}

/// One step of the small-gradient example with bf16 inputs against the f32 step. Each product
/// moves by at most (2u + u²) Σ|a||b| (u = 2⁻⁸); a gradient is the end of a chain of such
/// products, whose first-order errors add. Measured: the loss 7.0·10⁻⁵ apart, the worst
/// tensor 8.6·10⁻³ = 2.2u of its largest entry; held to 4u. Rounding to 4 fraction bits
/// instead of 7 (u = 2⁻⁵) fails it.
#[test]
fn one_bf16_step_stays_near_the_f32_step() {
    let (loss32, grads32, _) = small_gradient_step(Precision::F32).unwrap();
    let (loss16, grads16, r) = small_gradient_step(BF16_INPUTS).unwrap();
    assert_eq!(r.gradients.underflows + r.others.underflows, 0, "bf16 has f32's range");
    let u = ProductInputs::Bf16.format().unit_roundoff();
    let worst = worst_relative(&grads16, &grads32);
    assert!(worst <= 4.0 * u, "worst gradient tensor {worst:e} of its largest entry");
    assert!(worst > u / 4.0, "{worst:e}: the backward products were not rounded");
    assert_eq!(format!("{:.1e}", (loss16 - loss32).abs()), "7.0e-5");
}

/// The same step with f16 inputs: the gradient inputs that became 0, pinned, and the
/// gradients against f32's. Scaling by 2¹⁰ moves every gradient input 10 binades up, out of
/// the range that flushes to 0; unscaled afterwards, the gradients are f32's within 4u
/// (u = 2⁻¹¹; measured 7.9·10⁻⁴ = 1.6u). Forgetting to unscale leaves them 1024 times too
/// large.
#[test]
fn f16_gradients_underflow_without_loss_scaling() {
    let (_, grads32, _) = small_gradient_step(Precision::F32).unwrap();
    let (_, plain, r_plain) = small_gradient_step(F16_INPUTS).unwrap();
    let (_, scaled, r_scaled) = small_gradient_step(F16_SCALED).unwrap();
    assert_eq!(r_plain.gradients.underflows, 3120);
    assert_eq!(r_scaled.gradients.underflows, 0);
    assert_eq!(r_plain.gradients.overflows + r_scaled.gradients.overflows, 0);
    assert_eq!(r_scaled.others.overflows, 0, "the scale leaves every input below 65504");
    let u = ProductInputs::F16.format().unit_roundoff();
    for (grads, what) in [(&plain, "unscaled"), (&scaled, "scaled")] {
        let worst = worst_relative(grads, &grads32);
        assert!(worst <= 4.0 * u, "{what}: {worst:e}");
    }
}

/// The short runs of the margin test: f32 and bf16, trained once per test process.
fn short_runs() -> &'static [MixedRun] {
    static RUNS: std::sync::OnceLock<Vec<MixedRun>> = std::sync::OnceLock::new();
    RUNS.get_or_init(|| {
        let tokens = llm_workbook::ch09_gpt::experiments::corpus_tokens().unwrap();
        [Precision::F32, BF16_INPUTS]
            .into_iter()
            .map(|p| runs::train_mixed(&tokens, SHORT_STEPS, p, |_| {}).unwrap())
            .collect()
    })
}
const SHORT_STEPS: usize = 60;

/// The corpus model for 60 steps with f32 and with bf16 inputs, from the same seed and the
/// same batches. Over the first 16 steps each batch's loss stays within 5·10⁻⁴ of f32's
/// (measured: 2.2·10⁻⁴ at worst; rounding to 4 fraction bits instead of 7 exceeds it from
/// step 2 on); after that the two runs drift apart as any two nearby runs do, and the final
/// validation losses end 0.045 nats apart (5.0602 and 5.1055), held within 0.1.
#[test]
fn the_bf16_run_ends_within_its_margin_of_f32() {
    let [f32_run, bf16_run] = short_runs() else { panic!("two runs") };
    for (step, (a, b)) in f32_run.history.iter().zip(&bf16_run.history).take(16).enumerate() {
        assert!((a.loss - b.loss).abs() <= 5e-4, "step {step}: {} against {}", b.loss, a.loss);
    }
    let margin = (bf16_run.validation - f32_run.validation).abs();
    assert!(margin <= 0.1, "validation {} against {}", bf16_run.validation, f32_run.validation);
    assert_eq!(format!("{:.4}", f32_run.validation), "5.0602");
    assert_eq!(format!("{:.4}", bf16_run.validation), "5.1055");
}

#[test]
fn the_mixed_figure_draws_one_curve_per_run() {
    use llm_workbook::plot::Figure;
    let fig = llm_workbook::ch11_precision::book::mixed_figure(short_runs());
    let Figure::Line(chart) = &fig else { panic!("a line chart") };
    let labels: Vec<&str> = chart.series.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, ["f32", "bf16"]);
    assert!(chart.series.iter().all(|s| s.points.len() == SHORT_STEPS));
    let dir = common::temp_dir("ch11-mixed");
    for f in fig.save(&dir, "mixed").unwrap() {
        assert!(std::fs::metadata(&f).unwrap().len() > 1000, "{}", f.display());
    }
    assert_eq!(F16_SCALED.label(), "f16, S = 2^10");
    // The second figure shows what the first cannot: each run's difference from f32, step by
    // step (zero would mean the same curve).
    let runs = short_runs();
    let change = llm_workbook::ch11_precision::book::mixed_change_figure(runs);
    let Figure::Line(chart) = &change else { panic!("a line chart") };
    assert_eq!(chart.series.len(), 1);
    assert_eq!(chart.series[0].label, "bf16 − f32");
    let first = |r: &llm_workbook::ch11_precision::runs::MixedRun| r.history[0].loss;
    assert_eq!(chart.series[0].points[0], (1.0, first(&runs[1]) - first(&runs[0])));
    assert!(chart.series[0].points.iter().any(|p| p.1 != 0.0), "bf16 changes nothing?");
}

#[test]
fn bad_precisions_are_refused_naming_the_argument() {
    for scale in [0.0, 0.5, 1000.0, 2.0 * MAX_LOSS_SCALE, f64::NAN, f64::INFINITY] {
        let e = Precision::new(ProductInputs::F16, scale).unwrap_err().to_string();
        assert!(e.contains("loss_scale"), "{e}");
    }
    let tokens = llm_workbook::ch09_gpt::experiments::CorpusTokens {
        tokenizer: llm_workbook::ch08_tokens::bpe::Bpe::bytes_only(
            llm_workbook::ch08_tokens::bpe::PreTokenizer::Gpt2,
        ),
        train: vec![1; 100],
        validation: vec![1; 100],
    };
    let e = runs::train_mixed(&tokens, 0, BF16_INPUTS, |_| {}).unwrap_err().to_string();
    assert!(e.contains("steps"), "{e}");
    // A model the fused step does not cover (ε added to σ in the final LayerNorm) trains by the
    // reference path, which has no rounding: asking for bf16 products is refused, f32 is not.
    use llm_workbook::ch09_gpt::{schedule::Schedule, train};
    let mut model = Gpt::<f32>::new(Config::new(runs::SMALL_VOCAB, 32, 2, 4, 64), 3).unwrap();
    model.ln_f = llm_workbook::ch06_attention::Epsilon::AddedToStd;
    let tc = train::TrainConfig::new(2, Schedule::new(1e-3, 1e-3, 0, 10).unwrap());
    let mut trainer = train::Trainer::new(model, &tc, 1).unwrap();
    let e = trainer.set_precision(BF16_INPUTS).unwrap_err().to_string();
    assert!(e.contains("precision"), "{e}");
    trainer.set_precision(Precision::F32).unwrap();
}

/// A trainer of the small-gradient example's tiny model (batches of 2 windows of 32 tokens, 64
/// scored) in f16 with the loss scale `scale`, and its tokens.
fn f16_trainer(
    scale: f64,
) -> (llm_workbook::ch09_gpt::train::Trainer<f32>, llm_workbook::ch09_gpt::train::TrainConfig) {
    use llm_workbook::ch09_gpt::{schedule::Schedule, train};
    let model = Gpt::<f32>::new(Config::new(runs::SMALL_VOCAB, 32, 2, 4, 64), 3).unwrap();
    let tc = train::TrainConfig::new(2, Schedule::new(1e-3, 1e-3, 0, 40).unwrap());
    let mut trainer = train::Trainer::new(model, &tc, 1).unwrap();
    trainer.set_precision(Precision::new(ProductInputs::F16, scale).unwrap()).unwrap();
    (trainer, tc)
}

/// Tokens for [`f16_trainer`]'s batches: a walk through the vocabulary.
fn f16_tokens() -> Vec<u32> {
    (0..400u32).map(|i| i * 7 % runs::SMALL_VOCAB as u32).collect()
}

/// The overflow rule: with S = 2^24 the logits' gradient (p − 1)/64 · S is far past f16's 65504,
/// so the scaled gradient overflows; the trainer halves S and skips the update (weights, AdamW's
/// moments and step count unchanged), counts the step, and once S is small enough trains.
#[test]
fn an_overflowing_loss_scale_is_halved_and_its_step_skipped() {
    use llm_workbook::ch09_gpt::train::Data;
    let (mut trainer, tc) = f16_trainer(MAX_LOSS_SCALE);
    let tokens = f16_tokens();
    let data = Data::Stream { tokens: &tokens, seq_len: 32 };
    let before = trainer.model.clone();
    let r = trainer.step(&data, &tc).unwrap();
    assert!(r.skipped && r.grad_norm == f64::INFINITY && r.loss.is_finite(), "{r:?}");
    assert_eq!(trainer.precision().loss_scale, MAX_LOSS_SCALE / 2.0);
    assert_eq!(trainer.precision().inputs, ProductInputs::F16);
    assert_eq!(trainer.model, before, "a skipped step changes no weight");
    assert_eq!(trainer.optimizer.moments.steps(), 0, "nor AdamW's moments");
    assert_eq!((trainer.step, trainer.skipped_steps()), (1, 1));
    while trainer.history.last().unwrap().skipped {
        trainer.step(&data, &tc).unwrap();
    }
    let skipped = trainer.skipped_steps();
    assert!(skipped >= 2, "S = 2^23 overflows too: {skipped}");
    assert_eq!(trainer.precision().loss_scale, MAX_LOSS_SCALE / 2f64.powi(skipped as i32));
    assert_ne!(trainer.model, before);
    assert_eq!(trainer.optimizer.moments.steps(), 1);
    let last = *trainer.history.last().unwrap();
    assert!(last.grad_norm.is_finite() && !last.skipped, "{last:?}");
    // The S the run settled at gives the step a trainer started at that S takes from the same
    // weights and batch: the skipped steps left nothing behind.
    let (mut direct, _) = f16_trainer(trainer.precision().loss_scale);
    direct.rng = {
        let (mut replay, _) = f16_trainer(MAX_LOSS_SCALE);
        for _ in 0..skipped {
            replay.step(&data, &tc).unwrap();
        }
        replay.rng
    };
    direct.step = skipped;
    let record = direct.step(&data, &tc).unwrap();
    assert_eq!(record.loss.to_bits(), last.loss.to_bits());
    assert_eq!(direct.model, trainer.model);
    // Without a scale (S = 1) there is nothing to halve: no step is skipped.
    let (mut unscaled, _) = f16_trainer(1.0);
    for _ in 0..3 {
        assert!(!unscaled.step(&data, &tc).unwrap().skipped);
    }
}

/// A trainer saved after skipped steps and loaded goes on with the loss scale it had reached
/// (the checkpoint keeps it), bit for bit as if it had not stopped.
#[test]
fn a_saved_trainer_keeps_its_halved_loss_scale() {
    use llm_workbook::ch09_gpt::{checkpoint as ck, train::Data};
    let tokens = f16_tokens();
    let data = Data::Stream { tokens: &tokens, seq_len: 32 };
    let (mut straight, tc) = f16_trainer(MAX_LOSS_SCALE);
    let (mut first, _) = f16_trainer(MAX_LOSS_SCALE);
    first.run(&data, &tc, 3, |_| {}).unwrap();
    assert!(first.skipped_steps() > 0);
    let dir = common::temp_dir("ch11_loss_scale_resume");
    ck::save_trainer(&first, &dir).unwrap();
    let mut resumed = ck::load_trainer(&dir, &f16_trainer(MAX_LOSS_SCALE).0).unwrap();
    assert_eq!(resumed.precision(), first.precision());
    assert_eq!(resumed.skipped_steps(), first.skipped_steps());
    resumed.run(&data, &tc, 8, |_| {}).unwrap();
    straight.run(&data, &tc, 8, |_| {}).unwrap();
    assert_eq!(resumed.history, straight.history);
    assert_eq!(resumed.model, straight.model);
    assert_eq!(resumed.precision(), straight.precision());
}

// ───────────────────────────── quantized weights ─────────────────────────────

mod quant {
    use llm_workbook::ch09_gpt::config::Config;
    use llm_workbook::ch09_gpt::model::Gpt;
    use llm_workbook::ch11_precision::quant::{
        BLOCK, QuantMatrix, Storage, dequantize_block, quantize_block, stored_model,
    };
    use llm_workbook::rng::Rng;
    use nalgebra::DMatrix;

    /// The largest |w − ŵ| over a matrix divided by half its block's step s/2, computed in f64
    /// (ŵ = s·q exactly, as f32 stores it): at most 1 when every weight is within half a step.
    fn worst_error_in_half_steps(w: &DMatrix<f32>, storage: Storage) -> f64 {
        let q = QuantMatrix::quantize(w, storage).unwrap();
        let w_hat = q.dequantize();
        let mut worst = 0.0f64;
        for j in 0..w.ncols() {
            for i in 0..w.nrows() {
                let s = f64::from(q.scales[j * q.blocks() + i / BLOCK]);
                let e = (f64::from(w[(i, j)]) - f64::from(w_hat[(i, j)])).abs();
                if s == 0.0 {
                    assert_eq!(e, 0.0, "a zero block must come back as zeros");
                } else {
                    worst = worst.max(e / (s / 2.0));
                }
            }
        }
        worst
    }

    /// Half a step, up to the rounding of s·q and of w/s in f32 (a few parts in 10⁷).
    const HALF_STEP_SLACK: f64 = 1.0 + 1e-5;

    #[test]
    fn every_weight_is_within_half_a_step_of_its_dequantized_value_over_random_matrices() {
        let mut rng = Rng::new(37);
        // Columns of 1 … 100 weights: whole blocks, a short last block, a block shorter than 32.
        for (rows, cols) in [(32, 3), (64, 5), (100, 4), (7, 2), (1, 1), (33, 6)] {
            for scale in [1.0, 1e-3, 50.0] {
                let w: DMatrix<f32> = rng.normal_matrix(rows, cols, scale);
                for storage in [Storage::Int8, Storage::Q4] {
                    let worst = worst_error_in_half_steps(&w, storage);
                    assert!(worst <= HALF_STEP_SLACK, "{storage:?} {rows}×{cols}: {worst}");
                    // The bound is reached: some weight is nearly half a step away.
                    if rows * cols >= 2 * BLOCK {
                        assert!(worst > 0.5, "{storage:?} {rows}×{cols}: {worst}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_weight_of_a_trained_model_is_within_half_a_step() {
        let model = super::quant_quality::trained_model();
        for (name, t) in model.tensors() {
            if t.nrows() > 1 {
                for storage in [Storage::Int8, Storage::Q4] {
                    let worst = worst_error_in_half_steps(t, storage);
                    assert!(worst <= HALF_STEP_SLACK, "{name} {storage:?}: {worst}");
                }
            }
        }
    }

    /// A 4-bit block by hand: max|w| = 3.5, so s = 3.5/7 = 0.5 and w/s = 7, −2.5, 1.5, 0, −0.5, 4;
    /// rounded to nearest with ties away from zero q = 7, −3, 2, 0, −1, 4 (ties to even would give
    /// −2, 2 and 0); ŵ = s·q = 3.5, −1.5, 1, 0, −0.5, 2: the ties are exactly half a step (0.25)
    /// away. The int8 block: s = 1.984375/127 = 1/64, w/s = 127, −64, 32.5, 0.5, −0.25, so q =
    /// 127, −64, 33, 1, 0.
    #[test]
    fn worked_blocks_quantize_as_by_hand() {
        let b = quantize_block(&[3.5, -1.25, 0.75, 0.0, -0.25, 2.0], Storage::Q4).unwrap();
        assert_eq!(b.scale, 0.5);
        assert_eq!(b.codes[..6], [7, -3, 2, 0, -1, 4]);
        assert!(b.codes[6..].iter().all(|&q| q == 0));
        assert_eq!(dequantize_block(&b)[..6], [3.5, -1.5, 1.0, 0.0, -0.5, 2.0]);
        let w = [1.984375, -1.0, 0.5078125, 0.0078125, -0.00390625];
        let b = quantize_block(&w, Storage::Int8).unwrap();
        assert_eq!(b.scale, 1.0 / 64.0);
        assert_eq!(b.codes[..5], [127, -64, 33, 1, 0]);
    }

    #[test]
    fn a_block_of_zeros_has_scale_zero_and_comes_back_as_zeros() {
        for storage in [Storage::Int8, Storage::Q4] {
            let b = quantize_block(&[0.0; BLOCK], storage).unwrap();
            assert_eq!((b.scale, b.codes), (0.0, [0; BLOCK]));
            assert!(dequantize_block(&b).iter().all(|&x| x == 0.0));
            let q = QuantMatrix::quantize(&DMatrix::zeros(40, 2), storage).unwrap();
            assert!(q.dequantize().iter().all(|&x| x == 0.0));
        }
    }

    #[test]
    fn the_largest_magnitude_lands_on_the_largest_level_whatever_its_sign() {
        // The negative weight has the largest magnitude: absmax, not max, sets the scale.
        for (storage, l) in [(Storage::Int8, 127), (Storage::Q4, 7)] {
            let b = quantize_block(&[-2.0, 1.0, 0.5], storage).unwrap();
            assert_eq!(b.codes[0], -l, "{storage:?}");
            assert_eq!(b.scale, 2.0 / l as f32);
        }
    }

    #[test]
    fn bad_blocks_are_refused_in_one_line() {
        let e = quantize_block(&[0.0; 33], Storage::Int8).unwrap_err().to_string();
        assert!(e.contains("33 weights") && !e.contains('\n'), "{e}");
        let e = quantize_block(&[f32::NAN], Storage::Q4).unwrap_err().to_string();
        assert!(e.contains("w") && !e.contains('\n'), "{e}");
        assert!(quantize_block(&[1.0], Storage::Bf16).is_err());
        let e = Storage::parse("int4").unwrap_err().to_string();
        assert!(e.contains("q4"), "{e}");
    }

    #[test]
    fn packing_four_bit_codes_keeps_every_code() {
        let mut rng = Rng::new(5);
        let w: DMatrix<f32> = rng.normal_matrix(64, 3, 1.0);
        let q = QuantMatrix::quantize(&w, Storage::Q4).unwrap();
        assert_eq!(q.codes.len(), 3 * 2 * 16);
        for j in 0..3 {
            for b in 0..2 {
                let block = q.block(j, b);
                let again = quantize_block(&w.as_slice()[j * 64 + b * 32..][..32], Storage::Q4);
                assert_eq!(block, again.unwrap());
            }
        }
        let m = Config::new(11, 8, 1, 2, 32);
        let model = Gpt::<f32>::new(m, 1).unwrap();
        assert_eq!(stored_model(&model, Storage::F32, true).unwrap(), model);
    }
}

// ───────────────────────────── what quantization costs in loss ─────────────────────────────

mod quant_quality {
    use llm_workbook::ch08_tokens::Tokenizer;
    use llm_workbook::ch09_gpt::CorpusTokens;
    use llm_workbook::ch09_gpt::data::{Batch, covering_windows};
    use llm_workbook::ch09_gpt::model::Gpt;
    use llm_workbook::ch09_gpt::{corpus_setup, corpus_tokens, train_corpus};
    use llm_workbook::ch11_precision::quant::{Storage, storage_losses};
    use std::sync::OnceLock;

    /// Training steps of the test's corpus model: chapter 9's corpus model (3 blocks, width 96,
    /// chapter 8's BPE) for an eighth of the main job's steps, a few seconds here.
    const STEPS: usize = 200;

    /// The corpus model trained for [`STEPS`] steps, once per test process, with the validation
    /// windows it is scored on.
    fn run() -> &'static (Gpt<f32>, Vec<Batch>, CorpusTokens) {
        static CELL: OnceLock<(Gpt<f32>, Vec<Batch>, CorpusTokens)> = OnceLock::new();
        CELL.get_or_init(|| {
            let tokens = corpus_tokens().unwrap();
            let setup = corpus_setup(tokens.tokenizer.vocab_size(), STEPS).unwrap();
            let run = train_corpus(&tokens, &setup, |_, _| {}).unwrap();
            let context = setup.config.context;
            let batches = covering_windows(&tokens.validation, context, 32);
            (run.model, batches, tokens)
        })
    }

    pub fn trained_model() -> &'static Gpt<f32> {
        &run().0
    }

    #[test]
    fn the_sections_walk_and_figures_show_every_storage_within_the_terminal() {
        use llm_workbook::ch11_precision::book::{quant_figures_of, quant_results_of, quant_walk};
        use llm_workbook::plot::Figure;
        let (model, _, tokens) = run();
        let r = quant_results_of(model, tokens).unwrap();
        let mut buf = Vec::new();
        quant_walk(&mut llm_workbook::report::Walk::new(&mut buf), &r).unwrap();
        let text = String::from_utf8(buf).unwrap();
        for name in ["f32 ", "bf16 ", "int8 ", "q4 "] {
            assert_eq!(text.lines().filter(|l| l.trim_start().starts_with(name)).count(), 2);
        }
        let wide: Vec<&str> = text.lines().filter(|l| l.chars().count() > 100).collect();
        assert!(wide.is_empty(), "{}", wide.join("\n"));
        // The errors in steps lie within half a step; every storage has its sample.
        for e in &r.errors_in_steps {
            assert!(!e.is_empty() && e.iter().all(|x| x.abs() <= 0.5 + 1e-5));
        }
        assert_eq!(r.samples.1.len(), 4);
        let figs = quant_figures_of(&r).unwrap();
        let names: Vec<&str> = figs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["ch11_quant_loss", "ch11_quant_weights", "ch11_quant_error"]);
        let Figure::Bars(bars) = &figs[0].1 else { panic!("bars") };
        assert_eq!(bars.series.len(), 2);
        assert!(bars.series.iter().all(|(_, v)| v.len() == 4 && v[0] == 0.0));
        let dir = crate::common::temp_dir("ch11-quant-figures");
        for (stem, fig) in &figs {
            assert!(!fig.save(&dir, stem).unwrap().is_empty());
        }
    }

    /// The page's bounds: int8 weights within 0.01 nats per token of f32, 4-bit within 0.1, on
    /// the validation tokens, every block matrix quantized, and with the unembedding too.
    #[test]
    fn int8_and_four_bit_weights_stay_within_0_01_and_0_1_nats_of_f32() {
        let (model, batches, _) = run();
        for head in [false, true] {
            let losses = storage_losses(model, batches, head).unwrap();
            let f32_loss = losses[0].1;
            let cost = |s: Storage| losses.iter().find(|l| l.0 == s).unwrap().1 - f32_loss;
            let (bf16, int8, q4) = (cost(Storage::Bf16), cost(Storage::Int8), cost(Storage::Q4));
            eprintln!(
                "head {head}: f32 {f32_loss:.4}, bf16 {bf16:+.5}, int8 {int8:+.5}, q4 {q4:+.5}"
            );
            assert!(int8.abs() < INT8_GOAL, "int8 costs {int8:.5} nats per token (head {head})");
            assert!(q4.abs() < Q4_GOAL, "4-bit costs {q4:.5} nats per token (head {head})");
            // Coarser levels cost more: 4-bit's loss moves further than int8's.
            assert!(q4.abs() > int8.abs(), "{q4} against {int8}");
        }
    }
    const INT8_GOAL: f64 = 0.01;
    const Q4_GOAL: f64 = 0.1;
}

// ───────────────────────────── the cached step from quantized blocks ─────────────────────────────

mod quant_step {
    use llm_workbook::ch09_gpt::config::Config;
    use llm_workbook::ch09_gpt::model::Gpt;
    use llm_workbook::ch11_precision::quant::{QuantMatrix, Storage};
    use llm_workbook::ch11_precision::quant_step::{
        QuantGpt, column_dot_reference, quant_row_product,
    };
    use llm_workbook::rng::Rng;
    use llm_workbook::simd::{Kernel, available_kernels};
    use nalgebra::DMatrix;

    /// x·Ŵ in f64 from the dequantized matrix: the sum the kernels approximate.
    fn exact(x: &[f32], w: &QuantMatrix) -> Vec<f64> {
        let w_hat = w.dequantize();
        (0..w.cols)
            .map(|j| {
                x.iter().enumerate().map(|(i, &v)| f64::from(v) * f64::from(w_hat[(i, j)])).sum()
            })
            .collect()
    }

    #[test]
    fn every_path_gives_the_references_bits_on_awkward_sizes_and_any_thread_count() {
        let paths = available_kernels();
        eprintln!("paths on this CPU: {paths:?}");
        let mut rng = Rng::new(11);
        for k in [1, 7, 31, 32, 33, 64, 95, 100, 384] {
            for n in [1, 3, 4, 9, 17] {
                let w: DMatrix<f32> = rng.normal_matrix(k, n, 0.5);
                let x: Vec<f32> = rng.normal_matrix::<f32>(1, k, 1.0).iter().copied().collect();
                for storage in [Storage::Int8, Storage::Q4] {
                    let q = QuantMatrix::quantize(&w, storage).unwrap();
                    let reference = quant_row_product(Kernel::Scalar, &x, &q, 1).unwrap();
                    // The reference is the sum it claims: close to x·Ŵ computed in f64.
                    for (r, e) in reference.iter().zip(exact(&x, &q)) {
                        let size: f64 = x.iter().map(|v| f64::from(v.abs())).sum::<f64>();
                        assert!((f64::from(*r) - e).abs() <= 1e-5 * size.max(1.0), "{r} {e}");
                    }
                    for &path in &paths {
                        for threads in [1, 2, 3] {
                            let y = quant_row_product(path, &x, &q, threads).unwrap();
                            let bits =
                                |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                            assert_eq!(bits(&y), bits(&reference), "{path:?} {storage:?} {k}×{n}");
                        }
                    }
                }
            }
        }
        // One column by the documented formula, by hand in f32: s·Σ q·x over one block.
        let q =
            QuantMatrix::quantize(&DMatrix::from_column_slice(2, 1, &[3.5, -1.25]), Storage::Q4)
                .unwrap();
        let dot = column_dot_reference(&[2.0; 32], &q.scales, &q.codes, Storage::Q4);
        assert_eq!(dot, 0.5 * (7.0 * 2.0 - 3.0 * 2.0));
        let e = quant_row_product(Kernel::Scalar, &[1.0; 3], &q, 1).unwrap_err().to_string();
        assert!(e.contains("x") && !e.contains('\n'), "{e}");
    }

    /// A model whose blocks are wide enough for two blocks of 32 along the width and whose
    /// hidden width is 4·48 = 192 (six blocks), trained not at all: random weights exercise
    /// every product.
    fn model() -> Gpt<f32> {
        Gpt::<f32>::new(Config::new(37, 16, 2, 3, 48), 7).unwrap()
    }

    #[test]
    fn the_f32_storage_steps_with_chapter_9s_bits() {
        let m = model();
        let q = QuantGpt::new(&m, Storage::F32, true).unwrap();
        let (mut a, mut b) = (m.new_kv_cache(), q.new_kv_cache());
        for t in [3u32, 1, 4, 1, 5] {
            let (x, y) = (m.step(&mut a, t).unwrap(), q.step(&mut b, t).unwrap());
            assert_eq!(x, y);
        }
    }

    #[test]
    fn the_quantized_step_matches_the_stored_models_step_on_every_path() {
        let m = model();
        for storage in [Storage::Int8, Storage::Q4] {
            for head in [false, true] {
                let q = QuantGpt::new(&m, storage, head).unwrap();
                let stored = &q.widened();
                let mut reference = stored.new_kv_cache();
                let mut caches: Vec<_> =
                    available_kernels().into_iter().map(|p| (p, q.new_kv_cache())).collect();
                let mut last = Vec::new();
                for t in [3u32, 1, 4, 1, 5, 9, 2, 6] {
                    let want = stored.reference_step(&mut reference, t).unwrap();
                    for (path, cache) in caches.iter_mut() {
                        let q = q.clone().with_kernel(*path);
                        let got = q.step(cache, t).unwrap();
                        let worst =
                            got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                        assert!(worst < 1e-5, "{storage:?} head {head} {path:?}: {worst}");
                        if *path == Kernel::Scalar {
                            last = got;
                        } else {
                            assert_eq!(got, last, "{path:?} differs from the reference path");
                        }
                    }
                }
                // The quantized model is not the f32 model: its logits moved.
                let mut f32_cache = m.new_kv_cache();
                let mut f32_last = Vec::new();
                for t in [3u32, 1, 4, 1, 5, 9, 2, 6] {
                    f32_last = m.step(&mut f32_cache, t).unwrap();
                }
                assert_ne!(f32_last, last);
            }
        }
    }

    #[test]
    fn a_step_reads_fewer_bytes_in_blocks() {
        let m = model();
        let bytes = |s| QuantGpt::new(&m, s, true).unwrap().weight_bytes_per_token();
        let (f, i, q) = (bytes(Storage::F32), bytes(Storage::Int8), bytes(Storage::Q4));
        // 2 blocks of 12·48² weights and the 37×48 unembedding, 4 bytes each in f32. In blocks,
        // a column of 48 is padded to 2 blocks, one of 192 (W₂'s) is 6: per block of 32 weights
        // 32 code bytes and a 4-byte scale (int8), 16 and 4 (4-bit).
        assert_eq!(f, 4 * (2 * 12 * 48 * 48 + 37 * 48));
        let blocks = 2 * (144 * 2 + 48 * 2 + 192 * 2 + 48 * 6) + 37 * 2;
        assert_eq!((i, q), (blocks * 36, blocks * 20));
        // bf16 keeps its patterns, 2 bytes a weight: half of f32's bytes a token.
        assert_eq!(2 * bytes(Storage::Bf16), f);
    }

    /// The largest gap between the stored step's logits and the widened model's over the
    /// logits of one model: every product is an f32 dot product of at most 4·48 = 192 terms of
    /// size ≤ 10 here, whose orders differ (γ_192·Σ|x·ŵ| ≲ 10⁻⁴ at worst); measured, under 10⁻⁵.
    const STORED_STEP_TOLERANCE: f32 = 1e-4;

    #[test]
    fn the_stored_step_chooses_the_widened_models_greedy_tokens_in_every_storage() {
        use llm_workbook::ch09_gpt::sample::{Decoding, argmax, generate, generate_with};
        let m = model();
        for storage in [Storage::Bf16, Storage::Int8, Storage::Q4] {
            let q = QuantGpt::new(&m, storage, false).unwrap();
            let widened = q.widened();
            // The widened model is the stored model, bit for bit, and not the f32 one.
            assert_eq!(
                widened,
                llm_workbook::ch11_precision::quant::stored_model(&m, storage, false).unwrap()
            );
            assert_ne!(widened, m, "{storage:?}");
            // Step by step on the widened model's greedy tokens: the logits agree within the
            // tolerance, and each greedy choice is decided by a gap larger than twice it, so the
            // stored step must choose the same token.
            let (mut a, mut b) = (widened.new_kv_cache(), q.new_kv_cache());
            let mut token = 3u32;
            let mut smallest_gap = f32::INFINITY;
            for _ in 0..m.config.context {
                let (want, got) =
                    (widened.step(&mut a, token).unwrap(), q.step(&mut b, token).unwrap());
                let worst = got.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
                assert!(worst < STORED_STEP_TOLERANCE, "{storage:?}: {worst}");
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
            // The whole generation, past the context (the window slides and the cache is
            // rebuilt one stored step a token): the same tokens.
            let prompt = [1u32, 4, 1, 5];
            let run = |g: &mut dyn FnMut() -> Vec<u32>| g();
            let want = run(&mut || {
                let g = generate(&widened, &prompt, 24, &Decoding::Greedy, &mut Rng::new(1), true);
                g.unwrap().tokens
            });
            let got = run(&mut || {
                let g =
                    generate_with(&mut &q, &prompt, 24, &Decoding::Greedy, &mut Rng::new(1), true);
                g.unwrap().tokens
            });
            assert_eq!(got, want, "{storage:?}");
        }
    }

    #[test]
    fn the_bf16_row_product_widens_each_pattern_exactly() {
        use llm_workbook::ch11_precision::bf16_weights::{
            Bf16Matrix, bf16_row_product, widen_bf16,
        };
        // The dot's one-shift widening is the chapter's conversion on every pattern but the
        // NaNs (which the conversion makes quiet; a stored matrix holds none).
        for b in 0..=u16::MAX {
            let want = llm_workbook::ch11_precision::bf16_to_f32(b);
            if want.is_nan() {
                assert!(widen_bf16(b).is_nan());
                continue;
            }
            let want = want.to_bits();
            assert_eq!(widen_bf16(b).to_bits(), want, "{b:#06x}");
        }
        let mut rng = Rng::new(5);
        for (k, n) in [(1, 1), (7, 3), (8, 2), (33, 5), (100, 4)] {
            let w: DMatrix<f32> = rng.normal_matrix(k, n, 0.5);
            let x: Vec<f32> = rng.normal_matrix::<f32>(1, k, 1.0).iter().copied().collect();
            let b = Bf16Matrix::round(&w);
            let w_hat = b.widen();
            assert_eq!(w_hat, w.map(llm_workbook::ch11_precision::round_to_bf16));
            for threads in [1, 2, 3] {
                let y = bf16_row_product(&x, &b, threads).unwrap();
                for (j, yj) in y.iter().enumerate() {
                    let exact: f64 =
                        (0..k).map(|i| f64::from(x[i]) * f64::from(w_hat[(i, j)])).sum();
                    let size: f64 = (0..k).map(|i| f64::from(x[i] * w_hat[(i, j)]).abs()).sum();
                    let gamma = k as f64 * 2f64.powi(-24) / (1.0 - k as f64 * 2f64.powi(-24));
                    let err = (f64::from(*yj) - exact).abs();
                    assert!(err <= gamma * size + 1e-30, "{k}×{n} column {j}: {err}");
                }
            }
        }
        let b = Bf16Matrix::round(&DMatrix::from_element(3, 2, 1.0));
        let e = bf16_row_product(&[1.0; 2], &b, 1).unwrap_err().to_string();
        assert!(e.contains("x") && !e.contains('\n'), "{e}");
    }
}

// ───────────────────────────── stored models on disk ─────────────────────────────

mod quant_disk {
    use llm_workbook::ch09_gpt::config::Config;
    use llm_workbook::ch09_gpt::model::Gpt;
    use llm_workbook::ch09_gpt::safetensors::SafeTensors;
    use llm_workbook::ch11_precision::quant::{Storage, stored_model};
    use llm_workbook::ch11_precision::quant_file::{
        QUANTIZATION_KEY, model_from_stored, storage_of_config, stored_files,
    };
    use std::process::{Command, Output};

    /// A model whose width (40) leaves a short last block in every column.
    fn model() -> Gpt<f32> {
        Gpt::<f32>::new(Config::new(23, 8, 2, 2, 40), 3).unwrap()
    }

    fn file(files: &[(String, Vec<u8>)], name: &str) -> Vec<u8> {
        files.iter().find(|f| f.0 == name).unwrap().1.clone()
    }

    #[test]
    fn stored_files_are_read_by_the_safetensors_crate_and_load_back_as_the_stored_model() {
        let m = model();
        for (storage, dtype) in
            [(Storage::Bf16, "BF16"), (Storage::Int8, "I8"), (Storage::Q4, "U8")]
        {
            let files = stored_files(&m, storage).unwrap();
            let bytes = file(&files, "model.safetensors");
            // The official crate reads every tensor: the codes as I8 or U8, the scales as F32.
            let oracle = safetensors::SafeTensors::deserialize(&bytes).unwrap();
            let codes = oracle.tensor("h.1.mlp.c_proj.weight").unwrap();
            assert_eq!(format!("{:?}", codes.dtype()), dtype);
            if storage == Storage::Bf16 {
                assert_eq!(codes.shape(), [160, 40]);
            } else {
                // W₂ is 160×40: 40 columns of 5 blocks.
                let per = if storage == Storage::Int8 { 32 } else { 16 };
                assert_eq!(codes.shape(), [40, 5, per]);
                let scales = oracle.tensor("h.1.mlp.c_proj.weight.scales").unwrap();
                assert_eq!(
                    (format!("{:?}", scales.dtype()), scales.shape()),
                    ("F32".into(), &[40, 5][..])
                );
            }
            let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
            let meta = meta.metadata().clone().unwrap();
            assert_eq!(meta.get(QUANTIZATION_KEY).map(String::as_str), Some(storage.name()));
            let config = file(&files, "config.json");
            assert_eq!(storage_of_config(&config, "config.json").unwrap(), storage);
            // Ours loads it back as the stored model, bit for bit.
            let f = SafeTensors::parse(bytes, "model.safetensors").unwrap();
            let loaded = model_from_stored(m.config, storage, &f).unwrap();
            assert_eq!(loaded, stored_model(&m, storage, false).unwrap(), "{storage:?}");
        }
    }

    /// Loads `bytes` as a file of `storage`, returning the one-line error.
    fn refused(bytes: Vec<u8>, storage: Storage) -> String {
        let e = SafeTensors::parse(bytes, "model.safetensors")
            .and_then(|f| model_from_stored(model().config, storage, &f))
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n'), "{e}");
        e
    }

    #[test]
    fn damaged_stored_files_are_refused_in_one_line() {
        let m = model();
        let files = stored_files(&m, Storage::Q4).unwrap();
        let bytes = file(&files, "model.safetensors");
        // Cut short.
        let e = refused(bytes[..bytes.len() - 100].to_vec(), Storage::Q4);
        assert!(e.contains("model.safetensors"), "{e}");
        // config.json names another storage than the file.
        let e = refused(bytes.clone(), Storage::Int8);
        assert!(e.contains("q4") && e.contains("int8"), "{e}");
        // A code byte of 0 holds the code −8, which the symmetric 4-bit storage never writes.
        let f = SafeTensors::parse(bytes.clone(), "m").unwrap();
        let at = f.info("h.0.attn.c_attn.weight").unwrap().begin;
        let header = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let mut bad = bytes.clone();
        bad[header + at] = 0;
        let e = refused(bad, Storage::Q4);
        assert!(e.contains("h.0.attn.c_attn.weight") && e.contains("−8"), "{e}");
        // A NaN scale.
        let at = f.info("h.0.attn.c_proj.weight.scales").unwrap().begin;
        let mut bad = bytes.clone();
        bad[header + at..header + at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        let e = refused(bad, Storage::Q4);
        assert!(e.contains("h.0.attn.c_proj.weight.scales"), "{e}");
        // An unknown storage in config.json.
        let e = storage_of_config(br#"{"quantization": "int3"}"#, "config.json").unwrap_err();
        assert!(e.to_string().contains("int3"), "{e}");
    }

    fn cli(dir: &std::path::Path, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_llm-workbook"))
            .current_dir(dir)
            .args(args)
            .output()
            .unwrap()
    }

    #[test]
    fn a_stored_file_loads_as_stored_without_an_f32_copy_of_its_matrices() {
        use llm_workbook::ch11_precision::quant_file::sampling_model_from_stored;
        use llm_workbook::ch11_precision::quant_step::{QuantGpt, SamplingModel};
        let m = model();
        let f32_bytes = 4 * m.parameter_count();
        for storage in [Storage::Bf16, Storage::Int8, Storage::Q4] {
            let bytes = file(&stored_files(&m, storage).unwrap(), "model.safetensors");
            let f = SafeTensors::parse(bytes, "model.safetensors").unwrap();
            let SamplingModel::Stored(q) =
                sampling_model_from_stored(m.config, storage, &f).unwrap()
            else {
                panic!("{storage:?} loaded as an f32 model");
            };
            // The blocks the step reads are the ones quantizing the f32 model gives.
            let built = QuantGpt::new(&m, storage, false).unwrap();
            assert_eq!(q.widened(), built.widened(), "{storage:?}");
            assert_eq!(q.resident_bytes(), built.resident_bytes(), "{storage:?}");
            // What it holds: the block matrices as stored and the rest (23 + 8 rows of 40 and
            // the 13 rows of each block) in f32, under f32's bytes.
            let block_weights = 2 * 12 * 40 * 40;
            let rest = 4 * (m.parameter_count() - block_weights);
            let stored = match storage {
                Storage::Bf16 => 2 * block_weights,
                // 2 blocks of W_QKV (120 columns), W_O, W₁ (160), 5 of W₂ (40): codes + scale.
                _ => {
                    let per = if storage == Storage::Int8 { 36 } else { 20 };
                    2 * (2 * 120 + 2 * 40 + 2 * 160 + 5 * 40) * per
                }
            };
            assert_eq!(q.resident_bytes(), stored + rest, "{storage:?}");
            assert!(q.resident_bytes() < f32_bytes);
        }
    }

    /// A folder's memory: under a budget that the 4-bit model's bytes fit but f32's do not,
    /// `gpt sample` runs the 4-bit folder and refuses the f32 one; `--stats` reports the
    /// storage and the 4-bit bytes a token reads.
    #[test]
    fn gpt_sample_runs_a_4_bit_folder_within_a_budget_its_f32_bytes_exceed() {
        let dir = crate::common::temp_dir("ch11_sample_stored");
        let text = dir.join("my.txt");
        std::fs::write(&text, "the cat sat on the mat. ".repeat(20)).unwrap();
        let (ck, q) = (dir.join("ck"), dir.join("q4"));
        let (t, c, o) = (text.to_str().unwrap(), ck.to_str().unwrap(), q.to_str().unwrap());
        // 2 blocks of width 256: 12·2·256² = 1.57 M block weights, 6.3 MB in f32, 0.98 MB in
        // 4-bit blocks; the vocabulary (11 characters) and the 16 positions are small beside.
        let shape = ["--layers", "2", "--heads", "4", "--width", "256", "--context", "16"];
        let mut args =
            vec!["gpt", "train", "--data", t, "--steps", "1", "--batch", "1", "--out", c];
        args.extend(shape);
        let r = cli(&dir, &args);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let r = cli(&dir, &["gpt", "quantize", "--checkpoint", c, "--to", "q4", "--out", o]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        // Sampling needs the weights twice (the file and the model) and the cache: about
        // 12.6 MB in f32, 2.1 MB in 4-bit blocks.
        let budget = "4000000";
        let sample = |folder: &str| {
            let args = ["gpt", "sample", "--checkpoint", folder, "--prompt", "the ", "--tokens"];
            let mut args = args.to_vec();
            args.extend(["20", "--greedy", "--stats", "--memory-budget", budget]);
            cli(&dir, &args)
        };
        let r = sample(o);
        let err = String::from_utf8_lossy(&r.stderr).to_string();
        assert!(r.status.success(), "{err}");
        assert!(String::from_utf8_lossy(&r.stdout).starts_with("the "));
        assert!(err.contains("tokens/s (q4 weights)"), "{err}");
        let block_bytes = 2 * (8 * 768 + 8 * 256 + 8 * 1024 + 32 * 256) * 20;
        let unembedding = 11 * 256 * 4;
        let per_token = format!("weight bytes read per token {} ", block_bytes + unembedding);
        assert!(err.contains(&per_token), "{per_token} in {err}");
        let r = sample(c);
        let e = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success() && e.trim().lines().count() == 1, "{e}");
        assert!(e.contains("--memory-budget"), "{e}");
    }

    #[test]
    fn gpt_quantize_writes_a_folder_gpt_sample_reads_and_gpt_resume_refuses() {
        let dir = crate::common::temp_dir("ch11_quantize");
        let text = dir.join("my.txt");
        std::fs::write(&text, "the cat sat on the mat. the dog sat on the log. ".repeat(40))
            .unwrap();
        let (ck, q) = (dir.join("ck"), dir.join("q4"));
        let (t, c, o) = (text.to_str().unwrap(), ck.to_str().unwrap(), q.to_str().unwrap());
        let small = ["--layers", "1", "--heads", "2", "--width", "40", "--context", "16"];
        let mut args =
            vec!["gpt", "train", "--data", t, "--steps", "2", "--batch", "2", "--out", c];
        args.extend(small);
        let r = cli(&dir, &args);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let r = cli(&dir, &["gpt", "quantize", "--checkpoint", c, "--to", "q4", "--out", o]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        assert!(String::from_utf8_lossy(&r.stdout).contains("stored as q4"));
        // Generations and a pointer, as gpt train writes them.
        assert!(
            q.join("CURRENT").exists(),
            "{:?}",
            std::fs::read_dir(&q).unwrap().collect::<Vec<_>>()
        );
        let r =
            cli(&dir, &["gpt", "sample", "--checkpoint", o, "--prompt", "the ", "--tokens", "5"]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        assert!(String::from_utf8_lossy(&r.stdout).starts_with("the "));
        let one_line = |r: &Output, want: &str| {
            assert!(!r.status.success());
            let e = String::from_utf8_lossy(&r.stderr);
            assert!(e.trim().lines().count() == 1 && e.contains(want), "{e}");
            crate::common::assert_fits_as_a_user_sees_it(&e, want);
        };
        one_line(
            &cli(&dir, &["gpt", "resume", "--checkpoint", o, "--steps", "4"]),
            "sampling only",
        );
        let again = ["gpt", "quantize", "--checkpoint", o, "--to", "int8", "--out", c];
        one_line(&cli(&dir, &again), "already stored as q4");
        let into_ck = ["gpt", "quantize", "--checkpoint", c, "--to", "int8", "--out", c];
        one_line(&cli(&dir, &into_ck), "--out");
        one_line(
            &cli(&dir, &["gpt", "quantize", "--checkpoint", c, "--to", "int4", "--out", o]),
            "--to",
        );
    }

    /// A Llama decoder whose widths (40, hidden 112, V 23) leave short last blocks and whose
    /// projections are not square, so that a matrix stored the wrong way round shows.
    fn llama() -> llm_workbook::ch12_modern::Decoder<f32> {
        use llm_workbook::ch12_modern::{
            DecoderConfig, Gate, MlpKind, NormKind, Pairing, PositionKind,
        };
        let c = DecoderConfig {
            n_kv_heads: 2,
            hidden: 112,
            positions: PositionKind::Rotary { base: 10_000.0, pairing: Pairing::Halves },
            norm: NormKind::Rms,
            mlp: MlpKind::Gated(Gate::Swish),
            biases: false,
            tied: false,
            ..DecoderConfig::gpt2(23, 8, 2, 4, 40)
        };
        llm_workbook::ch12_modern::Decoder::new(c, 5).unwrap()
    }

    /// A Llama folder's projections stored as bf16, int8 and 4-bit blocks load back as the
    /// widened stored values (ŵ of each matrix quantized on its own), every other tensor (W_E,
    /// each γ, W_U) exactly as it was; the official crate reads the file.
    #[test]
    fn a_llama_decoders_stored_projections_load_back_as_chapter_11_stores_them() {
        use llm_workbook::ch11_precision::bf16_weights::Bf16Matrix;
        use llm_workbook::ch11_precision::quant::QuantMatrix;
        use llm_workbook::ch12_modern::llama::{decoder_from_stored_llama, llama_stored_files};
        let m = llama();
        let projection = |n: &str| {
            ["w_q", "w_k", "w_v", "w_o", "w_gate", "w_up", "w_down"]
                .iter()
                .any(|p| n.ends_with(&format!(".{p}")))
        };
        assert_eq!(m.tensors().iter().filter(|(n, _)| projection(n)).count(), 2 * 7);
        for storage in [Storage::Bf16, Storage::Int8, Storage::Q4] {
            let files = llama_stored_files(&m, storage).unwrap();
            let bytes = file(&files, "model.safetensors");
            let oracle = safetensors::SafeTensors::deserialize(&bytes).unwrap();
            // down_proj is a Linear of 112 inputs and 40 outputs: [40, 112] in bf16 as in f32,
            // else 40 rows of 4 blocks.
            let down = oracle.tensor("model.layers.1.mlp.down_proj.weight").unwrap();
            let want: &[usize] = match storage {
                Storage::Bf16 => &[40, 112],
                Storage::Int8 => &[40, 4, 32],
                _ => &[40, 4, 16],
            };
            assert_eq!(down.shape(), want, "{storage:?}");
            let embed = oracle.tensor("model.embed_tokens.weight").unwrap();
            assert_eq!(format!("{:?}", embed.dtype()), "F32");
            let config = file(&files, "config.json");
            assert_eq!(storage_of_config(&config, "config.json").unwrap(), storage);
            let f = SafeTensors::parse(bytes, "model.safetensors").unwrap();
            let back = decoder_from_stored_llama::<f32>(m.config, storage, &f).unwrap();
            for ((name, w), (_, got)) in m.tensors().into_iter().zip(back.tensors()) {
                let want = match storage {
                    _ if !projection(&name) => w,
                    Storage::Bf16 => Bf16Matrix::round(&w).widen(),
                    _ => QuantMatrix::quantize(&w, storage).unwrap().dequantize(),
                };
                assert_eq!(got, want, "{storage:?} {name}");
            }
            // The files name their storage; loaded as another, they are refused in one line.
            let f = SafeTensors::parse(file(&files, "model.safetensors"), "m").unwrap();
            let e = decoder_from_stored_llama::<f32>(m.config, Storage::F32, &f).unwrap_err();
            let e = e.to_string();
            assert!(e.contains(storage.name()) && !e.contains('\n'), "{e}");
        }
    }

    /// The mean next-token loss, in nats, of the logits `gpt sample --logits-out` wrote for its
    /// prompt (each position predicting the next prompt token).
    fn prompt_loss(path: &std::path::Path) -> (f64, Vec<Vec<f64>>) {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let ids: Vec<usize> =
            v["prompt"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        let rows: Vec<Vec<f64>> = v["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
            .collect();
        let mut total = 0.0;
        for (t, z) in rows.iter().enumerate().take(ids.len() - 1) {
            let top = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = top + z.iter().map(|x| (x - top).exp()).sum::<f64>().ln();
            total += lse - z[ids[t + 1]];
        }
        (total / (ids.len() - 1) as f64, rows)
    }

    /// `gpt quantize` on a Llama folder (`gpt train --arch llama`): int8 and 4-bit folders that
    /// `gpt sample` runs, their loss on the prompt within chapter 11's bounds of the f32
    /// model's (0.01 and 0.1 nats per token), their logits moved; `gpt resume` and `gpt
    /// finetune` refuse them and a second quantize too, each in one line.
    #[test]
    fn gpt_quantize_stores_a_llama_folder_that_samples_within_chapter_11s_bounds() {
        let dir = crate::common::temp_dir("ch11_quantize_llama");
        let text = dir.join("my.txt");
        std::fs::write(&text, "the cat sat on the mat. the dog sat on the log. ".repeat(40))
            .unwrap();
        let ck = dir.join("ck");
        let (t, c) = (text.to_str().unwrap(), ck.to_str().unwrap());
        let shape = ["--layers", "2", "--heads", "4", "--kv-heads", "2", "--width", "64"];
        let mut args = vec!["gpt", "train", "--arch", "llama", "--data", t, "--out", c];
        args.extend(shape);
        args.extend(["--context", "16", "--steps", "30", "--batch", "4"]);
        let r = cli(&dir, &args);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let examples = dir.join("pairs.jsonl");
        std::fs::write(&examples, "{\"prompt\": \"the \", \"answer\": \"cat\"}\n").unwrap();
        let pairs = examples.to_str().unwrap();
        let prompt = "the cat sat on t";
        let sample = |folder: &str, logits: &std::path::Path| {
            let l = logits.to_str().unwrap();
            let args = ["gpt", "sample", "--checkpoint", folder, "--prompt", prompt, "--tokens"];
            let r = cli(&dir, &[&args[..], &["8", "--greedy", "--logits-out", l]].concat());
            assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
            assert!(String::from_utf8_lossy(&r.stdout).starts_with(prompt));
            String::from_utf8_lossy(&r.stderr).to_string()
        };
        sample(c, &dir.join("f32.json"));
        let (f32_loss, f32_logits) = prompt_loss(&dir.join("f32.json"));
        let one_line = |r: &Output, want: &str| {
            assert!(!r.status.success());
            let e = String::from_utf8_lossy(&r.stderr);
            assert!(e.trim().lines().count() == 1 && e.contains(want), "{e}");
            crate::common::assert_fits_as_a_user_sees_it(&e, want);
        };
        for (storage, bound) in [(Storage::Int8, 0.01), (Storage::Q4, 0.1)] {
            let out = dir.join(storage.name());
            let o = out.to_str().unwrap();
            let r = cli(&dir, &["gpt", "quantize", "--checkpoint", c, "--to", storage.name()]);
            assert!(!r.status.success(), "--out is required");
            let args = ["gpt", "quantize", "--checkpoint", c, "--to", storage.name(), "--out", o];
            let r = cli(&dir, &args);
            assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
            let said = String::from_utf8_lossy(&r.stdout).to_string();
            assert!(said.contains(&format!("stored as {}", storage.name())), "{said}");
            let logits = dir.join(format!("{}.json", storage.name()));
            let err = sample(o, &logits);
            assert!(err.contains("sampled as stored"), "{err}");
            let (loss, rows) = prompt_loss(&logits);
            let moved = (loss - f32_loss).abs();
            eprintln!("{}: loss {loss:.5} against f32 {f32_loss:.5}", storage.name());
            assert!(moved < bound, "{}: {moved} nats per token", storage.name());
            assert_ne!(rows, f32_logits, "{} gave the f32 logits", storage.name());
            let resume = ["gpt", "resume", "--checkpoint", o, "--steps", "40"];
            one_line(&cli(&dir, &resume), "sampling only");
            let finetune = ["gpt", "finetune", "--checkpoint", o, "--data", pairs, "--out", "ft"];
            one_line(&cli(&dir, &finetune), storage.name());
            let again = ["gpt", "quantize", "--checkpoint", o, "--to", "q4", "--out", "again"];
            one_line(&cli(&dir, &again), "already stored as");
        }
    }
}

// ───────────────────────────── a product of bf16 matrices ─────────────────────────────

/// Values over forty binary orders, both signs, rounded to bf16: products and sums of very
/// different sizes, where the order of the additions shows.
fn spread_bf16(rows: usize, cols: usize, rng: &mut Rng) -> nalgebra::DMatrix<u16> {
    let m = nalgebra::DMatrix::from_fn(rows, cols, |_, _| {
        let sign = if rng.below(2) == 0 { -1.0f32 } else { 1.0 };
        sign * 2f32.powf(rng.uniform(-20.0, 20.0) as f32)
    });
    llm_workbook::ch11_precision::bf16_product::to_bf16(&m)
}

/// op(X) shaped rows×cols, stored as op says.
fn stored(rows: usize, cols: usize, op: llm_workbook::matmul::Op, rng: &mut Rng) -> DMatrix<u16> {
    match op {
        llm_workbook::matmul::Op::N => spread_bf16(rows, cols, rng),
        llm_workbook::matmul::Op::T => spread_bf16(cols, rows, rng),
    }
}

/// Shapes across every edge: single entries, partial tiles of 16×6, 32×8 and 4×4, k odd (a pair
/// half padded), k across the f32 kernels' KC (256 and 384) and the pairs' KC of 512.
const BF16_SHAPES: [(usize, usize, usize); 6] =
    [(1, 1, 1), (17, 5, 13), (33, 301, 9), (70, 513, 65), (3, 1031, 2), (40, 64, 17)];

/// The widened path packs the bf16 values as f32 and runs chapter 10's f32 kernel with its
/// blocking, so for α = 1 it is the f32 product of the widened matrices to the bit, on every
/// kernel this CPU runs. Planted and caught: widening by a 15-bit shift; packing the A sliver's
/// lines one position late.
#[test]
fn the_widened_bf16_product_is_the_f32_product_of_the_widened_inputs() {
    use llm_workbook::matmul::lab::{Bf16Path, gemm_bf16};
    use llm_workbook::matmul::{Op, Settings, gemm_with};
    use llm_workbook::simd::available_kernels;
    let mut rng = Rng::new(1611);
    for kernel in available_kernels() {
        for (m, k, n) in BF16_SHAPES {
            for (ta, tb) in [(Op::N, Op::N), (Op::T, Op::N), (Op::N, Op::T), (Op::T, Op::T)] {
                let (a, b) = (stored(m, k, ta, &mut rng), stored(k, n, tb, &mut rng));
                let widen = |x: &DMatrix<u16>| x.map(bf16_to_f32);
                let start = DMatrix::from_fn(m, n, |i, j| (i as f32 - j as f32) * 0.37);
                for beta in [0.0f32, 0.5] {
                    let (mut ours, mut f32s) = (start.clone(), start.clone());
                    gemm_bf16(Bf16Path::widened(kernel), 1.0, &a, ta, &b, tb, beta, &mut ours)
                        .unwrap();
                    let on = Settings { kernel: Some(kernel), ..Settings::default() };
                    gemm_with(on, 1.0, &widen(&a), ta, &widen(&b), tb, beta, &mut f32s).unwrap();
                    let differ = ours.iter().zip(&f32s).filter(|(x, y)| x.to_bits() != y.to_bits());
                    assert_eq!(
                        differ.count(),
                        0,
                        "{kernel} {m}×{k}×{n} {ta:?}{tb:?} β = {beta}: not the f32 product's bits"
                    );
                }
            }
        }
    }
}

/// Every path this CPU runs, against the exact product of the bf16 inputs: the widened path
/// within γ_k S + k·2⁻¹⁴⁹, the pair paths within γ_k S + F + (k + 1)·2⁻¹²⁶ (the module
/// `ch11_precision::bf16_product` derives both). The portable pair path runs everywhere, so the
/// pair packing (k in pairs, an odd k's last pair half zero) is tested on every CPU; the
/// AVX512-BF16 kernel wherever the CPU has it. α and β are checked on the widened path's result
/// against α·s + β·c in f64. Planted and caught: the B pair's halves swapped (b₁ with a₀); an
/// odd k's last value dropped; the bound without its γ_k S term.
#[test]
fn every_bf16_path_keeps_its_bound_against_the_exact_product() {
    use llm_workbook::ch11_precision::bf16_product::{exact_product, pair_bound, widened_bound};
    use llm_workbook::matmul::Op;
    use llm_workbook::matmul::lab::{Bf16Method, Bf16Path, available_bf16_paths, gemm_bf16};
    use llm_workbook::simd::active_kernel;
    let mut rng = Rng::new(1612);
    let paths = available_bf16_paths();
    assert!(
        paths.contains(&Bf16Path::widened(active_kernel()))
            && paths.contains(&Bf16Path::PAIRS_PORTABLE)
    );
    for path in paths {
        for (m, k, n) in BF16_SHAPES {
            for (ta, tb) in [(Op::N, Op::N), (Op::T, Op::T), (Op::T, Op::N)] {
                let (a, b) = (stored(m, k, ta, &mut rng), stored(k, n, tb, &mut rng));
                let exact = exact_product(&a, ta, &b, tb).unwrap();
                let mut c = DMatrix::from_element(m, n, f32::NAN);
                gemm_bf16(path, 1.0, &a, ta, &b, tb, 0.0, &mut c).unwrap();
                for ((&got, &s), (&size, &flushed)) in
                    c.iter().zip(&exact.sum).zip(exact.size.iter().zip(&exact.flushed))
                {
                    let bound = match path.method {
                        Bf16Method::Widened => widened_bound(k, size),
                        Bf16Method::Pairs => pair_bound(k, size, flushed),
                    };
                    assert!(
                        (f64::from(got) - s).abs() <= bound,
                        "{} {m}×{k}×{n} {ta:?}{tb:?}: {got} against {s}, bound {bound:e}",
                        path.name()
                    );
                }
                // α and β: α·s + β·c, with one more rounding of each of the three operations.
                let start = DMatrix::from_fn(m, n, |i, j| (i + 2 * j) as f32 - 3.5);
                let mut c = start.clone();
                gemm_bf16(path, -0.75, &a, ta, &b, tb, 2.0, &mut c).unwrap();
                for (((&got, &s), &size), &c0) in
                    c.iter().zip(&exact.sum).zip(&exact.size).zip(&start)
                {
                    let want = -0.75 * s + 2.0 * f64::from(c0);
                    let slack = 0.75 * (pair_bound(k, size, exact.flushed.max()) + 1e-7 * size)
                        + 1e-6 * f64::from(c0).abs().max(want.abs());
                    assert!((f64::from(got) - want).abs() <= slack, "{}: α, β", path.name());
                }
            }
        }
    }
}

/// The two worked examples of section 7: the order within a pair, and a flushed input.
#[test]
fn the_pair_instruction_adds_in_its_own_order_and_flushes_subnormals() {
    use llm_workbook::ch11_precision::bf16_product::{
        exact_product, flushed_pair, pair_bound, pair_order_row, widened_bound,
    };
    use llm_workbook::matmul::Op;
    use llm_workbook::matmul::lab::{Bf16Path, gemm_bf16};
    use llm_workbook::simd::active_kernel;
    let run = |path, a: &DMatrix<u16>, b: &DMatrix<u16>| {
        let mut c = DMatrix::zeros(1, 1);
        gemm_bf16(path, 1.0, a, Op::N, b, Op::N, 0.0, &mut c).unwrap();
        c[(0, 0)]
    };
    let pair_paths: Vec<Bf16Path> = [Bf16Path::PAIRS_PORTABLE, Bf16Path::PAIRS_AVX512]
        .into_iter()
        .filter(|p| p.is_available())
        .collect();
    // The order: 1, 0, 2⁻²⁴, 2⁻²⁴(1 + 2⁻⁷) times ones.
    let a = DMatrix::from_row_slice(1, 4, &pair_order_row());
    let ones = DMatrix::from_element(4, 1, llm_workbook::ch11_precision::f32_to_bf16(1.0));
    let exact = exact_product(&a, Op::N, &ones, Op::N).unwrap();
    assert_eq!(exact.sum[(0, 0)], 1.0 + 2f64.powi(-23) + 2f64.powi(-31));
    let widened = run(Bf16Path::widened(active_kernel()), &a, &ones);
    assert_eq!(widened, 1.0 + 2f32.powi(-23), "1.00000012: the nearer of the two");
    assert!((f64::from(widened) - exact.sum[(0, 0)]).abs() <= widened_bound(4, exact.size[(0, 0)]));
    for &path in &pair_paths {
        let pairs = run(path, &a, &ones);
        assert_eq!(
            pairs,
            1.0 + 2f32.powi(-22),
            "{}: 1.00000024, a tie gone the other way",
            path.name()
        );
        let error = (f64::from(pairs) - exact.sum[(0, 0)]).abs();
        assert!(error <= pair_bound(4, exact.size[(0, 0)], 0.0));
    }
    // The flush: 2⁻¹³⁰ · 2¹⁰⁰ = 2⁻³⁰.
    let (x, y) = flushed_pair();
    let (a, b) = (DMatrix::from_element(1, 1, x), DMatrix::from_element(1, 1, y));
    assert_eq!(run(Bf16Path::widened(active_kernel()), &a, &b), 2f32.powi(-30));
    let exact = exact_product(&a, Op::N, &b, Op::N).unwrap();
    assert_eq!(exact.flushed[(0, 0)], 2f64.powi(-30), "the flushed part of S");
    for &path in &pair_paths {
        assert_eq!(run(path, &a, &b), 0.0, "{}: a subnormal input is read as zero", path.name());
    }
}

/// Wrong shapes and a path the CPU lacks are refused in one line naming the argument.
#[test]
fn a_bf16_product_refuses_what_it_cannot_compute() {
    use llm_workbook::matmul::Op;
    use llm_workbook::matmul::lab::{Bf16Path, gemm_bf16};
    use llm_workbook::simd::active_kernel;
    let (a, b) = (DMatrix::<u16>::zeros(3, 4), DMatrix::<u16>::zeros(5, 2));
    let mut c = DMatrix::<f32>::zeros(3, 2);
    let err = gemm_bf16(Bf16Path::widened(active_kernel()), 1.0, &a, Op::N, &b, Op::N, 0.0, &mut c)
        .unwrap_err()
        .to_string();
    assert!(err.contains("gemm_bf16") && err.contains("3×4") && !err.contains('\n'), "{err}");
    let mut c = DMatrix::<f32>::zeros(2, 2);
    let err = gemm_bf16(Bf16Path::widened(active_kernel()), 1.0, &a, Op::T, &a, Op::N, 0.0, &mut c)
        .unwrap_err()
        .to_string();
    assert!(err.contains("C") && err.contains("4×4") && err.contains("2×2"), "{err}");
    if !Bf16Path::PAIRS_AVX512.is_available() {
        let mut c = DMatrix::<f32>::zeros(3, 3);
        let err = gemm_bf16(Bf16Path::PAIRS_AVX512, 1.0, &a, Op::N, &a, Op::T, 0.0, &mut c)
            .unwrap_err()
            .to_string();
        assert!(err.contains("path") && err.contains("AVX512-BF16"), "{err}");
    }
    let mut c = DMatrix::<f32>::from_element(3, 3, f32::NAN);
    gemm_bf16(Bf16Path::widened(active_kernel()), 1.0, &a, Op::N, &a, Op::T, 0.0, &mut c).unwrap();
    assert!(c.iter().all(|&x| x == 0.0), "β = 0 overwrites NaN in C");
}

/// A product large enough for threads (2·300·256·301 ≈ 4.6·10⁷ flops) gives the same bits on 1,
/// 2, 3 and 5 threads, on every path this CPU runs: each thread takes whole runs of C's columns
/// and computes each entry as one thread would. Planted and caught: each run's B read from
/// column 0 instead of its own first column.
#[test]
fn a_bf16_product_gives_the_same_bits_on_any_thread_count() {
    use llm_workbook::matmul::Op;
    use llm_workbook::matmul::lab::{available_bf16_paths, gemm_bf16};
    let mut rng = Rng::new(1613);
    let (m, k, n) = (300, 256, 301);
    let (a, b) = (stored(m, k, Op::N, &mut rng), stored(k, n, Op::T, &mut rng));
    for path in available_bf16_paths() {
        let run = |threads| {
            let mut c = DMatrix::from_element(m, n, 1.0f32);
            gemm_bf16(path.on_threads(threads), 1.0, &a, Op::N, &b, Op::T, 0.5, &mut c).unwrap();
            c.map(f32::to_bits)
        };
        let one = run(1);
        for threads in [2, 3, 5] {
            assert_eq!(run(threads), one, "{} on {threads} threads", path.name());
        }
    }
}

// ───────────────────────────── the page's run tables ─────────────────────────────

/// A change as the page prints it: `$+1.4 \cdot 10^{-4}$` for the walk's `+1.4e-4`.
fn change_on_the_page(change: f64) -> String {
    let text = ch11_book::change_text(change);
    let (mantissa, exponent) = text.split_once('e').expect("scientific");
    format!("${mantissa} \\cdot 10^{{{exponent}}}$")
}

/// 2945658 as `2,945,658`, 19637.7 as `19,637.7`.
fn with_thousands(number: &str) -> String {
    let (whole, fraction) = number.split_once('.').map_or((number, None), |(w, f)| (w, Some(f)));
    let digits: Vec<char> = whole.chars().collect();
    let mut out = String::new();
    for (i, c) in digits.iter().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(*c);
    }
    fraction.map_or(out.clone(), |f| format!("{out}.{f}"))
}

/// The page's two tables of measured runs (the quantized losses of chapter 9's corpus model and
/// the four precision runs) print the values the main job measured and keeps at full precision
/// in `chapters/img/ch11_runs.csv`, rounded as printed, with each change the difference of the
/// unrounded values (its sign kept where the losses' four decimals cannot show it).
#[test]
fn the_pages_run_tables_are_the_main_jobs() {
    let root = common::repo_root();
    let csv = std::fs::read_to_string(root.join("chapters/img").join(ch11_book::RUNS_CSV))
        .expect("the runs file");
    let value = |table: &str, row: &str| common::runs_value(&csv, table, row);
    let page = common::prose("ch11_precision");
    let table = |header: &str| common::page_table(&page, header);
    let row_in = |rows: &[Vec<String>], first: &str| -> Vec<String> {
        rows.iter().find(|r| r[0] == first).unwrap_or_else(|| panic!("no row {first}")).clone()
    };
    let storages = table("| storage | bytes per weight |");
    let runs = table("| products | validation loss");
    let (base, base_head) = (value("loss", "f32"), value("loss_with_head", "f32"));
    for (first, storage) in
        [("f32", "f32"), ("bf16", "bf16"), ("int8", "int8"), ("4-bit (`q4`)", "q4")]
    {
        let cells = row_in(&storages, first);
        let (loss, head) = (value("loss", storage), value("loss_with_head", storage));
        assert_eq!(cells[2], format!("{loss:.4}"), "{storage}: loss");
        assert_eq!(cells[4], format!("{head:.4}"), "{storage}: loss with W_U");
        if storage == "f32" {
            assert_eq!((cells[3].as_str(), cells[5].as_str()), ("—", "—"));
        } else {
            assert_eq!(cells[3], change_on_the_page(loss - base), "{storage}: change");
            assert_eq!(cells[5], change_on_the_page(head - base_head), "{storage}: with W_U");
        }
    }
    let f32_run = value("validation", "f32");
    for (first, row) in
        [("f32", "f32"), ("bf16", "bf16"), ("f16", "f16"), ("f16, $S = 2^{10}$", "f16 S = 2^10")]
    {
        let cells = row_in(&runs, first);
        let found: Vec<&String> = cells.iter().skip(1).collect();
        let run = value("validation", row);
        let change = if row == "f32" { String::new() } else { change_on_the_page(run - f32_run) };
        let underflows = value("underflows", row);
        assert_eq!(
            found,
            [
                &format!("{run:.4}"),
                &change,
                &with_thousands(&format!("{underflows}")),
                &match value("underflows_per_step", row) {
                    0.0 => "0".to_string(),
                    per_step => with_thousands(&format!("{per_step:.1}")),
                },
                &format!("{}", value("overflows", row)),
            ],
            "the run {row}"
        );
    }
}
