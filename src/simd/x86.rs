//! The SIMD code (x86-64 only): the AVX2+FMA and AVX-512F micro-kernels for f32 and f64, and the
//! other loops that need wider registers than the baseline build has (the FMA throughput probe,
//! the element-wise map of [`crate::simd_map`], packing's 8×8 (f32) and 4×4 (f64) transposes, the
//! block-quantized dots and the bf16 pair tile).
//!
//! This file is the only code of the crate allowed to use `unsafe`. The safety argument has two
//! halves, and each has one place where it is made:
//!
//! 1. **The CPU has the instructions.** A token, [`Avx2`], [`Avx512`] or [`Avx512Bf16`], is a
//!    value whose only constructor (`detect`) asks the CPU (the standard library's feature
//!    detection) and returns `None` when the instruction set is missing; its field is private to
//!    this file, so no other code can make one, and only the dispatcher (`src/simd/mod.rs`, the
//!    parent module) calls `detect`, once per process. Every safe function that runs
//!    `#[target_feature]` code takes a token, or is a method of a [`SimdKernel`], which only a
//!    token can build. Holding one is the proof, so nothing re-checks the CPU on every
//!    micro-kernel call.
//! 2. **Every pointer stays inside its slice.** The micro-kernel is called once for a run of tiles
//!    (every full tile of a column sliver, or of a whole packed block) and checks, on every call,
//!    that `a` holds every value the run's tiles of Ã read, `b` every index the run's slivers of
//!    B̃ read (with a step and a lane, the highest index `(slivers − 1)·next + (kc − 1)·step +
//!    (NR − 1)·lane`, computed without overflow), and that each column of C holds the run's rows
//!    from `row` on; only then does it read through raw pointers.
//!
//! The four micro-kernels are one generic body ([`tile_body`], the run of tiles, around
//! [`tile_core`], one tile), written against a trait for a vector instruction set ([`Vector`]:
//! the vector type, its lanes, and zero, load, store, splat, fused multiply-add, multiply and add
//! as `#[inline(always)]` functions), and thin `#[target_feature]` wrappers, one per instruction
//! set, element type and tile height (MR, and MR/2 for the last rows of C), that call it. The
//! body and the trait's functions are inlined into each wrapper, so they are compiled with the
//! wrapper's instructions: the AVX-512 code is the very loop the AVX2 tests exercise, with wider
//! registers. The loop is the scalar specification (`src/matmul/scalar.rs`) with the MR rows of a
//! column of the tile held in MV = MR/LANES vectors:
//!
//! ```text
//! for p in 0..kc:
//!     a[r]      = load Ã[p·MR + r·LANES ..]              (MV vector loads)
//!     for j in 0..NR:
//!         b     = broadcast B̃[p·NR + j]                  (one scalar to every lane)
//!         acc[j][r] = fma(a[r], b, acc[j][r])            (MV·NR fused multiply-adds)
//! ```

use std::arch::x86_64::*;

// ───────────────────────────── the tokens: proof of what the CPU runs ─────────────────────────

/// Proof that this CPU runs AVX2 and FMA: [`Avx2::detect`] is the only way to make one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Avx2(());

impl Avx2 {
    /// A token if the CPU has AVX2 and FMA, else `None` (the dispatcher asks once per process).
    pub(super) fn detect() -> Option<Avx2> {
        let found = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        found.then_some(Avx2(()))
    }
}

/// Proof that this CPU runs AVX-512F, and with it AVX2 and FMA (every AVX-512 CPU has them; the
/// element-wise map uses all three): [`Avx512::detect`] is the only way to make one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Avx512(());

impl Avx512 {
    /// A token if the CPU has AVX-512F, AVX2 and FMA, else `None`.
    pub(super) fn detect() -> Option<Avx512> {
        let found = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma");
        found.then_some(Avx512(()))
    }
}

/// Asks the cache for every 64-byte line of `s` (packing uses it to fetch the next column run
/// of a block while copying the current one). A hint only: it changes no value.
pub(crate) fn prefetch_lines<T>(s: &[T]) {
    for line in s.chunks((64 / size_of::<T>().max(1)).max(1)) {
        // SAFETY: SSE, which provides the prefetch instruction, is part of every x86-64 CPU;
        // a prefetch reads nothing into the program and never faults, and the address is that of
        // an element of a live slice.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast::<i8>()) };
    }
}

// ───────────────────────────── one vector instruction set ─────────────────────────────

/// One vector instruction set for one element type: what the micro-kernel and the probe are
/// written in.
///
/// # Safety
///
/// Every function requires that the CPU supports the instruction set (the caller holds its
/// token, or is a `#[target_feature]` function that a token holder called). `load` and `store`
/// also require `p` to be valid for reading (writing) `LANES` consecutive elements; no alignment
/// is required.
trait Vector {
    /// The element type.
    type E: Copy + PartialEq;
    /// The vector register type.
    type V: Copy;
    /// Elements per vector.
    const LANES: usize;
    /// The element 0 (β = 0 means "do not read C").
    const ZERO: Self::E;
    unsafe fn zero() -> Self::V;
    unsafe fn load(p: *const Self::E) -> Self::V;
    unsafe fn store(p: *mut Self::E, v: Self::V);
    unsafe fn splat(x: Self::E) -> Self::V;
    /// a·b + c, rounded once.
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    /// Lane 0.
    unsafe fn first(v: Self::V) -> Self::E;
}

/// 256-bit AVX2+FMA vectors of f32.
struct Avx2F32;
/// 256-bit AVX2+FMA vectors of f64.
struct Avx2F64;
/// 512-bit AVX-512F vectors of f32.
struct Avx512F32;
/// 512-bit AVX-512F vectors of f64.
struct Avx512F64;

