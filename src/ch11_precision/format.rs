//! The four binary floating-point formats of the chapter, and our own conversions between them.
//!
//! A format with E exponent bits and F fraction bits stores a sign s, a biased exponent e and a
//! fraction f (an integer below 2^F). With bias = 2^{E−1} − 1 the bit pattern means
//!
//! ```text
//! e = 0             (−1)^s · f · 2^{1 − bias − F}              zero and the subnormals
//! 0 < e < 2^E − 1   (−1)^s · (2^F + f) · 2^{e − bias − F}       the normal numbers
//! e = 2^E − 1       (−1)^s · ∞ when f = 0, NaN otherwise
//! ```
//!
//! Everything the chapter says about a format follows from E and F: machine epsilon 2^{−F}, the
//! largest normal (2 − 2^{−F})·2^{bias}, the smallest normal 2^{1−bias}, the smallest subnormal
//! 2^{1−bias−F}, the ulp of x. [`f32_to_bf16`], [`f32_to_f16`], [`f16_to_f32`] and
//! [`bf16_to_f32`] convert bit patterns (held in `u16`) with round to nearest, ties to even, from
//! these definitions alone; the tests compare them with the `half` crate on every f16 pattern.

use crate::error::{Result, invalid};

/// A binary interchange format: its name, exponent width E and fraction width F (the stored
/// bits of the significand; the leading 1 of a normal number is implicit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    /// How the chapter names it: `f64`, `f32`, `bf16`, `f16`.
    pub name: &'static str,
    /// E, the exponent field's width in bits.
    pub exponent_bits: u32,
    /// F, the fraction field's width in bits.
    pub fraction_bits: u32,
}

/// IEEE 754 binary64: 1 + 11 + 52 bits.
pub const F64: Format = Format { name: "f64", exponent_bits: 11, fraction_bits: 52 };
/// IEEE 754 binary32: 1 + 8 + 23 bits.
pub const F32: Format = Format { name: "f32", exponent_bits: 8, fraction_bits: 23 };
/// Brain float 16: f32's sign and 8 exponent bits with only 7 fraction bits (f32's top half).
pub const BF16: Format = Format { name: "bf16", exponent_bits: 8, fraction_bits: 7 };
/// IEEE 754 binary16: 1 + 5 + 10 bits.
pub const F16: Format = Format { name: "f16", exponent_bits: 5, fraction_bits: 10 };
/// The four, widest first.
pub const FORMATS: [Format; 4] = [F64, F32, BF16, F16];

/// 2^k as an f64, exactly, for −1074 ≤ k ≤ 1023 (built from its bits, so no rounding and no
/// overflow on the way).
pub fn pow2(k: i32) -> f64 {
    const F64_BIAS: i32 = 1023;
    const F64_FRACTION: i32 = 52;
    if k >= 1 - F64_BIAS {
        f64::from_bits(((k.min(F64_BIAS) + F64_BIAS) as u64) << F64_FRACTION)
    } else {
        // A subnormal f64: one bit of the fraction; below 2^{−1074} nothing is left.
        let shift = k + F64_BIAS - 1 + F64_FRACTION;
        if shift < 0 { 0.0 } else { f64::from_bits(1u64 << shift) }
    }
}

/// The three fields of a bit pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    /// 0 for +, 1 for −.
    pub sign: u32,
    /// The biased exponent e, 0 ≤ e ≤ 2^E − 1.
    pub exponent: u32,
    /// The fraction f, 0 ≤ f < 2^F.
    pub fraction: u64,
}

impl Format {
    /// 1 + E + F.
    pub fn bits(self) -> u32 {
        1 + self.exponent_bits + self.fraction_bits
    }

    /// bias = 2^{E−1} − 1 (1023, 127, 127, 15).
    pub fn bias(self) -> i32 {
        (1 << (self.exponent_bits - 1)) - 1
    }

    /// The all-ones exponent field 2^E − 1, which marks ∞ and NaN.
    pub fn special_exponent(self) -> u32 {
        (1 << self.exponent_bits) - 1
    }

    /// Machine epsilon ε = 2^{−F}: the gap between 1 and the next number.
    pub fn epsilon(self) -> f64 {
        pow2(-(self.fraction_bits as i32))
    }

    /// The unit roundoff u = ε/2 = 2^{−F−1}: the largest relative error of rounding to nearest
    /// (for results in the normal range).
    pub fn unit_roundoff(self) -> f64 {
        pow2(-(self.fraction_bits as i32) - 1)
    }

    /// The largest finite number, (2 − 2^{−F})·2^{bias}.
    pub fn max_normal(self) -> f64 {
        (2.0 - self.epsilon()) * pow2(self.bias())
    }

    /// The smallest positive normal number, 2^{1−bias}.
    pub fn min_normal(self) -> f64 {
        pow2(1 - self.bias())
    }

