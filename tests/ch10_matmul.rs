//! Chapter 10: the packed, blocked, SIMD matrix product, checked against the triple loop.
//!
//! Every kernel this CPU can run is forced in turn and compared with an f64 triple loop on
//! thousands of shapes. The tolerance is not picked by hand: it is the classical bound for a
//! sum of products (Higham, *Accuracy and Stability of Numerical Algorithms*, §3.1),
//!
//! ```text
//! |ĉᵢⱼ − cᵢⱼ| ≤ γ_{k+2}(u) · (|α|·Σₚ|aᵢₚ||bₚⱼ| + |β|·|c⁰ᵢⱼ|),   γₙ(u) = n·u / (1 − n·u),
//! ```
//!
//! with u the unit roundoff of the type computed in: each term passes through at most k − 1
//! additions, its own product, the multiplication by α and the addition of β·c⁰ (k + 2
//! roundings), however the kernel blocks and orders the sum. The reference itself is computed in
//! f64, so its own γ_{k+2}(2⁻⁵³) is added.

mod common;

use llm_workbook::Error;
use llm_workbook::backend::Backend;
use llm_workbook::float::Float;
use llm_workbook::matmul::lab::{Blocking, default_blocking, tile_shape};
use llm_workbook::matmul::{self, MatMut, MatRef, Op, ProductStats, Settings, gemm, matmul};
use llm_workbook::matmul::{matmul_nt, matmul_tn};
use llm_workbook::rng::Rng;
use llm_workbook::simd::{Kernel, available_kernels};
use nalgebra::DMatrix;

/// [`matmul::gemm_with`] on our kernels, whatever backend the process chose: what they did.
#[allow(clippy::too_many_arguments)]
fn ran<'a, T: matmul::Element>(
    settings: Settings,
    alpha: T,
    a: impl Into<MatRef<'a, T>>,
    ta: Op,
    b: impl Into<MatRef<'a, T>>,
    tb: Op,
    beta: T,
    c: impl Into<MatMut<'a, T>>,
) -> llm_workbook::Result<ProductStats> {
    let ours = Settings { backend: Some(Backend::Ours), ..settings };
    matmul::gemm_with(ours, alpha, a, ta, b, tb, beta, c).map(|s| s.expect("our kernels ran"))
}

/// op(A)·op(B) by our `kernel`.
fn product_on<T: Float>(
    kernel: Kernel,
    a: &DMatrix<T>,
    ta: Op,
    b: &DMatrix<T>,
    tb: Op,
) -> DMatrix<T> {
    let m = if ta == Op::N { a.nrows() } else { a.ncols() };
    let n = if tb == Op::N { b.ncols() } else { b.nrows() };
    let mut c = DMatrix::zeros(m, n);
    ran(forced(kernel), T::one(), a, ta, b, tb, T::zero(), &mut c).expect("shapes chain");
    c
}

// ───────────────────────────── the reference and the bound ─────────────────────────────

/// γₙ(u) = n·u/(1 − n·u).
fn gamma(n: usize, u: f64) -> f64 {
    let nu = n as f64 * u;
    assert!(nu < 0.5, "γ_{n} is only meaningful for n·u < 1");
    nu / (1.0 - nu)
}

/// Unit roundoff of T: half the distance from 1 to the next number.
fn unit_roundoff<T: Float>() -> f64 {
    T::epsilon().as_f64() / 2.0
}

/// The smallest positive subnormal of T (the absolute error one underflowing product can add).
fn eta<T: Float>() -> f64 {
    T::min_positive_value().as_f64() * T::epsilon().as_f64()
}

#[derive(Clone, Copy, Debug)]
struct Case {
    m: usize,
    n: usize,
    k: usize,
    ta: Op,
    tb: Op,
    alpha: f64,
    beta: f64,
}

impl Case {
    fn new(m: usize, n: usize, k: usize) -> Self {
        Case { m, n, k, ta: Op::N, tb: Op::N, alpha: 1.0, beta: 0.0 }
    }
    fn ops(self, ta: Op, tb: Op) -> Self {
        Case { ta, tb, ..self }
    }
    fn scaled(self, alpha: f64, beta: f64) -> Self {
        Case { alpha, beta, ..self }
    }
}

const OPS: [(Op, Op); 4] = [(Op::N, Op::N), (Op::T, Op::N), (Op::N, Op::T), (Op::T, Op::T)];
const ALPHA_BETA: [(f64, f64); 6] =
    [(1.0, 0.0), (-1.0, 1.0), (0.5, -0.5), (2.5, 0.0), (1.0, 2.0), (-0.75, 1.0)];

/// The operands of a case: A stored so that op(A) is m×k, B so that op(B) is k×n, and C⁰ (all NaN
/// when β = 0, to prove it is never read).
struct Operands<T: Float> {
    a: DMatrix<T>,
    b: DMatrix<T>,
    c0: DMatrix<T>,
}

fn operands<T: Float>(case: &Case, rng: &mut Rng) -> Operands<T> {
    let (ar, ac) = if case.ta == Op::N { (case.m, case.k) } else { (case.k, case.m) };
    let (br, bc) = if case.tb == Op::N { (case.k, case.n) } else { (case.n, case.k) };
    let a = rng.normal_matrix::<T>(ar, ac, 1.0);
    let b = rng.normal_matrix::<T>(br, bc, 1.0);
    let c0 = if case.beta == 0.0 {
        DMatrix::from_element(case.m, case.n, T::nan())
    } else {
        rng.normal_matrix::<T>(case.m, case.n, 1.0)
    };
    Operands { a, b, c0 }
}

fn op_at<T: Float>(x: &DMatrix<T>, op: Op, i: usize, j: usize) -> f64 {
    if op == Op::N { x[(i, j)].as_f64() } else { x[(j, i)].as_f64() }
}

/// α·op(A)·op(B) + β·C⁰ in f64 (β·C⁰ taken as 0 when β = 0), and the magnitude
/// |α|·Σ|a||b| + |β|·|C⁰| the error bound scales with.
fn reference<T: Float>(case: &Case, x: &Operands<T>) -> (DMatrix<f64>, DMatrix<f64>) {
    let mut value = DMatrix::zeros(case.m, case.n);
    let mut size = DMatrix::zeros(case.m, case.n);
    for j in 0..case.n {
        for i in 0..case.m {
            let (mut s, mut s_abs) = (0.0, 0.0);
            for p in 0..case.k {
                let t = op_at(&x.a, case.ta, i, p) * op_at(&x.b, case.tb, p, j);
                s += t;
                s_abs += t.abs();
            }
            let c0 = if case.beta == 0.0 { 0.0 } else { x.c0[(i, j)].as_f64() };
            value[(i, j)] = case.alpha * s + case.beta * c0;
            size[(i, j)] = case.alpha.abs() * s_abs + case.beta.abs() * c0.abs();
        }
    }
    (value, size)
}

/// Checks every entry of `c` against the reference within the bound; names the first entry that
/// is outside it.
fn within_bound<T: Float>(
    case: &Case,
    c: &DMatrix<T>,
    value: &DMatrix<f64>,
    size: &DMatrix<f64>,
) -> Result<(), String> {
    let rounds = case.k + 2;
    let (u, u64_) = (unit_roundoff::<T>(), unit_roundoff::<f64>());
    // Ours, plus the f64 reference's own error, plus its error in computing `size` itself.
    let relative = (gamma(rounds, u) + gamma(rounds, u64_)) * (1.0 + gamma(rounds, u64_));
    let absolute = rounds as f64 * eta::<T>();
    if c.shape() != (case.m, case.n) {
        return Err(format!("{case:?}: C is {:?}", c.shape()));
    }
    for j in 0..case.n {
        for i in 0..case.m {
            let (got, want) = (c[(i, j)].as_f64(), value[(i, j)]);
            let bound = relative * size[(i, j)] + absolute;
            if !got.is_finite() || (got - want).abs() > bound {
                return Err(format!(
                    "{case:?}: C[{i},{j}] = {got:e}, reference {want:e}, |error| {:e} > bound \
                     {bound:e}",
                    (got - want).abs()
                ));
            }
        }
    }
    Ok(())
}

/// Runs one case with `settings` and checks it; returns the product's statistics.
fn run_case<T: Float>(
    settings: Settings,
    case: Case,
    rng: &mut Rng,
) -> Result<matmul::ProductStats, String> {
    let x = operands::<T>(&case, rng);
    let mut c = x.c0.clone();
    let stats =
        ran(settings, T::of(case.alpha), &x.a, case.ta, &x.b, case.tb, T::of(case.beta), &mut c)
            .map_err(|e| e.to_string())?;
    if let Some(k) = settings.kernel
        && stats.kernel != k
    {
        return Err(format!("{case:?}: asked for {k}, ran {}", stats.kernel));
    }
    let (value, size) = reference(&case, &x);
    within_bound(&case, &c, &value, &size)?;
    Ok(stats)
}

fn forced(kernel: Kernel) -> Settings {
    Settings { kernel: Some(kernel), ..Settings::default() }
}

