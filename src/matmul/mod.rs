//! The one entry point every matrix product in the crate goes through.
//!
//! Chapters call [`matmul`], [`matmul_tn`] (AᵀB), [`matmul_nt`] (ABᵀ) or the in-place [`gemm`]
//! (C ← αAB + βC with either operand transposed). All of them check shapes and return
//! [`crate::Error::Shape`] instead of panicking. Underneath (chapter 10,
//! [`chapters/ch10_matmul.md`](../../chapters/ch10_matmul.md)) sits a BLIS-style product:
//!
//! - packing copies blocks of op(A) and op(B) into contiguous, zero-padded buffers in the order
//!   the micro-kernel reads them (a transpose is only a swap of strides, paid for here; see
//!   [`lab::pack_a_block`] and [`lab::pack_b_panel`] to look at them);
//! - the five loops around the micro-kernel keep each packed block in the cache level it was
//!   sized for ([`lab::Blocking`]);
//! - a micro-kernel updates an MR×NR tile of C held in registers: a portable one (the
//!   specification, [`Kernel::Scalar`]) and AVX2+FMA and AVX-512F ones, chosen by the crate's
//!   one dispatcher ([`crate::simd`]) from what the CPU supports, named by a product's
//!   [`Settings`] or forced for the process ([`crate::simd::set_kernel`] or the environment
//!   variable `LLM_WORKBOOK_KERNEL`);
//! - large products are cut into pieces of C shared between threads ([`default_threads`],
//!   [`lab::PARALLEL_MIN_FLOPS`]).
//!
//! The public names are the product itself: the products, the views they take, [`Op`],
//! [`Element`], the [`Settings`] and what a product reports ([`ProductStats`]). The names
//! chapter 10 teaches and tunes with (blocking constants, caches, tile shapes, packed blocks, one
//! kernel call, the bf16 product) are in [`lab`].
//!
//! The SIMD micro-kernels' bodies are not here: they live in the crate's one file allowed
//! `unsafe` code, `src/simd/x86.rs`, with the CPU tokens, the FMA probe's loops and the
//! element-wise map's. A SIMD kernel can only be built from a token that the CPU detection alone
//! can make, and every call checks every slice bound before touching a pointer.
//!
//! What is not the product lives beside this module: the thread count in [`crate::threads`], the
//! nalgebra backend switch in [`crate::backend`], the element-wise map in [`crate::simd_map`] and
//! the FMA throughput probe in [`crate::peak`].

mod bf16;
mod blocked;
mod caches;
mod kernels;
mod pack;
mod row;
mod scalar;
mod stats;

use crate::backend::{Backend, active_backend, record_nalgebra_product};
use crate::error::{Result, invalid, shape_error};
use crate::threads::default_threads;
use nalgebra::{ClosedAddAssign, ClosedMulAssign, ClosedSubAssign, DMatrix};
use num_traits::{One, Zero};

pub mod inputs;
pub mod lab;

pub use row::row_product;
pub use stats::ProductStats;

use crate::simd::{Kernel, active_kernel};
use blocked::PARALLEL_MIN_FLOPS;
use stats::Blocking;

/// Whether an operand enters the product as stored (`N`) or transposed (`T`), without a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Use the matrix as it is.
    N,
    /// Use its transpose.
    T,
}

impl Op {
    /// The shape (rows, columns) of op(M) for a stored matrix M.
    pub fn shape<T>(self, m: &DMatrix<T>) -> (usize, usize) {
        match self {
            Op::N => (m.nrows(), m.ncols()),
            Op::T => (m.ncols(), m.nrows()),
        }
    }
}

impl Element for f32 {}
impl Element for f64 {}

/// The element types a product can be computed in: `f32` and `f64`.
///
/// The trait is sealed: each type brings its micro-kernels and its packing workspaces.
pub trait Element:
    nalgebra::Scalar
    + Copy
    + Zero
    + One
    + ClosedAddAssign
    + ClosedSubAssign
    + ClosedMulAssign
    + std::iter::Sum
    + Send
    + Sync
    + sealed::Sealed
{
}

