//! The cached step's row products shared between threads.
//!
//! One token of cached generation multiplies one row by every weight matrix of the model: the
//! work is reading each weight once, and one core reads them only as fast as its path to the
//! cache allows (a plain 16-lane sum over 42.6 MB, the f32 weights of one step, reads about
//! 12.6 GB/s on one core of the 2-core AMD EPYC machines here, best of 30 passes).
//! A second core reads the other half of each matrix at the same time. A thread started for each
//! product would cost more than it saves (starting one takes about 50 µs, a product of the
//! 6-layer, width-384 model about 80 µs), so a [`RowTeam`] hands each product's runs of columns
//! to the crate's scheduler ([`share_pieces`]), whose pool threads are started once per process.
//!
//! Every output is the same dot product of the row with one column ([`row_product`] with α = 1
//! and β = 0 on the thread's run of columns), whichever thread computed it, and the caller
//! combines them with α and β as [`row_product`] does, so any number of threads gives the same
//! bits.

use crate::error::Result;
use crate::float::Float;
use crate::matmul::{MatMut, MatRef, Op, row_product};
use crate::threads::share_pieces;
use std::marker::PhantomData;
use std::ops::Range;

/// Weights the cached step reads per thread it uses: a model with fewer than twice this many
/// weights in its blocks runs its step on one thread. About 0.63 ms of reading at 12.6 GB/s in
/// f32, several times what handing a piece to a pool thread and waiting for it costs.
pub const ROW_TEAM_WEIGHTS_PER_THREAD: usize = 2_000_000;

/// The threads of one cached step's row products (one: the caller alone).
pub(crate) struct RowTeam<'w, T> {
    threads: usize,
    weights: PhantomData<&'w [T]>,
}

/// a·B\[:, j\] for each column j of `cols`: [`row_product`] with α = 1 and β = 0 on those
/// columns of B (k×n), so each sum is the one the whole product computes.
fn column_dots<T: Float>(a: MatRef<T>, b: MatRef<T>, cols: Range<usize>) -> Result<Vec<T>> {
    let (k, ld) = (b.rows(), b.ld());
    let mut sums = vec![T::zero(); cols.len()];
    let b_cols = MatRef::new(&b.as_slice()[cols.start * ld..], k, cols.len(), ld)?;
    let c = MatMut::new(&mut sums, 1, cols.len(), 1)?;
    row_product(T::one(), a, b_cols, Op::N, T::zero(), c)?;
    Ok(sums)
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
        a: MatRef<T>,
        b: MatRef<'w, T>,
        beta: T,
        mut c: MatMut<T>,
    ) -> Result<()> {
        let (k, n) = (a.cols(), b.cols());
        let parts = self.threads.min(n);
        if parts <= 1
            || a.rows() != 1
            || a.ld() != 1
            || b.rows() != k
            || c.rows() != 1
            || c.cols() != n
        {
            return row_product(alpha, a, b, Op::N, beta, c);
        }
        let per = n.div_ceil(parts);
        let runs: Vec<Range<usize>> = (0..parts)
            .map(|p| p * per..((p + 1) * per).min(n))
            .take_while(|cols| !cols.is_empty())
            .collect();
        let sums =
            share_pieces(&mut vec![(); runs.len()], runs, |(), cols| column_dots(a, b, cols));
        let sums = sums.into_iter().collect::<Result<Vec<_>>>()?;
        let ld = c.ld();
        for (out, s) in c.as_mut_slice().iter_mut().step_by(ld).zip(sums.into_iter().flatten()) {
            *out = if beta == T::zero() { alpha * s } else { alpha * s + beta * *out };
        }
        Ok(())
    }
}
