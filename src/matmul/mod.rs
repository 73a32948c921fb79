//! The one entry point every matrix product in the crate goes through.
//!
//! Chapters call [`matmul`], [`matmul_tn`] (AᵀB), [`matmul_nt`] (ABᵀ) or the in-place [`gemm`]
//! (C ← αAB + βC with either operand transposed). All of them check shapes and return
//! [`crate::Error::Shape`] instead of panicking. Chapter 10 replaces what happens underneath with
//! packed, SIMD micro-kernels; no caller changes.

use crate::error::{Result, shape_error};
use nalgebra::{ClosedAddAssign, ClosedMulAssign, DMatrix};
use num_traits::{One, Zero};

/// Whether an operand enters the product as stored (`N`) or transposed (`T`), without a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Use the matrix as it is.
    N,
    /// Use its transpose.
    T,
}

impl Op {
    fn shape<T>(self, m: &DMatrix<T>) -> (usize, usize) {
        match self {
            Op::N => (m.nrows(), m.ncols()),
            Op::T => (m.ncols(), m.nrows()),
        }
    }
}

/// The element types a product can be computed in: `f32` and `f64`.
///
/// The trait is sealed; [`Element::gemm_unchecked`] is where a type picks its kernel.
pub trait Element: nalgebra::Scalar + Copy + Zero + One + ClosedAddAssign + ClosedMulAssign + sealed::Sealed {
    /// C ← α·op(A)·op(B) + β·C, shapes already checked. β = 0 overwrites C (NaN in C is ignored).
    fn gemm_unchecked(alpha: Self, a: &DMatrix<Self>, ta: Op, b: &DMatrix<Self>, tb: Op, beta: Self, c: &mut DMatrix<Self>);
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

fn reference_gemm<T: Element>(alpha: T, a: &DMatrix<T>, ta: Op, b: &DMatrix<T>, tb: Op, beta: T, c: &mut DMatrix<T>) {
    if beta == T::zero() {
        c.fill(T::zero());
    }
    match (ta, tb) {
        (Op::N, Op::N) => c.gemm(alpha, a, b, beta),
        (Op::T, Op::N) => c.gemm_tr(alpha, a, b, beta),
        (Op::N, Op::T) => c.gemm(alpha, a, &b.transpose(), beta),
        (Op::T, Op::T) => c.gemm(alpha, &a.transpose(), &b.transpose(), beta),
    }
}

impl Element for f32 {
    fn gemm_unchecked(alpha: f32, a: &DMatrix<f32>, ta: Op, b: &DMatrix<f32>, tb: Op, beta: f32, c: &mut DMatrix<f32>) {
        reference_gemm(alpha, a, ta, b, tb, beta, c)
    }
}

impl Element for f64 {
    fn gemm_unchecked(alpha: f64, a: &DMatrix<f64>, ta: Op, b: &DMatrix<f64>, tb: Op, beta: f64, c: &mut DMatrix<f64>) {
        reference_gemm(alpha, a, ta, b, tb, beta, c)
    }
}

/// C ← α·op(A)·op(B) + β·C.
///
/// Shapes: op(A) is m×k, op(B) is k×n, C is m×n. With β = 0, C's old contents (even NaN) are
/// ignored. Errors name the operands and their shapes.
pub fn gemm<T: Element>(alpha: T, a: &DMatrix<T>, ta: Op, b: &DMatrix<T>, tb: Op, beta: T, c: &mut DMatrix<T>) -> Result<()> {
    let (m, k) = ta.shape(a);
    let (k2, n) = tb.shape(b);
    if k != k2 {
        return Err(shape_error(
            "gemm",
            "inner dimensions of op(A) and op(B)",
            format!("op(B) with {k} rows"),
            format!("op(A) {m}×{k}, op(B) {k2}×{n}"),
        ));
    }
    if c.nrows() != m || c.ncols() != n {
        return Err(shape_error("gemm", "C", format!("{m}×{n}"), format!("{}×{}", c.nrows(), c.ncols())));
    }
    T::gemm_unchecked(alpha, a, ta, b, tb, beta, c);
    Ok(())
}

fn product<T: Element>(op: &'static str, a: &DMatrix<T>, ta: Op, b: &DMatrix<T>, tb: Op) -> Result<DMatrix<T>> {
    let (m, k) = ta.shape(a);
    let (k2, n) = tb.shape(b);
    if k != k2 {
        return Err(shape_error(
            op,
            "a and b (inner dimensions)",
            format!("b to have {k} {}", if tb == Op::N { "rows" } else { "columns" }),
            format!("a {}×{}, b {}×{}", a.nrows(), a.ncols(), b.nrows(), b.ncols()),
        ));
    }
    let mut c = DMatrix::zeros(m, n);
    T::gemm_unchecked(T::one(), a, ta, b, tb, T::zero(), &mut c);
    Ok(c)
}

/// A·B. Shapes: a is m×k, b is k×n, the result m×n.
pub fn matmul<T: Element>(a: &DMatrix<T>, b: &DMatrix<T>) -> Result<DMatrix<T>> {
    product("matmul", a, Op::N, b, Op::N)
}

/// Aᵀ·B without forming Aᵀ. Shapes: a is k×m, b is k×n, the result m×n (weight gradients).
pub fn matmul_tn<T: Element>(a: &DMatrix<T>, b: &DMatrix<T>) -> Result<DMatrix<T>> {
    product("matmul_tn", a, Op::T, b, Op::N)
}

/// A·Bᵀ without forming Bᵀ. Shapes: a is m×k, b is n×k, the result m×n (QKᵀ, input gradients).
pub fn matmul_nt<T: Element>(a: &DMatrix<T>, b: &DMatrix<T>) -> Result<DMatrix<T>> {
    product("matmul_nt", a, Op::N, b, Op::T)
}

/// The triple loop, in f64 accumulation: the specification every fast path is tested against.
pub fn naive<T: Element + num_traits::ToPrimitive + num_traits::FromPrimitive>(
    a: &DMatrix<T>,
    ta: Op,
    b: &DMatrix<T>,
    tb: Op,
) -> Result<DMatrix<T>> {
    let (m, k) = ta.shape(a);
    let (k2, n) = tb.shape(b);
    if k != k2 {
        return Err(shape_error("naive", "a and b (inner dimensions)", format!("{k}"), format!("{k2}")));
    }
    let at = |i: usize, p: usize| if ta == Op::N { a[(i, p)] } else { a[(p, i)] };
    let bt = |p: usize, j: usize| if tb == Op::N { b[(p, j)] } else { b[(j, p)] };
    Ok(DMatrix::from_fn(m, n, |i, j| {
        let mut s = 0.0f64;
        for p in 0..k {
            s += at(i, p).to_f64().unwrap_or(f64::NAN) * bt(p, j).to_f64().unwrap_or(f64::NAN);
        }
        T::from_f64(s).unwrap_or_else(T::zero)
    }))
}
