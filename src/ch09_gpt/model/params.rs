//! The model's parameters: one table ([`PARAMETERS`]) says, for every tensor, its name, its shape
//! as a function of the config, its name and layout in GPT-2's files, whether AdamW decays it and
//! how [`Gpt::new`] initialises it. Everything else is derived from the table: the order of the
//! tensors (of the gradients, of AdamW's moments and of the checkpoint), the decay mask, the
//! shapes a config expects ([`Config::tensor_shapes`]), the checkpoint's tensors
//! ([`gpt2_layout`]) and the fused step's offsets into its list of gradients ([`Slots`]).

use super::Gpt;
use super::table::{PARAMETERS, Param, Shape, full_name, spec_of};
use crate::ch06_attention::{BlockGrads, LayerNorm};
use crate::ch09_gpt::config::Positions;
use crate::error::{Result, invalid, shape_error, shape_of};
use crate::float::Float;
use nalgebra::DMatrix;

// ─────────────── the table's rows as the struct's fields (the only place that maps them) ───────

/// Every field of the model that the table names, as (row, block index, matrix); `$r` is `&` or
/// `&mut`. The order here does not matter: [`Shape::order`] puts them in the table's.
macro_rules! fields {
    ($model:expr, $($r:tt)+) => {{
        let m = $model;
        let mut out = vec![(Param::Wte, None, $($r)+ m.wte), (Param::Wpe, None, $($r)+ m.wpe)];
        for (l, b) in ($($r)+ m.blocks).iter_mut_or_iter().enumerate() {
            let (a, f) = ($($r)+ b.attn, $($r)+ b.ffn);
            let l = Some(l);
            out.extend([
                (Param::Ln1Gamma, l, $($r)+ b.ln1.gamma),
                (Param::Ln1Beta, l, $($r)+ b.ln1.beta),
                (Param::WQ, l, $($r)+ a.w_q),
                (Param::BQ, l, $($r)+ a.b_q),
                (Param::WK, l, $($r)+ a.w_k),
                (Param::BK, l, $($r)+ a.b_k),
                (Param::WV, l, $($r)+ a.w_v),
                (Param::BV, l, $($r)+ a.b_v),
                (Param::WO, l, $($r)+ a.w_o),
                (Param::BO, l, $($r)+ a.b_o),
                (Param::Ln2Gamma, l, $($r)+ b.ln2.gamma),
                (Param::Ln2Beta, l, $($r)+ b.ln2.beta),
                (Param::W1, l, $($r)+ f.w1),
                (Param::B1, l, $($r)+ f.b1),
                (Param::W2, l, $($r)+ f.w2),
                (Param::B2, l, $($r)+ f.b2),
            ]);
        }
        out.push((Param::LnFGamma, None, $($r)+ m.ln_f.gamma));
        out.push((Param::LnFBeta, None, $($r)+ m.ln_f.beta));
        if let Some(h) = ($($r)+ m.lm_head).iter_mut_or_iter().next() {
            out.push((Param::LmHead, None, h));
        }
        out
    }};
}

/// `iter()` or `iter_mut()`, whichever the borrow allows, so one macro serves both.
trait IterEither {
    type Iter;
    fn iter_mut_or_iter(self) -> Self::Iter;
}

impl<'a, X> IterEither for &'a Vec<X> {
    type Iter = std::slice::Iter<'a, X>;
    fn iter_mut_or_iter(self) -> Self::Iter {
        self.iter()
    }
}

impl<'a, X> IterEither for &'a mut Vec<X> {
    type Iter = std::slice::IterMut<'a, X>;
    fn iter_mut_or_iter(self) -> Self::Iter {
        self.iter_mut()
    }
}

impl<'a, X> IterEither for &'a Option<X> {
    type Iter = std::option::Iter<'a, X>;
    fn iter_mut_or_iter(self) -> Self::Iter {
        self.iter()
    }
}

impl<'a, X> IterEither for &'a mut Option<X> {
    type Iter = std::option::IterMut<'a, X>;
    fn iter_mut_or_iter(self) -> Self::Iter {
        self.iter_mut()
    }
}

/// Puts (row, block, item) in the table's order for `shape`, leaving out what it lacks.
fn in_order<X>(shape: Shape, items: Vec<(Param, Option<usize>, X)>) -> Vec<X> {
    let row = |p: Param| PARAMETERS.iter().position(|r| r.param == p).unwrap_or(0);
    let mut keyed: Vec<Option<(Param, Option<usize>, X)>> = items.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(keyed.len());
    let index = |p: Param, l: Option<usize>| (row(p), l);
    let mut by_key: std::collections::HashMap<(usize, Option<usize>), usize> = keyed
        .iter()
        .enumerate()
        .filter_map(|(i, k)| k.as_ref().map(|(p, l, _)| (index(*p, *l), i)))
        .collect();
    for (s, l) in shape.order() {
        if let Some(i) = by_key.remove(&index(s.param, l))
            && let Some((_, _, x)) = keyed[i].take()
        {
            out.push(x);
        }
    }
    out
}