// SAFETY (each function of the four implementations): a call of one intrinsic, under the
// contract of [`Vector`]: the CPU supports it, and `load`/`store` pointers are valid for LANES
// elements.
impl Vector for Avx2F32 {
    type E = f32;
    type V = __m256;
    const LANES: usize = 8;
    const ZERO: f32 = 0.0;
    #[inline(always)]
    unsafe fn zero() -> __m256 {
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn first(v: __m256) -> f32 {
        unsafe { _mm256_cvtss_f32(v) }
    }
}

impl Vector for Avx2F64 {
    type E = f64;
    type V = __m256d;
    const LANES: usize = 4;
    const ZERO: f64 = 0.0;
    #[inline(always)]
    unsafe fn zero() -> __m256d {
        unsafe { _mm256_setzero_pd() }
    }
    #[inline(always)]
    unsafe fn load(p: *const f64) -> __m256d {
        unsafe { _mm256_loadu_pd(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f64, v: __m256d) {
        unsafe { _mm256_storeu_pd(p, v) }
    }
    #[inline(always)]
    unsafe fn splat(x: f64) -> __m256d {
        unsafe { _mm256_set1_pd(x) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m256d, b: __m256d, c: __m256d) -> __m256d {
        unsafe { _mm256_fmadd_pd(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_mul_pd(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_add_pd(a, b) }
    }
    #[inline(always)]
    unsafe fn first(v: __m256d) -> f64 {
        unsafe { _mm256_cvtsd_f64(v) }
    }
}

impl Vector for Avx512F32 {
    type E = f32;
    type V = __m512;
    const LANES: usize = 16;
    const ZERO: f32 = 0.0;
    #[inline(always)]
    unsafe fn zero() -> __m512 {
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn first(v: __m512) -> f32 {
        unsafe { _mm512_cvtss_f32(v) }
    }
}

impl Vector for Avx512F64 {
    type E = f64;
    type V = __m512d;
    const LANES: usize = 8;
    const ZERO: f64 = 0.0;
    #[inline(always)]
    unsafe fn zero() -> __m512d {
        unsafe { _mm512_setzero_pd() }
    }
    #[inline(always)]
    unsafe fn load(p: *const f64) -> __m512d {
        unsafe { _mm512_loadu_pd(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f64, v: __m512d) {
        unsafe { _mm512_storeu_pd(p, v) }
    }
    #[inline(always)]
    unsafe fn splat(x: f64) -> __m512d {
        unsafe { _mm512_set1_pd(x) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m512d, b: __m512d, c: __m512d) -> __m512d {
        unsafe { _mm512_fmadd_pd(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512d, b: __m512d) -> __m512d {
        unsafe { _mm512_mul_pd(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512d, b: __m512d) -> __m512d {
        unsafe { _mm512_add_pd(a, b) }
    }
    #[inline(always)]
    unsafe fn first(v: __m512d) -> f64 {
        unsafe { _mm512_cvtsd_f64(v) }
    }
}

// ───────────────────────────── the micro-kernel ─────────────────────────────

/// Rows of the AVX2 f32 tile (two 8-lane vectors).
pub const AVX2_F32_MR: usize = 16;
/// Columns of the AVX2 f32 tile.
pub const AVX2_F32_NR: usize = 6;
/// Rows of the AVX2 f64 tile (two 4-lane vectors).
pub const AVX2_F64_MR: usize = 8;
/// Columns of the AVX2 f64 tile.
pub const AVX2_F64_NR: usize = 6;
/// Rows of the AVX-512 f32 tile (two 16-lane vectors).
pub const AVX512_F32_MR: usize = 32;
/// Columns of the AVX-512 f32 tile (8, not the 12 the registers allow: see the blocking notes).
pub const AVX512_F32_NR: usize = 8;
/// Rows of the AVX-512 f64 tile (two 8-lane vectors).
pub const AVX512_F64_MR: usize = 16;
/// Columns of the AVX-512 f64 tile.
pub const AVX512_F64_NR: usize = 8;

/// How many rank-1 steps ahead the micro-kernel prefetches its Ã sliver (16 steps of the f32 AVX2
/// tile are 1 KiB; on this machine the prefetch was worth about 5 % against none, and 8, 16 and 32
/// steps were indistinguishable).
const PREFETCH_AHEAD: usize = 16;

/// The bounds of one run of the micro-kernel, checked once before any pointer is read: `tiles`
/// tiles of MR rows down each of `slivers` slivers of NC columns. Tile t reads Ã from
/// `t·a_next` on (element (i, p) at `t·a_next + p·a_step + i`), sliver s reads B̃ from
/// `s·b_next` on (element (p, j) at `s·b_next + p·b_step + j·b_lane`) and writes the NC columns
/// `c[s·NC ..]`, rows `row + t·MR ..` of each. Returns the highest index read of A plus one, and
/// of B, in arithmetic that cannot wrap (`None` if it would).
#[allow(clippy::too_many_arguments)]
fn run_extent(
    kc: usize,
    mr: usize,
    nc: usize,
    (a_step, a_next, tiles): (usize, usize, usize),
    (b_step, b_lane, b_next, slivers): (usize, usize, usize, usize),
) -> (Option<usize>, Option<usize>) {
    if kc == 0 || tiles == 0 || slivers == 0 {
        return (Some(0), Some(0));
    }
    let a = (tiles - 1)
        .checked_mul(a_next)
        .zip((kc - 1).checked_mul(a_step))
        .and_then(|(x, y)| x.checked_add(y))
        .and_then(|last| last.checked_add(mr));
    let b = (slivers - 1)
        .checked_mul(b_next)
        .zip((kc - 1).checked_mul(b_step))
        .and_then(|(x, y)| x.checked_add(y))
        .zip((nc - 1).checked_mul(b_lane))
        .and_then(|(x, y)| x.checked_add(y))
        .and_then(|last| last.checked_add(1));
    (a, b)
}

/// One run of the micro-kernel: for each of `slivers` slivers of NC columns of B̃ (loop 2), each
/// of `tiles` tiles of MR rows of Ã (loop 1), C ← α·Ã·B̃ + β·C on that MR×NC tile; the layout of
/// the run is [`run_extent`]'s (β = 0: C is not read). NC is the tile's NR columns, or fewer for
/// the last columns of C (4, 2 or 1 at a time: an edge of C costs only its own columns). A packed
/// Ã has step MR and tiles MR·kc apart; MR rows of a column-major op(A) read where they are have
/// step its leading dimension and tiles MR apart. `B` says which of B̃'s step and lane are known
/// when compiling ([`B_PACKED`]: both, the sliver is packed with step NR and lane 1 whatever is
/// passed; [`B_ROWS`]: lane 1; [`B_COLS`]: step 1), so the loop addresses B with as few
/// registers as the layout allows. With `prefetch_next` (B̃ read in place by columns, one tile of
/// rows: a sliver is used once, straight from memory), each sliver's NC columns of kc values are
/// asked for while the previous sliver is computed.
///
/// Every bound is checked once for the whole run, then each tile is [`tile_core`] on raw
/// pointers: the per-tile cost of the call (checks, the indirect call, the column slices) is paid
/// once per run, and each element's k-sum is the one a single tile computes.
///
/// Panics, before touching a pointer, if a slice is too short for what it stands for.
///
/// # Safety
///
/// The CPU must support `I`'s instruction set. This function is `#[inline(always)]` so that it
/// is compiled inside the `#[target_feature]` wrapper that calls it, with its instructions.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn tile_body<
    I: Vector,
    const MR: usize,
    const NR: usize,
    const NC: usize,
    const MV: usize,
    const B: u8,
>(
    kc: usize,
    (a, a_step, a_next, tiles): (&[I::E], usize, usize, usize),
    (b, b_step, b_lane, b_next, slivers): (&[I::E], usize, usize, usize, usize),
    prefetch_next: bool,
    alpha: I::E,
    beta: I::E,
    c: &mut [&mut [I::E]],
    row: usize,
) {
    const { assert!(MV * I::LANES == MR, "MR must be a whole number of vectors") };
    const { assert!(NC >= 1 && NC <= NR, "1 to NR columns") };
    let (b_step, b_lane) = match B {
        B_PACKED => (NR, 1),
        B_ROWS => (b_step, 1),
        _ => (1, b_lane),
    };
    let (a_needed, b_needed) =
        run_extent(kc, MR, NC, (a_step, a_next, tiles), (b_step, b_lane, b_next, slivers));
    assert!(a_needed.is_some_and(|n| a.len() >= n), "A slivers too short for their steps");
    assert!(b_needed.is_some_and(|n| b.len() >= n), "B slivers too short for their steps");
    let columns = slivers.checked_mul(NC).expect("a column count that fits a usize");
    assert!(c.len() >= columns, "fewer than NC columns of C per sliver");
    let rows_end = tiles.checked_mul(MR).and_then(|r| r.checked_add(row));
    let rows_end = rows_end.expect("a row count that fits a usize");
    // Each column of the run holds its tiles' rows; the columns are distinct `&mut` slices, so no
    // two pointers alias.
    assert!(c[..columns].iter().all(|col| col.len() >= rows_end), "a column of C too short");
    let (a, b) = (a.as_ptr(), b.as_ptr());
    for s in 0..slivers {
        let b_s = b.wrapping_add(s * b_next);
        if B == B_COLS && prefetch_next && s + 1 < slivers {
            for j in 0..NC {
                // Column j of the next sliver: kc consecutive values (step 1).
                let next = b_s.wrapping_add(b_next + j * b_lane);
                for line in (0..kc).step_by((64 / size_of::<I::E>()).max(1)) {
                    // SAFETY: SSE is part of every x86-64 CPU; a prefetch never faults.
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line).cast::<i8>()) };
                }
            }
        }
        for t in 0..tiles {
            let c_t: [*mut I::E; NC] = std::array::from_fn(|j| {
                // `wrapping_add`: within the checked rows of column s·NC + j.
                c[s * NC + j].as_mut_ptr().wrapping_add(row + t * MR)
            });
            // SAFETY: the CPU supports `I` (this function's contract); tile t of sliver s reads
            // Ã from t·a_next and B̃ from s·b_next within the extents checked above, and writes
            // MR rows from row + t·MR of NC columns, each checked to hold them.
            unsafe {
                tile_core::<I, MR, NC, MV>(
                    kc,
                    a.wrapping_add(t * a_next),
                    a_step,
                    b_s,
                    (b_step, b_lane),
                    (alpha, beta),
                    c_t,
                );
            }
        }
    }
}

/// One MR×NC tile on raw pointers, the loop of the module documentation: element (i, p) of Ã is
/// `a[p·a_step + i]`, element (p, j) of B̃ is `b[p·b_step + j·b_lane]`, and `c[j]` points at the
/// tile's MR rows of column j: C ← α·Ã·B̃ + β·C (β = 0: C is not read).
///
/// # Safety
///
/// The CPU must support `I`; `a` and `b` must be valid for reading every index above for p < kc,
/// i < MR, j < NC, and each `c[j]` for reading and writing MR values, none of them overlapping.
#[inline(always)]
unsafe fn tile_core<I: Vector, const MR: usize, const NC: usize, const MV: usize>(
    kc: usize,
    a: *const I::E,
    a_step: usize,
    b: *const I::E,
    (b_step, b_lane): (usize, usize),
    (alpha, beta): (I::E, I::E),
    c: [*mut I::E; NC],
) {
    // Ask for the C tile now, so its cache lines arrive while the kc loop runs instead of
    // stalling the write-back at the end (C's columns are a whole leading dimension apart).
    for c_j in c {
        for edge in [0, MR - 1] {
            // SAFETY: SSE is part of every x86-64 CPU; a prefetch never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(c_j.wrapping_add(edge).cast::<i8>()) };
        }
    }
    // SAFETY (every `I::` call below): the CPU supports `I`, this function's contract.
    let mut acc: [[I::V; MV]; NC] = [[unsafe { I::zero() }; MV]; NC];
    // The rank-1 steps acc += Ã[p, :] ⊗ B̃[p, :], four at a time. A function, not a closure: a
    // closure would be compiled without the wrapper's features and call the intrinsics.
    // Where column j of the sliver starts; step p of it is `p·b_step` further on. With lane 1 (a
    // packed sliver, or rows of op(B) in place) these are constant offsets of one pointer; with
    // step 1 (columns of op(B) in place) NC pointers indexed by p, which stay in registers
    // (the general product p·step + j·lane spilled its offsets to the stack).
    let b_cols: [*const I::E; NC] = std::array::from_fn(|j| b.wrapping_add(j * b_lane));
    // SAFETY (each step): p < kc, and `a` and `b` hold every index (this function's contract).
    let mut p = 0;
    while p + 4 <= kc {
        // A prefetch never faults; wrapping_add keeps the address arithmetic defined even past
        // the end of the sliver.
        // SAFETY: SSE is part of every x86-64 CPU.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add((p + PREFETCH_AHEAD) * a_step).cast())
        };
        for q in p..p + 4 {
            let b_q = b_cols.map(|col| col.wrapping_add(q * b_step));
            unsafe { rank1_step::<I, MR, NC, MV>(a.add(q * a_step), &b_q, &mut acc) };
        }
        p += 4;
    }
    while p < kc {
        let b_p = b_cols.map(|col| col.wrapping_add(p * b_step));
        unsafe { rank1_step::<I, MR, NC, MV>(a.add(p * a_step), &b_p, &mut acc) };
        p += 1;
    }
    let alpha_v = unsafe { I::splat(alpha) };
    let beta_v = unsafe { I::splat(beta) };
    for (c_j, acc_j) in c.into_iter().zip(&acc) {
        for (r, &acc_jr) in acc_j.iter().enumerate() {
            // SAFETY: r·LANES + LANES ≤ MR: these LANES elements are among the MR readable and
            // writable behind c_j (this function's contract).
            let c_jr = unsafe { c_j.add(r * I::LANES) };
            let value = if beta == I::ZERO {
                // β = 0 overwrites: C is not read, so NaN or garbage in it cannot leak in.
                unsafe { I::mul(alpha_v, acc_jr) }
            } else {
                // SAFETY: as above, c_jr points at LANES readable elements.
                unsafe { I::fma(alpha_v, acc_jr, I::mul(beta_v, I::load(c_jr))) }
            };
            // SAFETY: as above, c_jr points at LANES writable elements.
            unsafe { I::store(c_jr, value) };
        }
    }
}

/// acc += Ã[:, p] ⊗ B̃[p, :], one step of [`tile_core`]'s loop: `a_p` points at Ã[0, p] (MR
/// values), `b_p[j]` at B̃[p, j].
///
/// # Safety
///
/// The CPU must support `I`; `a_p` must be valid for reading MR values, each `b_p[j]` for reading
/// one.
#[inline(always)]
unsafe fn rank1_step<I: Vector, const MR: usize, const NR: usize, const MV: usize>(
    a_p: *const I::E,
    b_p: &[*const I::E; NR],
    acc: &mut [[I::V; MV]; NR],
) {
    // SAFETY (every `I::` call): the CPU supports `I`, this function's contract.
    let mut a_v: [I::V; MV] = [unsafe { I::zero() }; MV];
    for (r, a_pr) in a_v.iter_mut().enumerate() {
        // SAFETY: r·LANES + LANES ≤ MR, so the LANES values read lie inside the MR values behind
        // `a_p` that the caller guarantees.
        *a_pr = unsafe { I::load(a_p.add(r * I::LANES)) };
    }
    for (&b_pj, acc_j) in b_p.iter().zip(acc.iter_mut()) {
        // SAFETY: a pointer the caller guarantees readable.
        let b_pj = unsafe { I::splat(*b_pj) };
        for (acc_jr, &a_pr) in acc_j.iter_mut().zip(&a_v) {
            *acc_jr = unsafe { I::fma(a_pr, b_pj, *acc_jr) };
        }
    }
}

/// How [`tile_core`] addresses its B sliver (see there): packed, in place by rows of op(B) (lane
/// of 1) or in place by columns (step of 1). An operand always has one stride 1, so no other
/// layout reaches a kernel.
const B_PACKED: u8 = 0;
/// Lane 1, any step: rows of op(B) read in place (op(B) = Bᵀ of a column-major B).
const B_ROWS: u8 = 1;
/// Step 1, any lane: columns of op(B) read in place (op(B) = B, column-major).
const B_COLS: u8 = 2;

/// The signature of the wrappers: `(kc, (Ã, its step, next tile, tiles), (B, B step, B lane,
/// next sliver, slivers), prefetch the next sliver, α, β, columns of C, row)`. Their one
/// requirement is the CPU's; they check every bound themselves.
type TileFn<T> = unsafe fn(
    usize,
    (&[T], usize, usize, usize),
    (&[T], usize, usize, usize, usize),
    bool,
    T,
    T,
    &mut [&mut [T]],
    usize,
);

/// Writes one `#[target_feature]` wrapper around [`tile_body`]: only the name, the features and
/// the instruction set differ (a declaration, not a body: the body is written once, above).
macro_rules! tile_wrapper {
    ($(#[$doc:meta])* $name:ident, $features:literal, $isa:ty, $t:ty, $mr:expr, $nr:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// The CPU must support the enabled features (the caller holds the token).
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
        unsafe fn $name<const B: u8, const NC: usize>(
            kc: usize,
            a: (&[$t], usize, usize, usize),
            b: (&[$t], usize, usize, usize, usize),
            prefetch_next: bool,
            alpha: $t,
            beta: $t,
            c: &mut [&mut [$t]],
            row: usize,
        ) {
            const MV: usize = $mr / <$isa as Vector>::LANES;
            // SAFETY: this function's features are those of `$isa`, and its contract passes the
            // CPU requirement on; `tile_body` checks every bound itself.
            unsafe {
                tile_body::<$isa, { $mr }, { $nr }, NC, MV, B>(
                    kc, a, b, prefetch_next, alpha, beta, c, row,
                )
            }
        }
    };
}

tile_wrapper!(
    /// AVX2+FMA, f32: a 16×6 tile in 12 of the 16 ymm registers.
    avx2_f32, "avx2,fma", Avx2F32, f32, AVX2_F32_MR, AVX2_F32_NR
);
tile_wrapper!(
    /// AVX2+FMA, f32, the half-height tile of the last rows: 8×6.
    avx2_f32_half, "avx2,fma", Avx2F32, f32, AVX2_F32_MR / 2, AVX2_F32_NR
);
tile_wrapper!(
    /// AVX2+FMA, f64: an 8×6 tile in 12 of the 16 ymm registers.
    avx2_f64, "avx2,fma", Avx2F64, f64, AVX2_F64_MR, AVX2_F64_NR
);
tile_wrapper!(
    /// AVX2+FMA, f64, the half-height tile of the last rows: 4×6.
    avx2_f64_half, "avx2,fma", Avx2F64, f64, AVX2_F64_MR / 2, AVX2_F64_NR
);
tile_wrapper!(
    /// AVX-512F, f32: a 32×8 tile in 16 of the 32 zmm registers.
    avx512_f32, "avx512f", Avx512F32, f32, AVX512_F32_MR, AVX512_F32_NR
);
tile_wrapper!(
    /// AVX-512F, f32, the half-height tile of the last rows: 16×8.
    avx512_f32_half, "avx512f", Avx512F32, f32, AVX512_F32_MR / 2, AVX512_F32_NR
);
tile_wrapper!(
    /// AVX-512F, f64: a 16×8 tile in 16 of the 32 zmm registers.
    avx512_f64, "avx512f", Avx512F64, f64, AVX512_F64_MR, AVX512_F64_NR
);
tile_wrapper!(
    /// AVX-512F, f64, the half-height tile of the last rows: 8×8.
    avx512_f64_half, "avx512f", Avx512F64, f64, AVX512_F64_MR / 2, AVX512_F64_NR
);

/// A SIMD micro-kernel for element type `T`: one wrapper compiled for each layout of B and each
/// width of tile, with the tile's column count. Its fields are private to this module and its only
/// constructors take a token, so a `SimdKernel` exists only on a CPU that runs its instructions.
#[derive(Clone, Copy)]
pub(crate) struct SimdKernel<T: 'static> {
    /// The wrapper compiled for each height (MR, then MR/2 for the last rows of C), each width
    /// (NR, then [`NARROW`]) and each way of addressing B ([`B_PACKED`], [`B_ROWS`],
    /// [`B_COLS`]): a static table, so the kernel is three words to copy.
    by_layout: &'static Variants<T>,
    mr: usize,
    nr: usize,
}

/// One kernel's variants, by height, width and layout of B.
type Variants<T> = [[[TileFn<T>; 3]; 4]; 2];

/// The narrower tiles every SIMD kernel also has, for the last columns of C: a remainder of r <
/// NR columns is covered by the binary digits of r, each in one call.
pub(crate) const NARROW: [usize; 3] = [4, 2, 1];

/// One wrapper for every height, width and layout, in the order of [`SimdKernel::by_layout`].
macro_rules! by_layout {
    ($name:ident, $half:ident, $nr:expr) => {{
        macro_rules! layouts {
            ($f:ident, $w:expr) => {
                [$f::<B_PACKED, { $w }>, $f::<B_ROWS, { $w }>, $f::<B_COLS, { $w }>]
            };
        }
        macro_rules! widths {
            ($f:ident) => {
                [
                    layouts!($f, $nr),
                    layouts!($f, NARROW[0]),
                    layouts!($f, NARROW[1]),
                    layouts!($f, NARROW[2]),
                ]
            };
        }
        [widths!($name), widths!($half)]
    }};
}

static AVX2_F32: Variants<f32> = by_layout!(avx2_f32, avx2_f32_half, AVX2_F32_NR);
static AVX2_F64: Variants<f64> = by_layout!(avx2_f64, avx2_f64_half, AVX2_F64_NR);
static AVX512_F32: Variants<f32> = by_layout!(avx512_f32, avx512_f32_half, AVX512_F32_NR);
static AVX512_F64: Variants<f64> = by_layout!(avx512_f64, avx512_f64_half, AVX512_F64_NR);

impl Avx2 {
    /// The AVX2 f32 micro-kernel (16×6).
    pub(crate) fn f32_kernel(self) -> SimdKernel<f32> {
        SimdKernel { by_layout: &AVX2_F32, mr: AVX2_F32_MR, nr: AVX2_F32_NR }
    }
    /// The AVX2 f64 micro-kernel (8×6).
    pub(crate) fn f64_kernel(self) -> SimdKernel<f64> {
        SimdKernel { by_layout: &AVX2_F64, mr: AVX2_F64_MR, nr: AVX2_F64_NR }
    }
}

impl Avx512 {
    /// The AVX-512 f32 micro-kernel (32×8).
    pub(crate) fn f32_kernel(self) -> SimdKernel<f32> {
        SimdKernel { by_layout: &AVX512_F32, mr: AVX512_F32_MR, nr: AVX512_F32_NR }
    }
    /// The AVX-512 f64 micro-kernel (16×8).
    pub(crate) fn f64_kernel(self) -> SimdKernel<f64> {
        SimdKernel { by_layout: &AVX512_F64, mr: AVX512_F64_MR, nr: AVX512_F64_NR }
    }
}

impl<T> SimdKernel<T> {
    /// One run of tiles (see [`tile_body`]) of `rows` rows (MR, or MR/2 for the last rows of C)
    /// and `cols` columns (NR or one of [`NARROW`]): for each of `slivers` slivers of B (sliver s
    /// from `b[s·b_next]` on, element (p, j) at `p·b_step + j·b_lane` from there), each of
    /// `tiles` tiles of Ã (tile t from `a[t·a_next]` on, element (i, p) at `p·a_step + i` from
    /// there): C ← α·Ã·B̃ + β·C on rows `row + t·rows ..` of columns `s·cols ..` of `c`. The
    /// variant compiled for that height, width and layout of B (packed: step NR and lane 1; lane
    /// 1; step 1) runs it, its bounds checked once. `prefetch_next` asks for each next sliver of
    /// B while one is used (with step 1 only). Panics (before touching memory) if a slice is too
    /// short for what it stands for, if the tile's shape is not one of the kernel's, or if
    /// neither step nor lane is 1 (an internal bug: every operand has one stride 1).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn run(
        self,
        kc: usize,
        (rows, cols): (usize, usize),
        a: (&[T], usize, usize, usize),
        b: (&[T], usize, usize, usize, usize),
        prefetch_next: bool,
        alpha: T,
        beta: T,
        c: &mut [&mut [T]],
        row: usize,
    ) {
        let layout = match (b.1, b.2) {
            (s, 1) if s == self.nr => B_PACKED,
            (_, 1) => B_ROWS,
            (1, _) => B_COLS,
            (s, l) => panic!("a B sliver read in place has step or lane 1, got {s}, {l}"),
        };
        let width = match cols {
            c if c == self.nr => 0,
            4 => 1,
            2 => 2,
            1 => 3,
            _ => panic!("a SIMD tile is {} columns wide or 4, 2, 1, not {cols}", self.nr),
        };
        let height = match rows {
            r if r == self.mr => 0,
            r if 2 * r == self.mr => 1,
            _ => panic!("a SIMD tile is {} rows high or {}, not {rows}", self.mr, self.mr / 2),
        };
        let f = self.by_layout[height][width][usize::from(layout)];
        // SAFETY: `self` was built by a constructor that took a token, which exists only when the
        // CPU supports the wrapper's features; the wrapper checks every bound itself.
        unsafe { f(kc, a, b, prefetch_next, alpha, beta, c, row) }
    }
}

// ───────────────────────────── the FMA throughput probe ─────────────────────────────

/// Independent multiply-add chains in the FMA-throughput probe: more than latency × pipes
/// (4 cycles × 2 FMA units on the cores here) so the units never wait for a result.
pub(crate) const PROBE_CHAINS: usize = 12;

/// The probe's loop: `PROBE_CHAINS` independent chains a ← a·x + y of full-width fused
/// multiply-adds, `iterations` times, then the lanes-0 of their sum (a checksum, so the loop
/// cannot be optimised away).
///
/// # Safety
///
/// The CPU must support `I`'s instruction set; inlined into a `#[target_feature]` wrapper.
#[inline(always)]
unsafe fn probe_body<I: Vector>(iterations: u64, x: I::E, y: I::E, one: I::E) -> I::E {
    // black_box hides the values from the optimiser, which could otherwise shorten the loop.
    let (x, y, one) = std::hint::black_box((x, y, one));
    // SAFETY (every `I::` call): the CPU supports `I`, this function's contract.
    let (x, y) = unsafe { (I::splat(x), I::splat(y)) };
    let mut acc: [I::V; PROBE_CHAINS] = [unsafe { I::splat(one) }; PROBE_CHAINS];
    for _ in 0..iterations {
        for a in acc.iter_mut() {
            *a = unsafe { I::fma(*a, x, y) };
        }
    }
    let mut sum = acc[0];
    for a in &acc[1..] {
        sum = unsafe { I::add(sum, *a) };
    }
    unsafe { I::first(sum) }
}

/// Writes one `#[target_feature]` wrapper around [`probe_body`].
macro_rules! probe_wrapper {
    ($name:ident, $features:literal, $isa:ty, $t:ty) => {
        /// # Safety
        ///
        /// The CPU must support the enabled features (the caller holds the token).
        #[target_feature(enable = $features)]
        unsafe fn $name(iterations: u64) -> $t {
            // SAFETY: this function's features are those of `$isa`.
            unsafe { probe_body::<$isa>(iterations, 0.999_99, 1.0e-4, 1.0) }
        }
    };
}

probe_wrapper!(probe_avx2_f32, "avx2,fma", Avx2F32, f32);
probe_wrapper!(probe_avx2_f64, "avx2,fma", Avx2F64, f64);
probe_wrapper!(probe_avx512_f32, "avx512f", Avx512F32, f32);
probe_wrapper!(probe_avx512_f64, "avx512f", Avx512F64, f64);

/// Flops of `iterations` rounds of the probe with `lanes`-wide vectors (2 per multiply-add).
fn probe_flops(iterations: u64, lanes: usize) -> u64 {
    iterations * (PROBE_CHAINS * lanes * 2) as u64
}

impl Avx2 {
    /// The FMA probe with 256-bit f32 vectors: (flops done, checksum).
    pub(crate) fn probe_f32(self, iterations: u64) -> (u64, f64) {
        // SAFETY: the token proves AVX2 and FMA; the probe touches no memory through pointers.
        let checksum = unsafe { probe_avx2_f32(iterations) };
        (probe_flops(iterations, Avx2F32::LANES), f64::from(checksum))
    }
    /// The FMA probe with 256-bit f64 vectors: (flops done, checksum).
    pub(crate) fn probe_f64(self, iterations: u64) -> (u64, f64) {
        // SAFETY: as for `probe_f32`.
        let checksum = unsafe { probe_avx2_f64(iterations) };
        (probe_flops(iterations, Avx2F64::LANES), checksum)
    }
}

impl Avx512 {
    /// The FMA probe with 512-bit f32 vectors: (flops done, checksum).
    pub(crate) fn probe_f32(self, iterations: u64) -> (u64, f64) {
        // SAFETY: the token proves AVX-512F; the probe touches no memory through pointers.
        let checksum = unsafe { probe_avx512_f32(iterations) };
        (probe_flops(iterations, Avx512F32::LANES), f64::from(checksum))
    }
    /// The FMA probe with 512-bit f64 vectors: (flops done, checksum).
    pub(crate) fn probe_f64(self, iterations: u64) -> (u64, f64) {
        // SAFETY: as for `probe_f32`.
        let checksum = unsafe { probe_avx512_f64(iterations) };
        (probe_flops(iterations, Avx512F64::LANES), checksum)
    }
}

// ───────────────────────────── the element-wise map ─────────────────────────────

/// yᵢ ← f(xᵢ, yᵢ): the loop of the portable path, inlined (with `f`) into a `#[target_feature]`
/// wrapper, so the compiler vectorises the whole body with the wrapper's registers. No
/// intrinsics and no pointers: the same operations per element as the plain loop.
#[inline(always)]
fn map_body<F: Fn(f32, f32) -> f32>(x: &[f32], y: &mut [f32], f: F) {
    for (y_i, &x_i) in y.iter_mut().zip(x) {
        *y_i = f(x_i, *y_i);
    }
}

/// # Safety
///
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn map_avx2<F: Fn(f32, f32) -> f32>(x: &[f32], y: &mut [f32], f: F) {
    map_body(x, y, f)
}

/// # Safety
///
/// The CPU must support AVX-512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn map_avx512<F: Fn(f32, f32) -> f32>(x: &[f32], y: &mut [f32], f: F) {
    map_body(x, y, f)
}

impl Avx2 {
    /// yᵢ ← f(xᵢ, yᵢ) over the common length, compiled for AVX2 and FMA.
    pub(crate) fn map_f32<F: Fn(f32, f32) -> f32>(self, x: &[f32], y: &mut [f32], f: F) {
        // SAFETY: the token proves AVX2 and FMA; the loop only iterates over the two slices.
        unsafe { map_avx2(x, y, f) }
    }
}

impl Avx512 {
    /// yᵢ ← f(xᵢ, yᵢ) over the common length, compiled for AVX-512F.
    pub(crate) fn map_f32<F: Fn(f32, f32) -> f32>(self, x: &[f32], y: &mut [f32], f: F) {
        // SAFETY: the token proves AVX-512F, AVX2 and FMA; the loop only iterates over the two
        // slices.
        unsafe { map_avx512(x, y, f) }
    }
}

// ──────────────────── packing: transposes in 8×8 (f32) and 4×4 (f64) blocks ────────────────────

/// The widest sliver [`transpose_f32`] takes: the 32 rows of the AVX-512 f32 tile.
pub(crate) const TRANSPOSE_MAX_LINES: usize = 32;

/// Writes `dst[p·W + i] = lines[i][p]` for every line i < W = `lines.len()` and every p below
/// `kc` rounded down to a multiple of 8, eight lines by eight values at a time with AVX 8×8
/// register transposes (the same values, moved: no arithmetic). Returns how many p it wrote; the
/// caller copies the rest. Returns 0, writing nothing, when the CPU lacks AVX or W is not a
/// multiple of 8 up to [`TRANSPOSE_MAX_LINES`]. Panics (never reads or writes out of bounds) if
/// a line is shorter than that many p or `dst` shorter than that many rows of W.
pub(crate) fn transpose_f32(dst: &mut [f32], lines: &[&[f32]], kc: usize) -> usize {
    transpose_checked(dst, lines, kc, 8, transpose_f32_inner)
}

/// The checks and pointers [`transpose_f32`] and [`transpose_f64`] share: `inner` transposes
/// blocks of `group` lines once the CPU, the width and every slice's length are checked.
fn transpose_checked<T: Copy>(
    dst: &mut [T],
    lines: &[&[T]],
    kc: usize,
    group: usize,
    inner: unsafe fn(*mut T, &[*const T], usize),
) -> usize {
    let w = lines.len();
    let full = kc / 8 * 8;
    if full == 0
        || w == 0
        || !w.is_multiple_of(group)
        || w > TRANSPOSE_MAX_LINES
        || !super::has_avx()
    {
        return 0;
    }
    assert!(dst.len() >= full * w, "packed sliver too short for {full} rows of {w}");
    let mut src = [std::ptr::null::<T>(); TRANSPOSE_MAX_LINES];
    for (s, line) in src.iter_mut().zip(lines) {
        assert!(line.len() >= full, "a line is shorter than {full} values");
        *s = line.as_ptr();
    }
    // SAFETY: AVX was detected just above; each of the w pointers is valid for `full` reads (the
    // asserts), and `dst` for full·w writes, which is every index `inner` touches; `full` is a
    // multiple of 8 and w of `group`, as `inner` requires.
    unsafe { inner(dst.as_mut_ptr(), &src[..w], full) };
    full
}

/// # Safety
///
/// The CPU must support AVX; every pointer in `src` must be valid for `full` reads, `dst` for
/// `full · src.len()` writes; `full` and `src.len()` are multiples of 8.
#[target_feature(enable = "avx")]
unsafe fn transpose_f32_inner(dst: *mut f32, src: &[*const f32], full: usize) {
    let w = src.len();
    for p0 in (0..full).step_by(8) {
        for (g, group) in src.chunks_exact(8).enumerate() {
            // r[k] = line g·8 + k, values p0 … p0 + 7.
            // SAFETY (every load and store below): p0 + 8 ≤ full, g·8 + 8 ≤ w, by the loop bounds.
            let r: [__m256; 8] =
                std::array::from_fn(|k| unsafe { _mm256_loadu_ps(group[k].add(p0)) });
            // Pairs, then quads, interleaved within each 128-bit half …
            let t0 = _mm256_unpacklo_ps(r[0], r[1]); // a0 b0 a1 b1 | a4 b4 a5 b5
            let t1 = _mm256_unpackhi_ps(r[0], r[1]); // a2 b2 a3 b3 | a6 b6 a7 b7
            let t2 = _mm256_unpacklo_ps(r[2], r[3]);
            let t3 = _mm256_unpackhi_ps(r[2], r[3]);
            let t4 = _mm256_unpacklo_ps(r[4], r[5]);
            let t5 = _mm256_unpackhi_ps(r[4], r[5]);
            let t6 = _mm256_unpacklo_ps(r[6], r[7]);
            let t7 = _mm256_unpackhi_ps(r[6], r[7]);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2); // a0 b0 c0 d0 | a4 b4 c4 d4
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2); // a1 b1 c1 d1 | a5 b5 c5 d5
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6); // e0 f0 g0 h0 | e4 f4 g4 h4
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            // … then the halves exchanged: column c of the block, values of lines a … h.
            let c = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            for (q, column) in c.into_iter().enumerate() {
                unsafe { _mm256_storeu_ps(dst.add((p0 + q) * w + g * 8), column) };
            }
        }
    }
}

/// [`transpose_f32`] for f64: `dst[p·W + i] = lines[i][p]` for every line i < W and every p below
/// `kc` rounded down to a multiple of 8, four lines by four values at a time with AVX 4×4
/// register transposes. Returns how many p it wrote; 0, writing nothing, when the CPU lacks AVX
/// or W is not a multiple of 4 up to [`TRANSPOSE_MAX_LINES`] (the AVX2 f64 tile's 6 columns are
/// left to the plain copy). Panics (never reads or writes out of bounds) if a line is shorter
/// than that many p or `dst` shorter than that many rows of W.
pub(crate) fn transpose_f64(dst: &mut [f64], lines: &[&[f64]], kc: usize) -> usize {
    transpose_checked(dst, lines, kc, 4, transpose_f64_inner)
}

/// # Safety
///
/// The CPU must support AVX; every pointer in `src` must be valid for `full` reads, `dst` for
/// `full · src.len()` writes; `full` and `src.len()` are multiples of 4.
#[target_feature(enable = "avx")]
unsafe fn transpose_f64_inner(dst: *mut f64, src: &[*const f64], full: usize) {
    let w = src.len();
    for p0 in (0..full).step_by(4) {
        for (g, group) in src.chunks_exact(4).enumerate() {
            // r[k] = line g·4 + k, values p0 … p0 + 3.
            // SAFETY (every load and store below): p0 + 4 ≤ full, g·4 + 4 ≤ w, by the loop bounds.
            let r: [__m256d; 4] =
                std::array::from_fn(|k| unsafe { _mm256_loadu_pd(group[k].add(p0)) });
            let t0 = _mm256_unpacklo_pd(r[0], r[1]); // a0 b0 | a2 b2
            let t1 = _mm256_unpackhi_pd(r[0], r[1]); // a1 b1 | a3 b3
            let t2 = _mm256_unpacklo_pd(r[2], r[3]); // c0 d0 | c2 d2
            let t3 = _mm256_unpackhi_pd(r[2], r[3]); // c1 d1 | c3 d3
            // … then the halves exchanged: column c of the block, values of lines a … d.
            let c = [
                _mm256_permute2f128_pd::<0x20>(t0, t2),
                _mm256_permute2f128_pd::<0x20>(t1, t3),
                _mm256_permute2f128_pd::<0x31>(t0, t2),
                _mm256_permute2f128_pd::<0x31>(t1, t3),
            ];
            for (q, column) in c.into_iter().enumerate() {
                unsafe { _mm256_storeu_pd(dst.add((p0 + q) * w + g * 4), column) };
            }
        }
    }
}

// ───────────────── the one-row product (f32): dots with columns, sums of rows ─────────────────

/// Vectors of independent partial sums in each column's dot ([`Avx2::row_dots`]): 32 values in
/// flight with AVX2, 64 with AVX-512, enough to keep the fused multiply-adds busy through their
/// latency while the column streams past.
pub(crate) const ROW_DOT_VECTORS: usize = 4;

/// Vectors of outputs held in registers by the row sums ([`Avx2::row_sums`]) while every row of B̃
/// is added in.
pub(crate) const ROW_SUM_VECTORS: usize = 4;

/// f32 values in one 64-byte cache line (the step of the next column's prefetch).
const F32_PER_LINE: usize = 16;

impl Avx2 {
    /// out_j = Σ_{p<k} x_p·b\[j·ld + p\] for every j < n = `out.len()`, k = `x.len()`
    /// ([`dots_body`], with AVX2 and FMA). Panics, before reading memory, when a column reaches
    /// past `b`.
    pub(crate) fn row_dots(self, x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) {
        assert_row_fit("columns", x.len(), out.len(), ld, b.len());
        // SAFETY: the token proves AVX2 and FMA; every column lies inside `b` (the assert).
        unsafe { row_dots_avx2(x, b, ld, out) }
    }

    /// out_j = Σ_{p<k} x_p·b\[p·ld + j\] for every j < n = `out.len()`, k = `x.len()`
    /// ([`sums_body`], with AVX2 and FMA). Panics, before reading memory, when a row reaches
    /// past `b`.
    pub(crate) fn row_sums(self, x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) {
        assert_row_fit("rows", out.len(), x.len(), ld, b.len());
        // SAFETY: the token proves AVX2 and FMA; every row lies inside `b` (the assert).
        unsafe { row_sums_avx2(x, b, ld, out) }
    }
}

impl Avx512 {
    /// [`Avx2::row_dots`] with AVX-512F: the same loop, 16 lanes a vector.
    pub(crate) fn row_dots(self, x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) {
        assert_row_fit("columns", x.len(), out.len(), ld, b.len());
        // SAFETY: the token proves AVX-512F; every column lies inside `b` (the assert).
        unsafe { row_dots_avx512(x, b, ld, out) }
    }

    /// [`Avx2::row_sums`] with AVX-512F: the same loop, 16 lanes a vector.
    pub(crate) fn row_sums(self, x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) {
        assert_row_fit("rows", out.len(), x.len(), ld, b.len());
        // SAFETY: the token proves AVX-512F; every row lies inside `b` (the assert).
        unsafe { row_sums_avx512(x, b, ld, out) }
    }
}

/// Panics unless `count` runs of `len` values, `ld` apart, lie inside `available` values
/// (arithmetic that cannot wrap): the bound every read of the one-row loops stays inside.
fn assert_row_fit(what: &str, len: usize, count: usize, ld: usize, available: usize) {
    let end = (count.max(1) - 1).checked_mul(ld).and_then(|s| s.checked_add(len));
    let fits = count == 0 || len == 0 || end.is_some_and(|e| e <= available);
    assert!(fits, "{count} {what} of {len} values, {ld} apart, need more than {available} values");
}

/// # Safety
///
/// The CPU must support AVX2 and FMA; `b` must hold every column (`assert_row_fit`).
#[target_feature(enable = "avx2,fma")]
unsafe fn row_dots_avx2(x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) {
    // SAFETY: the contract, passed on.
    unsafe { dots_body::<Avx2F32>(x, b, ld, out) }
}

/// # Safety
///
/// The CPU must support AVX-512F; `b` must hold every column (`assert_row_fit`).
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_dots_avx512(x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) {
    // SAFETY: the contract, passed on.
    unsafe { dots_body::<Avx512F32>(x, b, ld, out) }
}

/// # Safety
///
/// The CPU must support AVX2 and FMA; `b` must hold every row (`assert_row_fit`).
#[target_feature(enable = "avx2,fma")]
unsafe fn row_sums_avx2(x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) {
    // SAFETY: the contract, passed on.
    unsafe { sums_body::<Avx2F32>(x, b, ld, out) }
}

/// # Safety
///
/// The CPU must support AVX-512F; `b` must hold every row (`assert_row_fit`).
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_sums_avx512(x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) {
    // SAFETY: the contract, passed on.
    unsafe { sums_body::<Avx512F32>(x, b, ld, out) }
}

/// The lanes of `v` summed in halves: lane i + lane i + LANES/2, then again, until one is left.
///
/// # Safety
///
/// The CPU must support `I`.
#[inline(always)]
unsafe fn sum_lanes<I: Vector<E = f32>>(v: I::V) -> f32 {
    let mut lanes = [0.0f32; 16];
    const { assert!(I::LANES <= 16, "at most 16 lanes") };
    // SAFETY: the CPU supports `I`; `lanes` holds 16 ≥ LANES values.
    unsafe { I::store(lanes.as_mut_ptr(), v) };
    let mut width = I::LANES;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            lanes[i] += lanes[i + width];
        }
    }
    lanes[0]
}

/// The loop of [`Avx2::row_dots`] in `I`'s registers, one column at a time (so a run of
/// columns gives the bits the whole product gives): [`ROW_DOT_VECTORS`] vectors of LANES partial
/// sums, vector v taking the values p = q·4·LANES + v·LANES + l by fused multiply-adds, the
/// remaining whole vectors into vector 0; then (v₀ + v₁) + (v₂ + v₃), its lanes summed in halves
/// ([`sum_lanes`]), and the last k mod LANES values added in order by fused multiply-adds. While
/// one column is summed the next is asked for (a prefetch: it changes no value).
///
/// # Safety
///
/// The CPU must support `I`; `b` must hold every column (`assert_row_fit`). Inlined into the
/// `#[target_feature]` wrapper that calls it.
#[inline(always)]
unsafe fn dots_body<I: Vector<E = f32>>(x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) {
    let (k, n, lanes) = (x.len(), out.len(), I::LANES);
    let step = ROW_DOT_VECTORS * lanes;
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let (xp, bp) = (x.as_ptr(), b.as_ptr());
    for (j, o) in out.iter_mut().enumerate() {
        // SAFETY (every load): p + LANES ≤ k (loop bounds), so x's loads are inside x and column
        // j's inside b (the caller's contract).
        let col = bp.wrapping_add(j * ld);
        let next = if j + 1 < n { Some(col.wrapping_add(ld)) } else { None };
        let mut acc = [unsafe { I::zero() }; ROW_DOT_VECTORS];
        let mut p = 0;
        while p + step <= k {
            if let Some(next) = next {
                for line in (p..p + step).step_by(F32_PER_LINE) {
                    // SAFETY: SSE is part of every x86-64 CPU; a prefetch never faults.
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line).cast()) };
                }
            }
            for (v, a) in acc.iter_mut().enumerate() {
                let q = p + v * lanes;
                *a = unsafe { I::fma(I::load(xp.add(q)), I::load(col.add(q)), *a) };
            }
            p += step;
        }
        if let Some(next) = next {
            for line in (p..k).step_by(F32_PER_LINE) {
                // SAFETY: as above.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line).cast()) };
            }
        }
        while p + lanes <= k {
            acc[0] = unsafe { I::fma(I::load(xp.add(p)), I::load(col.add(p)), acc[0]) };
            p += lanes;
        }
        let v = unsafe { I::add(I::add(acc[0], acc[1]), I::add(acc[2], acc[3])) };
        let mut s = unsafe { sum_lanes::<I>(v) };
        for (&xq, &w) in x[p..].iter().zip(&b[j * ld + p..j * ld + k]) {
            s = xq.mul_add(w, s);
        }
        *o = s;
    }
}