mod sealed {
    use super::blocked::Workspace;
    use super::kernels::MicroKernel;
    use crate::simd::Kernel;
    use std::cell::RefCell;

    /// What the blocked product needs from an element type, hidden from outside the crate.
    pub trait Sealed: Sized + 'static {
        /// The micro-kernel of family `kind` for this type, if the CPU can run it.
        fn micro_kernel(kind: Kernel) -> Option<MicroKernel<Self>>;
        /// Runs `f` with at least `count` packing workspaces of the current thread.
        fn with_workspaces<R>(count: usize, f: impl FnOnce(&mut [Workspace<Self>]) -> R) -> R;
        /// Writes `dst[p·W + i] = lines[i][p]` (W = `lines.len()`) with SIMD transposes for p below
        /// some multiple of 8, and returns how many p that is; 0 (the default) leaves every p to
        /// the caller's plain copy.
        fn transpose_lines(_dst: &mut [Self], _lines: &[&[Self]], _kc: usize) -> usize {
            0
        }
        /// Whether the one-row product has a SIMD body for this type in `kernel` (f32 on x86-64:
        /// [`crate::simd::row_dots`] and [`crate::simd::row_sums`]); the default: none.
        fn row_simd(_kernel: Kernel) -> bool {
            false
        }
        /// The one-row product's column dots by `kernel` ([`crate::simd::row_dots`]); `false`
        /// (nothing done) where the type or the kernel has none.
        fn row_dots(
            _kernel: Kernel,
            _x: &[Self],
            _b: &[Self],
            _ld: usize,
            _out: &mut [Self],
        ) -> bool {
            false
        }
        /// The one-row product's sums of rows by `kernel` ([`crate::simd::row_sums`]); `false`
        /// (nothing done) where the type or the kernel has none.
        fn row_sums(
            _kernel: Kernel,
            _x: &[Self],
            _b: &[Self],
            _ld: usize,
            _out: &mut [Self],
        ) -> bool {
            false
        }
    }

    fn with_cache<T, R>(
        cache: &'static std::thread::LocalKey<RefCell<Vec<Workspace<T>>>>,
        count: usize,
        f: impl FnOnce(&mut [Workspace<T>]) -> R,
    ) -> R {
        cache.with(|cell| match cell.try_borrow_mut() {
            Ok(mut ws) => {
                let len = ws.len().max(count);
                ws.resize_with(len, Workspace::default);
                f(&mut ws[..count])
            }
            // Only reachable if a product were started from inside another on the same thread;
            // fresh buffers keep that correct.
            Err(_) => f(&mut (0..count).map(|_| Workspace::default()).collect::<Vec<_>>()),
        })
    }

    thread_local! {
        static F32_WORKSPACES: RefCell<Vec<Workspace<f32>>> = const { RefCell::new(Vec::new()) };
        static F64_WORKSPACES: RefCell<Vec<Workspace<f64>>> = const { RefCell::new(Vec::new()) };
    }

    impl Sealed for f32 {
        fn micro_kernel(kind: Kernel) -> Option<MicroKernel<f32>> {
            super::kernels::f32_kernel(kind)
        }
        fn with_workspaces<R>(count: usize, f: impl FnOnce(&mut [Workspace<f32>]) -> R) -> R {
            with_cache(&F32_WORKSPACES, count, f)
        }
        #[cfg(target_arch = "x86_64")]
        fn transpose_lines(dst: &mut [f32], lines: &[&[f32]], kc: usize) -> usize {
            crate::simd::transpose_f32(dst, lines, kc)
        }
        fn row_simd(kernel: Kernel) -> bool {
            cfg!(target_arch = "x86_64") && kernel != Kernel::Scalar
        }
        fn row_dots(kernel: Kernel, x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) -> bool {
            crate::simd::row_dots(kernel, x, b, ld, out)
        }
        fn row_sums(kernel: Kernel, x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) -> bool {
            crate::simd::row_sums(kernel, x, b, ld, out)
        }
    }
    impl Sealed for f64 {
        fn micro_kernel(kind: Kernel) -> Option<MicroKernel<f64>> {
            super::kernels::f64_kernel(kind)
        }
        fn with_workspaces<R>(count: usize, f: impl FnOnce(&mut [Workspace<f64>]) -> R) -> R {
            with_cache(&F64_WORKSPACES, count, f)
        }
        #[cfg(target_arch = "x86_64")]
        fn transpose_lines(dst: &mut [f64], lines: &[&[f64]], kc: usize) -> usize {
            crate::simd::transpose_f64(dst, lines, kc)
        }
    }
}

