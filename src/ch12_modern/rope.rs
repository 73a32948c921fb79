//! Rotary positions (RoPE): rotate each pair of a query's or key's columns by an angle that grows
//! with the position.
//!
//! A head of width d_h has d_h/2 pairs; pair i turns at the frequency θ_i = base^{−2i/d_h}
//! (i = 0 … d_h/2 − 1; base 10 000 in the paper, 500 000 in Llama 3). At position t the pair
//! (a, b) becomes
//!
//! ```text
//! a′ = a cos(tθ_i) − b sin(tθ_i)
//! b′ = a sin(tθ_i) + b cos(tθ_i)
//! ```
//!
//! so q_t·k_s = qᵀ R(tθ)ᵀ R(sθ) k = qᵀ R((s − t)θ) k depends on t − s only. Two pairings are in
//! use ([`Pairing`]): adjacent columns (2i, 2i + 1), as in the paper and Meta's original files,
//! and the two halves (i, i + d_h/2), as in Hugging Face's `rotate_half`. They differ by a fixed
//! permutation of the head's columns ([`halves_from_adjacent`]); applied to the columns of W_Q and
//! W_K ([`permute_head_columns`]) it makes the two give the same scores.
//!
//! The backward of a rotation is the transposed rotation, R(tθ)ᵀ = R(−tθ): the same function
//! with the sine's sign flipped. The cos/sin table is computed once per context
//! ([`RopeTable::new`]) and read by every layer and step.

use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::{Float, ensure_finite};
use nalgebra::DMatrix;

/// The base of the frequencies in the RoFormer paper and in Llama 2.
pub const ROPE_BASE: f64 = 10_000.0;

/// Which columns of a head form the pairs that rotate together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pairing {
    /// Pair i is columns (2i, 2i + 1): the paper's and Meta's original layout.
    Adjacent,
    /// Pair i is columns (i, i + d_h/2): Hugging Face's `rotate_half` layout.
    Halves,
}

impl Pairing {
    /// The two columns of pair i in a head of width `head_dim`.
    pub fn columns(self, head_dim: usize, i: usize) -> (usize, usize) {
        match self {
            Pairing::Adjacent => (2 * i, 2 * i + 1),
            Pairing::Halves => (i, i + head_dim / 2),
        }
    }
}

/// Checks a head width (even, ≥ 2) and a base (finite, > 1).
fn check_head(op: &'static str, head_dim: usize, base: f64) -> Result<()> {
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(invalid(op, "head_dim", format!("must be even and ≥ 2; got {head_dim}")));
    }
    if !(base.is_finite() && base > 1.0) {
        return Err(invalid(op, "base", format!("must be finite and > 1; got {base}")));
    }
    Ok(())
}

/// θ_i = base^{−2i/d_h} for i = 0 … d_h/2 − 1, in radians per position: pair 0 turns one radian
/// per position, the last pair slowest. Errors on an odd or zero head width or a base ≤ 1.
pub fn rope_frequencies(head_dim: usize, base: f64) -> Result<Vec<f64>> {
    check_head("rope_frequencies", head_dim, base)?;
    let d = head_dim as f64;
    Ok((0..head_dim / 2).map(|i| base.powf(-2.0 * i as f64 / d)).collect())
}

/// The wavelength of every pair, 2π/θ_i positions: how far apart two tokens must be before pair
/// i has turned a whole circle (from 2π ≈ 6.28 for pair 0 up to nearly 2π·base for the last).
pub fn rope_wavelengths(head_dim: usize, base: f64) -> Result<Vec<f64>> {
    Ok(rope_frequencies(head_dim, base)?.iter().map(|t| std::f64::consts::TAU / t).collect())
}

/// cos(tθ_i) and sin(tθ_i) for every position t < context and pair i, computed once (in f64,
/// then rounded to `T`) and read by every rotation.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeTable<T: Float> {
    /// cos(tθ_i), context×(d_h/2).
    pub cos: DMatrix<T>,
    /// sin(tθ_i), context×(d_h/2).
    pub sin: DMatrix<T>,
}

impl<T: Float> RopeTable<T> {
    /// The table for positions 0 … context − 1 of heads of width `head_dim` with the given base.
    /// Errors on a zero context, an odd head width or a base ≤ 1.
    pub fn new(context: usize, head_dim: usize, base: f64) -> Result<Self> {
        if context == 0 {
            return Err(invalid("RopeTable::new", "context", "must be at least 1; got 0"));
        }
        let theta = rope_frequencies(head_dim, base)?;
        let angle = |t: usize, i: usize| t as f64 * theta[i]; //    tθ_i
        Ok(RopeTable {
            cos: DMatrix::from_fn(context, theta.len(), |t, i| T::of(angle(t, i).cos())),
            sin: DMatrix::from_fn(context, theta.len(), |t, i| T::of(angle(t, i).sin())),
        })
    }

    /// The head width d_h the table serves (twice its pairs).
    pub fn head_dim(&self) -> usize {
        2 * self.cos.ncols()
    }

    /// The positions it covers.
    pub fn context(&self) -> usize {
        self.cos.nrows()
    }
}

/// Where the rows of a block sit: B sequences of `seq_len` rows stacked, row r of each sequence at
/// position `start` + r (`start` > 0 for the new rows of a cached step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Positions {
    /// T, the rows of one sequence.
    pub seq_len: usize,
    /// The position of each sequence's first row.
    pub start: usize,
}

