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
        let s = [splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm)];
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
    pub fn uniform_matrix<T: Float>(&mut self, rows: usize, cols: usize, lo: f64, hi: f64) -> DMatrix<T> {
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
