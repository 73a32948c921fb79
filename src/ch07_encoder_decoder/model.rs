//! The encoder–decoder model: the padded cross-entropy it is trained on, its shape, its forward
//! pass (embeddings plus sinusoidal positions, the encoder stack, the decoder stack, the output
//! projection), its backward pass, and greedy decoding.

use super::cross_attention::Batch;
use super::layers::{
    DecoderBlock, DecoderBlockCache, block_grads_as_params, block_tensors, block_tensors_mut,
    decoder_block_backward, decoder_block_forward, encoder_block, encoder_block_forward,
};
use crate::ch06_attention::{Block, BlockCache, block_backward};
use crate::error::{Error, Result, invalid, shape_error, shape_of};
use crate::float::Float;
use crate::matmul::{matmul, matmul_nt, matmul_tn};
use crate::rng::Rng;
use nalgebra::DMatrix;

// ───────────────────────────── the loss ─────────────────────────────

fn add_row<T: Float>(m: &mut DMatrix<T>, row: &DMatrix<T>) {
    for r in 0..m.nrows() {
        for c in 0..m.ncols() {
            m[(r, c)] += row[(0, c)];
        }
    }
}

fn column_sums<T: Float>(m: &DMatrix<T>) -> DMatrix<T> {
    DMatrix::from_fn(1, m.ncols(), |_, c| m.column(c).iter().copied().sum())
}

/// Cross-entropy of the rows of `logits` (N×V) against `labels` (one per row; `None` rows, the
/// padding, are skipped), averaged over the labelled rows. The labelled rows go through chapter 2's
/// [`crate::ch02_softmax::cross_entropy_from_logits_with_gradient`] (log-sum-exp, from the logits);
/// returns the loss and ∂L/∂logits = (softmax − one-hot)/N on labelled rows, 0 on padding rows.
pub fn padded_cross_entropy<T: Float>(
    logits: &DMatrix<T>,
    labels: &[Option<usize>],
) -> Result<(T, DMatrix<T>)> {
    const OP: &str = "padded_cross_entropy";
    if labels.len() != logits.nrows() {
        return Err(shape_error(
            OP,
            "labels",
            format!("{} labels (one per row of logits)", logits.nrows()),
            format!("{}", labels.len()),
        ));
    }
    let rows: Vec<usize> = (0..labels.len()).filter(|&r| labels[r].is_some()).collect();
    if rows.is_empty() {
        return Err(Error::Empty { op: OP, arg: "labels (every row is padding)" });
    }
    let targets: Vec<usize> = labels.iter().flatten().copied().collect();
    let real = DMatrix::from_fn(rows.len(), logits.ncols(), |i, c| logits[(rows[i], c)]);
    let (loss, d_real) =
        crate::ch02_softmax::cross_entropy_from_logits_with_gradient(&real, &targets)?;
    let mut d = DMatrix::zeros(logits.nrows(), logits.ncols());
    for (i, &r) in rows.iter().enumerate() {
        d.row_mut(r).copy_from(&d_real.row(i)); // padding rows keep a zero gradient
    }
    Ok((loss, d))
}

// ───────────────────────────── the model ─────────────────────────────

/// The shape of an encoder–decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// Tokens in the vocabulary (source and target share it).
    pub vocab: usize,
    /// C = d_model, the width of every row.
    pub width: usize,
    /// Attention heads (must divide the width).
    pub heads: usize,
    /// The feed-forward net's hidden width F.
    pub hidden: usize,
    /// Encoder layers.
    pub encoder_layers: usize,
    /// Decoder layers.
    pub decoder_layers: usize,
    /// The most positions either stream may hold (the source; the start token plus the target).
    pub max_len: usize,
}