/// Takes the gradient of block tensor `p` out of chapter 6's block gradients.
pub(super) fn take_block_grad<T: Float>(g: &mut BlockGrads<T>, p: Param) -> Option<DMatrix<T>> {
    let (a, f) = (&mut g.attn, &mut g.ffn);
    let m = match p {
        Param::Ln1Gamma => &mut g.ln1.d_gamma,
        Param::Ln1Beta => &mut g.ln1.d_beta,
        Param::WQ => &mut a.d_w_q,
        Param::BQ => &mut a.d_b_q,
        Param::WK => &mut a.d_w_k,
        Param::BK => &mut a.d_b_k,
        Param::WV => &mut a.d_w_v,
        Param::BV => &mut a.d_b_v,
        Param::WO => &mut a.d_w_o,
        Param::BO => &mut a.d_b_o,
        Param::Ln2Gamma => &mut g.ln2.d_gamma,
        Param::Ln2Beta => &mut g.ln2.d_beta,
        Param::W1 => &mut f.d_w1,
        Param::B1 => &mut f.d_b1,
        Param::W2 => &mut f.d_w2,
        Param::B2 => &mut f.d_b2,
        Param::Wte | Param::Wpe | Param::LnFGamma | Param::LnFBeta | Param::LmHead => return None,
    };
    Some(std::mem::replace(m, DMatrix::zeros(0, 0)))
}

impl<T: Float> Gpt<T> {
    /// Which optional tensors this model has.
    pub fn shape(&self) -> Shape {
        Shape {
            layers: self.blocks.len(),
            learned_positions: self.config.positions == Positions::Learned,
            untied: self.lm_head.is_some(),
        }
    }

    /// Tensor `p` (of block `layer` for a block tensor), if the model has that field.
    pub fn tensor(&self, p: Param, layer: Option<usize>) -> Option<&DMatrix<T>> {
        fields!(self, &).into_iter().find(|(q, l, _)| (*q, *l) == (p, layer)).map(|f| f.2)
    }

    /// Tensor `p`, mutable.
    pub fn tensor_mut(&mut self, p: Param, layer: Option<usize>) -> Option<&mut DMatrix<T>> {
        fields!(self, &mut).into_iter().find(|(q, l, _)| (*q, *l) == (p, layer)).map(|f| f.2)
    }

    /// Every parameter tensor with its name, in the table's order ([`PARAMETERS`]): `wte`, `wpe`
    /// (if learned), each block's 16 tensors
    /// ([`block_tensor_name`](super::table::block_tensor_name)), `ln_f.weight`, `ln_f.bias`,
    /// `lm_head.weight` (if untied).
    pub fn tensors(&self) -> Vec<(String, &DMatrix<T>)> {
        let shape = self.shape();
        let named = fields!(self, &)
            .into_iter()
            .map(|(p, l, m)| (p, l, (full_name(spec_of(p).name, l), m)))
            .collect();
        in_order(shape, named)
    }

    /// The same tensors, mutable, in the same order.
    pub fn tensors_mut(&mut self) -> Vec<&mut DMatrix<T>> {
        let shape = self.shape();
        in_order(shape, fields!(self, &mut))
    }