/// How a product is run: who computes it, which kernel, which blocking, how many threads — one
/// value, given to the product as an argument ([`gemm_with`]; chapter 9's step keeps one and hands
/// it to each of its products). `None` means the process's choice: [`active_backend`]
/// (`LLM_WORKBOOK_BACKEND`), [`active_kernel`] (`LLM_WORKBOOK_KERNEL`, or the best the CPU runs),
/// that kernel's tuned blocking, [`default_threads`] (`LLM_WORKBOOK_THREADS`, or the cores).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Settings {
    /// Who computes the product: our kernels, or nalgebra's (the benchmark's peer, which ignores
    /// every other setting).
    pub backend: Option<Backend>,
    /// The micro-kernel family (must be available on this CPU).
    pub kernel: Option<Kernel>,
    /// The cache blocking (every field at least 1).
    pub blocking: Option<Blocking>,
    /// The most threads to use (at least 1); small products still use one.
    pub threads: Option<usize>,
    /// The fewest flops (2·m·n·k) a product needs before it is split over threads; default
    /// [`PARALLEL_MIN_FLOPS`]. The benchmark lowers it to find where a second thread pays.
    pub min_parallel_flops: Option<f64>,
}

pub(crate) use crate::simd::unavailable;

/// op(A) (m×k) and op(B) (k2×n) chain only when k = k2: the error names both shapes.
fn check_inner(op: &'static str, (m, k): (usize, usize), (k2, n): (usize, usize)) -> Result<()> {
    if k != k2 {
        return Err(shape_error(
            op,
            "inner dimensions of op(A) and op(B)",
            format!("op(B) with {k} rows"),
            format!("op(A) {m}×{k}, op(B) {k2}×{n}"),
        ));
    }
    Ok(())
}

/// op(A) and op(B) chain and C is op(A)·op(B)'s shape (C may hold another type than A and B:
/// the bf16 product writes f32).
fn check_shapes<T, U>(
    op: &'static str,
    a: &DMatrix<T>,
    ta: Op,
    b: &DMatrix<T>,
    tb: Op,
    c: &DMatrix<U>,
) -> Result<()> {
    let (m, k) = ta.shape(a);
    let (k2, n) = tb.shape(b);
    check_inner(op, (m, k), (k2, n))?;
    if c.nrows() != m || c.ncols() != n {
        return Err(shape_error(
            op,
            "C",
            format!("{m}×{n}"),
            format!("{}×{}", c.nrows(), c.ncols()),
        ));
    }
    Ok(())
}

