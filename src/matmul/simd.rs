//! The SIMD micro-kernels (x86-64 only): AVX2+FMA and AVX-512F, for f32 and f64; with them the
//! other loops that need wider registers than the baseline build has (the FMA probe, `map_f32`'s
//! elementwise loops, and packing's 8×8 transposes).
//!
//! This is the only module of the crate allowed to use `unsafe`. Each kernel is a safe function
//! that checks, before anything else,
//!
//! 1. that the CPU has the instruction set (the standard library's cached feature detection), and
//! 2. that every slice is long enough for the tile it stands for: `a.len() ≥ kc·MR`,
//!    `b.len() ≥ kc·NR` (for the in-place entry, which reads B through a step and a lane, the
//!    highest index it reads, `(kc − 1)·step + (NR − 1)·lane`), and NR columns of C each holding
//!    MR elements from row `row` on,
//!
//! and only then calls the `#[target_feature]` function that does the work through raw pointers.
//! Those two checks are the whole safety argument: (1) makes executing the instructions defined
//! behaviour, (2) keeps every load and store inside the borrowed slices.
//!
//! All four kernels are one text, [`simd_kernel!`], instantiated with different vector types, so
//! the AVX-512 code is the very loop the AVX2 tests exercise, with wider registers. The loop is
//! the scalar specification ([`super::scalar`]) with the MR rows of a column of the tile held in
//! `MV` vectors of `LANES` lanes:
//!
//! ```text
//! for p in 0..kc:
//!     a[r]      = load Ã[p·MR + r·LANES ..]              (MV vector loads)
//!     for j in 0..NR:
//!         b     = broadcast B̃[p·NR + j]                  (one scalar to every lane)
//!         acc[j][r] = fma(a[r], b, acc[j][r])            (MV·NR fused multiply-adds)
//! ```

use std::arch::x86_64::*;

/// Asks the cache for every 64-byte line of `s` (packing uses it to fetch the next column run
/// of a block while copying the current one). A hint only: it changes no value.
pub(super) fn prefetch_lines<T>(s: &[T]) {
    for line in s.chunks((64 / size_of::<T>().max(1)).max(1)) {
        // SAFETY: SSE, which provides the prefetch instruction, is part of every x86-64 CPU;
        // a prefetch reads nothing into the program and never faults, and the address is that of
        // an element of a live slice.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast::<i8>()) };
    }
}

/// How many rank-1 steps ahead the micro-kernel prefetches its Ã sliver (16 steps of the f32 AVX2
/// tile are 1 KiB; on this machine the prefetch was worth about 5 % against none, and 8, 16 and 32
/// steps were indistinguishable).
const PREFETCH_AHEAD: usize = 16;

