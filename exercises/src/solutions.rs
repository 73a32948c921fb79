//! The main crate's functions in the exercises' own signatures, where the two differ: the
//! `solutions` feature answers those exercises with them, and `tests/planted.rs` proves each judge
//! passes them. One module per chapter that needs one.

/// The main crate's functions in this chapter's one-sequence signatures (used by the
/// `solutions` feature and by the judges' own tests).
pub mod ch06_attention {
    use llm_workbook::Result;
    use llm_workbook::ch06_attention as book;
    use nalgebra::DMatrix;

    fn spec(q: &DMatrix<f64>, k: &DMatrix<f64>, causal: bool) -> book::AttnSpec<f64> {
        let spec = book::AttnSpec::cross(q.nrows(), k.nrows());
        book::AttnSpec { causal, ..spec }
    }

    /// The exercise `attention_forward` answered by the main crate's `attention_forward`.
    pub fn attention_forward(
        q: &DMatrix<f64>,
        k: &DMatrix<f64>,
        v: &DMatrix<f64>,
        causal: bool,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>)> {
        let a = book::attention_forward(q, k, v, &spec(q, k, causal))?;
        Ok((a.out, a.weights))
    }

    /// The exercise `attention_backward` answered by the main crate's `attention_backward`.
    pub fn attention_backward(
        q: &DMatrix<f64>,
        k: &DMatrix<f64>,
        v: &DMatrix<f64>,
        weights: &DMatrix<f64>,
        d_out: &DMatrix<f64>,
        causal: bool,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)> {
        let g = book::attention_backward(q, k, v, weights, d_out, &spec(q, k, causal))?;
        Ok((g.d_q, g.d_k, g.d_v))
    }

    fn norm(gamma: &DMatrix<f64>, beta: DMatrix<f64>, eps: f64) -> book::LayerNorm<f64> {
        book::LayerNorm { gamma: gamma.clone(), beta, eps, placement: book::Epsilon::InsideSqrt }
    }

    /// The exercise `layer_norm_forward` answered by the main crate's `layer_norm_forward`.
    pub fn layer_norm_forward(
        x: &DMatrix<f64>,
        gamma: &DMatrix<f64>,
        beta: &DMatrix<f64>,
        eps: f64,
    ) -> Result<DMatrix<f64>> {
        Ok(book::layer_norm_forward(&norm(gamma, beta.clone(), eps), x)?.0)
    }

    /// The exercise `layer_norm_backward` answered by the main crate's `layer_norm_backward`.
    pub fn layer_norm_backward(
        x: &DMatrix<f64>,
        gamma: &DMatrix<f64>,
        d_y: &DMatrix<f64>,
        eps: f64,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)> {
        let ln = norm(gamma, DMatrix::zeros(gamma.nrows(), gamma.ncols()), eps);
        let (_, cache) = book::layer_norm_forward(&ln, x)?;
        let g = book::layer_norm_backward(&ln, &cache, d_y)?;
        Ok((g.d_x, g.d_gamma, g.d_beta))
    }
}

/// The main crate's functions in this chapter's signatures.
pub mod ch07_encoder_decoder {
    use llm_workbook::Result;
    use llm_workbook::ch06_attention::{MhaGrads, MultiHead};
    use llm_workbook::ch07_encoder_decoder as book;
    use llm_workbook::ch07_encoder_decoder::Batch;
    use nalgebra::DMatrix;

    /// The exercise `cross_attention_backward` by the main crate's forward and backward.
    pub fn cross_attention_backward(
        y: &DMatrix<f64>,
        y_batch: &Batch,
        e: &DMatrix<f64>,
        e_batch: &Batch,
        w: &MultiHead<f64>,
        d_out: &DMatrix<f64>,
    ) -> Result<MhaGrads<f64>> {
        let (_, cache) = book::cross_attention_forward(y, y_batch, e, e_batch, w)?;
        book::cross_attention_backward(w, &cache, d_out)
    }

    /// The exercise `loss_and_gradients` by the main crate's method of the same name.
    pub fn loss_and_gradients(
        model: &book::EncoderDecoder<f64>,
        source: &[Vec<usize>],
        target_in: &[Vec<usize>],
        labels: &[Vec<usize>],
    ) -> Result<book::Gradients<f64>> {
        model.loss_and_gradients(source, target_in, labels)
    }
}

