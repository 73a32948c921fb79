//! The cached step's row products shared between threads.
//!
//! One token of cached generation multiplies one row by every weight matrix of the model: the
//! work is reading each weight once, and one core reads them only as fast as its path to the
//! cache allows (about 30 GB/s on the 2-core machines here; the benchmarks appendix measures it).
//! A second core reads the other half of each matrix at the same time. A thread started for each
//! product would cost more than it saves (starting one takes about 50 µs, a product of the
//! 6-layer, width-384 model about 80 µs), so a [`RowTeam`] hands each product's runs of columns
//! to the crate's scheduler ([`share_pieces`]), whose pool threads are started once per process.
//!
//! Every output is the same [`dot`] of the row with one column, whichever thread computed it, and
//! the caller combines them with α and β as [`row_product`] does, so any number of threads gives
//! the same bits.

use super::cached::dot;
use super::forward::{Strided, StridedMut, row_product};
use crate::error::Result;
use crate::float::Float;
use crate::matmul::Op;
use crate::threads::share_pieces;
use std::marker::PhantomData;
use std::ops::Range;

/// Weights the cached step reads per thread it uses: a model with fewer than twice this many
/// weights in its blocks runs its step on one thread. About 0.27 ms of reading at 30 GB/s in
/// f32, several times what handing a piece to a pool thread and waiting for it costs.
pub const ROW_TEAM_WEIGHTS_PER_THREAD: usize = 2_000_000;

/// The threads of one cached step's row products (one: the caller alone).
pub(crate) struct RowTeam<'w, T> {
    threads: usize,
    weights: PhantomData<&'w [T]>,
}

/// aᵀ·B[:, j] for each column j of `cols`: the same [`dot`] that [`row_product`] takes.
fn column_dots<T: Float>(a: &[T], b: Strided<T>, cols: Range<usize>) -> Vec<T> {
    cols.map(|j| dot(a, &b.data[j * b.ld..][..a.len()])).collect()
}

/// Runs `f` with a team of `threads` threads for its row products.
pub(crate) fn with_row_team<'w, T: Float, R>(
    threads: usize,
    f: impl FnOnce(&mut RowTeam<'w, T>) -> R,
) -> R {
    f(&mut RowTeam { threads: threads.max(1), weights: PhantomData })
}

impl<'w, T: Float> RowTeam<'w, T> {
    /// c ← α·a·B + β·c for one row a (1×k, contiguous) and B k×n column-major, as
    /// [`row_product`] with op(B) = B, the columns of B cut into one equal run per thread (the
    /// caller takes the first). Any other layout goes to [`row_product`] alone.
    pub(crate) fn product(
        &mut self,
        alpha: T,
        a: Strided<T>,
        b: Strided<'w, T>,
        beta: T,
        c: StridedMut<T>,
    ) -> Result<()> {
        let (k, n) = (a.cols, b.cols);
        let parts = self.threads.min(n);
        if parts <= 1 || a.rows != 1 || a.ld != 1 || b.rows != k || c.rows != 1 || c.cols != n {
            return row_product(alpha, a, b, Op::N, beta, c);
        }
        let row = &a.data[..k];
        let per = n.div_ceil(parts);
        let runs: Vec<Range<usize>> = (0..parts)
            .map(|p| p * per..((p + 1) * per).min(n))
            .take_while(|cols| !cols.is_empty())
            .collect();
        let sums =
            share_pieces(&mut vec![(); runs.len()], runs, |(), cols| column_dots(row, b, cols));
        for (out, s) in c.data.iter_mut().step_by(c.ld).zip(sums.into_iter().flatten()) {
            *out = if beta == T::zero() { alpha * s } else { alpha * s + beta * *out };
        }
        Ok(())
    }
}