impl Positions {
    /// Sequences of `seq_len` rows from position 0.
    pub fn from_zero(seq_len: usize) -> Self {
        Positions { seq_len, start: 0 }
    }
}

/// Rotates every pair of x by ±tθ_i (`sign` +1 forward, −1 for the transpose).
fn rotate<T: Float>(
    op: &'static str,
    table: &RopeTable<T>,
    pairing: Pairing,
    x: &DMatrix<T>,
    at: Positions,
    sign: T,
) -> Result<DMatrix<T>> {
    let d_h = table.head_dim();
    if x.ncols() != d_h {
        return Err(shape_error(op, "x (one head)", format!("N×{d_h}"), shape_of(x)));
    }
    if x.nrows() == 0 {
        return Err(Error::Empty { op, arg: "x" });
    }
    if at.seq_len == 0 || !x.nrows().is_multiple_of(at.seq_len) {
        return Err(invalid(
            op,
            "positions",
            format!("{} rows are not whole sequences of {}", x.nrows(), at.seq_len),
        ));
    }
    let last = at.start + at.seq_len - 1;
    if last >= table.context() {
        return Err(invalid(
            op,
            "positions",
            format!("position {last} is beyond the table's context of {}", table.context()),
        ));
    }
    ensure_finite(op, "x", x)?;
    let mut y = x.clone();
    for r in 0..x.nrows() {
        let t = at.start + r % at.seq_len;
        for i in 0..d_h / 2 {
            let (ca, cb) = pairing.columns(d_h, i);
            let (cos, sin) = (table.cos[(t, i)], sign * table.sin[(t, i)]);
            let (a, b) = (x[(r, ca)], x[(r, cb)]);
            y[(r, ca)] = a * cos - b * sin; //                     a′ = a cos − b sin
            y[(r, cb)] = a * sin + b * cos; //                     b′ = a sin + b cos
        }
    }
    Ok(y)
}

/// The rotation of one head's block x (N×d_h, N = B·T rows at the given positions): every pair
/// (a, b) of row t becomes (a cos tθ_i − b sin tθ_i, a sin tθ_i + b cos tθ_i). Errors on a width
/// other than the table's d_h, rows that are not whole sequences, positions beyond the table,
/// non-finite input.
pub fn rope_forward<T: Float>(
    table: &RopeTable<T>,
    pairing: Pairing,
    x: &DMatrix<T>,
    at: Positions,
) -> Result<DMatrix<T>> {
    rotate("rope_forward", table, pairing, x, at, T::one())
}

/// Backward of [`rope_forward`]: y = R x per pair ⇒ ∂L/∂x = Rᵀ ∂L/∂y = R(−tθ_i) ∂L/∂y (N×d_h).
pub fn rope_backward<T: Float>(
    table: &RopeTable<T>,
    pairing: Pairing,
    d_y: &DMatrix<T>,
    at: Positions,
) -> Result<DMatrix<T>> {
    rotate("rope_backward", table, pairing, d_y, at, -T::one())
}

/// Hugging Face's `rotate_half` of an N×d_h block: [x₁, x₂] ↦ [−x₂, x₁] (x₁, x₂ the two halves).
/// With cos and sin laid out twice, [cos, cos] and [sin, sin], the halves rotation is
/// x ⊙ cos + rotate_half(x) ⊙ sin. Errors on an odd width.
pub fn rotate_half<T: Float>(x: &DMatrix<T>) -> Result<DMatrix<T>> {
    let d = x.ncols();
    if d == 0 || !d.is_multiple_of(2) {
        return Err(invalid("rotate_half", "x", format!("needs an even width; got {d}")));
    }
    let h = d / 2;
    Ok(DMatrix::from_fn(x.nrows(), d, |r, j| if j < h { -x[(r, j + h)] } else { x[(r, j - h)] }))
}

/// The column permutation from the adjacent layout to the halves layout of one head: column j of
/// the halves layout is column `p[j]` of the adjacent one, p = (0, 2, 4, …, 1, 3, 5, …) (pair i's
/// columns 2i and 2i + 1 move to i and i + d_h/2). Errors on an odd or zero width.
pub fn halves_from_adjacent(head_dim: usize) -> Result<Vec<usize>> {
    check_head("halves_from_adjacent", head_dim, ROPE_BASE)?;
    let h = head_dim / 2;
    Ok((0..head_dim).map(|j| if j < h { 2 * j } else { 2 * (j - h) + 1 }).collect())
}

/// W (C×(H·d_h)) with every head's columns permuted: column h·d_h + j of the result is column
/// h·d_h + p(j) of W. With p = [`halves_from_adjacent`] it turns a W_Q or W_K written for the
/// adjacent pairing into one for the halves pairing (the same scores). Errors when p is not a
/// permutation or W's width is not a whole number of heads of its length.
pub fn permute_head_columns<T: Float>(w: &DMatrix<T>, perm: &[usize]) -> Result<DMatrix<T>> {
    const OP: &str = "permute_head_columns";
    let d_h = perm.len();
    let mut seen = vec![false; d_h];
    for &p in perm {
        if p >= d_h || std::mem::replace(&mut seen[p], true) {
            return Err(invalid(OP, "perm", format!("is not a permutation of 0..{d_h}")));
        }
    }
    if d_h == 0 || !w.ncols().is_multiple_of(d_h) {
        return Err(shape_error(OP, "w", format!("C×(H·{d_h})"), shape_of(w)));
    }
    Ok(DMatrix::from_fn(w.nrows(), w.ncols(), |r, c| w[(r, c - c % d_h + perm[c % d_h])]))
}