macro_rules! simd_kernel {
    (
        $(#[$doc:meta])*
        name = $name:ident, in_place = $in_place:ident, inner = $inner:ident, elem = $t:ty,
            vector = $v:ty,
        lanes = $lanes:expr, mr = $mr:expr, nr = $nr:expr,
        features = $features:literal, detect = [$($detect:tt),+],
        zero = $zero:ident, load = $load:ident, store = $store:ident, splat = $splat:ident,
        fma = $fma:ident, mul = $mul:ident $(,)?
    ) => {
        $(#[$doc])*
        pub(super) fn $name(kc: usize, a: &[$t], b: &[$t], alpha: $t, beta: $t,
            c: &mut [&mut [$t]], row: usize) {
            const MR: usize = $mr;
            const _: () = assert!(MR % $lanes == 0, "MR must be a whole number of vectors");
            assert!($(std::arch::is_x86_feature_detected!($detect))&&+,
                "{} needs CPU features {:?}", stringify!($name), [$($detect),+]);
            assert!(a.len() >= kc * MR, "packed A sliver too short");
            assert!(b.len() >= kc * $nr, "packed B sliver too short");
            assert!(c.len() >= $nr, "fewer than NR columns of C");
            // Slicing checks that each of the NR columns holds MR elements from `row` on.
            let c_columns: [*mut $t; $nr] =
                std::array::from_fn(|j| c[j][row..row + MR].as_mut_ptr());
            // SAFETY: the CPU features the inner function is compiled for were detected just above,
            // and the asserts and slicing above establish exactly the bounds `$inner` requires:
            // kc·MR values of `a`, kc·NR values of `b` (packed: steps MR and NR, lane 1), MR
            // writable values behind each column pointer (distinct `&mut` slices, so no two
            // pointers alias).
            unsafe { $inner::<false>(kc, a.as_ptr(), b.as_ptr(), $nr, 1, alpha, beta, c_columns) }
        }

        /// The same tile update with a packed A sliver and the B sliver read where it is instead
        /// of packed: element (p, j) of B is `b[p·b_step + j·b_lane]`, any layout. Safe: checks
        /// the CPU and that the last element of each sliver lies inside its slice.
        #[allow(clippy::too_many_arguments)]
        pub(super) fn $in_place(
            kc: usize,
            a: &[$t],
            b: &[$t],
            b_step: usize,
            b_lane: usize,
            alpha: $t,
            beta: $t,
            c: &mut [&mut [$t]],
            row: usize,
        ) {
            const MR: usize = $mr;
            assert!($(std::arch::is_x86_feature_detected!($detect))&&+,
                "{} needs CPU features {:?}", stringify!($in_place), [$($detect),+]);
            if kc > 0 {
                assert!(a.len() >= kc * MR, "packed A sliver too short");
                assert!(b.len() > (kc - 1) * b_step + ($nr - 1) * b_lane,
                    "B sliver too short for its step and lane");
            }
            assert!(c.len() >= $nr, "fewer than NR columns of C");
            let c_columns: [*mut $t; $nr] =
                std::array::from_fn(|j| c[j][row..row + MR].as_mut_ptr());
            // SAFETY: as in the packed kernel; the B assert bounds the highest index read,
            // (kc − 1)·b_step + (NR − 1)·b_lane, and every other index read of B is smaller.
            unsafe { $inner::<true>(kc, a.as_ptr(), b.as_ptr(), b_step, b_lane, alpha, beta,
                c_columns) }
        }

        /// # Safety
        ///
        /// The CPU must support the enabled features; `a` must be valid for kc·MR reads, `b` for
        /// reads at every `p·b_step + j·b_lane` (p < kc, j < NR), and each of the NR pointers in
        /// `c` for reads and writes of MR consecutive elements, none overlapping another. With
        /// `IN_PLACE` false B's step and lane are the packed ones (NR, 1) whatever is passed, so
        /// the compiler sees them as constants.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
        unsafe fn $inner<const IN_PLACE: bool>(
            kc: usize,
            a: *const $t,
            b: *const $t,
            b_step: usize,
            b_lane: usize,
            alpha: $t,
            beta: $t,
            c: [*mut $t; $nr],
        ) {
            const MR: usize = $mr;
            const MV: usize = MR / $lanes;
            let (b_step, b_lane) = if IN_PLACE { (b_step, b_lane) } else { ($nr, 1) };
            // Ask for the C tile now, so its cache lines arrive while the kc loop runs instead of
            // stalling the write-back at the end (C's columns are a whole leading dimension apart).
            for c_j in c {
                for edge in [0, MR - 1] {
                    _mm_prefetch::<_MM_HINT_T0>(c_j.wrapping_add(edge).cast::<i8>());
                }
            }
            let mut acc: [[$v; MV]; $nr] = [[$zero(); MV]; $nr];
            // One step of the rank-1 update: acc += Ã[p, :] ⊗ B̃[p, :].
            let step = |p: usize, acc: &mut [[$v; MV]; $nr]| {
                let mut a_p: [$v; MV] = [$zero(); MV];
                for (r, a_pr) in a_p.iter_mut().enumerate() {
                    // SAFETY: p < kc and r·LANES + LANES ≤ MR, so the LANES values read lie inside
                    // the kc·MR values the caller guarantees readable.
                    *a_pr = unsafe { $load(a.add(p * MR + r * $lanes)) };
                }
                for (j, acc_j) in acc.iter_mut().enumerate() {
                    // SAFETY: p < kc and j < NR: an index the caller guarantees readable.
                    let b_pj = $splat(unsafe { *b.add(p * b_step + j * b_lane) });
                    for (acc_jr, &a_pr) in acc_j.iter_mut().zip(&a_p) {
                        *acc_jr = $fma(a_pr, b_pj, *acc_jr);
                    }
                }
            };
            let mut p = 0;
            while p + 4 <= kc {
                // A prefetch never faults; wrapping_add keeps the address arithmetic defined even
                // past the end of the sliver.
                _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add((p + PREFETCH_AHEAD) * MR).cast::<i8>());
                step(p, &mut acc);
                step(p + 1, &mut acc);
                step(p + 2, &mut acc);
                step(p + 3, &mut acc);
                p += 4;
            }
            while p < kc {
                step(p, &mut acc);
                p += 1;
            }
            let alpha_v = $splat(alpha);
            let beta_v = $splat(beta);
            for (c_j, acc_j) in c.into_iter().zip(&acc) {
                for (r, &acc_jr) in acc_j.iter().enumerate() {
                    // SAFETY: r·LANES + LANES ≤ MR: these LANES elements are among the MR the
                    // caller guarantees readable and writable behind c_j.
                    let c_jr = unsafe { c_j.add(r * $lanes) };
                    let value = if beta == 0.0 {
                        // β = 0 overwrites: C is not read, so NaN or garbage in it cannot leak in.
                        $mul(alpha_v, acc_jr)
                    } else {
                        // SAFETY: as above, c_jr points at LANES readable elements.
                        $fma(alpha_v, acc_jr, $mul(beta_v, unsafe { $load(c_jr) }))
                    };
                    // SAFETY: as above, c_jr points at LANES writable elements.
                    unsafe { $store(c_jr, value) };
                }
            }
        }
    };
}

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

simd_kernel! {
    /// AVX2+FMA, f32: a 16×6 tile in 12 of the 16 ymm registers.
    name = avx2_f32, in_place = avx2_f32_in_place, inner = avx2_f32_inner, elem = f32,
        vector = __m256,
    lanes = 8, mr = AVX2_F32_MR, nr = AVX2_F32_NR, features = "avx2,fma", detect = ["avx2", "fma"],
    zero = _mm256_setzero_ps, load = _mm256_loadu_ps, store = _mm256_storeu_ps,
        splat = _mm256_set1_ps,
    fma = _mm256_fmadd_ps, mul = _mm256_mul_ps,
}

simd_kernel! {
    /// AVX2+FMA, f64: an 8×6 tile in 12 of the 16 ymm registers.
    name = avx2_f64, in_place = avx2_f64_in_place, inner = avx2_f64_inner, elem = f64,
        vector = __m256d,
    lanes = 4, mr = AVX2_F64_MR, nr = AVX2_F64_NR, features = "avx2,fma", detect = ["avx2", "fma"],
    zero = _mm256_setzero_pd, load = _mm256_loadu_pd, store = _mm256_storeu_pd,
        splat = _mm256_set1_pd,
    fma = _mm256_fmadd_pd, mul = _mm256_mul_pd,
}

simd_kernel! {
    /// AVX-512F, f32: a 32×8 tile in 16 of the 32 zmm registers.
    name = avx512_f32, in_place = avx512_f32_in_place, inner = avx512_f32_inner, elem = f32,
        vector = __m512,
    lanes = 16, mr = AVX512_F32_MR, nr = AVX512_F32_NR, features = "avx512f", detect = ["avx512f"],
    zero = _mm512_setzero_ps, load = _mm512_loadu_ps, store = _mm512_storeu_ps,
        splat = _mm512_set1_ps,
    fma = _mm512_fmadd_ps, mul = _mm512_mul_ps,
}

simd_kernel! {
    /// AVX-512F, f64: a 16×8 tile in 16 of the 32 zmm registers.
    name = avx512_f64, in_place = avx512_f64_in_place, inner = avx512_f64_inner, elem = f64,
        vector = __m512d,
    lanes = 8, mr = AVX512_F64_MR, nr = AVX512_F64_NR, features = "avx512f", detect = ["avx512f"],
    zero = _mm512_setzero_pd, load = _mm512_loadu_pd, store = _mm512_storeu_pd,
        splat = _mm512_set1_pd,
    fma = _mm512_fmadd_pd, mul = _mm512_mul_pd,
}

/// Independent multiply-add chains in the FMA-throughput probe: more than latency × pipes
/// (4 cycles × 2 FMA units on the cores here) so the units never wait for a result.
pub(super) const PROBE_CHAINS: usize = 12;

macro_rules! fma_probe {
    ($(#[$doc:meta])* name = $name:ident, inner = $inner:ident, elem = $t:ty, vector = $v:ty,
        lanes = $lanes:expr,
     features = $features:literal, detect = [$($detect:tt),+], splat = $splat:ident,
         fma = $fma:ident, add = $add:ident,
     first = $first:ident $(,)?) => {
        $(#[$doc])*
        /// Returns the flops done and a checksum (so the loop cannot be optimised away), or `None`
        /// if the CPU lacks the instruction set.
        pub(super) fn $name(iterations: u64) -> Option<(u64, f64)> {
            if !($(std::arch::is_x86_feature_detected!($detect))&&+) {
                return None;
            }
            // SAFETY: the features `$inner` is compiled for were detected just above; it touches
            // no memory through pointers.
            let checksum = unsafe { $inner(iterations) };
            Some((iterations * (PROBE_CHAINS * $lanes * 2) as u64, checksum as f64))
        }

        #[target_feature(enable = $features)]
        fn $inner(iterations: u64) -> $t {
            // black_box hides the values from the optimiser, which could otherwise shorten the
            // loop.
            let x = $splat(std::hint::black_box(0.999_99));
            let y = $splat(std::hint::black_box(1.0e-4));
            let mut acc: [$v; PROBE_CHAINS] = [$splat(std::hint::black_box(1.0)); PROBE_CHAINS];
            for _ in 0..iterations {
                for a in acc.iter_mut() {
                    *a = $fma(*a, x, y);
                }
            }
            let mut sum = acc[0];
            for a in &acc[1..] {
                sum = $add(sum, *a);
            }
            $first(sum)
        }
    };
}

fma_probe! {
    /// FMA throughput with 256-bit f32 vectors.
    name = probe_avx2_f32, inner = probe_avx2_f32_inner, elem = f32, vector = __m256, lanes = 8,
    features = "avx2,fma", detect = ["avx2", "fma"], splat = _mm256_set1_ps, fma = _mm256_fmadd_ps,
        add = _mm256_add_ps,
    first = _mm256_cvtss_f32,
}
fma_probe! {
    /// FMA throughput with 256-bit f64 vectors.
    name = probe_avx2_f64, inner = probe_avx2_f64_inner, elem = f64, vector = __m256d, lanes = 4,
    features = "avx2,fma", detect = ["avx2", "fma"], splat = _mm256_set1_pd, fma = _mm256_fmadd_pd,
        add = _mm256_add_pd,
    first = _mm256_cvtsd_f64,
}
fma_probe! {
    /// FMA throughput with 512-bit f32 vectors.
    name = probe_avx512_f32, inner = probe_avx512_f32_inner, elem = f32, vector = __m512,
        lanes = 16,
    features = "avx512f", detect = ["avx512f"], splat = _mm512_set1_ps, fma = _mm512_fmadd_ps,
        add = _mm512_add_ps,
    first = _mm512_cvtss_f32,
}
fma_probe! {
    /// FMA throughput with 512-bit f64 vectors.
    name = probe_avx512_f64, inner = probe_avx512_f64_inner, elem = f64, vector = __m512d,
        lanes = 8,
    features = "avx512f", detect = ["avx512f"], splat = _mm512_set1_pd, fma = _mm512_fmadd_pd,
        add = _mm512_add_pd,
    first = _mm512_cvtsd_f64,
}

// ───────────────────────────── elementwise loops ─────────────────────────────

macro_rules! wide_map {
    ($(#[$doc:meta])* name = $name:ident, inner = $inner:ident, features = $features:literal,
        detect = [$($detect:tt),+] $(,)?) => {
        $(#[$doc])*
        pub(super) fn $name<F: Fn(f32, f32) -> f32>(x: &[f32], y: &mut [f32], f: F) {
            assert!($(std::arch::is_x86_feature_detected!($detect))&&+,
                "{} needs CPU features {:?}", stringify!($name), [$($detect),+]);
            // SAFETY: the CPU features the inner function is compiled for were detected just above;
            // it only iterates over the two slices it is given (no pointer arithmetic).
            unsafe { $inner(x, y, f) }
        }

        /// # Safety
        ///
        /// The CPU must support the enabled features.
        #[target_feature(enable = $features)]
        unsafe fn $inner<F: Fn(f32, f32) -> f32>(x: &[f32], y: &mut [f32], f: F) {
            // The loop of the scalar path, compiled here with the wider registers: `f` is inlined
            // into it, so the compiler vectorises the whole body with these instructions.
            for (y_i, &x_i) in y.iter_mut().zip(x) {
                *y_i = f(x_i, *y_i);
            }
        }
    };
}

wide_map! {
    /// yᵢ ← f(xᵢ, yᵢ) compiled for AVX2 and FMA (safe: checks the CPU first).
    name = map_f32_avx2, inner = map_f32_avx2_inner, features = "avx2,fma", detect = ["avx2",
        "fma"],
}

wide_map! {
    /// yᵢ ← f(xᵢ, yᵢ) compiled for AVX-512F (safe: checks the CPU first).
    name = map_f32_avx512, inner = map_f32_avx512_inner, features = "avx512f,avx2,fma",
        detect = ["avx512f", "avx2", "fma"],
}

// ───────────────────────────── packing: transposes in 8×8 blocks ─────────────────────────────

/// The widest sliver [`transpose_f32`] takes: the 32 rows of the AVX-512 f32 tile.
pub(super) const TRANSPOSE_MAX_LINES: usize = 32;

/// Writes `dst[p·W + i] = lines[i][p]` for every line i < W = `lines.len()` and every p below
/// `kc` rounded down to a multiple of 8, eight lines by eight values at a time with AVX 8×8
/// register transposes (the same values, moved: no arithmetic). Returns how many p it wrote; the
/// caller copies the rest. Returns 0, writing nothing, when the CPU lacks AVX or W is not a
/// multiple of 8 up to [`TRANSPOSE_MAX_LINES`]. Panics (never reads or writes out of bounds) if
/// a line is shorter than that many p or `dst` shorter than that many rows of W.
pub(super) fn transpose_f32(dst: &mut [f32], lines: &[&[f32]], kc: usize) -> usize {
    let w = lines.len();
    let full = kc / 8 * 8;
    if full == 0
        || w == 0
        || !w.is_multiple_of(8)
        || w > TRANSPOSE_MAX_LINES
        || !std::arch::is_x86_feature_detected!("avx")
    {
        return 0;
    }
    assert!(dst.len() >= full * w, "packed sliver too short for {full} rows of {w}");
    let mut src = [std::ptr::null::<f32>(); TRANSPOSE_MAX_LINES];
    for (s, line) in src.iter_mut().zip(lines) {
        assert!(line.len() >= full, "a line is shorter than {full} values");
        *s = line.as_ptr();
    }
    // SAFETY: AVX was detected just above; each of the w pointers is valid for `full` reads (the
    // asserts), and `dst` for full·w writes, which is every index the inner loop touches.
    unsafe { transpose_f32_inner(dst.as_mut_ptr(), &src[..w], full) };
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