/// The loop of [`Avx2::row_sums`] in `I`'s registers: [`ROW_SUM_VECTORS`] vectors of outputs at
/// a time, then one vector, then the last outputs one by one, each summed over p in order.
///
/// # Safety
///
/// The CPU must support `I`; `b` must hold every row (`assert_row_fit`). Inlined into the
/// `#[target_feature]` wrapper that calls it.
#[inline(always)]
unsafe fn sums_body<I: Vector<E = f32>>(x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) {
    let (n, lanes) = (out.len(), I::LANES);
    let (bp, op) = (b.as_ptr(), out.as_mut_ptr());
    let mut j = 0;
    // SAFETY (every load and store): j + width ≤ n (loop bounds), so row p's values j … are
    // inside b (the caller's contract) and the stores inside out.
    while j + ROW_SUM_VECTORS * lanes <= n {
        let mut acc = [unsafe { I::zero() }; ROW_SUM_VECTORS];
        for (p, &xp) in x.iter().enumerate() {
            let (xv, row) = (unsafe { I::splat(xp) }, bp.wrapping_add(p * ld + j));
            for (v, a) in acc.iter_mut().enumerate() {
                *a = unsafe { I::fma(xv, I::load(row.add(v * lanes)), *a) };
            }
        }
        for (v, a) in acc.into_iter().enumerate() {
            unsafe { I::store(op.add(j + v * lanes), a) };
        }
        j += ROW_SUM_VECTORS * lanes;
    }
    while j + lanes <= n {
        let mut acc = unsafe { I::zero() };
        for (p, &xp) in x.iter().enumerate() {
            acc = unsafe { I::fma(I::splat(xp), I::load(bp.add(p * ld + j)), acc) };
        }
        unsafe { I::store(op.add(j), acc) };
        j += lanes;
    }
    for (j, o) in out.iter_mut().enumerate().skip(j) {
        *o = x.iter().enumerate().fold(0.0f32, |s, (p, &xp)| xp.mul_add(b[p * ld + j], s));
    }
}