    /// The smallest positive subnormal number, 2^{1−bias−F}.
    pub fn min_subnormal(self) -> f64 {
        pow2(1 - self.bias() - self.fraction_bits as i32)
    }

    /// The sign, exponent and fraction fields of the pattern `bits` (its low 1 + E + F bits).
    /// Errors when `bits` has a bit set above the format's width.
    pub fn fields(self, bits: u64) -> Result<Fields> {
        if self.bits() < 64 && bits >> self.bits() != 0 {
            return Err(invalid(
                "Format::fields",
                "bits",
                format!("{bits:#x} is wider than the {} bits of {}", self.bits(), self.name),
            ));
        }
        Ok(Fields {
            sign: (bits >> (self.bits() - 1)) as u32 & 1,
            exponent: (bits >> self.fraction_bits) as u32 & self.special_exponent(),
            fraction: bits & ((1u64 << self.fraction_bits) - 1),
        })
    }

    /// The value of a bit pattern, exactly, as an f64 (every f32, bf16 and f16 value is one):
    /// the table in the module's documentation. NaN patterns decode to NaN. Errors as
    /// [`Format::fields`].
    pub fn decode(self, bits: u64) -> Result<f64> {
        let Fields { sign, exponent, fraction } = self.fields(bits)?;
        let magnitude = if exponent == self.special_exponent() {
            if fraction == 0 { f64::INFINITY } else { f64::NAN }
        } else {
            let (significand, e) = if exponent == 0 {
                (fraction, 1)
            } else {
                (fraction | (1u64 << self.fraction_bits), exponent as i32)
            };
            // significand < 2^53, so it is an f64 exactly, and so is the product.
            significand as f64 * pow2(e - self.bias() - self.fraction_bits as i32)
        };
        Ok(if sign == 1 { -magnitude } else { magnitude })
    }

    /// The ulp of x in this format: the gap between the two format numbers around |x|,
    /// 2^{max(⌊log₂|x|⌋, 1−bias) − F} (the subnormals' gap below the smallest normal). Errors when
    /// x is NaN, infinite or beyond the largest finite number.
    pub fn ulp(self, x: f64) -> Result<f64> {
        if !x.is_finite() || x.abs() > self.max_normal() {
            return Err(invalid(
                "Format::ulp",
                "x",
                format!("{x} is not a finite {} number (largest {})", self.name, self.max_normal()),
            ));
        }
        let min_exponent = 1 - self.bias();
        let binade = if x == 0.0 { min_exponent } else { exponent_of(x.abs()).max(min_exponent) };
        Ok(pow2(binade - self.fraction_bits as i32))
    }
}

/// ⌊log₂ x⌋ for a positive finite f64, read from its bits (subnormals included).
fn exponent_of(x: f64) -> i32 {
    let bits = x.to_bits();
    let e = (bits >> 52) as i32 & 0x7ff;
    if e == 0 { -1022 - 52 + (63 - bits.leading_zeros() as i32) } else { e - 1023 }
}

// ───────────────────────────── conversions ─────────────────────────────

/// The pattern of the f32 `x` in the narrower format `to` (E ≤ 8, F < 23), rounded to nearest
/// with ties to even: write |x| = m·2^{q₀} with an integer m, choose the target's quantum
/// 2^q (q = (exponent of the leading bit) − F, but never below the subnormal quantum 1 − bias − F),
/// divide m by 2^{q − q₀} and round the quotient. A quotient that rounds up to 2^{F+1} carries
/// into the exponent by itself, and one past the largest finite number becomes ∞. NaN stays NaN:
/// sign kept, quiet bit set, the top F − 1 bits of its payload kept.
#[inline]
fn narrow(x: f32, to: Format) -> u32 {
    let bits = x.to_bits();
    let (f, bias) = (to.fraction_bits, to.bias());
    let sign = (bits >> 31) << (to.bits() - 1);
    let exponent = (bits >> 23) & 0xff;
    let fraction = bits & 0x7f_ffff;
    let infinity = to.special_exponent() << f;
    if exponent == 0xff {
        let quiet = if fraction == 0 { 0 } else { 1 << (f - 1) };
        return sign | infinity | quiet | (fraction >> (23 - f));
    }
    if exponent == 0 && fraction == 0 {
        return sign;
    }
    let rebias = 127 - bias;
    if exponent != 0 && (1..to.special_exponent() as i32).contains(&(exponent as i32 - rebias)) {
        // The common case, a normal x whose exponent the target has: the quantum is x's own
        // exponent less F, so the quotient and remainder below are the pattern's top and low
        // 23 − F bits. Adding just under half a quantum, plus the quotient's last bit, carries
        // into the top bits exactly when the remainder is over half, or half with an odd
        // quotient; a carry out of the fraction raises the exponent, and one past the largest
        // exponent gives the pattern of ∞.
        let shift = 23 - f;
        let magnitude = bits & 0x7fff_ffff;
        let rounded = magnitude + (1 << (shift - 1)) - 1 + ((magnitude >> shift) & 1);
        let narrowed = (rounded >> shift) - ((rebias as u32) << f);
        return sign | narrowed.min(infinity);
    }
    // |x| = m · 2^{q0}: f32's subnormals have no hidden bit and the exponent of e = 1.
    let (m, q0) = if exponent == 0 {
        (u64::from(fraction), 1 - 127 - 23)
    } else {
        (u64::from(fraction | 1 << 23), exponent as i32 - 127 - 23)
    };
    let leading = q0 + 63 - m.leading_zeros() as i32;
    let q = (leading - f as i32).max(1 - bias - f as i32);
    // q ≥ q0 for every narrower format; a shift past m's 24 bits leaves less than half a quantum.
    let shift = (q - q0).min(40) as u32;
    let (mut quotient, remainder) = (m >> shift, m & ((1u64 << shift) - 1));
    let half = if shift == 0 { u64::MAX } else { 1u64 << (shift - 1) };
    if remainder > half || (remainder == half && quotient & 1 == 1) {
        quotient += 1;
    }
    // Exponent field (q + F + bias) minus the hidden bit that the quotient brings along: a
    // subnormal (q at its floor, quotient < 2^F) gets field 0, a carry to 2^{F+1} one more.
    let magnitude = (((q + f as i32 + bias - 1) as u64) << f) + quotient;
    if magnitude >= u64::from(infinity) { sign | infinity } else { sign | magnitude as u32 }
}

