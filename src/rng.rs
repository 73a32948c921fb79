//! Seeded random numbers, written here so the stream never changes under us.
//!
//! [`Rng`] is xoshiro256** (Blackman and Vigna, 2018) whose 256-bit state is filled from the seed
//! by SplitMix64, the seeding its authors recommend. The same seed gives the same numbers on every
//! machine and every version of this crate.

use crate::float::Float;
use nalgebra::DMatrix;

/// SplitMix64's golden-ratio increment, 2⁶⁴/φ.
const SPLITMIX_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(SPLITMIX_GAMMA);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256**: a small, fast generator with a 256-bit state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator whose state is four SplitMix64 outputs from `seed`.
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let s =
            [splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm)];
        Rng { s }
    }

    /// The full state, to save beside a checkpoint.
    pub fn state(&self) -> [u64; 4] {
        self.s
    }

    /// A generator resumed from a saved [`Rng::state`]. An all-zero state (which xoshiro never
    /// leaves) is replaced by the state of seed 0.
    pub fn from_state(s: [u64; 4]) -> Self {
        if s == [0; 4] { Rng::new(0) } else { Rng { s } }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Uniform integer in 0..n, without modulo bias (Lemire's multiply-and-reject).
    /// `below(0)` is 0 and draws nothing.
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let n = n as u64;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            let low = m as u64;
            if low >= n.wrapping_neg() % n {
                return (m >> 64) as usize;
            }
        }
    }

    /// Standard normal N(0, 1) by the Box–Muller transform.
    pub fn normal(&mut self) -> f64 {
        // 1 − u lies in (0, 1], so the logarithm is finite.
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Shuffles `v` in place (Fisher–Yates).
    pub fn shuffle<X>(&mut self, v: &mut [X]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }

    /// A rows×cols matrix of N(0, std²) entries, filled row by row.
    pub fn normal_matrix<T: Float>(&mut self, rows: usize, cols: usize, std: f64) -> DMatrix<T> {
        let v: Vec<T> = (0..rows * cols).map(|_| T::of(std * self.normal())).collect();
        DMatrix::from_row_slice(rows, cols, &v)
    }

    /// A rows×cols matrix of U[lo, hi) entries, filled row by row.
    pub fn uniform_matrix<T: Float>(
        &mut self,
        rows: usize,
        cols: usize,
        lo: f64,
        hi: f64,
    ) -> DMatrix<T> {
        let v: Vec<T> = (0..rows * cols).map(|_| T::of(self.uniform(lo, hi))).collect();
        DMatrix::from_row_slice(rows, cols, &v)
    }
}

// ───────────────────────── numpy's legacy Mersenne Twister ─────────────────────────

/// Words in the Mersenne Twister's state.
const MT_N: usize = 624;
/// The middle offset of the twist.
const MT_M: usize = 397;
/// The twist's matrix A (its last row), as a 32-bit word.
const MT_MATRIX_A: u32 = 0x9908_b0df;
/// The top bit of a word, taken from the current word during the twist.
const MT_UPPER_MASK: u32 = 0x8000_0000;
/// The lower 31 bits, taken from the next word during the twist.
const MT_LOWER_MASK: u32 = 0x7fff_ffff;
/// The multiplier of the linear recurrence that spreads a 32-bit seed over the state (Knuth).
const MT_INIT_MULTIPLIER: u32 = 1_812_433_253;

/// MT19937, seeded and read the way numpy's legacy `np.random.seed(s)` / `np.random.rand` do, so
/// worked examples that draw their weights from numpy can be reproduced without Python.
///
/// - Seeding: for an integer seed numpy's legacy `RandomState` calls the reference
///   `init_genrand(s)` (not `init_by_array`): state₀ = s, stateᵢ = 1812433253·(stateᵢ₋₁ ⊕
///   (stateᵢ₋₁ ≫ 30)) + i mod 2³². numpy accepts only 0 ≤ s < 2³², hence the `u32`.
/// - Doubles: `rand` takes two 32-bit outputs a, b and returns ((a ≫ 5)·2²⁶ + (b ≫ 6)) / 2⁵³,
///   53 random bits in [0, 1).
/// - Matrices: `np.random.rand(r, c)` fills row by row (C order).
///
/// This is not the crate's own generator ([`Rng`] is); it exists to match another program's
/// stream bit for bit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumpyMt19937 {
    state: [u32; MT_N],
    index: usize,
}

impl NumpyMt19937 {
    /// The generator after `np.random.seed(seed)`.
    pub fn new(seed: u32) -> Self {
        let mut state = [0u32; MT_N];
        state[0] = seed;
        for i in 1..MT_N {
            let prev = state[i - 1];
            state[i] = MT_INIT_MULTIPLIER.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
        }
        // Index N means "twist before the next draw", as after numpy's seeding.
        NumpyMt19937 { state, index: MT_N }
    }

    /// Regenerates all 624 words (the "twist").
    fn twist(&mut self) {
        for i in 0..MT_N {
            let y = (self.state[i] & MT_UPPER_MASK) | (self.state[(i + 1) % MT_N] & MT_LOWER_MASK);
            let mag = if y & 1 == 1 { MT_MATRIX_A } else { 0 };
            self.state[i] = self.state[(i + MT_M) % MT_N] ^ (y >> 1) ^ mag;
        }
        self.index = 0;
    }