/// The main crate's functions in this chapter's signatures.
pub mod ch08_tokens {
    use llm_workbook::Result;
    use llm_workbook::ch08_tokens::TokenId;
    use llm_workbook::ch08_tokens::ngram::NGramModel;
    use nalgebra::DMatrix;

    /// The exercise `bigram_counts` from the main crate's n-gram model.
    pub fn bigram_counts(tokens: &[TokenId], vocab_size: usize) -> Result<DMatrix<f64>> {
        let model = NGramModel::fit(tokens, 2, vocab_size)?;
        Ok(DMatrix::from_fn(vocab_size, vocab_size, |a, b| {
            model.followers(&[a as TokenId]).map_or(0.0, |f| f.count(b as TokenId) as f64)
        }))
    }

    /// The exercise `add_k_probability` from the main crate's n-gram model.
    pub fn add_k_probability(
        tokens: &[TokenId],
        vocab_size: usize,
        context: TokenId,
        next: TokenId,
        k: f64,
    ) -> Result<f64> {
        Ok(NGramModel::fit(tokens, 2, vocab_size)?.add_k(&[context], next, k))
    }
}

/// The main crate's functions in this chapter's signatures.
pub mod ch09_gpt {
    use llm_workbook::Result;
    use llm_workbook::optim::AdamConfig;
    use llm_workbook::optim::{AdamMoments, AdamW};
    use nalgebra::DMatrix;

    /// The exercise `lm_head_backward` by the crate's product and chapter 2's loss and gradient, as
    /// `Gpt::loss_and_grads` composes them.
    pub fn lm_head_backward(
        h: &DMatrix<f64>,
        w_u: &DMatrix<f64>,
        targets: &[usize],
    ) -> Result<(f64, DMatrix<f64>, DMatrix<f64>)> {
        use llm_workbook::matmul::{matmul, matmul_nt, matmul_tn};
        let z = matmul_nt(h, w_u)?; //                                     z = h W_Uᵀ
        let (loss, d_z) =
            llm_workbook::ch02_softmax::cross_entropy_from_logits_with_gradient(&z, targets)?;
        Ok((loss, matmul(&d_z, w_u)?, matmul_tn(&d_z, h)?))
    }

    /// The exercise `kv_cache_step` by writing the row and the crate's `attend_one` (one head).
    pub fn kv_cache_step(
        keys: &mut DMatrix<f64>,
        values: &mut DMatrix<f64>,
        len: usize,
        q: &[f64],
        k: &[f64],
        v: &[f64],
    ) -> Result<Vec<f64>> {
        const OP: &str = "kv_cache_step";
        let d = keys.ncols();
        if len >= keys.nrows() || values.shape() != keys.shape() {
            return Err(llm_workbook::Error::InvalidValue {
                op: OP,
                arg: "len",
                reason: format!("{len} tokens cached; the cache holds {} rows", keys.nrows()),
            });
        }
        if k.len() != d || v.len() != d || q.len() != d {
            return Err(llm_workbook::Error::InvalidValue {
                op: OP,
                arg: "q, k, v",
                reason: format!("each must have the cache's width {d}"),
            });
        }
        keys.row_mut(len).copy_from_slice(k);
        values.row_mut(len).copy_from_slice(v);
        llm_workbook::ch09_gpt::fast::attend_one(OP, q, keys, values, len + 1, 1)
    }

    /// The exercise `adamw_step` answered by the main crate's `AdamW`.
    pub fn adamw_step(
        theta: &mut DMatrix<f64>,
        grad: &DMatrix<f64>,
        m: &mut DMatrix<f64>,
        v: &mut DMatrix<f64>,
        steps: u64,
        config: &AdamConfig,
        weight_decay: f64,
    ) -> Result<()> {
        let mut opt = AdamW::new(*config, weight_decay)?;
        if steps > 0 {
            opt.moments = AdamMoments::from_parts(vec![m.clone()], vec![v.clone()], steps)?;
        }
        opt.step(&mut [theta], &[grad], &[true])?;
        *m = opt.moments.first()[0].clone();
        *v = opt.moments.second()[0].clone();
        Ok(())
    }
}

/// The main crate's product in this chapter's signature.
pub mod ch10_matmul {
    use nalgebra::DMatrix;