// ──────────────────── block-quantized dot products: int8 and 4-bit codes ────────────────────

/// Weights per quantized block (chapter 11's `quant::BLOCK`): one scale each.
pub(crate) const QUANT_BLOCK: usize = 32;

/// Lanes of the block dot's partial sums: one AVX2 register of f32.
pub(crate) const QUANT_LANES: usize = 8;

/// Columns summed in one pass of the quantized dot: they share each block's loads of x.
const QUANT_COLUMNS: usize = 4;

/// out_j = Σ_b s_{b,j}·(Σ_i q_{b,i,j}·x_{32b+i}) for a run of columns j of blocks, with AVX2 and
/// FMA, in the order of the scalar reference (the quantized step's `column_dot_reference`),
/// so the bits agree: for each column, in each of 8 lanes l, the block's partial sum
/// t_l = q_l·x_l, then t_l ← q_{8c+l}·x_{8c+l} + t_l fused for c = 1, 2, 3, then
/// acc_l ← t_l·s_b + acc_l fused; at the end ((acc₀ + acc₁) + (acc₂ + acc₃)) + ((acc₄ + acc₅) +
/// (acc₆ + acc₇)). Four columns go through the blocks together (x loaded once for the four), the
/// last `out.len() mod 4` one at a time; each column's sum is the same either way. `x` holds the
/// 32·B values of B blocks; `scales` B per column, column after column (B·`out.len()`);
/// `codes` the blocks' bytes in the same order, 32 a block (one signed byte a code) or, when
/// `four_bit`, 16 (q_i + 8 in the low four bits of byte i and q_{i+16} + 8 in the high four).
/// Panics (before reading memory) when the lengths disagree.
pub(crate) fn quant_columns_dot(
    _token: Avx2,
    x: &[f32],
    scales: &[f32],
    codes: &[u8],
    four_bit: bool,
    out: &mut [f32],
) {
    let per = if four_bit { QUANT_BLOCK / 2 } else { QUANT_BLOCK };
    let blocks = x.len() / QUANT_BLOCK;
    assert!(
        x.len() == blocks * QUANT_BLOCK
            && scales.len() == blocks * out.len()
            && codes.len() == scales.len() * per,
        "{} quantized columns of {} values need {} scales and {} code bytes, got {} and {}",
        out.len(),
        x.len(),
        blocks * out.len(),
        blocks * out.len() * per,
        scales.len(),
        codes.len()
    );
    let reduce =
        |l: [f32; QUANT_LANES]| ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    let (group_scales, group_codes) = (QUANT_COLUMNS * blocks, QUANT_COLUMNS * blocks * per);
    let mut j = 0;
    while j + QUANT_COLUMNS <= out.len() {
        let (s, c) =
            (&scales[j * blocks..][..group_scales], &codes[j * blocks * per..][..group_codes]);
        // SAFETY: the token proves AVX2 and FMA; `s` holds B scales and `c` B blocks of codes
        // for each of the four columns, and `x` B blocks of values.
        let lanes = unsafe {
            if four_bit {
                quant_columns_avx2::<QUANT_COLUMNS, true>(x, s, c)
            } else {
                quant_columns_avx2::<QUANT_COLUMNS, false>(x, s, c)
            }
        };
        for (o, l) in out[j..j + QUANT_COLUMNS].iter_mut().zip(lanes) {
            *o = reduce(l);
        }
        j += QUANT_COLUMNS;
    }
    for (j, o) in out.iter_mut().enumerate().skip(j) {
        let (s, c) = (&scales[j * blocks..][..blocks], &codes[j * blocks * per..][..blocks * per]);
        // SAFETY: as above, for one column.
        let [lanes] = unsafe {
            if four_bit {
                quant_columns_avx2::<1, true>(x, s, c)
            } else {
                quant_columns_avx2::<1, false>(x, s, c)
            }
        };
        *o = reduce(lanes);
    }
}