impl ModelConfig {
    fn check(&self) -> Result<()> {
        const OP: &str = "EncoderDecoder::new";
        if self.vocab == 0
            || self.width == 0
            || self.hidden == 0
            || self.max_len == 0
            || self.encoder_layers == 0
            || self.decoder_layers == 0
        {
            return Err(invalid(OP, "config", format!("every size must be positive: {self:?}")));
        }
        if self.heads == 0
            || !self.width.is_multiple_of(self.heads)
            || !self.width.is_multiple_of(2)
        {
            return Err(invalid(
                OP,
                "width and heads",
                format!(
                    "the width {} must be even and split into {} heads",
                    self.width, self.heads
                ),
            ));
        }
        Ok(())
    }
}

/// A transformer encoder–decoder: token embeddings plus sinusoidal positions on both sides, a
/// stack of encoder layers (chapter 6's [`Block`], post-LN), a stack of [`DecoderBlock`]s that
/// cross-attend to the last encoder output, and an output projection to logits over the
/// vocabulary, logits = Y W_out + b_out.
///
/// The same type holds gradients (same shapes), so optimisers pair tensors by position.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderDecoder<T: Float> {
    /// The shape.
    pub config: ModelConfig,
    /// Source token embeddings, V×C.
    pub source_embedding: DMatrix<T>,
    /// Target token embeddings, V×C.
    pub target_embedding: DMatrix<T>,
    /// The encoder layers.
    pub encoder: Vec<Block<T>>,
    /// The decoder layers.
    pub decoder: Vec<DecoderBlock<T>>,
    /// W_out, C×V.
    pub w_out: DMatrix<T>,
    /// b_out, 1×V.
    pub b_out: DMatrix<T>,
}

/// Everything a forward pass over a batch keeps for the backward pass.
#[derive(Clone, Debug)]
pub struct ForwardCache<T: Float> {
    source: Vec<Vec<usize>>,
    target_in: Vec<Vec<usize>>,
    source_batch: Batch,
    target_batch: Batch,
    encoder: Vec<BlockCache<T>>,
    /// The decoder layers' caches (their cross-attention weights included).
    pub decoder: Vec<DecoderBlockCache<T>>,
    decoder_out: DMatrix<T>,
}

impl<T: Float> ForwardCache<T> {
    /// The decoder inputs as one padded batch (its rows are the logits' rows).
    pub fn target_batch(&self) -> &Batch {
        &self.target_batch
    }
}

/// The gradients and loss of one batch.
#[derive(Clone, Debug)]
pub struct Gradients<T: Float> {
    /// The mean cross-entropy over the real target positions.
    pub loss: T,
    /// ∂loss/∂(every tensor), in an [`EncoderDecoder`] of the model's shapes.
    pub grads: EncoderDecoder<T>,
}

impl<T: Float> EncoderDecoder<T> {
    /// A model with random weights from `seed`: embeddings N(0, 1), attention N(0, 1/C), FFN
    /// He-style, W_out N(0, 1/C), LayerNorm γ = 1, β = 0, biases 0.
    pub fn new(config: ModelConfig, seed: u64) -> Result<Self> {
        config.check()?;
        let mut rng = Rng::new(seed);
        let (v, c) = (config.vocab, config.width);
        Ok(EncoderDecoder {
            config,
            source_embedding: rng.normal_matrix(v, c, 1.0),
            target_embedding: rng.normal_matrix(v, c, 1.0),
            encoder: (0..config.encoder_layers)
                .map(|_| encoder_block(c, config.heads, config.hidden, &mut rng))
                .collect::<Result<_>>()?,
            decoder: (0..config.decoder_layers)
                .map(|_| DecoderBlock::random(c, config.heads, config.hidden, &mut rng))
                .collect::<Result<_>>()?,
            w_out: rng.normal_matrix(c, v, 1.0 / (c as f64).sqrt()),
            b_out: DMatrix::zeros(1, v),
        })
    }