    /// The rows of the register tile (the main crate's scalar tile).
    pub const MR: usize = llm_workbook::matmul::lab::SCALAR_TILE.0;
    /// The columns of the register tile.
    pub const NR: usize = llm_workbook::matmul::lab::SCALAR_TILE.1;

    /// The exercise `micro_kernel`: one call of the main crate's portable micro-kernel.
    pub fn micro_kernel(
        kc: usize,
        a: &[f64],
        b: &[f64],
        alpha: f64,
        beta: f64,
        c: &mut DMatrix<f64>,
    ) {
        let _ = llm_workbook::matmul::lab::scalar_update(kc, a, b, alpha, beta, c);
    }
}

/// The main crate's chapter-11 functions in this chapter's signatures.
pub mod ch11_precision {
    /// The exercise `kahan_sum`: the main crate's, over a slice.
    pub fn kahan_sum(xs: &[f32]) -> f32 {
        llm_workbook::ch11_precision::kahan_sum(xs.iter().copied())
    }

    /// The exercise `quantize_block`: the main crate's scale and rounding.
    pub fn quantize_block(w: &[f32], max_level: i32) -> (f32, Vec<i8>) {
        use llm_workbook::ch11_precision::quant::{block_scale, quantize_value};
        let s = block_scale(w, max_level);
        (s, w.iter().map(|&x| quantize_value(x, s, max_level)).collect())
    }

    /// The exercise `dequantize_block`: the main crate's, over the codes given.
    pub fn dequantize_block(scale: f32, codes: &[i8]) -> Vec<f32> {
        use llm_workbook::ch11_precision::quant::{BLOCK, Block};
        let mut block = Block { scale, codes: [0; BLOCK] };
        let n = codes.len().min(BLOCK);
        block.codes[..n].copy_from_slice(&codes[..n]);
        llm_workbook::ch11_precision::quant::dequantize_block(&block)[..n].to_vec()
    }

    /// The exercise `int8_block_dot`: the main crate's column sum of one block, the activations
    /// and codes padded with zeros to 32.
    pub fn int8_block_dot(x: &[f32], scale: f32, codes: &[i8]) -> f32 {
        use llm_workbook::ch11_precision::quant::{BLOCK, Storage};
        let (mut xs, mut qs) = ([0.0f32; BLOCK], [0u8; BLOCK]);
        let n = x.len().min(codes.len()).min(BLOCK);
        xs[..n].copy_from_slice(&x[..n]);
        for (q, &c) in qs.iter_mut().zip(&codes[..n]) {
            *q = c as u8;
        }
        llm_workbook::ch11_precision::quant_step::column_dot_reference(
            &xs,
            &[scale],
            &qs,
            Storage::Int8,
        )
    }
}

/// The main crate's chapter-12 functions in this chapter's signatures.
pub mod ch12_modern {
    use llm_workbook::Result;
    use llm_workbook::ch06_attention::{concat_heads, split_heads};
    use llm_workbook::ch12_modern as book;
    use llm_workbook::ch12_modern::{Gate, GatedMlp, Pairing, Positions, RmsNorm, RopeTable};
    use nalgebra::DMatrix;

    /// The exercise `rms_norm_backward` by the main crate's forward and backward.
    pub fn rms_norm_backward(
        x: &DMatrix<f64>,
        gamma: &DMatrix<f64>,
        d_y: &DMatrix<f64>,
        eps: f64,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>)> {
        let norm = RmsNorm { gamma: gamma.clone(), eps };
        let (_, cache) = book::rms_norm_forward(&norm, x)?;
        let g = book::rms_norm_backward(&norm, &cache, d_y)?;
        Ok((g.d_x, g.d_gamma))
    }

    /// Each head of `m` through `rotate` (the main crate's forward or backward) with the table
    /// of positions `start` … `start` + T − 1.
    fn per_head(
        m: &DMatrix<f64>,
        n_heads: usize,
        start: usize,
        base: f64,
        rotate: impl Fn(&RopeTable<f64>, &DMatrix<f64>, Positions) -> Result<DMatrix<f64>>,
    ) -> Result<DMatrix<f64>> {
        let heads = split_heads(m, n_heads)?;
        let d_h = heads.first().map_or(0, DMatrix::ncols);
        let table = RopeTable::new(start + m.nrows(), d_h, base)?;
        let at = Positions { seq_len: m.nrows(), start };
        let rotated = heads.iter().map(|h| rotate(&table, h, at)).collect::<Result<Vec<_>>>()?;
        concat_heads(&rotated)
    }