/// The 8 lane sums of `N` columns (see [`quant_columns_dot`]).
///
/// # Safety
///
/// The CPU must support AVX2 and FMA; with B = `x.len()` / 32, `scales` must hold N·B values and
/// `codes` N·B blocks of 32 (or, `Q4`, 16) bytes, column after column.
#[target_feature(enable = "avx2,fma")]
unsafe fn quant_columns_avx2<const N: usize, const Q4: bool>(
    x: &[f32],
    scales: &[f32],
    codes: &[u8],
) -> [[f32; QUANT_LANES]; N] {
    let per = if Q4 { QUANT_BLOCK / 2 } else { QUANT_BLOCK };
    let blocks = x.len() / QUANT_BLOCK;
    // SAFETY: the caller's contract (above): the features are present and every read below
    // stays inside the slices (block b of column n: scale n·B + b, codes from per·(n·B + b)).
    unsafe {
        let mut acc = [_mm256_setzero_ps(); N];
        let low_nibbles = _mm_set1_epi8(0x0f);
        let offset = _mm_set1_epi8(8);
        let (xp0, sp0, cp0) = (x.as_ptr(), scales.as_ptr(), codes.as_ptr());
        for b in 0..blocks {
            let xp = xp0.add(b * QUANT_BLOCK);
            let xv = [0, 1, 2, 3].map(|c| _mm256_loadu_ps(xp.add(QUANT_LANES * c)));
            for (n, a) in acc.iter_mut().enumerate() {
                let block = n * blocks + b;
                let cp = cp0.add(block * per);
                // The same block of the next group of columns: the codes are one stream,
                // column after column, which four interleaved reads hide from the prefetcher.
                _mm_prefetch::<_MM_HINT_T0>(cp.wrapping_add(N * blocks * per).cast());
                // The block's 32 codes as four vectors of 8 f32 lanes, weights 8c … 8c + 7.
                let q: [__m256; 4] = if Q4 {
                    let bytes = _mm_loadu_si128(cp.cast());
                    let lo = _mm_sub_epi8(_mm_and_si128(bytes, low_nibbles), offset);
                    let hi = _mm_sub_epi8(
                        _mm_and_si128(_mm_srli_epi16::<4>(bytes), low_nibbles),
                        offset,
                    );
                    [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)]
                        .map(|v| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)))
                } else {
                    [0, 1, 2, 3].map(|c| {
                        let v = _mm_loadl_epi64(cp.add(QUANT_LANES * c).cast());
                        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
                    })
                };
                let mut t = _mm256_mul_ps(q[0], xv[0]);
                t = _mm256_fmadd_ps(q[1], xv[1], t);
                t = _mm256_fmadd_ps(q[2], xv[2], t);
                t = _mm256_fmadd_ps(q[3], xv[3], t);
                *a = _mm256_fmadd_ps(t, _mm256_set1_ps(*sp0.add(block)), *a);
            }
        }
        let mut out = [[0.0f32; QUANT_LANES]; N];
        for (o, a) in out.iter_mut().zip(acc) {
            _mm256_storeu_ps(o.as_mut_ptr(), a);
        }
        out
    }
}

