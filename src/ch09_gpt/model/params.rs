//! The model's parameters: every tensor by name, in one fixed order (the order of the gradients,
//! of AdamW's moments and of the checkpoint), which of them weight decay acts on, and the model in
//! another float type.

use super::Gpt;
use crate::ch06_attention::{Block, BlockGrads, Ffn, LayerNorm, MultiHead};
use crate::ch09_gpt::config::Positions;
use crate::error::{Result, invalid, shape_error, shape_of};
use crate::float::Float;
use nalgebra::DMatrix;

/// Tensors per block, in [`Gpt::tensors`] order.
pub const TENSORS_PER_BLOCK: usize = 16;

/// The name of tensor `i` of block `l` (our names: GPT-2's, except that the fused `c_attn` is
/// held as three matrices q, k, v).
pub fn block_tensor_name(l: usize, i: usize) -> String {
    const NAMES: [&str; TENSORS_PER_BLOCK] = [
        "ln_1.weight",
        "ln_1.bias",
        "attn.q.weight",
        "attn.q.bias",
        "attn.k.weight",
        "attn.k.bias",
        "attn.v.weight",
        "attn.v.bias",
        "attn.c_proj.weight",
        "attn.c_proj.bias",
        "ln_2.weight",
        "ln_2.bias",
        "mlp.c_fc.weight",
        "mlp.c_fc.bias",
        "mlp.c_proj.weight",
        "mlp.c_proj.bias",
    ];
    format!("h.{l}.{}", NAMES[i])
}

/// Whether tensor `i` of a block is a weight matrix (decayed by AdamW) rather than a bias or a
/// LayerNorm parameter.
fn block_tensor_decays(i: usize) -> bool {
    matches!(i, 2 | 4 | 6 | 8 | 12 | 14)
}

fn block_refs<T: Float>(b: &Block<T>) -> [&DMatrix<T>; TENSORS_PER_BLOCK] {
    let (a, f) = (&b.attn, &b.ffn);
    [
        &b.ln1.gamma,
        &b.ln1.beta,
        &a.w_q,
        &a.b_q,
        &a.w_k,
        &a.b_k,
        &a.w_v,
        &a.b_v,
        &a.w_o,
        &a.b_o,
        &b.ln2.gamma,
        &b.ln2.beta,
        &f.w1,
        &f.b1,
        &f.w2,
        &f.b2,
    ]
}

fn block_muts<T: Float>(b: &mut Block<T>) -> [&mut DMatrix<T>; TENSORS_PER_BLOCK] {
    let (a, f) = (&mut b.attn, &mut b.ffn);
    [
        &mut b.ln1.gamma,
        &mut b.ln1.beta,
        &mut a.w_q,
        &mut a.b_q,
        &mut a.w_k,
        &mut a.b_k,
        &mut a.w_v,
        &mut a.b_v,
        &mut a.w_o,
        &mut a.b_o,
        &mut b.ln2.gamma,
        &mut b.ln2.beta,
        &mut f.w1,
        &mut f.b1,
        &mut f.w2,
        &mut f.b2,
    ]
}

pub(super) fn block_grads_owned<T: Float>(g: BlockGrads<T>) -> [DMatrix<T>; TENSORS_PER_BLOCK] {
    let (a, f) = (g.attn, g.ffn);
    [
        g.ln1.d_gamma,
        g.ln1.d_beta,
        a.d_w_q,
        a.d_b_q,
        a.d_w_k,
        a.d_b_k,
        a.d_w_v,
        a.d_b_v,
        a.d_w_o,
        a.d_b_o,
        g.ln2.d_gamma,
        g.ln2.d_beta,
        f.d_w1,
        f.d_b1,
        f.d_w2,
        f.d_b2,
    ]
}

impl<T: Float> Gpt<T> {
    /// Every parameter tensor with its name, in a fixed order: `wte`, `wpe` (if learned), each
    /// block's 16 tensors ([`block_tensor_name`]), `ln_f.weight`, `ln_f.bias`, `lm_head.weight`
    /// (if untied).
    pub fn tensors(&self) -> Vec<(String, &DMatrix<T>)> {
        let mut out = vec![("wte.weight".to_string(), &self.wte)];
        if self.config.positions == Positions::Learned {
            out.push(("wpe.weight".to_string(), &self.wpe));
        }
        for (l, b) in self.blocks.iter().enumerate() {
            out.extend(
                block_refs(b).into_iter().enumerate().map(|(i, m)| (block_tensor_name(l, i), m)),
            );
        }
        out.push(("ln_f.weight".to_string(), &self.ln_f.gamma));
        out.push(("ln_f.bias".to_string(), &self.ln_f.beta));
        if let Some(h) = &self.lm_head {
            out.push(("lm_head.weight".to_string(), h));
        }
        out
    }