/// Runs every case with every available kernel in both types; fails listing the first bad case
/// of each kernel and type.
fn check_all(cases: &[Case], settings: impl Fn(Kernel) -> Settings, seed: u64) {
    let mut failures = Vec::new();
    for kernel in available_kernels() {
        let mut rng = Rng::new(seed);
        for case in cases {
            if let Err(e) = run_case::<f32>(settings(kernel), *case, &mut rng) {
                failures.push(format!("{kernel} f32: {e}"));
                break;
            }
        }
        for case in cases {
            if let Err(e) = run_case::<f64>(settings(kernel), *case, &mut rng) {
                failures.push(format!("{kernel} f64: {e}"));
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ───────────────────────────── the bound itself ─────────────────────────────

#[test]
fn the_error_bound_rejects_a_product_missing_one_term() {
    // A bound loose enough to pass anything would prove nothing: drop a single term aᵢₚ·bₚⱼ from
    // one entry of a correct product and the check must fail.
    let case = Case::new(9, 7, 40);
    let mut rng = Rng::new(7);
    for kernel in available_kernels() {
        let x = operands::<f64>(&case, &mut rng);
        let mut c = x.c0.clone();
        ran(forced(kernel), 1.0, &x.a, Op::N, &x.b, Op::N, 0.0, &mut c).expect("product");
        let (value, size) = reference(&case, &x);
        within_bound(&case, &c, &value, &size).expect("the correct product is inside the bound");
        c[(4, 3)] -= x.a[(4, 17)] * x.b[(17, 3)];
        assert!(
            within_bound(&case, &c, &value, &size).is_err(),
            "{kernel}: a missing term went unnoticed"
        );
    }
}

#[test]
fn the_error_bound_grows_with_k_and_the_magnitudes() {
    // γ_{k+2}(u)·Σ|a||b| for a 1×k by k×1 product of ones: k·γ_{k+2}(u).
    let u = unit_roundoff::<f32>();
    assert_eq!(u, 2f64.powi(-24));
    let case = Case::new(1, 1, 100);
    let ones = Operands {
        a: DMatrix::<f32>::from_element(1, 100, 1.0),
        b: DMatrix::from_element(100, 1, 1.0),
        c0: DMatrix::zeros(1, 1),
    };
    let (value, size) = reference(&case, &ones);
    assert_eq!((value[(0, 0)], size[(0, 0)]), (100.0, 100.0));
    // 100 + 1.2e-3 is outside the bound (≈ 6.1e-4 here), 100 + 4e-4 inside.
    let c_bad = DMatrix::from_element(1, 1, 100.0012f32);
    let c_ok = DMatrix::from_element(1, 1, 100.0004f32);
    assert!(within_bound(&case, &c_bad, &value, &size).is_err());
    assert!(within_bound(&case, &c_ok, &value, &size).is_ok());
}

// ───────────────────────────── every kernel against the triple loop ─────────────────────────────

#[test]
fn every_kernel_matches_the_triple_loop_on_all_shapes_up_to_17() {
    // All 17³ = 4913 shapes (m, n, k ∈ 1..=17), cycling through the four transpose combinations
    // and six (α, β) pairs; β = 0 cases start from a C full of NaN.
    let mut cases = Vec::new();
    let mut index = 0;
    for m in 1..=17 {
        for n in 1..=17 {
            for k in 1..=17 {
                let (ta, tb) = OPS[index % OPS.len()];
                let (alpha, beta) = ALPHA_BETA[(index / OPS.len()) % ALPHA_BETA.len()];
                cases.push(Case::new(m, n, k).ops(ta, tb).scaled(alpha, beta));
                index += 1;
            }
        }
    }
    assert_eq!(cases.len(), 4913);
    check_all(&cases, forced, 1);
}

#[test]
fn every_kernel_matches_the_triple_loop_at_each_transpose_and_scaling_on_odd_shapes() {
    // Every (op, α, β) combination on shapes that leave partial tiles on both sides.
    let mut cases = Vec::new();
    for &(m, n, k) in &[(5, 3, 7), (19, 13, 11), (33, 7, 29), (1, 9, 4), (8, 1, 16)] {
        for (ta, tb) in OPS {
            for (alpha, beta) in ALPHA_BETA {
                cases.push(Case::new(m, n, k).ops(ta, tb).scaled(alpha, beta));
            }
        }
    }
    check_all(&cases, forced, 2);
}

/// Full rows with every remainder of columns r = 1 … NR − 1 after whole tiles, for `kernel` in
/// type T: the SIMD kernels cover a remainder with narrower tiles (4, 2, 1 columns) straight into
/// C, reading op(B) in place by columns (op(B) = B) or by rows (Bᵀ), or packed (Bᵀ with more rows
/// than `IN_PLACE_MAX_STEP`); partial rows on top go through the scratch tile.
fn column_remainder_cases<T: Float>(kernel: Kernel) -> Vec<Case> {
    let (mr, nr) = tile_shape::<T>(kernel).expect("available");
    let packed_n = (matmul::lab::IN_PLACE_MAX_STEP + 1).next_multiple_of(nr);
    let mut cases = Vec::new();
    for r in 1..nr {
        for (i, (ta, tb)) in OPS.into_iter().enumerate() {
            let (alpha, beta) = ALPHA_BETA[(r + i) % ALPHA_BETA.len()];
            for k in [1, 5, 37] {
                cases.push(Case::new(2 * mr, 2 * nr + r, k).ops(ta, tb).scaled(alpha, beta));
            }
            cases.push(Case::new(mr + 3, nr + r, 9).ops(ta, tb).scaled(alpha, beta));
        }
        cases.push(Case::new(mr, packed_n + r, 6).ops(Op::N, Op::T).scaled(1.5, -0.5));
        cases.push(Case::new(mr - 1, packed_n + r, 6).ops(Op::T, Op::T).scaled(1.0, 0.0));
    }
    cases
}

/// Runs, on every available kernel, the f32 cases then the f64 cases the two functions build for
/// it (operands drawn from one generator per kernel, seeded `seed`); one line per failure.
fn failures_on_every_kernel(
    seed: u64,
    f32_cases: fn(Kernel) -> Vec<Case>,
    f64_cases: fn(Kernel) -> Vec<Case>,
) -> Vec<String> {
    let mut failures = Vec::new();
    for kernel in available_kernels() {
        let mut rng = Rng::new(seed);
        for case in f32_cases(kernel) {
            if let Err(e) = run_case::<f32>(forced(kernel), case, &mut rng) {
                failures.push(format!("{kernel} f32: {e}"));
            }
        }
        for case in f64_cases(kernel) {
            if let Err(e) = run_case::<f64>(forced(kernel), case, &mut rng) {
                failures.push(format!("{kernel} f64: {e}"));
            }
        }
    }
    failures
}

#[test]
fn every_kernel_matches_the_triple_loop_on_every_remainder_of_columns() {
    let failures =
        failures_on_every_kernel(5, column_remainder_cases::<f32>, column_remainder_cases::<f64>);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Shapes just below, at and just above each blocking constant of `kernel` in type T.
fn boundary_cases<T: Float>(kernel: Kernel) -> Vec<Case> {
    let (mr, nr) = tile_shape::<T>(kernel).expect("available");
    let b = default_blocking::<T>(kernel).expect("available");
    let around = |x: usize| [x - 1, x, x + 1];
    let mut cases = Vec::new();
    let ms = [around(mr), around(b.mc)].concat();
    let ns = [around(nr), [2 * nr + 1, 2 * nr + 1, 2 * nr + 1]].concat();
    let mut index = 0;
    for &m in &ms {
        for &n in &ns {
            for &k in &around(b.kc) {
                let (ta, tb) = OPS[index % OPS.len()];
                let (alpha, beta) = ALPHA_BETA[index % ALPHA_BETA.len()];
                cases.push(Case::new(m, n, k).ops(ta, tb).scaled(alpha, beta));
                index += 1;
            }
        }
    }
    // Across NC: a wide, shallow product whose columns need two B̃ panels.
    for (i, &n) in around(b.nc).iter().enumerate() {
        let (ta, tb) = OPS[i + 1];
        cases.push(Case::new(mr + 1, n, 3).ops(ta, tb).scaled(1.0, 0.0));
    }
    // Depth 2·KC + 1: three rank-KC updates, β applied by the first, the later ones added on.
    cases.push(Case::new(mr + 3, nr + 2, 2 * b.kc + 1).scaled(-1.0, 0.5));
    cases
}

#[test]
fn every_kernel_matches_the_triple_loop_around_its_blocking_constants() {
    let failures = failures_on_every_kernel(3, boundary_cases::<f32>, boundary_cases::<f64>);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_kernel_matches_the_triple_loop_with_tiny_blocks_that_force_every_loop_to_turn() {
    // Blocks of a few rows, columns and depths make all five loops run many times (and leave
    // edges everywhere) on small, fast shapes.
    let mut rng = Rng::new(4);
    let mut cases = Vec::new();
    for i in 0..120 {
        let (m, n, k) = (1 + rng.below(70), 1 + rng.below(40), 1 + rng.below(50));
        let (ta, tb) = OPS[i % OPS.len()];
        let (alpha, beta) = ALPHA_BETA[i % ALPHA_BETA.len()];
        cases.push(Case::new(m, n, k).ops(ta, tb).scaled(alpha, beta));
    }
    for blocking in [
        Blocking { mc: 1, kc: 1, nc: 1 },
        Blocking { mc: 17, kc: 5, nc: 13 },
        Blocking { mc: 40, kc: 9, nc: 7 },
    ] {
        check_all(
            &cases,
            |k| Settings {
                kernel: Some(k),
                blocking: Some(blocking),
                threads: Some(1),
                ..Settings::default()
            },
            5,
        );
    }
}

/// The micro-kernel runs every full tile of a block in one call (each full sliver of B̃ against
/// each full tile of Ã), then the last columns in narrower widths and the last rows through the
/// scratch tile. Shapes with several full tiles along both sides and every kind of remainder, in
/// every transpose (the last rows through a tile of half the height when they fit in it, else
/// a whole one): op(A) read in place (A·B with a narrow panel) and packed (Aᵀ, or a panel of
/// more than 16 slivers), op(B) read in place and, past the in-place step (Bᵀ with 1100 rows),
/// packed; with each kernel's own blocking and with small blocks that cut m, k and n many times.
#[test]
fn every_kernel_matches_the_triple_loop_when_one_call_runs_a_block_of_tiles() {
    let mut cases = Vec::new();
    let shapes =
        [(64, 32, 64), (65, 65, 33), (97, 131, 20), (48, 18, 7), (33, 200, 9), (128, 96, 5)];
    // The last rows: 13 of f32's 16 (a whole tile), 12 (whole) and 4 of f64's 8 (half).
    let shapes = [&shapes[..], &[(29, 20, 11), (44, 13, 17)]].concat();
    for (i, &(m, n, k)) in shapes.iter().enumerate() {
        for (j, &(ta, tb)) in OPS.iter().enumerate() {
            let (alpha, beta) = ALPHA_BETA[(i + j) % ALPHA_BETA.len()];
            cases.push(Case::new(m, n, k).ops(ta, tb).scaled(alpha, beta));
        }
    }
    cases.push(Case::new(37, 1100, 9).ops(Op::N, Op::T).scaled(1.0, 0.5));
    cases.push(Case::new(64, 1100, 3).ops(Op::T, Op::T));
    let one_thread = |k| Settings { threads: Some(1), ..forced(k) };
    check_all(&cases, one_thread, 35);
    let blocking = Some(Blocking { mc: 40, kc: 13, nc: 50 });
    check_all(&cases, |k| Settings { blocking, ..one_thread(k) }, 36);
}

#[test]
fn every_kernel_matches_the_triple_loop_on_tall_wide_and_deep_shapes() {
    let cases = [
        Case::new(1500, 3, 17),
        Case::new(3, 1500, 17).ops(Op::T, Op::T),
        Case::new(1, 1, 5000).scaled(0.5, 1.0),
        Case::new(400, 1, 300).ops(Op::T, Op::N),
        Case::new(1, 400, 300).ops(Op::N, Op::T),
        Case::new(300, 200, 1).scaled(1.0, 1.0),
        Case::new(2, 2, 3000).ops(Op::T, Op::T).scaled(-2.0, 0.0),
    ];
    check_all(&cases, forced, 6);
}

#[test]
fn every_kernel_matches_the_triple_loop_with_large_cancelling_inputs() {
    // Σ|a||b| ≫ |Σab|: the bound scales with the magnitudes, not with the result.
    let a = DMatrix::<f64>::from_row_slice(2, 4, &[1e8, 1.0, -1e8, 0.5, 3.0, 1e-8, 2.0, -1e-8]);
    let b = DMatrix::<f64>::from_row_slice(4, 2, &[1.0, 2.0, 1.0, 1.0, 1.0, 2.0, 4.0, 1.0]);
    let case = Case::new(2, 2, 4);
    let x = Operands { a: a.clone(), b: b.clone(), c0: DMatrix::from_element(2, 2, f64::NAN) };
    let (value, size) = reference(&case, &x);
    assert_eq!(value[(0, 0)], 3.0);
    for kernel in available_kernels() {
        let mut c = x.c0.clone();
        ran(forced(kernel), 1.0, &a, Op::N, &b, Op::N, 0.0, &mut c).expect("product");
        within_bound(&case, &c, &value, &size).unwrap_or_else(|e| panic!("{kernel}: {e}"));
    }
}

// ───────────────────────────── threads ─────────────────────────────

#[test]
fn two_threads_split_large_products_and_match_the_triple_loop() {
    let mut rng = Rng::new(8);
    for kernel in available_kernels() {
        let two = Settings { kernel: Some(kernel), threads: Some(2), ..Settings::default() };
        for case in [
            Case::new(260, 150, 400),
            Case::new(300, 13, 4000).ops(Op::T, Op::N).scaled(0.5, 1.0),
            Case::new(97, 401, 400).ops(Op::N, Op::T),
        ] {
            assert!(2.0 * (case.m * case.n * case.k) as f64 >= matmul::lab::PARALLEL_MIN_FLOPS);
            let stats =
                run_case::<f32>(two, case, &mut rng).unwrap_or_else(|e| panic!("{kernel}: {e}"));
            assert_eq!(stats.threads, 2, "{kernel} {case:?}");
            let stats =
                run_case::<f64>(two, case, &mut rng).unwrap_or_else(|e| panic!("{kernel}: {e}"));
            assert_eq!(stats.threads, 2, "{kernel} {case:?}");
        }
        // Three threads: the sharing out is general.
        let three = Settings { threads: Some(3), min_parallel_flops: Some(0.0), ..two };
        let stats = run_case::<f64>(three, Case::new(120, 100, 200), &mut rng)
            .unwrap_or_else(|e| panic!("{kernel}: {e}"));
        assert_eq!(stats.threads, 3);
    }
}

#[test]
fn a_product_uses_no_more_threads_than_its_work_pays_for() {
    // 2·335³ = 7.52·10⁷ flops: ⌊2·7.52·10⁷ / 3·10⁷⌋ = 5 threads at most, whatever is allowed
    // (every thread at least half the two-thread threshold), with the bits of one thread.
    let mut rng = Rng::new(13);
    let case = Case::new(335, 335, 335);
    let flops = 2.0 * 335f64.powi(3);
    assert_eq!((2.0 * flops / matmul::lab::PARALLEL_MIN_FLOPS).floor(), 5.0);
    let x = operands::<f32>(&case, &mut rng);
    let bits = |m: &DMatrix<f32>| m.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let run = |t: usize| {
        let mut c = x.c0.clone();
        let s = Settings { threads: Some(t), ..Settings::default() };
        let stats = ran(s, 1.0, &x.a, Op::N, &x.b, Op::N, 0.0, &mut c).expect("product");
        (stats.threads, bits(&c))
    };
    let (one, one_bits) = run(1);
    assert_eq!(one, 1);
    for (allowed, used) in [(2, 2), (5, 5), (8, 5), (16, 5)] {
        let (threads, b) = run(allowed);
        assert_eq!(threads, used, "{allowed} threads allowed");
        assert!(b == one_bits, "{allowed} threads: other bits than one thread's");
    }
}

#[test]
fn large_products_cut_into_blocks_of_up_to_four_pieces_a_thread_give_one_threads_bits() {
    // Above 8·10⁸ flops two threads cut C into more than four pieces (`PIECE_MIN_FLOPS`), and
    // from 2·10⁹ three threads into twelve, in blocks of rows and of columns whose edges fall
    // inside register tiles (sides that are no multiple of any kernel's MR or NR). Each entry of
    // C is still summed over k in the same order, so the bits are one thread's.
    let mut rng = Rng::new(12);
    let bits = |m: &DMatrix<f32>| m.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for (case, threads) in [
        (Case::new(1003, 997, 509).scaled(0.5, 1.0), [2, 5]),
        (Case::new(1503, 1201, 571).ops(Op::T, Op::N), [3, 8]),
    ] {
        assert!(2.0 * (case.m * case.n * case.k) as f64 > 8.0 * matmul::lab::PIECE_MIN_FLOPS);
        let x = operands::<f32>(&case, &mut rng);
        let (alpha, beta) = (case.alpha as f32, case.beta as f32);
        let run = |t: usize| {
            let mut c = x.c0.clone();
            let s = Settings { threads: Some(t), ..Settings::default() };
            let stats = ran(s, alpha, &x.a, case.ta, &x.b, case.tb, beta, &mut c).expect("product");
            assert_eq!(stats.threads, t);
            c
        };
        let one = bits(&run(1));
        for t in threads {
            assert!(one == bits(&run(t)), "{case:?} on {t} threads");
        }
    }
}

#[test]
fn small_products_stay_on_one_thread_even_when_two_are_allowed() {
    let mut rng = Rng::new(9);
    let two = Settings { threads: Some(2), ..Settings::default() };
    let small = Case::new(40, 40, 40);
    assert!(2.0 * 40f64.powi(3) < matmul::lab::PARALLEL_MIN_FLOPS);
    assert_eq!(run_case::<f32>(two, small, &mut rng).expect("small").threads, 1);
    // Threads share out pieces of whole register tiles along the longer side of C; a product of
    // one tile has nothing to share, so even with the threshold switched off it runs on one
    // thread, and one row or column more makes a second piece.
    let (mr, nr) = tile_shape::<f64>(llm_workbook::simd::active_kernel()).expect("active");
    let no_threshold = Settings { min_parallel_flops: Some(0.0), ..two };
    assert_eq!(
        run_case::<f64>(no_threshold, Case::new(mr, nr, 300), &mut rng).expect("one tile").threads,
        1
    );
    assert_eq!(
        run_case::<f64>(no_threshold, Case::new(mr + 1, nr, 300), &mut rng)
            .expect("two rows of tiles")
            .threads,
        2
    );
    assert_eq!(
        run_case::<f64>(no_threshold, Case::new(mr, nr + 1, 300), &mut rng)
            .expect("two columns of tiles")
            .threads,
        2
    );
}

// ───────────────────────────── the forced kernel really ran ─────────────────────────────
// (The tile count of a forced kernel against the process-wide counter is a test inside
// `src/matmul/mod.rs`: the counter is the crate's own.)

#[test]
fn simd_kernels_fuse_multiply_and_add_and_the_scalar_kernel_does_not() {
    // c = (−1)·1 + x·x with x = 1 + 2⁻¹² in f32. Exactly, c = 2⁻¹¹ + 2⁻²⁴. Rounding x·x first
    // (separate multiply and add) loses the 2⁻²⁴ (a tie, rounded to even); a fused multiply-add
    // keeps it. The result is a fingerprint of the instructions that computed it.
    let x = 1.0 + 2f32.powi(-12);
    let a = DMatrix::from_row_slice(1, 2, &[-1.0f32, x]);
    let b = DMatrix::from_column_slice(2, 1, &[1.0f32, x]);
    let fused = 2f32.powi(-11) + 2f32.powi(-24);
    let unfused = 2f32.powi(-11);
    assert_ne!(fused, unfused);
    // The same in f64 with x = 1 + 2⁻²⁷.
    let x64 = 1.0 + 2f64.powi(-27);
    let a64 = DMatrix::from_row_slice(1, 2, &[-1.0f64, x64]);
    let b64 = DMatrix::from_column_slice(2, 1, &[1.0f64, x64]);
    let (fused64, unfused64) = (2f64.powi(-26) + 2f64.powi(-54), 2f64.powi(-26));
    for kernel in available_kernels() {
        let want = if kernel == Kernel::Scalar { (unfused, unfused64) } else { (fused, fused64) };
        let got32 = product_on(kernel, &a, Op::N, &b, Op::N)[(0, 0)];
        let got64 = product_on(kernel, &a64, Op::N, &b64, Op::N)[(0, 0)];
        assert_eq!((got32, got64), want, "{kernel}");
    }
}

#[test]
fn a_kernel_the_cpu_lacks_is_refused_by_name() {
    for kernel in Kernel::ALL.into_iter().filter(|k| !k.is_available()) {
        assert!(matches!(
            llm_workbook::simd::set_kernel(Some(kernel)),
            Err(Error::InvalidValue { arg: "kernel", .. })
        ));
        let e = ran(
            forced(kernel),
            1.0,
            &DMatrix::<f32>::zeros(1, 1),
            Op::N,
            &DMatrix::zeros(1, 1),
            Op::N,
            0.0,
            &mut DMatrix::zeros(1, 1),
        );
        assert!(matches!(e, Err(Error::InvalidValue { arg: "kernel", .. })), "{kernel}: {e:?}");
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn detection_finds_what_the_cpu_reports() {
    let avx2 =
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
    let avx512 = std::arch::is_x86_feature_detected!("avx512f");
    let mut expected = vec![Kernel::Scalar];
    if avx2 {
        expected.push(Kernel::Avx2);
    }
    if avx512 {
        expected.push(Kernel::Avx512);
    }
    assert_eq!(available_kernels(), expected);
    assert_eq!(llm_workbook::simd::best_kernel(), *expected.last().expect("scalar at least"));
    if !avx512 {
        eprintln!("note: this CPU has no AVX-512F; the avx512 kernels were compiled but not run");
    }
}

#[test]
fn kernel_names_parse_and_bad_names_are_refused() {
    for kernel in Kernel::ALL {
        assert_eq!(Kernel::from_name(kernel.name()).expect("own name"), kernel);
        assert_eq!(Kernel::from_name(&kernel.name().to_uppercase()).expect("any case"), kernel);
    }
    assert!(matches!(Kernel::from_name("sse9"), Err(Error::InvalidValue { .. })));
    assert_eq!(llm_workbook::simd::parse_kernel_setting(None).expect("unset"), None);
    assert_eq!(llm_workbook::simd::parse_kernel_setting(Some("auto")).expect("auto"), None);
    assert_eq!(
        llm_workbook::simd::parse_kernel_setting(Some(" scalar ")).expect("scalar"),
        Some(Kernel::Scalar)
    );
    assert!(llm_workbook::simd::parse_kernel_setting(Some("fast")).is_err());
    for kernel in Kernel::ALL.into_iter().filter(|k| !k.is_available()) {
        assert!(
            llm_workbook::simd::parse_kernel_setting(Some(kernel.name())).is_err(),
            "{kernel} is not available here"
        );
    }
}

/// Run by [`the_environment_variable_forces_the_kernel_in_a_fresh_process`] in a child process:
/// reports the kernel a product ran with, so the parent can compare it with the variable.
#[test]
fn env_probe_child() {
    let a = DMatrix::<f32>::from_element(20, 20, 1.0);
    let mut c = DMatrix::zeros(20, 20);
    let ran = ran(Settings::default(), 1.0, &a, Op::N, &a, Op::N, 0.0, &mut c).unwrap().kernel;
    assert_eq!(c[(3, 4)], 20.0);
    // Set to an available kernel: that one; unset, `auto` or unusable: the best one (with a
    // warning on stderr for an unusable value).
    let expected = match llm_workbook::simd::parse_kernel_setting(
        std::env::var(llm_workbook::simd::KERNEL_ENV).ok().as_deref(),
    ) {
        Ok(Some(k)) => k,
        Ok(None) | Err(_) => llm_workbook::simd::best_kernel(),
    };
    assert_eq!(ran, expected);
    println!("ENV_PROBE_KERNEL={ran}");
}

#[test]
fn the_program_refuses_a_kernel_setting_it_cannot_use_in_one_line() {
    // The main program reads LLM_WORKBOOK_KERNEL once at start: a value naming no kernel, or one
    // this CPU lacks, is one line naming the variable and exit status 2; a usable one runs.
    let dir = common::temp_dir("ch10_kernel_setting");
    let run = |value: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_llm-workbook"))
            .arg("list")
            .current_dir(&dir)
            .env(llm_workbook::simd::KERNEL_ENV, value)
            .output()
            .expect("the program runs")
    };
    let mut bad = vec!["fast".to_string()];
    bad.extend(Kernel::ALL.iter().filter(|k| !k.is_available()).map(|k| k.name().to_string()));
    for value in &bad {
        let o = run(value);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{value}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{value}: {err}");
        assert!(
            err.contains(llm_workbook::simd::KERNEL_ENV) && err.contains(value.as_str()),
            "{err}"
        );
        assert!(o.stdout.is_empty(), "{value}: nothing else is done");
    }
    for value in ["scalar", "auto", ""] {
        let o = run(value);
        assert!(o.status.success(), "{value:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

#[test]
fn the_environment_variable_forces_the_kernel_in_a_fresh_process() {
    let exe = std::env::current_exe().expect("the test binary");
    for kernel in available_kernels() {
        let out = std::process::Command::new(&exe)
            .args(["--exact", "env_probe_child", "--nocapture", "--test-threads", "1"])
            .env(llm_workbook::simd::KERNEL_ENV, kernel.name())
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{kernel}: child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(&format!("ENV_PROBE_KERNEL={kernel}")),
            "{kernel}: child printed\n{stdout}"
        );
    }
    // A name the CPU cannot run (or no kernel at all) falls back to the best one, with a warning.
    let out = std::process::Command::new(&exe)
        .args(["--exact", "env_probe_child", "--nocapture", "--test-threads", "1"])
        .env(llm_workbook::simd::KERNEL_ENV, "no-such-kernel")
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{stdout}");
    assert!(
        stdout.contains(&format!("ENV_PROBE_KERNEL={}", llm_workbook::simd::best_kernel())),
        "{stdout}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(llm_workbook::simd::KERNEL_ENV),
        "the fallback is announced on stderr"
    );
}

// ───────────────────────── the public API, IEEE values and bad input ─────────────────────────

#[test]
fn matmul_tn_and_nt_match_the_triple_loop_on_the_transposed_operands() {
    let mut rng = Rng::new(11);
    let x = rng.normal_matrix::<f64>(23, 9, 1.0);
    let y = rng.normal_matrix::<f64>(23, 14, 1.0);
    let z = rng.normal_matrix::<f64>(14, 9, 1.0);
    let tn = matmul_tn(&x, &y).expect("xᵀy");
    let case = Case::new(9, 14, 23).ops(Op::T, Op::N);
    let (value, size) =
        reference(&case, &Operands { a: x.clone(), b: y.clone(), c0: DMatrix::zeros(9, 14) });
    within_bound(&case, &tn, &value, &size).expect("xᵀy");
    let nt = matmul_nt(&x, &z).expect("x zᵀ");
    let case = Case::new(23, 14, 9).ops(Op::N, Op::T);
    let (value, size) =
        reference(&case, &Operands { a: x.clone(), b: z.clone(), c0: DMatrix::zeros(23, 14) });
    within_bound(&case, &nt, &value, &size).expect("x zᵀ");
    let mut again = DMatrix::zeros(23, 14);
    let ran = ran(Settings::default(), 1.0, &x, Op::N, &z, Op::T, 0.0, &mut again).unwrap();
    assert_eq!(ran.kernel, llm_workbook::simd::active_kernel());
    assert_eq!(again, nt, "the default settings are the plain product's");
}

#[test]
fn beta_zero_overwrites_nan_and_infinity_in_c() {
    let a = DMatrix::<f32>::from_row_slice(2, 2, &[1.0, 2.0, 3.0, 4.0]);
    for kernel in available_kernels() {
        let mut c =
            DMatrix::from_row_slice(2, 2, &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
        ran(forced(kernel), 1.0, &a, Op::N, &a, Op::N, 0.0, &mut c).expect("shapes");
        assert_eq!(c, DMatrix::from_row_slice(2, 2, &[7.0, 10.0, 15.0, 22.0]), "{kernel}");
    }
}

#[test]
fn nonzero_beta_propagates_nan_in_c_as_ieee_says() {
    let a = DMatrix::<f64>::identity(3, 3);
    for kernel in available_kernels() {
        let mut c = DMatrix::from_element(3, 3, 1.0);
        c[(1, 2)] = f64::NAN;
        ran(forced(kernel), 1.0, &a, Op::N, &a, Op::N, 1.0, &mut c).expect("shapes");
        assert!(c[(1, 2)].is_nan(), "{kernel}");
        assert_eq!(c.iter().filter(|v| v.is_nan()).count(), 1, "{kernel}");
        assert_eq!(c[(0, 0)], 2.0);
    }
}

#[test]
fn nan_and_infinity_in_the_inputs_reach_exactly_the_entries_they_touch() {
    // A NaN in row 2 of A poisons row 2 of C; +∞ in row 3 of B makes column 1 of C infinite
    // (with the sign of aᵢ₃), everywhere else stays finite. Tiles padded with zeros must not
    // turn 0·∞ into NaN anywhere else.
    let mut rng = Rng::new(12);
    for kernel in available_kernels() {
        let (m, k, n) = (21, 9, 14);
        let mut a = rng.normal_matrix::<f32>(m, k, 1.0);
        let mut b = rng.normal_matrix::<f32>(k, n, 1.0);
        a[(2, 5)] = f32::NAN;
        b[(3, 1)] = f32::INFINITY;
        let c = product_on(kernel, &a, Op::N, &b, Op::N);
        for j in 0..n {
            for i in 0..m {
                let v = c[(i, j)];
                if i == 2 {
                    assert!(v.is_nan(), "{kernel} [{i},{j}] = {v}");
                } else if j == 1 {
                    assert_eq!(v, f32::INFINITY.copysign(a[(i, 3)]), "{kernel} [{i},{j}]");
                } else {
                    assert!(v.is_finite(), "{kernel} [{i},{j}] = {v}");
                }
            }
        }
    }
}

#[test]
fn alpha_zero_scales_c_by_beta_without_reading_a_or_b() {
    // The BLAS convention: with α = 0 the product is not formed, so NaN in A or B cannot reach C.
    let a = DMatrix::<f64>::from_element(4, 3, f64::NAN);
    let b = DMatrix::<f64>::from_element(3, 5, f64::INFINITY);
    for kernel in available_kernels() {
        let mut c = DMatrix::from_element(4, 5, 2.0);
        let stats = ran(forced(kernel), 0.0, &a, Op::N, &b, Op::N, -1.5, &mut c).expect("valid");
        assert_eq!(c, DMatrix::from_element(4, 5, -3.0));
        assert_eq!(stats.tiles, 0);
        let mut c = DMatrix::from_element(4, 5, f64::NAN);
        ran(forced(kernel), 0.0, &a, Op::N, &b, Op::N, 0.0, &mut c).expect("valid");
        assert_eq!(c, DMatrix::zeros(4, 5));
    }
}

#[test]
fn zero_sized_products_are_empty_or_zero_or_beta_times_c() {
    for kernel in available_kernels() {
        // m = 0 or n = 0: an empty result.
        let empty_rows =
            product_on(kernel, &DMatrix::<f32>::zeros(0, 4), Op::N, &DMatrix::zeros(4, 3), Op::N);
        assert_eq!(empty_rows.shape(), (0, 3));
        let empty_cols =
            product_on(kernel, &DMatrix::<f64>::zeros(4, 2), Op::T, &DMatrix::zeros(4, 0), Op::N);
        assert_eq!(empty_cols.shape(), (2, 0));
        // k = 0: the empty sum is 0, so C ← β·C (zeros when β = 0, whatever C held).
        let zero =
            product_on(kernel, &DMatrix::<f64>::zeros(3, 0), Op::N, &DMatrix::zeros(2, 0), Op::T);
        assert_eq!(zero, DMatrix::zeros(3, 2));
        let mut c = DMatrix::from_element(3, 2, f32::NAN);
        ran(
            forced(kernel),
            1.0,
            &DMatrix::zeros(3, 0),
            Op::N,
            &DMatrix::zeros(0, 2),
            Op::N,
            0.0,
            &mut c,
        )
        .expect("valid");
        assert_eq!(c, DMatrix::zeros(3, 2));
        let mut c = DMatrix::from_element(3, 2, 4.0f32);
        ran(
            forced(kernel),
            1.0,
            &DMatrix::zeros(0, 3),
            Op::T,
            &DMatrix::zeros(0, 2),
            Op::N,
            0.5,
            &mut c,
        )
        .expect("valid");
        assert_eq!(c, DMatrix::from_element(3, 2, 2.0));
    }
}

#[test]
fn mismatched_inner_dimensions_are_a_shape_error_naming_both_operands() {
    let a = DMatrix::<f32>::zeros(3, 4);
    let b = DMatrix::<f32>::zeros(5, 2);
    let e = matmul(&a, &b).expect_err("4 ≠ 5");
    assert!(matches!(&e, Error::Shape { op: "matmul", .. }), "{e:?}");
    assert!(e.to_string().contains("3×4") && e.to_string().contains("5×2"), "{e}");
    assert!(matches!(matmul_tn(&a, &b), Err(Error::Shape { op: "matmul_tn", .. })));
    assert!(matches!(matmul_nt(&a, &b), Err(Error::Shape { op: "matmul_nt", .. })));
    let mut c = DMatrix::<f32>::zeros(3, 2);
    let e = gemm(1.0, &a, Op::N, &b, Op::N, 0.0, &mut c).expect_err("4 ≠ 5");
    assert!(
        matches!(&e, Error::Shape { op: "gemm", arg: "inner dimensions of op(A) and op(B)", .. }),
        "{e:?}"
    );
    let e = ran(Settings::default(), 1.0, &a, Op::T, &b, Op::N, 0.0, &mut c).expect_err("3 ≠ 5");
    assert!(matches!(&e, Error::Shape { op: "gemm_with", .. }), "{e:?}");
}

#[test]
fn an_output_of_the_wrong_shape_is_a_shape_error_and_c_is_untouched() {
    let a = DMatrix::<f64>::from_element(3, 4, 1.0);
    let b = DMatrix::<f64>::from_element(4, 2, 1.0);
    let mut c = DMatrix::from_element(2, 3, 7.0);
    let e = gemm(1.0, &a, Op::N, &b, Op::N, 0.0, &mut c).expect_err("C must be 3×2");
    assert!(matches!(&e, Error::Shape { arg: "C", .. }), "{e:?}");
    assert!(e.to_string().contains("3×2") && e.to_string().contains("2×3"), "{e}");
    assert_eq!(c, DMatrix::from_element(2, 3, 7.0));
}

#[test]
fn zero_threads_and_zero_block_sizes_are_refused() {
    let a = DMatrix::<f32>::zeros(2, 2);
    let mut c = DMatrix::<f32>::zeros(2, 2);
    let zero_threads = Settings { threads: Some(0), ..Settings::default() };
    assert!(matches!(
        ran(zero_threads, 1.0, &a, Op::N, &a, Op::N, 0.0, &mut c),
        Err(Error::InvalidValue { arg: "threads", .. })
    ));
    for blocking in [
        Blocking { mc: 0, kc: 1, nc: 1 },
        Blocking { mc: 1, kc: 0, nc: 1 },
        Blocking { mc: 1, kc: 1, nc: 0 },
    ] {
        let s = Settings { blocking: Some(blocking), ..Settings::default() };
        assert!(matches!(
            ran(s, 1.0, &a, Op::N, &a, Op::N, 0.0, &mut c),
            Err(Error::InvalidValue { arg: "blocking", .. })
        ));
    }
}

#[test]
fn the_peak_probe_counts_its_flops() {
    for kernel in available_kernels() {
        let (flops, checksum) =
            llm_workbook::peak::fma_probe::<f32>(kernel, 1000).expect("available");
        let lanes = match kernel {
            Kernel::Scalar => 1,
            Kernel::Avx2 => 8,
            Kernel::Avx512 => 16,
        };
        assert_eq!(flops, 1000 * 12 * lanes * 2, "{kernel}");
        assert!(checksum.is_finite() && checksum > 0.0);
    }
    for kernel in Kernel::ALL.into_iter().filter(|k| !k.is_available()) {
        assert!(llm_workbook::peak::fma_probe::<f64>(kernel, 10).is_err());
    }
}

#[test]
fn two_threads_forced_below_the_threshold_still_match_the_triple_loop_on_odd_shapes() {
    // With the threshold at 0 every product more than one register tile high or wide is split
    // into pieces (of rows when it is higher than wide, counted in tiles, else of columns), so the
    // split itself is checked on ragged shapes of both kinds, with edge tiles in both threads.
    let mut cases = Vec::new();
    for (i, &(m, n, k)) in
        [(37, 13, 5), (17, 25, 9), (33, 14, 40), (50, 49, 3), (64, 100, 1), (7, 30, 6)]
            .iter()
            .enumerate()
    {
        let (ta, tb) = OPS[i % OPS.len()];
        let (alpha, beta) = ALPHA_BETA[i % ALPHA_BETA.len()];
        cases.push(Case::new(m, n, k).ops(ta, tb).scaled(alpha, beta));
    }
    check_all(
        &cases,
        |k| Settings {
            kernel: Some(k),
            threads: Some(2),
            min_parallel_flops: Some(0.0),
            ..Settings::default()
        },
        13,
    );
    let mut rng = Rng::new(14);
    let forced_two =
        Settings { threads: Some(2), min_parallel_flops: Some(0.0), ..Settings::default() };
    assert_eq!(
        run_case::<f32>(forced_two, Case::new(40, 9, 4), &mut rng).expect("split").threads,
        2
    );
}

// ───────────────────────────── the chapter's derived numbers ─────────────────────────────

use llm_workbook::ch10_matmul as ch10;

#[test]
fn flops_of_the_qkv_projection_are_2_m_n_k() {
    assert_eq!(ch10::flops(768, 384, 128), 75_497_472);
    // 2·m·n·k is one multiply and one add per pass of the innermost loop: count the passes.
    for &(m, n, k) in &[(3, 4, 5), (1, 7, 2), (6, 1, 9)] {
        let mut passes = 0u64;
        for _i in 0..m {
            for _j in 0..n {
                for _p in 0..k {
                    passes += 1;
                }
            }
        }
        assert_eq!(ch10::flops(m, n, k), 2 * passes);
    }
}

#[test]
fn the_avx2_f32_tile_uses_12_of_16_registers_for_accumulators() {
    let acc = ch10::accumulator_registers(16, 6, 8).expect("16 rows are two 8-lane vectors");
    assert_eq!(acc, 12);
    // Accumulators + one register per vector of Ã (2) + one broadcast of B̃ must fit in 16.
    let (a_vectors, broadcast) = (2, 1);
    assert!(acc + a_vectors + broadcast <= ch10::AVX2_REGISTERS);
    assert_eq!(ch10::accumulator_registers(8, 6, 4).expect("f64"), 12);
    // AVX-512: 32×8 f32 in 16-lane zmm registers, 16 accumulators + 2 + 1 of 32 (8 columns, so
    // the GPT's widths 32, 64, 128, 384 and 512 need no edge tiles).
    assert_eq!(ch10::accumulator_registers(32, 8, 16).expect("avx512"), 16);
    assert_eq!(ch10::accumulator_registers(16, 8, 8).expect("avx512 f64"), 16);
    assert!(ch10::accumulator_registers(15, 6, 8).is_err());
    if Kernel::Avx2.is_available() {
        assert_eq!(tile_shape::<f32>(Kernel::Avx2).expect("available"), (16, 6));
        assert_eq!(tile_shape::<f64>(Kernel::Avx2).expect("available"), (8, 6));
    }
    if Kernel::Avx512.is_available() {
        assert_eq!(tile_shape::<f32>(Kernel::Avx512).expect("available"), (32, 8));
        assert_eq!(tile_shape::<f64>(Kernel::Avx512).expect("available"), (16, 8));
    }
    assert_eq!(tile_shape::<f32>(Kernel::Scalar).expect("always"), matmul::lab::SCALAR_TILE);
}

#[test]
fn the_analytical_model_blocks_for_the_written_out_caches() {
    // Zen 3 as written out in the chapter: L1d 32 KiB 8-way (a way is 4096 B), L2 512 KiB 8-way
    // (65,536 B a way), L3 32 MiB 16-way shared by 2 cores (1 MiB a way per core), lines of 64 B.
    // AVX2 f32, 16×6, 4 B, tuned KC = 384:
    //   KC: Ã gets ⌊7·16/22⌋ = 5 ways, 5·4096/(16·4) = 320;
    //   MC: B̃'s sliver 384·6·4 = 9216 B takes 1 way, Ã 8 − 1 − 1 = 6 ways (one left free),
    //       6·65536/(384·4) = 256;
    //   NC: Ã 256·384·4 = 393,216 B takes 1 way, B̃ 16 − 1 − 1 = 14 ways,
    //       ⌊14·1048576/1536⌋ = 9557, down to a multiple of 6: 9552.
    // AVX2 f64, 8×6, 8 B, KC = 256: ⌊7·8/14⌋ = 4, 4·4096/64 = 256; sliver 12,288 B → 1 way,
    //   6·65536/2048 = 192; Ã 393,216 B → 1 way, ⌊14·1048576/2048⌋ = 7168 → 7164.
    // Portable f64, 4×4, KC = 256: ⌊7·4/8⌋ = 3, 3·4096/32 = 384; MC 192; NC 7168 (a multiple of 4).
    // Zen 4 (L2 1 MiB, 131,072 B a way), AVX-512 f32, 32×8, KC = 256: ⌊7·32/40⌋ = 5,
    //   5·4096/128 = 160; sliver 8192 B → 1 way, 6·131072/1024 = 768; Ã 786,432 B → 1 way,
    //   14·1048576/1024 = 14336. AVX-512 f64, 16×8: ⌊7·16/24⌋ = 4, 4·4096/128 = 128;
    //   6·131072/2048 = 384; Ã 786,432 B → 1 way, 14·1048576/2048 = 7168.
    let model = |caches, kernel: Kernel, elem: usize, kc: usize| {
        let tile = if elem == 4 { tile_shape::<f32>(kernel) } else { tile_shape::<f64>(kernel) };
        let m: matmul::lab::ModelBlocking =
            matmul::lab::model_blocking(&caches, tile.expect("every kernel has a tile"), elem, kc)
                .expect("the description feeds the model");
        assert_eq!(m.blocking.kc, kc, "KC stays the tuned one");
        (m.model_kc, m.blocking.mc, m.blocking.nc)
    };
    let (zen3, zen4) = (ch10::ZEN3_CACHES, ch10::ZEN4_CACHES);
    assert_eq!(model(zen3, Kernel::Avx2, 4, 384), (320, 256, 9552));
    assert_eq!(model(zen3, Kernel::Avx2, 8, 256), (256, 192, 7164));
    assert_eq!(model(zen3, Kernel::Scalar, 8, 256), (384, 192, 7168));
    assert_eq!(model(zen4, Kernel::Avx512, 4, 256), (160, 768, 14336));
    assert_eq!(model(zen4, Kernel::Avx512, 8, 256), (128, 384, 7168));
    // The tiles are the kernels' own, on any machine.
    assert_eq!(tile_shape::<f32>(Kernel::Avx512).expect("a fact of the code"), (32, 8));
    // The blocking a product runs with here keeps the tuned KC whatever the caches say.
    for kernel in available_kernels() {
        assert_eq!(
            default_blocking::<f32>(kernel).expect("available").kc,
            match kernel {
                Kernel::Scalar => matmul::lab::SCALAR_BLOCKING.kc,
                Kernel::Avx2 => matmul::lab::AVX2_F32_BLOCKING.kc,
                Kernel::Avx512 => matmul::lab::AVX512_F32_BLOCKING.kc,
            }
        );
    }
}

#[test]
fn packed_blocks_fit_their_caches() {
    let fp = ch10::footprint(16, 6, matmul::lab::AVX2_F32_BLOCKING, 4);
    assert_eq!(
        (fp.b_sliver, fp.a_sliver, fp.a_block, fp.b_panel),
        (9216, 24576, 147_456, 1_585_152)
    );
    // Each tuned kernel's blocks against the caches they target: Zen 3 for the AVX2 and portable
    // constants, Zen 4 (32 KiB L1d, 1 MiB L2), where they were swept, for the AVX-512 ones.
    let zen3 = (ch10::L1D_BYTES, ch10::L2_BYTES, ch10::L3_BYTES);
    let zen4 = (ch10::L1D_BYTES, ch10::ZEN4_L2_BYTES, ch10::L3_BYTES);
    for (mr, nr, b, elem, (l1, l2, l3)) in [
        (16, 6, matmul::lab::AVX2_F32_BLOCKING, 4, zen3),
        (8, 6, matmul::lab::AVX2_F64_BLOCKING, 8, zen3),
        (4, 4, matmul::lab::SCALAR_BLOCKING, 8, zen3),
        (32, 8, matmul::lab::AVX512_F32_BLOCKING, 4, zen4),
        (16, 8, matmul::lab::AVX512_F64_BLOCKING, 8, zen4),
    ] {
        let fp = ch10::footprint(mr, nr, b, elem);
        // The reused B̃ sliver takes at most half of L1, leaving the rest to the Ã sliver streaming
        // by.
        assert!(fp.b_sliver <= l1 / 2, "{mr}×{nr}: B̃ sliver {fp:?}");
        assert!(fp.a_block <= l2 / 2, "{mr}×{nr}: Ã block {fp:?}");
        assert!(fp.b_panel <= l3 / 2, "{mr}×{nr}: B̃ panel {fp:?}");
        assert_eq!(b.nc % nr, 0, "NC is a whole number of NR-slivers");
        assert_eq!(b.mc % mr, 0, "MC is a whole number of MR-slivers");
    }
}

#[test]
fn naive_and_blocked_arithmetic_intensity() {
    let n = 1024;
    let naive = ch10::intensity(ch10::flops(n, n, n), ch10::naive_traffic_bytes(n, n, n, 4));
    let blocked = ch10::intensity(
        ch10::flops(n, n, n),
        ch10::blocked_traffic_bytes(n, n, n, 4, matmul::lab::AVX2_F32_BLOCKING),
    );
    assert!((naive - 0.25).abs() < 1e-3, "{naive}");
    // A once, B once, C three times read and written (⌈1024/384⌉ rank-KC updates): 8·n² floats.
    assert_eq!(matmul::lab::AVX2_F32_BLOCKING.kc, 384);
    assert_eq!(
        ch10::blocked_traffic_bytes(n, n, n, 4, matmul::lab::AVX2_F32_BLOCKING),
        8 * 1024 * 1024 * 4
    );
    assert_eq!(blocked, 64.0);
    assert!(blocked > 200.0 * naive);
    // Deeper KC means fewer passes over C: intensity grows with KC.
    let shallow = ch10::intensity(
        ch10::flops(n, n, n),
        ch10::blocked_traffic_bytes(
            n,
            n,
            n,
            4,
            Blocking { kc: 32, ..matmul::lab::AVX2_F32_BLOCKING },
        ),
    );
    assert!(shallow < blocked / 4.0);
}

#[test]
fn tile_counts_follow_from_mr_nr_kc() {
    assert_eq!(ch10::tile_calls(37, 29, 600, 16, 6, 384), 30);
    assert_eq!(ch10::tile_calls(37, 29, 300, 16, 6, 256), 30);
    // The formula is what the product really does, for every kernel here.
    let mut rng = Rng::new(15);
    for kernel in available_kernels() {
        let (mr, nr) = tile_shape::<f64>(kernel).expect("available");
        let kc = default_blocking::<f64>(kernel).expect("available").kc;
        let one = Settings { kernel: Some(kernel), threads: Some(1), ..Settings::default() };
        let stats = run_case::<f64>(one, Case::new(37, 29, 300), &mut rng).expect("valid");
        assert_eq!(stats.tiles, ch10::tile_calls(37, 29, 300, mr, nr, kc), "{kernel}");
    }
}

#[test]
fn tile_use_of_a_one_row_product() {
    assert_eq!(ch10::tile_use(1, 384, 16, 6), 0.0625);
    assert_eq!(ch10::tile_use(768, 384, 16, 6), 1.0);
    assert_eq!(ch10::tile_use(17, 7, 16, 6), 17.0 * 7.0 / (32.0 * 12.0));
    for m in 1..60 {
        let u = ch10::tile_use(m, 13, 16, 6);
        assert!(u > 0.0 && u <= 1.0);
    }
}

#[test]
fn packing_pads_with_zeros() {
    let a = DMatrix::<f64>::from_row_slice(
        5,
        3,
        &[1.0, 2.0, 0.0, 0.0, 1.0, 3.0, 2.0, 0.0, 1.0, 1.0, 1.0, 1.0, 3.0, 2.0, 1.0],
    );
    let packed = matmul::lab::pack_a_block(&a, Op::N, 0..5, 0..3, 4).expect("valid");
    // Sliver 0: rows 0..4, column after column; sliver 1: row 4 and three zero rows.
    #[rustfmt::skip]
    let expected = [
        1.0, 0.0, 2.0, 1.0,   2.0, 1.0, 0.0, 1.0,   0.0, 3.0, 1.0, 1.0,
        3.0, 0.0, 0.0, 0.0,   2.0, 0.0, 0.0, 0.0,   1.0, 0.0, 0.0, 0.0,
    ];
    assert_eq!(packed, expected);
    let pad_zeros =
        packed.iter().filter(|&&v| v == 0.0).count() - a.iter().filter(|&&v| v == 0.0).count();
    assert_eq!(pad_zeros, 9);
    // The transpose is handled by packing: Aᵀ stored and read with op = T packs identically.
    let at = a.transpose();
    assert_eq!(matmul::lab::pack_a_block(&at, Op::T, 0..5, 0..3, 4).expect("valid"), expected);
    let b = a.transpose(); // 3×5 as op(B)
    let nn = matmul::lab::pack_b_panel(&b, Op::N, 1..3, 0..5, 4).expect("valid");
    let tt = matmul::lab::pack_b_panel(&a, Op::T, 1..3, 0..5, 4).expect("valid");
    assert_eq!(nn, tt);
    assert_eq!(nn.len(), 2 * 4 * 2);
    // Sliver 0, row p = 1 of op(B): columns 0..4 of row 1 of Aᵀ, i.e. A[0..4, 1].
    assert_eq!(&nn[..4], &[2.0, 1.0, 0.0, 1.0]);
    assert!(matches!(
        matmul::lab::pack_a_block(&a, Op::N, 0..6, 0..3, 4),
        Err(Error::InvalidValue { arg: "rows", .. })
    ));
    assert!(matches!(
        matmul::lab::pack_b_panel(&b, Op::N, 0..4, 0..5, 4),
        Err(Error::InvalidValue { arg: "depth", .. })
    ));
    assert!(matches!(
        matmul::lab::pack_a_block(&a, Op::N, 0..5, 0..3, 0),
        Err(Error::InvalidValue { arg: "mr", .. })
    ));
}

#[test]
fn the_scalar_update_is_the_sum_of_outer_products_of_the_slivers() {
    let (mr, nr) = matmul::lab::SCALAR_TILE;
    let kc = 3;
    let a: Vec<f64> = (0..kc * mr).map(|v| v as f64 - 4.0).collect();
    let b: Vec<f64> = (0..kc * nr).map(|v| (v % 5) as f64).collect();
    let product =
        |i: usize, j: usize| -> f64 { (0..kc).map(|p| a[p * mr + i] * b[p * nr + j]).sum() };
    // β = 0 over a NaN-filled C: C is not read.
    let mut tile = DMatrix::from_element(mr, nr, f64::NAN);
    matmul::lab::scalar_update(kc, &a, &b, 1.0, 0.0, &mut tile).expect("lengths agree");
    // α = 2, β = 0.5 over C = (i + 10j), with slivers one value longer (read no further).
    let start = DMatrix::from_fn(mr, nr, |i, j| (i + 10 * j) as f64);
    let mut scaled = start.clone();
    let (a_long, b_long) = ([&a[..], &[7.0]].concat(), [&b[..], &[7.0]].concat());
    matmul::lab::scalar_update(kc, &a_long, &b_long, 2.0, 0.5, &mut scaled).expect("longer");
    for i in 0..mr {
        for j in 0..nr {
            assert_eq!(tile[(i, j)], product(i, j));
            assert_eq!(scaled[(i, j)], 2.0 * product(i, j) + 0.5 * start[(i, j)]);
        }
    }
    assert!(matches!(
        matmul::lab::scalar_update(kc, &a[1..], &b, 1.0, 0.0, &mut tile),
        Err(Error::Shape { arg: "a_sliver", .. })
    ));
    assert!(matches!(
        matmul::lab::scalar_update(kc, &a, &b[1..], 1.0, 0.0, &mut tile),
        Err(Error::Shape { arg: "b_sliver", .. })
    ));
    let mut wide = DMatrix::zeros(mr, nr + 1);
    assert!(matches!(
        matmul::lab::scalar_update(kc, &a, &b, 1.0, 0.0, &mut wide),
        Err(Error::Shape { arg: "c", .. })
    ));
}

#[test]
fn the_walk_assembles_the_product_from_its_tiles() {
    let mut out = Vec::new();
    let mut walk = llm_workbook::report::Walk::new(&mut out);
    ch10::book::walk(&mut walk).expect("the walk runs");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(text.contains("equal to the tiles assembled above, entry for entry"), "{text}");
    assert!(!text.contains("DIFFERS"));
    assert_eq!(text.matches("tile (").count(), 8, "4 tiles × 2 rank-KC updates");
}

/// Every point of the committed roofline lies under the roof of the level holding its operands
/// (a point above a roof means a wrong roof or a wrong traffic count); each roof is drawn
/// straight, by its ends and its knee; and a planted point above its roof is caught.
#[test]
fn every_roofline_point_lies_under_its_roof() {
    use ch10::roofline::{Point, attainable, committed_roofline, points_above_roofs, roof_line};
    let r = committed_roofline().expect("data/ch10_roofline.csv parses");
    assert!(r.roofs.len() >= 2, "a cache roof and the memory roof: {:?}", r.roofs);
    assert!(r.roofs.last().is_some_and(|m| m.bytes.is_none()), "memory comes last");
    assert!(r.points.iter().any(|p| p.contender == "naive loop"));
    assert!(r.points.iter().any(|p| p.contender == "ours"));
    let above = points_above_roofs(&r).expect("roofs");
    assert!(above.is_empty(), "{}", above.join("\n"));
    // The figure names the machine, draws every roof and labels each group with its roof.
    let llm_workbook::plot::Figure::LogLine(chart, _) =
        ch10::book::roofline_figure(&r).expect("figure")
    else {
        panic!("a log-log line chart")
    };
    assert!(chart.title.contains(ch10::roofline::meta(&r, "cpu").expect("cpu")));
    for roof in &r.roofs {
        assert!(chart.series.iter().any(|s| s.label.starts_with(&format!("{} roof", roof.level))));
    }
    // A roof is straight on log–log axes: its ends and its knee, no stairs between.
    let line = roof_line(200.0, 50.0, (0.125, 64.0));
    assert_eq!(line, vec![(0.125, 6.25), (4.0, 200.0), (64.0, 200.0)]);
    assert_eq!(attainable(200.0, 50.0, 1.0), 50.0);
    // The planted mistake: a point above the roof of its level is reported.
    let mut planted = r.clone();
    let roof = &r.roofs[0];
    planted.points.push(Point {
        contender: "planted".into(),
        n: 1,
        working_set: roof.bytes.unwrap_or(1),
        intensity: 0.25,
        gflops: 1.01 * attainable(r.peak, roof.gbs, 0.25),
    });
    assert_eq!(points_above_roofs(&planted).expect("roofs").len(), 1);
}

#[test]
fn the_figures_show_what_the_prose_says() {
    let figs = ch10::book::figures().expect("figures");
    let names: Vec<&str> = figs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["ch10_intensity", "ch10_tile_use"]);
    use llm_workbook::plot::{Figure, LogAxes};
    // Real n and real flops per byte, on two log axes (not axes of log₂ n and log₂ intensity).
    let Figure::LogLine(intensity, LogAxes::Both) = &figs[0].1 else {
        panic!("a line chart on log axes")
    };
    let naive = &intensity.series[0].points;
    let blocked = &intensity.series[1].points;
    assert_eq!((naive[0].0, naive.last().expect("points").0), (16.0, 4096.0));
    // The naive loop stays at 2 flops per 8 bytes whatever n; blocking climbs past 2⁵.
    assert!(naive.iter().all(|&(_, y)| (y - 0.25).abs() < 0.01));
    assert!(blocked.windows(2).all(|w| w[1].1 >= w[0].1));
    assert!(blocked.last().expect("points").1 > 32.0);
    let llm_workbook::plot::Figure::Line(tiles) = &figs[1].1 else { panic!("a line chart") };
    assert!(tiles.series.iter().all(|s| s.points.iter().all(|&(_, y)| y > 0.0 && y <= 1.0)));
    let dir = common::temp_dir("ch10-figures");
    for (stem, fig) in &figs {
        let files = fig.save(&dir, stem).expect("drawn");
        assert!(
            files.iter().all(|f| std::fs::metadata(f).map(|m| m.len() > 1000).unwrap_or(false))
        );
    }
}

#[test]
fn the_chapter_prose_carries_the_worked_table() {
    common::check_chapter_prose(&ch10::book::CHAPTER);
}

// ───────────── properties (proptest) ─────────────

mod properties {
    use super::*;
    use llm_workbook::rng::Rng;
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![Just(Op::N), Just(Op::T)]
    }

    /// Any shape up to 40 (so the edges of every register tile and the 17-wide loop remainders
    /// come up), either transpose of each operand (row and column strides swapped), and α, β from
    /// a set with zero, negative and fractional values.
    fn case() -> impl Strategy<Value = Case> {
        (1usize..40, 1usize..40, 1usize..40, op(), op(), 0usize..ALPHA_BETA.len()).prop_map(
            |(m, n, k, ta, tb, s)| {
                Case::new(m, n, k).ops(ta, tb).scaled(ALPHA_BETA[s].0, ALPHA_BETA[s].1)
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        // Every kernel, f32 and f64, against the f64 triple loop within
        // γ_{k+2}(u)·(|α|Σ|a||b| + |β||c⁰|).
        #[test]
        fn every_kernel_matches_the_naive_product_on_random_shapes_and_transposes(
            case in case(),
            seed in any::<u64>(),
        ) {
            for kernel in available_kernels() {
                let mut rng = Rng::new(seed);
                run_case::<f32>(forced(kernel), case, &mut rng)
                    .map_err(|e| TestCaseError::fail(format!("{kernel} f32: {e}")))?;
                run_case::<f64>(forced(kernel), case, &mut rng)
                    .map_err(|e| TestCaseError::fail(format!("{kernel} f64: {e}")))?;
            }
        }

        // Threads share out blocks of rows (or columns) of C; each entry is still summed over k in
        // the same order by the same kernel, so any thread count gives the bits of one thread.
        #[test]
        fn one_to_eight_threads_give_the_same_bits(case in case(), seed in any::<u64>()) {
            for kernel in available_kernels() {
                let x = operands::<f32>(&case, &mut Rng::new(seed));
                let (alpha, beta) = (case.alpha as f32, case.beta as f32);
                let base = Settings {
                    kernel: Some(kernel),
                    min_parallel_flops: Some(0.0),
                    ..Settings::default()
                };
                let bits = |m: &DMatrix<f32>| m.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                let mut one = x.c0.clone();
                ran(
                    Settings { threads: Some(1), ..base },
                    alpha, &x.a, case.ta, &x.b, case.tb, beta, &mut one,
                )
                .unwrap();
                for threads in [2, 3, 4, 5, 8] {
                    let mut many = x.c0.clone();
                    let stats = ran(
                        Settings { threads: Some(threads), ..base },
                        alpha, &x.a, case.ta, &x.b, case.tb, beta, &mut many,
                    )
                    .unwrap();
                    prop_assert_eq!(
                        bits(&one),
                        bits(&many),
                        "{} asked for {} threads, used {}",
                        kernel,
                        threads,
                        stats.threads
                    );
                }
            }
        }

        // Each SIMD kernel against the scalar kernel: both lie within γ_{k+2}(u)·size of the exact
        // product, so they lie within twice that of each other (size as in `reference`).
        #[test]
        fn every_simd_kernel_agrees_with_the_scalar_kernel_within_twice_the_bound(
            case in case(),
            seed in any::<u64>(),
        ) {
            let x = operands::<f32>(&case, &mut Rng::new(seed));
            let (_, size) = reference(&case, &x);
            let (alpha, beta) = (case.alpha as f32, case.beta as f32);
            let mut scalar = x.c0.clone();
            let (ta, tb) = (case.ta, case.tb);
            ran(forced(Kernel::Scalar), alpha, &x.a, ta, &x.b, tb, beta, &mut scalar)
                .unwrap();
            let relative = 2.0 * gamma(case.k + 2, unit_roundoff::<f32>());
            let absolute = 2.0 * (case.k + 2) as f64 * eta::<f32>();
            for kernel in available_kernels().into_iter().filter(|&k| k != Kernel::Scalar) {
                let mut simd = x.c0.clone();
                ran(forced(kernel), alpha, &x.a, ta, &x.b, tb, beta, &mut simd).unwrap();
                for j in 0..case.n {
                    for i in 0..case.m {
                        let diff = (simd[(i, j)] as f64 - scalar[(i, j)] as f64).abs();
                        let bound = relative * size[(i, j)] + absolute;
                        prop_assert!(
                            diff <= bound,
                            "{kernel} vs scalar at ({i}, {j}): {diff:e} > {bound:e}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_scalar_kernel_is_always_available_so_the_comparison_runs() {
        assert!(available_kernels().contains(&Kernel::Scalar));
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            assert!(
                available_kernels().contains(&Kernel::Avx2),
                "this CPU has AVX2 + FMA, so the SIMD path is compared"
            );
        }
    }
}

// ──────── views: products of blocks inside larger matrices (chapter 9's attention heads) ────────

mod views {
    use super::*;
    use llm_workbook::matmul::gemm_with;
    use llm_workbook::threads::share_pieces;

    /// `inner` placed at rows r0…, columns c0… of a larger zero-padded matrix with `ld` rows; the
    /// view's slice starts at its first entry.
    fn embedded<T: Float>(
        inner: &DMatrix<T>,
        r0: usize,
        c0: usize,
        ld: usize,
        rng: &mut Rng,
    ) -> (Vec<T>, usize) {
        let cols = c0 + inner.ncols() + 2;
        // Surrounding values that must not leak in.
        let mut big = rng.normal_matrix::<T>(ld, cols, 1.0);
        big.view_mut((r0, c0), inner.shape()).copy_from(inner);
        (big.as_slice().to_vec(), r0 + c0 * ld)
    }

    fn check_view_case<T: Float>(
        settings: Settings,
        case: Case,
        rng: &mut Rng,
    ) -> Result<(), String> {
        let x = operands::<T>(&case, rng);
        let (pad_a, pad_b) = (1 + case.m % 3, 2 + case.n % 4);
        let (a_store, a_at) = embedded(&x.a, pad_a, 1, x.a.nrows() + pad_a + 3, rng);
        let (b_store, b_at) = embedded(&x.b, pad_b, 2, x.b.nrows() + pad_b + 1, rng);
        let a = MatRef::new(&a_store[a_at..], x.a.nrows(), x.a.ncols(), x.a.nrows() + pad_a + 3)
            .map_err(|e| e.to_string())?;
        let b = MatRef::new(&b_store[b_at..], x.b.nrows(), x.b.ncols(), x.b.nrows() + pad_b + 1)
            .map_err(|e| e.to_string())?;
        // C too lives inside a larger matrix, whose other entries must come out untouched.
        let ldc = case.m + 3;
        let mut big_c = rng.normal_matrix::<T>(ldc, case.n + 1, 1.0);
        big_c.view_mut((2, 1), (case.m, case.n)).copy_from(&x.c0);
        let before = big_c.clone();
        let view = MatMut::new(&mut big_c.as_mut_slice()[2 + ldc..], case.m, case.n, ldc)
            .map_err(|e| e.to_string())?;
        gemm_with(settings, T::of(case.alpha), a, case.ta, b, case.tb, T::of(case.beta), view)
            .map_err(|e| e.to_string())?;
        for j in 0..case.n + 1 {
            for i in 0..ldc {
                let inside = (2..2 + case.m).contains(&i) && (1..1 + case.n).contains(&j);
                if !inside && big_c[(i, j)].as_f64().to_bits() != before[(i, j)].as_f64().to_bits()
                {
                    return Err(format!("{case:?}: C's surroundings changed at ({i}, {j})"));
                }
            }
        }
        let c = big_c.view((2, 1), (case.m, case.n)).into_owned();
        let (value, size) = reference(&case, &x);
        within_bound(&case, &c, &value, &size)
    }

    #[test]
    fn views_inside_larger_matrices_match_the_triple_loop_with_every_kernel_and_both_backends() {
        let mut cases = Vec::new();
        for (m, n, k) in
            [(1, 1, 1), (7, 5, 3), (33, 17, 9), (64, 64, 32), (64, 32, 64), (13, 40, 71)]
        {
            for (ta, tb) in [(Op::N, Op::N), (Op::T, Op::N), (Op::N, Op::T), (Op::T, Op::T)] {
                cases.push(
                    Case::new(m, n, k).ops(ta, tb).scaled(0.5, if m % 2 == 0 { 0.0 } else { -1.5 }),
                );
            }
        }
        let mut failures = Vec::new();
        for backend in [Backend::Ours, Backend::Nalgebra] {
            for kernel in available_kernels() {
                let mut rng = Rng::new(41);
                let settings = Settings {
                    backend: Some(backend),
                    kernel: Some(kernel),
                    ..Settings::default()
                };
                for case in &cases {
                    if let Err(e) = check_view_case::<f32>(settings, *case, &mut rng)
                        .and_then(|()| check_view_case::<f64>(settings, *case, &mut rng))
                    {
                        failures.push(format!("{} {kernel}: {e}", backend.name()));
                        break;
                    }
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// A SIMD kernel reads op(B) where it is when its rows are at most IN_PLACE_MAX_STEP apart, and
    /// packs it otherwise; the kernel does the same multiply-adds in the same order either way, so
    /// the two must agree to the bit. The same B is given twice: as a matrix of its own (read in
    /// place) and inside a matrix whose leading dimension is past the limit (packed), for both
    /// layouts of op(B) and shapes with and without a partial sliver.
    #[test]
    fn b_read_in_place_and_b_packed_give_the_same_bits() {
        let mut rng = Rng::new(43);
        let far = llm_workbook::matmul::lab::IN_PLACE_MAX_STEP + 5;
        for kernel in available_kernels() {
            for (m, n, k) in [(64, 24, 40), (33, 19, 7), (96, 64, 300)] {
                for tb in [Op::N, Op::T] {
                    let a = rng.normal_matrix::<f32>(m, k, 1.0);
                    let b = if tb == Op::N {
                        rng.normal_matrix::<f32>(k, n, 1.0)
                    } else {
                        rng.normal_matrix::<f32>(n, k, 1.0)
                    };
                    let near = MatRef::new(b.as_slice(), b.nrows(), b.ncols(), b.nrows()).unwrap();
                    let (store, at) = embedded(&b, 0, 0, far, &mut rng);
                    let packed = MatRef::new(&store[at..], b.nrows(), b.ncols(), far).unwrap();
                    // op(B) = B steps k by 1 either way (read in place both times): it is
                    // op(B) = Bᵀ, stepping k by the leading dimension, that the limit sends to
                    // packing.
                    let mut c_near = DMatrix::<f32>::zeros(m, n);
                    let mut c_far = DMatrix::<f32>::zeros(m, n);
                    let a_view = || MatRef::new(a.as_slice(), m, k, m).unwrap();
                    let c = MatMut::new(c_near.as_mut_slice(), m, n, m).unwrap();
                    ran(forced(kernel), 1.0, a_view(), Op::N, near, tb, 0.0, c).unwrap();
                    let c = MatMut::new(c_far.as_mut_slice(), m, n, m).unwrap();
                    ran(forced(kernel), 1.0, a_view(), Op::N, packed, tb, 0.0, c).unwrap();
                    let same =
                        c_near.iter().zip(c_far.iter()).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(
                        same,
                        "{kernel}, {m}×{n}×{k}, op(B) {tb:?}: in place and packed differ"
                    );
                }
            }
        }
    }

    #[test]
    fn a_view_that_does_not_fit_its_slice_and_mismatched_shapes_are_errors() {
        let data = vec![1.0f64; 20];
        assert!(MatRef::new(&data, 4, 5, 4).is_ok()); // exactly 20 values
        let e = MatRef::new(&data, 4, 5, 5).unwrap_err(); // needs 4·5 + 4 = 24
        assert!(e.to_string().contains("data") && e.to_string().contains("24"), "{e}");
        let e = MatRef::new(&data, 4, 2, 3).unwrap_err(); // ld < rows
        assert!(e.to_string().contains("ld"), "{e}");
        let a = MatRef::new(&data, 4, 5, 4).unwrap();
        let b = MatRef::new(&data, 4, 5, 4).unwrap();
        let mut c = vec![0.0; 16];
        let c_view = MatMut::new(&mut c, 4, 4, 4).unwrap();
        let e = gemm(1.0, a, Op::N, b, Op::N, 0.0, c_view).unwrap_err(); // 4×5 by 4×5
        assert!(e.to_string().contains("inner dimensions"), "{e}");
        // 4×5 by 5×4 fits a 4×4 C.
        gemm(1.0, a, Op::N, b, Op::T, 0.0, MatMut::new(&mut c, 4, 4, 4).unwrap()).unwrap();
        assert!(c.iter().all(|&v| v == 5.0));
        let e =
            gemm(1.0, a, Op::N, b, Op::T, 0.0, MatMut::new(&mut c, 4, 3, 4).unwrap()).unwrap_err();
        assert!(e.to_string().contains("C") && e.to_string().contains("4×3"), "{e}");
        let mut short = vec![0.0; 15];
        let e = MatMut::new(&mut short, 4, 4, 4).unwrap_err();
        assert!(e.to_string().contains("16"), "{e}");
        let e = MatMut::new(&mut c, 4, 2, 2).unwrap_err();
        assert!(e.to_string().contains("ld"), "{e}");
    }

    /// A product's settings limit its threads, and the scheduler runs pieces on the pool's
    /// threads with nothing of the caller's but what the pieces capture: a product's settings,
    /// passed in, reach every piece.
    #[test]
    fn settings_limit_a_product_s_threads_and_reach_every_piece_of_the_scheduler() {
        let mut rng = Rng::new(3);
        let a = rng.normal_matrix::<f32>(600, 300, 1.0);
        let b = rng.normal_matrix::<f32>(300, 200, 1.0);
        const { assert!(2.0 * 600.0 * 300.0 * 200.0 >= matmul::lab::PARALLEL_MIN_FLOPS) };
        let threads_used = |threads| {
            let mut c = DMatrix::zeros(600, 200);
            let settings = Settings { threads: Some(threads), ..Settings::default() };
            ran(settings, 1.0, &a, Op::N, &b, Op::N, 0.0, &mut c).unwrap().threads
        };
        assert_eq!(threads_used(1), 1);
        assert_eq!(threads_used(2), 2);
        // Two pieces that wait for each other run on two threads; each runs its product with the
        // settings it was handed, on the portable kernel and one thread.
        let meet = std::sync::Barrier::new(2);
        let settings =
            Settings { kernel: Some(Kernel::Scalar), threads: Some(1), ..Settings::default() };
        let seen = share_pieces(&mut [(), ()], vec![0, 1], |(), _| {
            meet.wait();
            let mut c = DMatrix::zeros(600, 200);
            let stats = ran(settings, 1.0, &a, Op::N, &b, Op::N, 0.0, &mut c).unwrap();
            (std::thread::current().id(), stats.kernel, stats.threads)
        });
        assert_ne!(seen[0].0, seen[1].0, "the two pieces ran on two threads");
        for (_, kernel, threads) in &seen[..] {
            assert_eq!((*kernel, *threads), (Kernel::Scalar, 1));
        }
    }
}

// ───────────── elementwise loops in the widest registers (chapter 9's GELU) ─────────────

mod wide_map {
    use super::*;
    use llm_workbook::ch03_mlp::{gelu_tanh_derivative_f32, gelu_tanh_f32};
    use llm_workbook::simd_map::{map_f32, map_f32_with};

    type Binary = fn(f32, f32) -> f32;

    #[test]
    fn every_kernel_maps_bit_for_bit_like_the_plain_loop_on_awkward_lengths() {
        let mut rng = Rng::new(8);
        for len in [0, 1, 3, 7, 15, 16, 17, 31, 33, 64, 100, 1023] {
            let x: Vec<f32> = (0..len).map(|_| 4.0 * rng.normal() as f32).collect();
            let y0: Vec<f32> = (0..len).map(|_| rng.normal() as f32).collect();
            let fs: [(&str, Binary); 3] = [
                ("GELU", |z, _| gelu_tanh_f32(z)),
                ("GELU′·d", |z, d| gelu_tanh_derivative_f32(z) * d),
                ("mixed", |x, y| (x * x + 1.0).sqrt() / (y - 7.5) + x * y),
            ];
            for (name, f) in fs {
                let want: Vec<u32> = x.iter().zip(&y0).map(|(&a, &b)| f(a, b).to_bits()).collect();
                for kernel in available_kernels() {
                    let mut y = y0.clone();
                    map_f32_with(kernel, &x, &mut y, f).unwrap();
                    let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
                    assert!(got == want, "{name}, {kernel}, length {len}");
                }
            }
        }
        // NaN and infinities go through as in the plain loop (GELU(−∞) is −∞·0 = NaN there too).
        let x = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0];
        for kernel in available_kernels() {
            let mut y = [0.0; 5];
            map_f32_with(kernel, &x, &mut y, |z, _| gelu_tanh_f32(z)).unwrap();
            for (&got, &z) in y.iter().zip(&x) {
                let want = gelu_tanh_f32(z);
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "{kernel}: GELU({z}) = {got}, plain {want}"
                );
            }
        }
    }

    #[test]
    fn slices_of_different_lengths_are_an_error() {
        let mut y = [0.0f32; 3];
        let e = map_f32(&[1.0; 4], &mut y, |x, _| x).unwrap_err();
        assert!(e.to_string().contains("x and y"), "{e}");
        assert_eq!(y, [0.0; 3]);
    }
}

// ─────────── the optimisers on any thread count (`llm_workbook::threads`) ───────────

mod optimiser_threads {
    use super::*;
    use llm_workbook::optim::{AdamConfig, AdamW, PARAMETERS_PER_THREAD};

    /// Three AdamW steps on tensors of awkward sizes (4.1·10⁵ parameters, so 8 runs of at least
    /// `PARAMETERS_PER_THREAD`, cutting tensors between runs) with `threads` threads;
    /// returns the bits of the parameters and of both moments.
    fn adamw_bits(threads: usize) -> Vec<u32> {
        let shapes = [(257, 300), (1, 7), (600, 500), (33, 65), (1000, 31)];
        let mut rng = Rng::new(23);
        let mut params: Vec<DMatrix<f32>> =
            shapes.iter().map(|&(r, c)| rng.normal_matrix(r, c, 0.1)).collect();
        let total: usize = params.iter().map(|p| p.len()).sum();
        assert!(total >= 8 * PARAMETERS_PER_THREAD, "{total} parameters");
        let config = AdamConfig { learning_rate: 1e-3, ..AdamConfig::default() };
        let mut opt = AdamW::new(config, 0.1).unwrap();
        let decay = [true, false, true, false, true];
        for _ in 0..3 {
            let grads: Vec<DMatrix<f32>> =
                shapes.iter().map(|&(r, c)| rng.normal_matrix(r, c, 1.0)).collect();
            let grads: Vec<&DMatrix<f32>> = grads.iter().collect();
            let mut refs: Vec<&mut DMatrix<f32>> = params.iter_mut().collect();
            opt.moments.threads = Some(threads);
            opt.step(&mut refs, &grads, &decay).unwrap();
        }
        let moments = opt.moments.first().iter().chain(opt.moments.second());
        params.iter().chain(moments).flat_map(|m| m.iter().map(|v| v.to_bits())).collect()
    }

    #[test]
    fn adamw_gives_the_same_bits_on_one_to_eight_threads() {
        let one = adamw_bits(1);
        for threads in [2, 3, 4, 5, 8] {
            assert!(adamw_bits(threads) == one, "AdamW with {threads} threads differs from 1");
        }
    }
}
