//! Packing: copying a block of op(A) or op(B) into the order the micro-kernel reads it.
//!
//! An operand is described by its storage and two strides, so a transpose is only a swap of the
//! strides: element (i, j) of op(X) is `data[i·rs + j·cs]`. For a column-major `DMatrix` with r
//! rows, op = N gives (rs, cs) = (1, r) and op = T gives (r, 1). Packing is where the layout
//! difference is paid for, once per block, so the micro-kernel only ever sees one layout:
//!
//! ```text
//! Ã (from an mc×kc block of op(A)): ⌈mc/MR⌉ slivers, each kc columns of MR values (rows of the
//!    sliver, zero-padded past the block's last row), one sliver after the other.
//! B̃ (from a kc×nc block of op(B)): ⌈nc/NR⌉ slivers, each kc rows of NR values (columns of the
//!    sliver, zero-padded past the block's last column).
//! ```
//!
//! The padding zeros only ever meet rows or columns of the tile that are thrown away, so the
//! micro-kernel can always compute a full MR×NR tile.

use super::Element;
use crate::simd::prefetch;

/// A read-only operand op(X): element (i, j) is `data[i·rs + j·cs]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Operand<'a, T> {
    pub data: &'a [T],
    pub rs: usize,
    pub cs: usize,
}

impl<'a, T> Operand<'a, T> {
    /// op(X) for a column-major matrix with `rows` rows stored in `data`: as stored, or transposed.
    pub fn new(data: &'a [T], rows: usize, transposed: bool) -> Self {
        if transposed {
            Operand { data, rs: rows, cs: 1 }
        } else {
            Operand { data, rs: 1, cs: rows }
        }
    }

    /// op(X)ᵀ: the same storage with the strides swapped.
    pub fn transposed(self) -> Self {
        Operand { data: self.data, rs: self.cs, cs: self.rs }
    }
}

/// Packs rows `i0..i0+mc`, columns `p0..p0+kc` of op(A) into `dst` as ⌈mc/mr⌉ slivers of kc×mr.
/// `simd`: a row-major op(A) may be transposed with SIMD instructions ([`interleave`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn pack_a<T: Element>(
    dst: &mut [T],
    a: Operand<T>,
    i0: usize,
    mc: usize,
    p0: usize,
    kc: usize,
    mr: usize,
    simd: bool,
) {
    if a.rs == 1 {
        // Column-major op(A): column p of the block is one contiguous run of mc values, cut into
        // slivers of mr. Walking p outermost visits each column (and its memory page) once.
        split_runs(dst, mr, kc, mc, |p| &a.data[i0 + (p0 + p) * a.cs..][..mc]);
    } else {
        // Row-major op(A) (a transposed DMatrix, cs = 1): row i's kc values are contiguous.
        let line = |i: usize| &a.data[(i0 + i) * a.rs + p0..][..kc];
        let slivers = mc.div_ceil(mr);
        for (q, sliver) in dst.chunks_exact_mut(kc * mr).take(slivers).enumerate() {
            let r0 = q * mr;
            // The rows of the next sliver are a whole leading dimension apart, a pattern the
            // hardware prefetchers follow poorly: ask for them while this sliver is copied.
            for i in (r0 + mr..mc).take(mr) {
                prefetch(line(i));
            }
            interleave(sliver, mr, kc, mr.min(mc - r0), |i| line(r0 + i), simd);
        }
    }
}

/// Packs rows `p0..p0+kc`, columns `j0..j0+nc` of op(B) into `dst` as ⌈nc/nr⌉ slivers of kc×nr.
///
/// B̃ is Ã of op(B)ᵀ: a sliver of kc rows of nr values of op(B) is a sliver of kc columns of nr
/// values of its transpose, so this is [`pack_a`] on the operand with its strides swapped.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pack_b<T: Element>(
    dst: &mut [T],
    b: Operand<T>,
    p0: usize,
    kc: usize,
    j0: usize,
    nc: usize,
    nr: usize,
    simd: bool,
) {
    pack_a(dst, b.transposed(), j0, nc, p0, kc, nr, simd);
}

/// How many runs ahead [`split_runs`] asks for the next run's cache lines. The runs of a
/// column-major block are a whole column apart in memory (often a new page), a pattern the
/// hardware prefetchers follow poorly.
const RUNS_AHEAD: usize = 4;

/// For each p < kc, cuts the run `run(p)` (of `len` values) into pieces of `width` and writes
/// piece q to row p of sliver q: `dst[q·kc·width + p·width ..][..width]`, zero-padding the last.
fn split_runs<'a, T: Element>(
    dst: &mut [T],
    width: usize,
    kc: usize,
    len: usize,
    run: impl Fn(usize) -> &'a [T],
) {
    match width {
        4 => split_runs_const::<T, 4>(dst, kc, len, run),
        6 => split_runs_const::<T, 6>(dst, kc, len, run),
        8 => split_runs_const::<T, 8>(dst, kc, len, run),
        12 => split_runs_const::<T, 12>(dst, kc, len, run),
        16 => split_runs_const::<T, 16>(dst, kc, len, run),
        32 => split_runs_const::<T, 32>(dst, kc, len, run),
        _ => {
            for p in 0..kc {
                for (q, piece) in run(p)[..len].chunks(width).enumerate() {
                    let d = &mut dst[q * kc * width + p * width..][..width];
                    d[..piece.len()].copy_from_slice(piece);
                    d[piece.len()..].fill(T::zero());
                }
            }
        }
    }
}