    /// Every tensor in a fixed order: embeddings, encoder layers, decoder layers, W_out, b_out.
    pub fn tensors(&self) -> Vec<&DMatrix<T>> {
        let mut v = vec![&self.source_embedding, &self.target_embedding];
        for b in &self.encoder {
            v.extend(block_tensors(b));
        }
        for b in &self.decoder {
            v.extend(b.tensors());
        }
        v.extend([&self.w_out, &self.b_out]);
        v
    }

    /// Every tensor, mutable, in the order of [`EncoderDecoder::tensors`].
    pub fn tensors_mut(&mut self) -> Vec<&mut DMatrix<T>> {
        let mut v = vec![&mut self.source_embedding, &mut self.target_embedding];
        for b in &mut self.encoder {
            v.extend(block_tensors_mut(b));
        }
        for b in &mut self.decoder {
            v.extend(b.tensors_mut());
        }
        v.extend([&mut self.w_out, &mut self.b_out]);
        v
    }

    /// The number of trainable numbers.
    pub fn parameter_count(&self) -> usize {
        self.tensors().iter().map(|m| m.len()).sum()
    }

    /// A copy with every tensor replaced, in the order of [`EncoderDecoder::tensors`] (shapes
    /// must match). For gradient checks and for loading.
    pub fn with_tensors(&self, tensors: &[DMatrix<T>]) -> Result<Self> {
        let mut out = self.clone();
        let n = out.tensors().len();
        if tensors.len() != n {
            return Err(invalid(
                "EncoderDecoder::with_tensors",
                "tensors",
                format!("expected {n} tensors, got {}", tensors.len()),
            ));
        }
        for (i, (slot, t)) in out.tensors_mut().into_iter().zip(tensors).enumerate() {
            if slot.shape() != t.shape() {
                return Err(shape_error(
                    "EncoderDecoder::with_tensors",
                    "tensor",
                    format!("tensor {i} of {}", shape_of(slot)),
                    shape_of(t),
                ));
            }
            slot.copy_from(t);
        }
        Ok(out)
    }

    /// All zeros, the shapes of this model (a gradient accumulator).
    pub fn zeros_like(&self) -> Self {
        let mut z = self.clone();
        for t in z.tensors_mut() {
            t.fill(T::zero());
        }
        z
    }

    fn check_tokens(
        &self,
        op: &'static str,
        arg: &'static str,
        seqs: &[Vec<usize>],
    ) -> Result<Batch> {
        if seqs.is_empty() {
            return Err(Error::Empty { op, arg });
        }
        for (b, s) in seqs.iter().enumerate() {
            if s.is_empty() {
                return Err(invalid(op, arg, format!("sequence {b} is empty")));
            }
            if s.len() > self.config.max_len {
                return Err(invalid(
                    op,
                    arg,
                    format!(
                        "sequence {b} has {} positions, more than the model's maximum {}",
                        s.len(),
                        self.config.max_len
                    ),
                ));
            }
            if let Some(&t) = s.iter().find(|&&t| t >= self.config.vocab) {
                return Err(invalid(
                    op,
                    arg,
                    format!(
                        "sequence {b} holds token id {t}, outside the vocabulary 0..{}",
                        self.config.vocab
                    ),
                ));
            }
        }
        let len = seqs.iter().map(|s| s.len()).max().unwrap_or(1);
        Batch::new(len, seqs.iter().map(|s| s.len()).collect())
    }

    /// Rows E[token] + PE[position]; padding rows (past a sequence's end) are zero.
    fn embed(&self, table: &DMatrix<T>, seqs: &[Vec<usize>], batch: &Batch) -> Result<DMatrix<T>> {
        let c = self.config.width;
        let pe = crate::ch05_positions::sinusoidal::<T>(batch.len, c)?;
        let mut x = DMatrix::zeros(batch.rows(), c);
        for (b, s) in seqs.iter().enumerate() {
            for (p, &t) in s.iter().enumerate() {
                for j in 0..c {
                    x[(b * batch.len + p, j)] = table[(t, j)] + pe[(p, j)];
                }
            }
        }
        Ok(x)
    }