    /// The next tempered 32-bit output (`genrand_int32`).
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= MT_N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// The next double in [0, 1), as `np.random.rand()` makes it from two 32-bit outputs.
    pub fn next_f64(&mut self) -> f64 {
        let a = (self.next_u32() >> 5) as f64; // 27 bits
        let b = (self.next_u32() >> 6) as f64; // 26 bits
        (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0 // (a·2²⁶ + b) / 2⁵³
    }

    /// `np.random.rand(rows, cols)`: a rows×cols matrix filled row by row.
    pub fn rand_matrix<T: Float>(&mut self, rows: usize, cols: usize) -> DMatrix<T> {
        let v: Vec<T> = (0..rows * cols).map(|_| T::of(self.next_f64())).collect();
        DMatrix::from_row_slice(rows, cols, &v)
    }
}

#[cfg(test)]
mod numpy_tests {
    use super::*;

    // Reference outputs printed by numpy 2.x: `np.random.seed(s)`, then
    // `np.random.randint(0, 2**32, dtype=np.uint32)` (one raw 32-bit draw each) and
    // `np.random.rand()`.

    #[test]
    fn integer_seeding_is_init_genrand_not_init_by_array() {
        // `RandomState(42).get_state()[1][:2]` is [42, 3107752595]:
        // state₁ = 1812433253·42 + 1 mod 2³².
        let g = NumpyMt19937::new(42);
        assert_eq!(g.state[..2], [42, 3_107_752_595]);
        assert_eq!(g.index, MT_N);
    }

    #[test]
    fn raw_draws_match_numpy_for_seeds_42_and_5489() {
        let mut g = NumpyMt19937::new(42);
        let got: Vec<u32> = (0..4).map(|_| g.next_u32()).collect();
        assert_eq!(got, [1_608_637_542, 3_421_126_067, 4_083_286_876, 787_846_414]);
        // 5489 is the reference implementation's default seed; its first output is well known.
        let mut g = NumpyMt19937::new(5489);
        assert_eq!([g.next_u32(), g.next_u32()], [3_499_211_612, 581_869_302]);
    }

    #[test]
    fn rand_doubles_match_numpy_bit_for_bit() {
        let mut g = NumpyMt19937::new(42);
        let got: Vec<f64> = (0..8).map(|_| g.next_f64()).collect();
        let numpy = [
            0.3745401188473625,
            0.9507143064099162,
            0.7319939418114051,
            0.5986584841970366,
            0.15601864044243652,
            0.15599452033620265,
            0.05808361216819946,
            0.8661761457749352,
        ];
        assert_eq!(got, numpy);
        let mut g = NumpyMt19937::new(0);
        assert_eq!(
            [g.next_f64(), g.next_f64(), g.next_f64()],
            [0.5488135039273248, 0.7151893663724195, 0.6027633760716439]
        );
    }

    #[test]
    fn the_stream_continues_correctly_across_a_twist() {
        // 624 words give 312 doubles; draws 620–623 of `rand(700)` need a second twist.
        let mut g = NumpyMt19937::new(42);
        let got: Vec<f64> = (0..700).map(|_| g.next_f64()).collect();
        assert_eq!(
            got[620..624],
            [0.18452101935637732, 0.2093493233367103, 0.370472102791382, 0.4845229851910213]
        );
    }

    #[test]
    fn rand_matrix_fills_row_by_row_like_c_order() {
        let m = NumpyMt19937::new(42).rand_matrix::<f64>(2, 3);
        assert_eq!(m[(0, 1)], 0.9507143064099162);
        assert_eq!(m[(1, 0)], 0.5986584841970366);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_its_reference_stream() {
        // Reference values of SplitMix64 from state 1234567 (Vigna's splitmix64.c).
        let mut s = 1234567u64;
        let got: Vec<u64> = (0..3).map(|_| splitmix64(&mut s)).collect();
        assert_eq!(got, [6457827717110365317, 3203168211198807973, 9817491932198370423]);
    }

    #[test]
    fn xoshiro256starstar_matches_its_reference_stream() {
        // State (1, 2, 3, 4): the first outputs of xoshiro256** from Vigna's reference code.
        let mut r = Rng::from_state([1, 2, 3, 4]);
        let got: Vec<u64> = (0..4).map(|_| r.next_u64()).collect();
        assert_eq!(got, [11520, 0, 1509978240, 1215971899390074240]);
    }

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let a: Vec<u64> = {
            let mut r = Rng::new(42);
            (0..5).map(|_| r.next_u64()).collect()
        };
        let mut r = Rng::new(42);
        assert_eq!(a, (0..5).map(|_| r.next_u64()).collect::<Vec<_>>());
        let mut r = Rng::new(43);
        assert_ne!(a, (0..5).map(|_| r.next_u64()).collect::<Vec<_>>());
    }

    #[test]
    fn uniform_and_normal_have_the_right_moments() {
        let mut r = Rng::new(7);
        let n = 200_000;
        let u: Vec<f64> = (0..n).map(|_| r.next_f64()).collect();
        assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = u.iter().sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.005, "uniform mean {mean}");
        let z: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let m = z.iter().sum::<f64>() / n as f64;
        let v = z.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64;
        assert!(m.abs() < 0.01 && (v - 1.0).abs() < 0.02, "normal mean {m}, variance {v}");
    }

    #[test]
    fn below_is_in_range_and_unbiased_enough() {
        let mut r = Rng::new(3);
        let mut counts = [0usize; 7];
        for _ in 0..70_000 {
            counts[r.below(7)] += 1;
        }
        assert!(counts.iter().all(|&c| (9_500..10_500).contains(&c)), "{counts:?}");
        assert_eq!(r.below(0), 0);
    }

    #[test]
    fn state_round_trips() {
        let mut r = Rng::new(9);
        r.next_u64();
        let mut resumed = Rng::from_state(r.state());
        assert_eq!(r.next_u64(), resumed.next_u64());
    }
}