/// [`split_runs`] with the width known at compile time, so each piece is a fixed-size copy.
fn split_runs_const<'a, T: Element, const W: usize>(
    dst: &mut [T],
    kc: usize,
    len: usize,
    run: impl Fn(usize) -> &'a [T],
) {
    let stride = kc * W;
    for p in 0..kc {
        if p + RUNS_AHEAD < kc {
            prefetch(&run(p + RUNS_AHEAD)[..len]);
        }
        let pieces = run(p)[..len].chunks_exact(W);
        let tail = pieces.remainder();
        let full = len / W;
        for (q, piece) in pieces.enumerate() {
            let d: &mut [T; W] =
                (&mut dst[q * stride + p * W..][..W]).try_into().expect("W elements");
            let s: &[T; W] = piece.try_into().expect("chunks_exact gives W elements");
            *d = *s;
        }
        if !tail.is_empty() {
            let d = &mut dst[full * stride + p * W..][..W];
            d[..tail.len()].copy_from_slice(tail);
            d[tail.len()..].fill(T::zero());
        }
    }
}

/// Writes `dst[p·width + i] = line(i)[p]` for p < kc and i < lines (zero for lines ≤ i < width):
/// `lines` contiguous source runs of length kc side by side, a small transpose. All lines are
/// read together, p by p, so the hardware streams them in parallel and the writes are sequential.
/// With `simd`, a full sliver of f32 is first transposed eight lines by eight values at a time in
/// vector registers (`transpose_lines`, in the kernel module), which moves the same values; the
/// plain copy below then does only what is left.
fn interleave<'a, T: Element>(
    dst: &mut [T],
    width: usize,
    kc: usize,
    lines: usize,
    line: impl Fn(usize) -> &'a [T],
    simd: bool,
) {
    let dst = &mut dst[..kc * width];
    if lines == width {
        match width {
            4 => return interleave_full::<T, 4>(dst, kc, line, simd),
            6 => return interleave_full::<T, 6>(dst, kc, line, simd),
            8 => return interleave_full::<T, 8>(dst, kc, line, simd),
            12 => return interleave_full::<T, 12>(dst, kc, line, simd),
            16 => return interleave_full::<T, 16>(dst, kc, line, simd),
            32 => return interleave_full::<T, 32>(dst, kc, line, simd),
            _ => {}
        }
    }
    dst.fill(T::zero());
    for i in 0..lines {
        for (d, &v) in dst.chunks_exact_mut(width).zip(line(i)) {
            d[i] = v;
        }
    }
}

fn interleave_full<'a, T: Element, const W: usize>(
    dst: &mut [T],
    kc: usize,
    line: impl Fn(usize) -> &'a [T],
    simd: bool,
) {
    // Eight steps of p at a time, all W lines together: each line gives eight consecutive values
    // (one bounds check), which go to the same position of eight consecutive rows of the sliver.
    // Only those eight rows and a short piece of every line are touched per step, so both stay in
    // L1 however long the lines are.
    const STEPS: usize = 8;
    let lines: [&[T]; W] = std::array::from_fn(|i| &line(i)[..kc]);
    // The rows the SIMD transpose wrote (a multiple of STEPS), if it ran.
    let done = if simd { T::transpose_lines(&mut dst[..kc * W], &lines, kc) } else { 0 };
    let full = kc / STEPS * STEPS;
    let (dst_full, dst_tail) = dst[..kc * W].split_at_mut(full * W);
    for (p0, rows) in
        (done..full).step_by(STEPS).zip(dst_full[done * W..].chunks_exact_mut(STEPS * W))
    {
        for (i, src) in lines.iter().enumerate() {
            let vals: &[T; STEPS] = src[p0..p0 + STEPS].try_into().expect("STEPS values");
            for (q, &v) in vals.iter().enumerate() {
                rows[q * W + i] = v;
            }
        }
    }
    for (p, row) in (full..kc).zip(dst_tail.chunks_exact_mut(W)) {
        for (d, src) in row.iter_mut().zip(&lines) {
            *d = src[p];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SIMD transpose moves the same values to the same places as the plain copy, for every
    /// sliver width the kernels use and depths with and without a remainder of 8, in f32 (where
    /// it runs with 8×8 blocks) and f64 (4×4 blocks, for widths that are a multiple of 4).
    #[test]
    fn the_simd_transpose_packs_exactly_like_the_plain_copy() {
        fn check<T: Element + From<u16>>() {
            for width in [4, 6, 8, 12, 16, 32] {
                for kc in [0, 1, 7, 8, 9, 16, 37, 64, 131] {
                    // Line i holds the distinct values i·1000 + p (exact in f32), inside a longer
                    // buffer so a read past kc would show up as a wrong value, not only a panic.
                    let stride = kc + 5;
                    let buf: Vec<T> = (0..width * stride)
                        .map(|x| T::from(((x / stride) * 1000 + x % stride) as u16))
                        .collect();
                    let line = |i: usize| &buf[i * stride..];
                    let mut plain = vec![T::zero(); kc * width + 3];
                    let mut fast = plain.clone();
                    interleave(&mut plain, width, kc, width, line, false);
                    interleave(&mut fast, width, kc, width, line, true);
                    assert_eq!(plain, fast, "width {width}, kc {kc}");
                    for p in 0..kc {
                        for i in 0..width {
                            assert_eq!(
                                plain[p * width + i],
                                buf[i * stride + p],
                                "width {width}, kc {kc}, p {p}, line {i}"
                            );
                        }
                    }
                }
            }
        }
        check::<f32>();
        check::<f64>();
    }
}