/// The blocked product on operands already described by their strides, C column-major m×n with
/// leading dimension `ldc`.
#[allow(clippy::too_many_arguments)]
fn run_operands<T: Element>(
    settings: Settings,
    alpha: T,
    a_op: pack::Operand<T>,
    b_op: pack::Operand<T>,
    beta: T,
    c: &mut [T],
    ldc: usize,
    (m, n, k): (usize, usize, usize),
) -> Result<ProductStats> {
    let kind = settings.kernel.unwrap_or_else(active_kernel);
    let kernel = T::micro_kernel(kind).ok_or_else(|| unavailable("gemm_with", kind))?;
    let blocking = settings.blocking.unwrap_or(kernel.blocking);
    if blocking.mc == 0 || blocking.kc == 0 || blocking.nc == 0 {
        return Err(invalid(
            "gemm_with",
            "blocking",
            format!("every block size must be at least 1, got {blocking:?}"),
        ));
    }
    let threads = settings.threads.unwrap_or_else(default_threads);
    if threads == 0 {
        return Err(invalid("gemm_with", "threads", "at least 1 thread is needed, got 0"));
    }
    let min_parallel_flops = settings.min_parallel_flops.unwrap_or(PARALLEL_MIN_FLOPS);
    if min_parallel_flops.is_nan() {
        return Err(invalid("gemm_with", "min_parallel_flops", "a number is needed, got NaN"));
    }
    let plan = blocked::Plan { kernel, blocking, threads, min_parallel_flops };
    let stats = blocked::gemm(plan, alpha, a_op, b_op, beta, c, ldc, (m, n, k));
    stats::record(stats);
    Ok(stats)
}

/// A read-only view of a column-major matrix stored inside a longer slice, as BLAS describes one:
/// element (i, j) is `data[i + j·ld]`, with the leading dimension ld ≥ rows. A head of attention
/// is such a view of the projections (its columns, in the rows of one sequence), so it can enter a
/// product without being copied out.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a, T> {
    data: &'a [T],
    rows: usize,
    cols: usize,
    ld: usize,
}

impl<'a, T> MatRef<'a, T> {
    /// The rows×cols view starting at `data[0]` with leading dimension `ld`. Errors when ld < rows
    /// or the slice is too short to hold the last column.
    pub fn new(data: &'a [T], rows: usize, cols: usize, ld: usize) -> Result<Self> {
        check_view("MatRef::new", data.len(), rows, cols, ld)?;
        Ok(MatRef { data, rows, cols, ld })
    }

    /// Rows of the view.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of the view.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The leading dimension: the distance in the slice between (i, j) and (i, j + 1).
    pub fn ld(&self) -> usize {
        self.ld
    }

    /// The slice the view starts at: element (i, j) is `as_slice()[i + j·ld]`.
    pub fn as_slice(&self) -> &'a [T] {
        self.data
    }

    /// The same view as nalgebra's.
    fn nalgebra(self) -> nalgebra::DMatrixView<'a, T, nalgebra::Dyn, nalgebra::Dyn>
    where
        T: nalgebra::Scalar,
    {
        nalgebra::DMatrixView::from_slice_with_strides(self.data, self.rows, self.cols, 1, self.ld)
    }

    /// The shape of op(view).
    fn shape(&self, op: Op) -> (usize, usize) {
        match op {
            Op::N => (self.rows, self.cols),
            Op::T => (self.cols, self.rows),
        }
    }
}

/// A writable view of a column-major matrix inside a longer slice: element (i, j) is
/// `data[i + j·ld]`, ld ≥ rows (the output side of [`gemm`]).
#[derive(Debug)]
pub struct MatMut<'a, T> {
    data: &'a mut [T],
    rows: usize,
    cols: usize,
    ld: usize,
}

/// The checks [`MatRef::new`] and [`MatMut::new`] share: ld ≥ rows and room for the last column.
fn check_view(op: &'static str, len: usize, rows: usize, cols: usize, ld: usize) -> Result<()> {
    if ld < rows.max(1) {
        return Err(invalid(
            op,
            "ld",
            format!("the leading dimension must be at least the rows ({rows}), got {ld}"),
        ));
    }
    let needed = if rows == 0 || cols == 0 { 0 } else { (cols - 1) * ld + rows };
    if len < needed {
        return Err(shape_error(
            op,
            "data",
            format!("at least {needed} values for {rows}×{cols} with ld = {ld}"),
            format!("{len}"),
        ));
    }
    Ok(())
}