    fn embed_backward(
        d_table: &mut DMatrix<T>,
        seqs: &[Vec<usize>],
        batch: &Batch,
        d_x: &DMatrix<T>,
    ) {
        for (b, s) in seqs.iter().enumerate() {
            for (p, &t) in s.iter().enumerate() {
                for j in 0..d_table.ncols() {
                    d_table[(t, j)] += d_x[(b * batch.len + p, j)];
                }
            }
        }
    }

    /// Runs the encoder over the source sequences: the encoder output ((B·T_s)×C), its batch and
    /// the layer caches.
    pub fn encode(&self, source: &[Vec<usize>]) -> Result<(DMatrix<T>, Batch, Vec<BlockCache<T>>)> {
        let batch = self.check_tokens("EncoderDecoder::encode", "source", source)?;
        let mut x = self.embed(&self.source_embedding, source, &batch)?;
        let mut caches = Vec::with_capacity(self.encoder.len());
        for block in &self.encoder {
            let (out, cache) = encoder_block_forward(&x, &batch, block)?;
            x = out;
            caches.push(cache);
        }
        Ok((x, batch, caches))
    }

    /// Logits ((B·T_t)×V) for every position of the decoder inputs (start token first), given an
    /// encoder output; also the forward cache.
    pub fn forward(
        &self,
        source: &[Vec<usize>],
        target_in: &[Vec<usize>],
    ) -> Result<(DMatrix<T>, ForwardCache<T>)> {
        const OP: &str = "EncoderDecoder::forward";
        let (e, source_batch, encoder) = self.encode(source)?;
        let target_batch = self.check_tokens(OP, "target", target_in)?;
        if target_in.len() != source.len() {
            return Err(shape_error(
                OP,
                "source and target batches",
                format!("{} target sequences", source.len()),
                format!("{}", target_in.len()),
            ));
        }
        let mut y = self.embed(&self.target_embedding, target_in, &target_batch)?;
        let mut decoder = Vec::with_capacity(self.decoder.len());
        for block in &self.decoder {
            let (out, cache) = decoder_block_forward(&y, &target_batch, &e, &source_batch, block)?;
            y = out;
            decoder.push(cache);
        }
        let mut logits = matmul(&y, &self.w_out)?;
        add_row(&mut logits, &self.b_out);
        let cache = ForwardCache {
            source: source.to_vec(),
            target_in: target_in.to_vec(),
            source_batch,
            target_batch,
            encoder,
            decoder,
            decoder_out: y,
        };
        Ok((logits, cache))
    }

    /// Teacher forcing: the decoder reads `target_in` = [start, t₁, …, t_n] and is scored on
    /// predicting `labels` = [t₁, …, t_n, end] position by position (the two must have equal
    /// lengths per sequence). Returns the mean cross-entropy over all real positions and the
    /// gradient of every tensor.
    pub fn loss_and_gradients(
        &self,
        source: &[Vec<usize>],
        target_in: &[Vec<usize>],
        labels: &[Vec<usize>],
    ) -> Result<Gradients<T>> {
        const OP: &str = "EncoderDecoder::loss_and_gradients";
        let (logits, cache) = self.forward(source, target_in)?;
        self.check_tokens(OP, "labels", labels)?;
        if labels.len() != target_in.len()
            || labels.iter().zip(target_in).any(|(l, t)| l.len() != t.len())
        {
            return Err(shape_error(
                OP,
                "labels",
                "one label per decoder input position",
                format!(
                    "{} label sequences for {} inputs, or unequal lengths",
                    labels.len(),
                    target_in.len()
                ),
            ));
        }
        let tb = cache.target_batch();
        let mut row_labels = vec![None; tb.rows()];
        for (b, l) in labels.iter().enumerate() {
            for (p, &t) in l.iter().enumerate() {
                row_labels[b * tb.len + p] = Some(t);
            }
        }
        let (loss, d_logits) = padded_cross_entropy(&logits, &row_labels)?;
        let grads = self.backward(&cache, &d_logits)?;
        Ok(Gradients { loss, grads })
    }

