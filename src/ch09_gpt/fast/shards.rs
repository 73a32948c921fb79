//! The fused step's shards: running a job on every shard on the threads the settings allow,
//! adding their gradients in shard order, and one shard's forward and backward.

use super::*;

/// Runs `job` on every shard, on at most the threads `settings` allow (the crate's scheduler,
/// [`share_pieces`]): the threads take the shards one at a time (a thread that finishes early
/// takes the next), and each shard's products get the threads left over, `threads / workers` of
/// them (the settings `job` is given), so the two levels never ask for more threads than there
/// are. Every shard writes only its own buffers, so which thread ran it changes nothing. Each
/// shard's result in shard order.
pub(super) fn run_shards<T: Float, R: Send>(
    shards: &mut [Shard<T>],
    settings: Settings,
    job: impl Fn(&mut Shard<T>, Settings) -> Result<R> + Sync,
) -> Vec<Result<R>> {
    let threads = settings.threads.unwrap_or_else(crate::threads::default_threads);
    let workers = threads.clamp(1, shards.len().max(1));
    let products = Settings { threads: Some((threads / workers).max(1)), ..settings };
    share_pieces(&mut vec![(); workers], shards.iter_mut().collect(), |(), shard| {
        job(shard, products)
    })
}

/// Elements of a gradient tensor added as one piece of work in [`add_in_shard_order`]: small
/// enough that the sum (one element of every shard) stays in the L1 cache, large enough that
/// handing out pieces costs nothing next to adding them.
pub(super) const REDUCE_PIECE: usize = 1 << 13;

/// Fewest additions (gradient elements × shards beyond the first) before the sum over shards is
/// shared between threads: about 1 ms of work on one thread. Below it, waking threads for the
/// sum saves a fraction of a millisecond and risks more: on a busy machine a thread can wait a
/// scheduler slice to start. (nanoGPT's two shards, 0.8·10⁶ additions, stay on one thread.)
const PARALLEL_REDUCE_MIN: usize = 1 << 22;

/// The batch's loss sum and gradient, left in the first shard: every element is the first
/// shard's, plus the second's, plus the third's … always in shard order, so the bits do not
/// depend on how the pieces of the tensors are shared between `threads` threads.
pub(super) fn add_in_shard_order<T: Float>(shards: &mut [Shard<T>], threads: usize) -> f64 {
    let (first, rest) = shards.split_at_mut(1);
    let first = &mut first[0];
    let loss_sum = rest.iter().fold(first.loss_sum, |sum, s| sum + s.loss_sum);
    let rest: Vec<&[DMatrix<T>]> = rest.iter().map(|s| &s.grads[..]).collect();
    add_in_order(&mut first.grads, &rest, threads, PARALLEL_REDUCE_MIN);
    loss_sum
}

/// `acc` += `rest[0]` += `rest[1]` … tensor by tensor, element by element, in that order, on up
/// to `threads` threads once there are `parallel_min` additions or more; the threads share
/// pieces of [`REDUCE_PIECE`] elements, and each element's sum is taken in the same order
/// whichever thread takes it.
pub(super) fn add_in_order<T: Float>(
    acc: &mut [DMatrix<T>],
    rest: &[&[DMatrix<T>]],
    threads: usize,
    parallel_min: usize,
) {
    if rest.is_empty() {
        return;
    }
    let mut pieces: Vec<(usize, usize, &mut [T])> = Vec::new();
    for (k, g) in acc.iter_mut().enumerate() {
        for (p, piece) in g.as_mut_slice().chunks_mut(REDUCE_PIECE).enumerate() {
            pieces.push((k, p * REDUCE_PIECE, piece));
        }
    }
    let add = |(k, at, piece): (usize, usize, &mut [T])| {
        for grads in rest {
            for (a, &b) in piece.iter_mut().zip(&grads[k].as_slice()[at..]) {
                *a += b;
            }
        }
    };
    let additions = pieces.iter().map(|p| p.2.len()).sum::<usize>() * rest.len();
    let workers = if additions < parallel_min { 1 } else { threads.clamp(1, pieces.len()) };
    share_pieces(&mut vec![(); workers], pieces, |(), piece| add(piece));
}

impl<T: Float> Shard<T> {
    /// Forward and backward over this shard's sequences; `factors` holds k_r for every position
    /// of the whole batch (1/(scored positions) each for the mean, so the shards' gradients add
    /// up to the batch mean's), of which the shard reads its own rows. The products run and
    /// round their inputs as `rounder` says; returns what those roundings did.
    pub(super) fn run(
        &mut self,
        model: &Gpt<T>,
        batch: &Batch,
        factors: &[T],
        mut rounder: Rounder,
    ) -> Result<StepRounding> {
        let t = batch.seq_len;
        let rows = self.first * t..(self.first + self.seqs) * t;
        let inputs = &batch.inputs[rows.clone()];
        let targets = &batch.targets[rows.clone()];
        let rounder = &mut rounder;
        self.forward(model, inputs, t, Outputs::Every, rounder)?;
        self.loss_sum = self.loss_and_logit_gradient(targets, &factors[rows]);
        self.backward(model, inputs, t, rounder)?;
        Ok(rounder.tally())
    }

    /// The forward pass alone over this shard's sequences, leaving −ln p(target) of each row in
    /// `nll` (and ∂L/∂z with every factor 0, that is zeros, in place of the logits).
    pub(super) fn forward_scores(
        &mut self,
        model: &Gpt<T>,
        batch: &Batch,
        mut rounder: Rounder,
    ) -> Result<StepRounding> {
        let t = batch.seq_len;
        let rows = self.first * t..(self.first + self.seqs) * t;
        let rounder = &mut rounder;
        self.forward(model, &batch.inputs[rows.clone()], t, Outputs::Every, rounder)?;
        let zeros = vec![T::zero(); rows.len()];
        self.loss_sum = self.loss_and_logit_gradient(&batch.targets[rows], &zeros);
        Ok(rounder.tally())
    }
}
