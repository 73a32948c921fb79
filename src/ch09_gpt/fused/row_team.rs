//! The cached step's row products shared between threads.
//!
//! One token of cached generation multiplies one row by every weight matrix of the model: the
//! work is reading each weight once, and one core reads them only as fast as its path to the
//! cache allows (about 30 GB/s on the 2-core machines here; the benchmarks appendix measures it).
//! A second core reads the other half of each matrix at the same time. A thread started for each
//! product would cost more than it saves (starting one takes about 50 µs, a product of the
//! 6-layer, width-384 model about 80 µs), so a [`RowTeam`] starts its helpers once per token and
//! hands them a range of columns for each product; they wait for the next one spinning, since
//! the step between two products (LayerNorm, attention, GELU) takes microseconds.
//!
//! Every output is the same [`dot`] of the row with one column, whichever thread computed it, and
//! the caller combines them with α and β as [`row_product`] does, so any number of threads gives
//! the same bits.

use super::cached::dot;
use super::forward::{Strided, StridedMut, row_product};
use crate::error::{Result, invalid};
use crate::float::Float;
use crate::matmul::Op;
use std::ops::Range;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};

/// Weights the cached step reads per thread it uses: a model with fewer than twice this many
/// weights in its blocks runs its step on one thread. About 0.27 ms of reading at 30 GB/s in
/// f32, several times the 50 µs a helper thread costs to start each token.
pub const ROW_TEAM_WEIGHTS_PER_THREAD: usize = 2_000_000;

/// Spins before a waiting thread starts yielding its core (on a busy machine a spinning helper
/// would otherwise hold a core another thread needs).
const SPINS_BEFORE_YIELD: u32 = 1 << 14;

/// Columns `cols` of a product: the row `a` (copied, so the caller may overwrite its buffer) and
/// the matrix `b`, read where it is.
struct Job<'w, T> {
    a: Vec<T>,
    b: Strided<'w, T>,
    cols: Range<usize>,
}

/// A helper thread's two channels: jobs to it, the dot products of its columns back.
struct Helper<'w, T> {
    jobs: Sender<Job<'w, T>>,
    sums: Receiver<Vec<T>>,
}

/// The threads of one cached step: the caller and its helpers (none on one thread).
pub(crate) struct RowTeam<'w, T> {
    helpers: Vec<Helper<'w, T>>,
}

/// The next message, spinning and then yielding while there is none; `None` once the sender is
/// gone.
fn wait<M>(rx: &Receiver<M>) -> Option<M> {
    let mut spins = 0u32;
    loop {
        match rx.try_recv() {
            Ok(m) => return Some(m),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if spins < SPINS_BEFORE_YIELD => {
                spins += 1;
                std::hint::spin_loop();
            }
            Err(TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
}

/// aᵀ·B[:, j] for each column j of `cols`: the same [`dot`] that [`row_product`] takes.
fn column_dots<T: Float>(a: &[T], b: Strided<T>, cols: Range<usize>) -> Vec<T> {
    cols.map(|j| dot(a, &b.data[j * b.ld..][..a.len()])).collect()
}

/// Runs `f` with a team of `threads` threads (the caller and `threads − 1` helpers, started here
/// and stopped when `f` returns); one thread starts none.
pub(crate) fn with_row_team<'w, T: Float, R>(
    threads: usize,
    f: impl FnOnce(&mut RowTeam<'w, T>) -> R,
) -> R {
    if threads <= 1 {
        return f(&mut RowTeam { helpers: Vec::new() });
    }
    std::thread::scope(|s| {
        let mut team = RowTeam { helpers: Vec::with_capacity(threads - 1) };
        for _ in 1..threads {
            let (jobs, job_rx) = channel::<Job<'w, T>>();
            let (sum_tx, sums) = channel();
            s.spawn(move || {
                while let Some(job) = wait(&job_rx) {
                    if sum_tx.send(column_dots(&job.a, job.b, job.cols)).is_err() {
                        break;
                    }
                }
            });
            team.helpers.push(Helper { jobs, sums });
        }
        // The team (and with it every job sender) is dropped when `f` returns, which ends the
        // helpers' loops before the scope joins them.
        f(&mut team)
    })
}

impl<'w, T: Float> RowTeam<'w, T> {
    /// c ← α·a·B + β·c for one row a (1×k, contiguous) and B k×n column-major, as
    /// [`row_product`] with op(B) = B, the columns of B shared between the team's threads in
    /// equal runs (the caller takes the first). Any other layout goes to [`row_product`] alone.
    pub(crate) fn product(
        &mut self,
        alpha: T,
        a: Strided<T>,
        b: Strided<'w, T>,
        beta: T,
        c: StridedMut<T>,
    ) -> Result<()> {
        let (k, n) = (a.cols, b.cols);
        let parts = (self.helpers.len() + 1).min(n);
        if parts <= 1 || a.rows != 1 || a.ld != 1 || b.rows != k || c.rows != 1 || c.cols != n {
            return row_product(alpha, a, b, Op::N, beta, c);
        }
        let row = &a.data[..k];
        let per = n.div_ceil(parts);
        let mut asked = Vec::with_capacity(parts - 1);
        for (h, helper) in self.helpers.iter().enumerate().take(parts - 1) {
            let cols = (h + 1) * per..((h + 2) * per).min(n);
            if cols.is_empty() {
                break;
            }
            let job = Job { a: row.to_vec(), b, cols: cols.clone() };
            helper.jobs.send(job).map_err(|_| stopped())?;
            asked.push((h, cols));
        }
        let mut sums = column_dots(row, b, 0..per.min(n));
        sums.resize(n, T::zero());
        for (h, cols) in asked {
            let part = wait(&self.helpers[h].sums).ok_or_else(stopped)?;
            sums[cols].copy_from_slice(&part);
        }
        for (out, s) in c.data.iter_mut().step_by(c.ld).zip(sums) {
            *out = if beta == T::zero() { alpha * s } else { alpha * s + beta * *out };
        }
        Ok(())
    }
}

/// A helper that stopped before answering (it can only have panicked).
fn stopped() -> crate::error::Error {
    invalid("RowTeam::product", "helper thread", "stopped before finishing its columns")
}