    /// The backward pass from ∂L/∂logits to every tensor.
    pub fn backward(
        &self,
        cache: &ForwardCache<T>,
        d_logits: &DMatrix<T>,
    ) -> Result<EncoderDecoder<T>> {
        let mut g = self.zeros_like();
        g.w_out = matmul_tn(&cache.decoder_out, d_logits)?; // logits = Y W_out + b_out
        g.b_out = column_sums(d_logits);
        let mut d_y = matmul_nt(d_logits, &self.w_out)?;
        let mut d_e = DMatrix::zeros(cache.source_batch.rows(), self.config.width);
        for (i, block) in self.decoder.iter().enumerate().rev() {
            let (dy, de, gb) = decoder_block_backward(block, &cache.decoder[i], &d_y)?;
            d_y = dy;
            d_e += de; // every decoder layer reads the same encoder output
            g.decoder[i] = gb;
        }
        Self::embed_backward(&mut g.target_embedding, &cache.target_in, &cache.target_batch, &d_y);
        for (i, block) in self.encoder.iter().enumerate().rev() {
            let mut gb = block_backward(block, &cache.encoder[i], &d_e)?;
            d_e = std::mem::replace(&mut gb.d_x, DMatrix::zeros(0, 0));
            g.encoder[i] = block_grads_as_params(block, gb);
        }
        Self::embed_backward(&mut g.source_embedding, &cache.source, &cache.source_batch, &d_e);
        Ok(g)
    }

    /// Greedy decoding: encode each source once, then start from `[start]` and append the argmax
    /// token until `end` or until the decoder input reaches the model's maximum length. Returns
    /// each output without the start and end tokens.
    pub fn greedy_decode(
        &self,
        source: &[Vec<usize>],
        start: usize,
        end: usize,
    ) -> Result<Vec<Vec<usize>>> {
        const OP: &str = "EncoderDecoder::greedy_decode";
        for (arg, t) in [("start token", start), ("end token", end)] {
            if t >= self.config.vocab {
                return Err(invalid(
                    OP,
                    arg,
                    format!("{t} is outside the vocabulary 0..{}", self.config.vocab),
                ));
            }
        }
        let (e, source_batch, _) = self.encode(source)?;
        let mut inputs: Vec<Vec<usize>> = vec![vec![start]; source.len()];
        let mut done = vec![false; source.len()];
        while inputs[0].len() < self.config.max_len && done.iter().any(|d| !d) {
            let batch = Batch::full(source.len(), inputs[0].len())?;
            let mut y = self.embed(&self.target_embedding, &inputs, &batch)?;
            for block in &self.decoder {
                y = decoder_block_forward(&y, &batch, &e, &source_batch, block)?.0;
            }
            let last = DMatrix::from_fn(source.len(), self.config.width, |b, j| {
                y[(b * batch.len + batch.len - 1, j)]
            });
            let mut logits = matmul(&last, &self.w_out)?;
            add_row(&mut logits, &self.b_out);
            for (b, input) in inputs.iter_mut().enumerate() {
                let next = argmax(logits.row(b).iter().copied());
                input.push(next); // finished sequences keep growing in lock-step; cut below
                if next == end {
                    done[b] = true;
                }
            }
        }
        Ok(inputs
            .into_iter()
            .map(|s| {
                let body = &s[1..];
                body.iter().position(|&t| t == end).map_or(body.to_vec(), |p| body[..p].to_vec())
            })
            .collect())
    }
}

fn argmax<T: Float>(values: impl Iterator<Item = T>) -> usize {
    let mut best = (0, T::neg_infinity());
    for (i, v) in values.enumerate() {
        if v > best.1 {
            best = (i, v);
        }
    }
    best.0
}