// ───────────────────────────── the bf16 pair product (AVX512-BF16) ─────────────────────────

/// Proof that this CPU runs AVX512-BF16 (VDPBF16PS) and AVX-512F: [`Avx512Bf16::detect`] is the
/// only way to make one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Avx512Bf16(());

impl Avx512Bf16 {
    /// A token if the CPU has AVX-512F and AVX512-BF16, else `None`.
    pub(super) fn detect() -> Option<Avx512Bf16> {
        let found = is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16");
        found.then_some(Avx512Bf16(()))
    }
}

/// Rows of the pair tile: two vectors of 16 f32 accumulators per column.
pub(crate) const BF16_PAIR_MR: usize = 32;
/// Columns of the pair tile (16 accumulators in all, as in the AVX-512 f32 tile).
pub(crate) const BF16_PAIR_NR: usize = 8;

/// C ← α·Ã·B̃ + β·C on the 32×8 tile at rows `row..row + 32` of the first 8 slices of `c`
/// (β = 0: C is not read), from slivers packed in pairs of k (`src/matmul/bf16.rs`): for pair q
/// of the `pairs` pairs, `a[q·64 + 2i + e]` is row i's bf16 at k = 2q + e and `b[q·16 + 2j + e]`
/// is column j's. One VDPBF16PS per vector and column adds both products of a pair to the f32
/// accumulators (`pair_step` in `src/matmul/bf16.rs` states one lane in scalar Rust). Panics,
/// before touching memory, if a slice is too short.
#[allow(clippy::too_many_arguments)]
pub(crate) fn bf16_pair_tile(
    _token: Avx512Bf16,
    pairs: usize,
    a: &[u16],
    b: &[u16],
    alpha: f32,
    beta: f32,
    c: &mut [&mut [f32]],
    row: usize,
) {
    let (a_len, b_len) = (pairs.checked_mul(2 * BF16_PAIR_MR), pairs.checked_mul(2 * BF16_PAIR_NR));
    assert!(a_len.is_some_and(|n| a.len() >= n), "A pair sliver too short");
    assert!(b_len.is_some_and(|n| b.len() >= n), "B pair sliver too short");
    assert!(c.len() >= BF16_PAIR_NR, "fewer than 8 columns of C");
    let c: [*mut f32; BF16_PAIR_NR] =
        std::array::from_fn(|j| c[j][row..row + BF16_PAIR_MR].as_mut_ptr());
    // SAFETY: the token proves AVX-512F and AVX512-BF16; `a` and `b` hold `pairs` pairs of a
    // 32-row and an 8-column sliver, and each pointer of `c` 32 writable values (checked above).
    unsafe { bf16_pair_tile_avx512(pairs, a.as_ptr(), b.as_ptr(), alpha, beta, c) }
}