impl<'a, T> MatMut<'a, T> {
    /// The rows×cols view starting at `data[0]` with leading dimension `ld`. Errors when ld < rows
    /// or the slice is too short to hold the last column.
    pub fn new(data: &'a mut [T], rows: usize, cols: usize, ld: usize) -> Result<Self> {
        check_view("MatMut::new", data.len(), rows, cols, ld)?;
        Ok(MatMut { data, rows, cols, ld })
    }

    /// Rows of the view.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of the view.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The leading dimension: the distance in the slice between (i, j) and (i, j + 1).
    pub fn ld(&self) -> usize {
        self.ld
    }

    /// The slice the view starts at, to write in place: element (i, j) is at `i + j·ld`.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        self.data
    }

    /// The same view, borrowed again for one call (the view stays usable after it).
    pub fn reborrow(&mut self) -> MatMut<'_, T> {
        MatMut { data: self.data, rows: self.rows, cols: self.cols, ld: self.ld }
    }

    /// The same view, read-only.
    pub fn as_ref(&self) -> MatRef<'_, T> {
        MatRef { data: self.data, rows: self.rows, cols: self.cols, ld: self.ld }
    }
}

impl<'a, T> From<&'a DMatrix<T>> for MatRef<'a, T> {
    /// The whole matrix as a view (ld = its rows, at least 1).
    fn from(m: &'a DMatrix<T>) -> Self {
        MatRef { data: m.as_slice(), rows: m.nrows(), cols: m.ncols(), ld: m.nrows().max(1) }
    }
}

impl<'a, T> From<&'a mut DMatrix<T>> for MatMut<'a, T> {
    /// The whole matrix as a writable view (ld = its rows, at least 1).
    fn from(m: &'a mut DMatrix<T>) -> Self {
        let (rows, cols) = m.shape();
        MatMut { data: m.as_mut_slice(), rows, cols, ld: rows.max(1) }
    }
}

/// C ← α·op(A)·op(B) + β·C by nalgebra's own product ([`Backend::Nalgebra`], the benchmark's
/// peer): `gemm` for op(A) = A, `gemm_tr` for op(A) = Aᵀ, and a transposed copy of B when op(B) =
/// Bᵀ (what nalgebra's `a * b.transpose()` does too). β = 0 first zeroes C, so NaN in C is ignored
/// as with our kernels. Shapes already checked.
#[allow(clippy::too_many_arguments)]
fn nalgebra_gemm<T: Element>(
    alpha: T,
    a: MatRef<T>,
    ta: Op,
    b: MatRef<T>,
    tb: Op,
    beta: T,
    c: MatMut<T>,
    (m, n): (usize, usize),
) {
    let (av, bv) = (a.nalgebra(), b.nalgebra());
    let b_t;
    let bv = match tb {
        Op::N => bv,
        Op::T => {
            b_t = bv.transpose();
            b_t.as_view()
        }
    };
    let mut cv = nalgebra::DMatrixViewMut::from_slice_with_strides_mut(c.data, m, n, 1, c.ld);
    if beta == T::zero() {
        cv.fill(T::zero());
    }
    match ta {
        Op::N => cv.gemm(alpha, &av, &bv, beta),
        Op::T => cv.gemm_tr(alpha, &av, &bv, beta),
    }
    record_nalgebra_product();
}

/// The one product every public entry point runs: the shapes checked (errors name `op`, the
/// operands and their shapes), then nalgebra's product when the settings (or the process) chose
/// it as the backend (`None` comes back), else ours (what it did comes back).
#[allow(clippy::too_many_arguments)]
fn product_of<T: Element>(
    op: &'static str,
    settings: Settings,
    alpha: T,
    a: MatRef<T>,
    ta: Op,
    b: MatRef<T>,
    tb: Op,
    beta: T,
    c: MatMut<T>,
) -> Result<Option<ProductStats>> {
    let (m, k) = a.shape(ta);
    let (k2, n) = b.shape(tb);
    check_inner(op, (m, k), (k2, n))?;
    if c.rows != m || c.cols != n {
        return Err(shape_error(op, "C", format!("{m}×{n}"), format!("{}×{}", c.rows, c.cols)));
    }
    if settings.backend.unwrap_or_else(active_backend) == Backend::Nalgebra {
        nalgebra_gemm(alpha, a, ta, b, tb, beta, c, (m, n));
        return Ok(None);
    }
    let a_op = pack::Operand::new(a.data, a.ld, ta == Op::T);
    let b_op = pack::Operand::new(b.data, b.ld, tb == Op::T);
    run_operands(settings, alpha, a_op, b_op, beta, c.data, c.ld, (m, n, k)).map(Some)
}