    /// Which tensors AdamW decays, in [`Gpt::tensors`] order (the table's `decays`).
    pub fn decay_mask(&self) -> Vec<bool> {
        self.shape().order().into_iter().map(|(s, _)| s.decays).collect()
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

    /// The model in another float type (f64 for checks, f32 for speed): every matrix of the
    /// model (the parameters, and a fixed position table) converted, the rest as it is.
    pub fn cast<U: Float>(&self) -> Gpt<U> {
        let c = |m: &DMatrix<T>| crate::float::cast::<T, U>(m);
        let ln = |l: &LayerNorm<T>| LayerNorm {
            gamma: c(&l.gamma),
            beta: c(&l.beta),
            eps: l.eps,
            placement: l.placement,
        };
        let mut out = Gpt {
            config: self.config,
            wte: c(&self.wte),
            wpe: c(&self.wpe),
            blocks: self
                .blocks
                .iter()
                .map(|b| {
                    super::unfilled_block(b.attn.heads, b.ffn.act, ln(&b.ln1), ln(&b.ln2), b.order)
                })
                .collect(),
            ln_f: ln(&self.ln_f),
            lm_head: self.lm_head.as_ref().map(c),
        };
        // The blocks' matrices, by the table (wte, wpe, ln_f and lm_head are converted above).
        let all = self.shape();
        let sources = in_order(all, fields!(self, &));
        for (dst, src) in in_order(all, fields!(&mut out, &mut)).into_iter().zip(sources) {
            *dst = c(src);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::table::{Slots, gpt2_layout};
    use super::*;
    use crate::ch09_gpt::config::Config;

    fn configs() -> Vec<Config> {
        let base = Config::new(11, 6, 2, 2, 4);
        let untied = Config { tied: false, ..base };
        let sinusoidal = Config { positions: Positions::Sinusoidal, ..base };
        vec![base, untied, sinusoidal, Config { tied: false, ..sinusoidal }]
    }

    /// The struct's fields by our names, written out here independently of the table and of
    /// `fields!`, so a row mapped to the wrong field (or a field left out) is caught.
    fn by_hand(m: &Gpt<f64>) -> Vec<(String, &DMatrix<f64>)> {
        let mut out = vec![("wte.weight".to_string(), &m.wte)];
        if m.config.positions == Positions::Learned {
            out.push(("wpe.weight".into(), &m.wpe));
        }
        for (l, b) in m.blocks.iter().enumerate() {
            let (a, f) = (&b.attn, &b.ffn);
            let named = [
                ("ln_1.weight", &b.ln1.gamma),
                ("ln_1.bias", &b.ln1.beta),
                ("attn.q.weight", &a.w_q),
                ("attn.q.bias", &a.b_q),
                ("attn.k.weight", &a.w_k),
                ("attn.k.bias", &a.b_k),
                ("attn.v.weight", &a.w_v),
                ("attn.v.bias", &a.b_v),
                ("attn.c_proj.weight", &a.w_o),
                ("attn.c_proj.bias", &a.b_o),
                ("ln_2.weight", &b.ln2.gamma),
                ("ln_2.bias", &b.ln2.beta),
                ("mlp.c_fc.weight", &f.w1),
                ("mlp.c_fc.bias", &f.b1),
                ("mlp.c_proj.weight", &f.w2),
                ("mlp.c_proj.bias", &f.b2),
            ];
            out.extend(named.map(|(n, m)| (format!("h.{l}.{n}"), m)));
        }
        out.push(("ln_f.weight".into(), &m.ln_f.gamma));
        out.push(("ln_f.bias".into(), &m.ln_f.beta));
        if let Some(h) = &m.lm_head {
            out.push(("lm_head.weight".into(), h));
        }
        out
    }

    #[test]
    fn the_table_names_every_field_of_the_struct_once_with_its_shape() {
        for c in configs() {
            let mut m = Gpt::<f64>::new(c, 1).unwrap();
            // A distinct value in every tensor, written through the table's order …
            for (k, t) in m.tensors_mut().into_iter().enumerate() {
                t.fill(k as f64);
            }
            let order = m.shape().order();
            let listed = m.tensors();
            let hand = by_hand(&m);
            assert_eq!(listed.len(), hand.len(), "{c:?}");
            assert_eq!(order.len(), hand.len());
            // … is found in the field of that name, and the order is GPT-2's.
            for (k, (((name, t), (hand_name, field)), (s, _))) in
                listed.iter().zip(&hand).zip(&order).enumerate()
            {
                assert_eq!(name, hand_name);
                assert!(field.iter().all(|&x| x == k as f64), "{name} is not its own field");
                assert_eq!(t.shape(), (s.rows.of(&c), s.cols.of(&c)), "{name}");
                assert_eq!(m.tensor(s.param, order[k].1).map(|t| t[(0, 0)]), Some(k as f64));
            }
            assert_eq!(m.decay_mask(), order.iter().map(|(s, _)| s.decays).collect::<Vec<_>>());
        }
    }

    #[test]
    fn the_gpt2_layout_fuses_q_k_v_in_that_order_and_the_slots_follow_the_order() {
        let c = Config { tied: false, ..Config::new(11, 6, 2, 2, 4) };
        let m = Gpt::<f64>::new(c, 2).unwrap();
        let layout = gpt2_layout(&c, m.shape());
        let fused = layout.iter().find(|t| t.name == "h.1.attn.c_attn.weight").unwrap();
        assert_eq!((fused.rows, fused.cols), (4, 12));
        assert_eq!(
            fused.parts,
            vec![(Param::WQ, Some(1)), (Param::WK, Some(1)), (Param::WV, Some(1))]
        );
        let slots = Slots::of(m.shape());
        let names: Vec<String> = m.tensors().into_iter().map(|(n, _)| n).collect();
        for (s, l) in m.shape().order() {
            assert_eq!(names[slots.at(s.param, l.unwrap_or(0))], full_name(s.name, l));
        }
        assert_eq!(c.tensor_shapes().len(), layout.len());
    }
}