/// The f32 value of a pattern of the narrower format `from`, exactly (every bf16 and f16 value is
/// an f32). A NaN keeps its sign and payload, with the quiet bit set.
#[inline]
fn widen(bits: u32, from: Format) -> f32 {
    let f = from.fraction_bits;
    let exponent = (bits >> f) & from.special_exponent();
    let fraction = bits & ((1 << f) - 1);
    if exponent == from.special_exponent() && fraction != 0 {
        let sign = (bits >> (from.bits() - 1)) << 31;
        return f32::from_bits(sign | 0x7f80_0000 | 0x40_0000 | fraction << (23 - f));
    }
    if exponent != 0 && exponent != from.special_exponent() {
        // A normal number: the same sign and fraction (shifted to f32's 23 bits), the exponent
        // re-biased from the format's bias to f32's 127.
        let sign = (bits >> (from.bits() - 1)) << 31;
        let e = exponent as i32 - from.bias() + 127;
        return f32::from_bits(sign | (e as u32) << 23 | fraction << (23 - f));
    }
    let sign = if bits >> (from.bits() - 1) & 1 == 1 { -1.0 } else { 1.0 };
    if exponent == from.special_exponent() {
        return sign * f32::INFINITY;
    }
    // The table of the module's documentation, in f32: (significand·2^{−F})·2^{e − bias}, two
    // exact products (the significand has at most F + 1 ≤ 11 bits, 2^{e − bias} is a normal f32
    // for e ≥ 1, and the value itself is an f32).
    let (significand, e) =
        if exponent == 0 { (fraction, 1) } else { (fraction | 1 << f, exponent as i32) };
    let pow2_f32 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    sign * (significand as f32 * pow2_f32(-(f as i32))) * pow2_f32(e - from.bias())
}

/// The bf16 pattern nearest the f32 `x` (ties to even); ±∞ past the largest bf16
/// (≈ 3.39·10³⁸); NaN stays a NaN of the same sign, made quiet. bf16 keeps f32's exponent, so
/// this is f32's top 16 bits, rounded by the 16 it drops.
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    narrow(x, BF16) as u16
}

/// The f16 pattern nearest the f32 `x` (ties to even): ±∞ from 65520 on (the tie between 65504
/// and where 65536 would be rounds to even, which is ∞), subnormals below 2^{−14}, ±0 below
/// 2^{−25}; NaN stays a NaN of the same sign, made quiet, with the top 9 bits of its payload.
#[inline]
pub fn f32_to_f16(x: f32) -> u16 {
    narrow(x, F16) as u16
}

/// The f32 value of an f16 pattern, exactly.
#[inline]
pub fn f16_to_f32(bits: u16) -> f32 {
    widen(u32::from(bits), F16)
}

/// The f32 value of a bf16 pattern, exactly (the pattern followed by 16 zero bits).
#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    widen(u32::from(bits), BF16)
}

/// x rounded to the nearest bf16 and widened back: the f32 a bf16 store keeps of x.
#[inline]
pub fn round_to_bf16(x: f32) -> f32 {
    bf16_to_f32(f32_to_bf16(x))
}

/// x rounded to the nearest f16 and widened back: the f32 an f16 store keeps of x.
#[inline]
pub fn round_to_f16(x: f32) -> f32 {
    f16_to_f32(f32_to_f16(x))
}