    /// The same tensors, mutable, in the same order.
    pub fn tensors_mut(&mut self) -> Vec<&mut DMatrix<T>> {
        let mut out = vec![&mut self.wte];
        if self.config.positions == Positions::Learned {
            out.push(&mut self.wpe);
        }
        for b in self.blocks.iter_mut() {
            out.extend(block_muts(b));
        }
        out.push(&mut self.ln_f.gamma);
        out.push(&mut self.ln_f.beta);
        if let Some(h) = self.lm_head.as_mut() {
            out.push(h);
        }
        out
    }

    /// Which tensors AdamW decays: the embeddings and the weight matrices, not the biases and
    /// LayerNorm parameters.
    pub fn decay_mask(&self) -> Vec<bool> {
        let mut out = vec![true];
        if self.config.positions == Positions::Learned {
            out.push(true);
        }
        for _ in &self.blocks {
            out.extend((0..TENSORS_PER_BLOCK).map(block_tensor_decays));
        }
        out.extend([false, false]);
        if self.lm_head.is_some() {
            out.push(true);
        }
        out
    }

    /// The number of parameters (equals
    /// [`Config::parameter_count`](crate::ch09_gpt::config::Config::parameter_count) by
    /// construction; a test checks it).
    pub fn parameter_count(&self) -> usize {
        self.tensors().iter().map(|(_, m)| m.len()).sum()
    }

    /// Replaces every parameter tensor, in [`Gpt::tensors`] order; shapes must match.
    pub fn set_tensors(&mut self, values: &[DMatrix<T>]) -> Result<()> {
        let names: Vec<String> = self.tensors().into_iter().map(|(n, _)| n).collect();
        if values.len() != names.len() {
            return Err(invalid(
                "Gpt::set_tensors",
                "values",
                format!("{} tensors given, the model has {}", values.len(), names.len()),
            ));
        }
        for ((slot, v), name) in self.tensors_mut().into_iter().zip(values).zip(&names) {
            if slot.shape() != v.shape() {
                return Err(shape_error(
                    "Gpt::set_tensors",
                    "a tensor",
                    format!("{name} {}", shape_of(slot)),
                    shape_of(v),
                ));
            }
            slot.copy_from(v);
        }
        Ok(())
    }

    /// The model in another float type (f64 for checks, f32 for speed).
    pub fn cast<U: Float>(&self) -> Gpt<U> {
        let c = |m: &DMatrix<T>| crate::float::cast::<T, U>(m);
        let ln = |l: &LayerNorm<T>| LayerNorm {
            gamma: c(&l.gamma),
            beta: c(&l.beta),
            eps: l.eps,
            placement: l.placement,
        };
        Gpt {
            config: self.config,
            wte: c(&self.wte),
            wpe: c(&self.wpe),
            blocks: self
                .blocks
                .iter()
                .map(|b| Block {
                    attn: MultiHead {
                        heads: b.attn.heads,
                        w_q: c(&b.attn.w_q),
                        b_q: c(&b.attn.b_q),
                        w_k: c(&b.attn.w_k),
                        b_k: c(&b.attn.b_k),
                        w_v: c(&b.attn.w_v),
                        b_v: c(&b.attn.b_v),
                        w_o: c(&b.attn.w_o),
                        b_o: c(&b.attn.b_o),
                    },
                    ln1: ln(&b.ln1),
                    ffn: Ffn {
                        w1: c(&b.ffn.w1),
                        b1: c(&b.ffn.b1),
                        w2: c(&b.ffn.w2),
                        b2: c(&b.ffn.b2),
                        act: b.ffn.act,
                    },
                    ln2: ln(&b.ln2),
                    order: b.order,
                })
                .collect(),
            ln_f: ln(&self.ln_f),
            lm_head: self.lm_head.as_ref().map(c),
        }
    }
}