/// The body of [`bf16_pair_tile`].
///
/// # Safety
///
/// The CPU must support AVX-512F and AVX512-BF16; `a` must be readable for 64·`pairs` values,
/// `b` for 16·`pairs`, each `c[j]` readable and writable for 32.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn bf16_pair_tile_avx512(
    pairs: usize,
    a: *const u16,
    b: *const u16,
    alpha: f32,
    beta: f32,
    c: [*mut f32; BF16_PAIR_NR],
) {
    // SAFETY (the whole body): within the bounds of the contract above.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 2]; BF16_PAIR_NR];
        for q in 0..pairs {
            let a_q = a.add(q * 2 * BF16_PAIR_MR);
            // Rows 0–15 and 16–31, each lane holding one row's two bf16 values of the pair.
            // (No closures here: a closure would be compiled without this function's features.)
            let a_lo: __m512bh = std::mem::transmute(_mm512_loadu_si512(a_q.cast()));
            let a_hi: __m512bh = std::mem::transmute(_mm512_loadu_si512(a_q.add(32).cast()));
            let a_v = [a_lo, a_hi];
            let b_q = b.add(q * 2 * BF16_PAIR_NR).cast::<i32>();
            for (j, acc_j) in acc.iter_mut().enumerate() {
                // Column j's two values of the pair as one 32-bit word, in every lane.
                let word = b_q.add(j).read_unaligned();
                let b_v: __m512bh = std::mem::transmute(_mm512_set1_epi32(word));
                for (acc_jr, &a_r) in acc_j.iter_mut().zip(&a_v) {
                    *acc_jr = _mm512_dpbf16_ps(*acc_jr, a_r, b_v);
                }
            }
        }
        let (alpha_v, beta_v) = (_mm512_set1_ps(alpha), _mm512_set1_ps(beta));
        for (c_j, acc_j) in c.into_iter().zip(&acc) {
            for (r, &acc_jr) in acc_j.iter().enumerate() {
                let c_jr = c_j.add(16 * r);
                let value = if beta == 0.0 {
                    _mm512_mul_ps(alpha_v, acc_jr)
                } else {
                    _mm512_fmadd_ps(alpha_v, acc_jr, _mm512_mul_ps(beta_v, _mm512_loadu_ps(c_jr)))
                };
                _mm512_storeu_ps(c_jr, value);
            }
        }
    }
}