    /// The exercise `rope_forward` by the main crate's table and rotation, head by head.
    pub fn rope_forward(
        q: &DMatrix<f64>,
        n_heads: usize,
        start: usize,
        base: f64,
        pairing: Pairing,
    ) -> Result<DMatrix<f64>> {
        per_head(q, n_heads, start, base, |t, h, at| book::rope_forward(t, pairing, h, at))
    }

    /// The exercise `rope_backward` by the main crate's transposed rotation, head by head.
    pub fn rope_backward(
        d_y: &DMatrix<f64>,
        n_heads: usize,
        start: usize,
        base: f64,
        pairing: Pairing,
    ) -> Result<DMatrix<f64>> {
        per_head(d_y, n_heads, start, base, |t, h, at| book::rope_backward(t, pairing, h, at))
    }

    /// The exercise `swiglu_backward` by the main crate's gated MLP with the SiLU gate.
    pub fn swiglu_backward(
        x: &DMatrix<f64>,
        w_gate: &DMatrix<f64>,
        w_up: &DMatrix<f64>,
        w_down: &DMatrix<f64>,
        d_y: &DMatrix<f64>,
    ) -> Result<book::GluGrads<f64>> {
        let p = GatedMlp {
            w_gate: w_gate.clone(),
            w_up: w_up.clone(),
            w_down: w_down.clone(),
            gate: Gate::Swish,
        };
        let (_, cache) = book::glu_forward(&p, x)?;
        book::glu_backward(&p, &cache, d_y)
    }

    /// The exercise `gqa_backward` by the main crate's forward and backward.
    pub fn gqa_backward(
        p: &book::Gqa<f64>,
        x: &DMatrix<f64>,
        seq_len: usize,
        d_y: &DMatrix<f64>,
    ) -> Result<book::GqaGrads<f64>> {
        let (_, cache) = book::gqa_forward(p, x, seq_len)?;
        book::gqa_backward(p, &cache, d_y)
    }

    /// The exercise `kv_cache_bytes_per_token` by the main crate's `KvCacheShape`.
    pub fn kv_cache_bytes_per_token(
        layers: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        bytes_per_value: usize,
    ) -> Result<u64> {
        book::KvCacheShape { layers, n_heads, n_kv_heads, head_dim }
            .bytes_per_token(bytes_per_value)
    }
}

/// The main crate's chapter-13 functions in this chapter's signatures.
pub mod ch13_finetune {
    use llm_workbook::Result;
    use llm_workbook::ch13_finetune as book;
    use llm_workbook::ch13_finetune::{DpoPair, GrpoSample, GrpoSpec, Lora, LoraGrads};
    use nalgebra::DMatrix;

    /// The exercise `masked_cross_entropy` by the main crate's forward and backward.
    pub fn masked_cross_entropy(
        logits: &DMatrix<f64>,
        targets: &[usize],
        mask: &[bool],
    ) -> Result<(f64, DMatrix<f64>)> {
        let (loss, cache) = book::masked_cross_entropy_forward(logits, targets, mask)?;
        Ok((loss, book::masked_cross_entropy_backward(&cache)?))
    }

    /// The exercise `lora_backward` by the main crate's forward and backward.
    pub fn lora_backward(layer: &Lora, x: &DMatrix<f64>, d_y: &DMatrix<f64>) -> Result<LoraGrads> {
        let (_, cache) = book::lora_forward(layer, x)?;
        book::lora_backward(layer, &cache, d_y)
    }

    /// The exercise `dpo_loss_and_gradient` by the main crate's forward and backward.
    pub fn dpo_loss_and_gradient(
        pairs: &[DpoPair],
        beta: f64,
    ) -> Result<(f64, Vec<f64>, Vec<f64>)> {
        let (loss, cache) = book::dpo_forward(pairs, beta)?;
        let g = book::dpo_backward(&cache);
        Ok((loss, g.d_chosen, g.d_rejected))
    }

    /// The exercise `grpo_loss_and_gradient` by the main crate's forward and backward.
    pub fn grpo_loss_and_gradient(
        spec: GrpoSpec,
        sample: GrpoSample,
    ) -> Result<(f64, DMatrix<f64>)> {
        let (loss, cache) = book::grpo_forward(spec, sample)?;
        Ok((loss, book::grpo_backward(&cache)?))
    }
}