/// C ← α·op(A)·op(B) + β·C: the one in-place product, for whole matrices (`&DMatrix`,
/// `&mut DMatrix`) and for views inside larger ones ([`MatRef`], [`MatMut`]: one head of one
/// sequence in chapter 9's attention).
///
/// Shapes: op(A) is m×k, op(B) is k×n, C is m×n. With β = 0, C's old contents (even NaN) are
/// ignored. Errors name the operands and their shapes.
pub fn gemm<'a, T: Element>(
    alpha: T,
    a: impl Into<MatRef<'a, T>>,
    ta: Op,
    b: impl Into<MatRef<'a, T>>,
    tb: Op,
    beta: T,
    c: impl Into<MatMut<'a, T>>,
) -> Result<()> {
    let settings = Settings::default();
    product_of("gemm", settings, alpha, a.into(), ta, b.into(), tb, beta, c.into()).map(|_| ())
}

/// [`gemm`] run with `settings`: who computes it, the kernel, blocking or thread count (chapter 9's
/// step, the benchmarks, the blocking sweep and the kernel tests give them). Returns what our
/// kernels did, or `None` when nalgebra computed the product. Errors: shapes as for [`gemm`]; an
/// unavailable kernel, a zero block size or zero threads as [`crate::Error::InvalidValue`].
#[allow(clippy::too_many_arguments)]
pub fn gemm_with<'a, T: Element>(
    settings: Settings,
    alpha: T,
    a: impl Into<MatRef<'a, T>>,
    ta: Op,
    b: impl Into<MatRef<'a, T>>,
    tb: Op,
    beta: T,
    c: impl Into<MatMut<'a, T>>,
) -> Result<Option<ProductStats>> {
    product_of("gemm_with", settings, alpha, a.into(), ta, b.into(), tb, beta, c.into())
}

fn product<T: Element>(
    op: &'static str,
    a: &DMatrix<T>,
    ta: Op,
    b: &DMatrix<T>,
    tb: Op,
) -> Result<DMatrix<T>> {
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
    let settings = Settings::default();
    product_of(op, settings, T::one(), a.into(), ta, b.into(), tb, T::zero(), (&mut c).into())?;
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
        return Err(shape_error(
            "naive",
            "a and b (inner dimensions)",
            format!("{k}"),
            format!("{k2}"),
        ));
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

#[cfg(test)]
mod forced {
    //! A forced kernel really runs: its tiles are counted in the crate's process-wide counter.

    use super::*;
    use crate::rng::Rng;
    use crate::simd::available_kernels;
    use lab::{default_blocking, tile_shape};
    use stats::kernel_calls;

    #[test]
    fn the_forced_kernel_reports_its_own_tile_count() {
        // Tile counts differ between kernels (their MR×NR differ), so the count identifies the
        // kernel that computed the tiles.
        let (m, n, k) = (37, 29, 300);
        let mut rng = Rng::new(10);
        let a = rng.normal_matrix::<f32>(m, k, 1.0);
        let b = rng.normal_matrix::<f32>(k, n, 1.0);
        for kernel in available_kernels() {
            let (mr, nr) = tile_shape::<f32>(kernel).expect("available");
            let kc = default_blocking::<f32>(kernel).expect("available").kc;
            let mut c = DMatrix::zeros(m, n);
            let settings = Settings {
                kernel: Some(kernel),
                backend: Some(Backend::Ours),
                ..Settings::default()
            };
            let before = kernel_calls(kernel);
            let stats = gemm_with(settings, 1.0, &a, Op::N, &b, Op::N, 0.0, &mut c)
                .expect("ran")
                .expect("our kernels");
            assert_eq!(stats.kernel, kernel);
            assert_eq!((stats.mr, stats.nr), (mr, nr));
            let expected = (m.div_ceil(mr) * n.div_ceil(nr) * k.div_ceil(kc)) as u64;
            assert_eq!(stats.tiles, expected, "{kernel}");
            // Its tiles are counted in the process-wide counter too.
            assert!(
                kernel_calls(kernel) >= before + expected,
                "{kernel}: the process-wide counter did not grow"
            );
        }
    }
}

#[cfg(test)]
mod layering {
    //! The files of this module import each other without a cycle: each sibling (`blocked`,
    //! `kernels` …) may use those below it, never one that uses it back.

    use std::path::Path;

    /// The siblings `code` names through `super::name`.
    fn siblings_used<'s>(code: &str, siblings: &[&'s str]) -> Vec<&'s str> {
        let code: String = code
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        siblings.iter().copied().filter(|s| code.contains(&format!("super::{s}"))).collect()
    }

    /// A cycle in the graph `uses` (file, siblings it uses), as the files along it, if any.
    fn cycle(uses: &[(&str, Vec<&str>)]) -> Option<Vec<String>> {
        fn visit(
            node: &str,
            uses: &[(&str, Vec<&str>)],
            path: &mut Vec<String>,
        ) -> Option<Vec<String>> {
            if let Some(at) = path.iter().position(|p| p == node) {
                let mut found = path[at..].to_vec();
                found.push(node.to_string());
                return Some(found);
            }
            path.push(node.to_string());
            let next = uses.iter().find(|(n, _)| *n == node).map(|(_, u)| u.clone());
            for n in next.unwrap_or_default() {
                if let Some(found) = visit(n, uses, path) {
                    return Some(found);
                }
            }
            path.pop();
            None
        }
        uses.iter().find_map(|(n, _)| visit(n, uses, &mut Vec::new()))
    }

    const SIBLINGS: [&str; 9] =
        ["bf16", "blocked", "caches", "kernels", "lab", "pack", "row", "scalar", "stats"];

    #[test]
    fn the_files_of_matmul_import_each_other_without_a_cycle() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join("matmul");
        let codes: Vec<(&str, String)> = SIBLINGS
            .iter()
            .map(|s| {
                let path = dir.join(format!("{s}.rs"));
                (*s, std::fs::read_to_string(&path).expect("a file of src/matmul"))
            })
            .collect();
        let uses: Vec<(&str, Vec<&str>)> =
            codes.iter().map(|(s, code)| (*s, siblings_used(code, &SIBLINGS))).collect();
        assert!(uses.iter().any(|(_, u)| !u.is_empty()), "the files do use each other");
        assert_eq!(cycle(&uses), None);
    }

    #[test]
    fn the_cycle_check_sees_blocked_and_kernels_importing_each_other() {
        // The layout before the split: `blocked` took the kernel type from `kernels`, which took
        // the scratch tile's size from `blocked`.
        let blocked = "use super::kernels::MicroKernel;\n// super::simd in a comment\n";
        let kernels = "use super::blocked::{MAX_NR, MAX_TILE};\nuse super::stats::Blocking;\n";
        let uses = [
            ("blocked", siblings_used(blocked, &SIBLINGS)),
            ("kernels", siblings_used(kernels, &SIBLINGS)),
            ("stats", vec![]),
        ];
        assert_eq!(uses[0].1, ["kernels"], "comments are not code");
        assert_eq!(cycle(&uses).expect("a cycle"), ["blocked", "kernels", "blocked"]);
        assert_eq!(cycle(&uses[1..]), None);
    }
}
