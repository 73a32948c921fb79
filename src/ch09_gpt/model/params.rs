//! The model's parameters: one table ([`PARAMETERS`]) says, for every tensor, its GPT-2 name, its
//! shape as a function of the config, whether AdamW decays it and how [`Gpt::new`] initialises
//! it; one store ([`Params`]) holds the tensors in the table's order. Everything else walks the
//! store: the gradients (the same type, [`Grads`]), AdamW's moments, the checkpoint, the decay
//! mask and the fast path, which reads a tensor by its row of the table ([`Params::at`]).

use super::Gpt;
use super::table::{Param, Part, Shape, Spec, full_name, spec_of};
use crate::ch09_gpt::config::Config;
use crate::error::{Result, invalid, shape_error, shape_of};
use crate::float::Float;
use nalgebra::{DMatrix, DMatrixView};

/// Every parameter tensor of a GPT, in the table's order ([`Shape::order`]): `wte`, `wpe` (if
/// learned), each block's 12 tensors, `ln_f.weight`, `ln_f.bias`, `lm_head.weight` (if untied).
/// Read by table row ([`Params::of`], [`Params::at`]) or walked in order (it dereferences to the
/// slice of tensors).
#[derive(Clone, Debug, PartialEq)]
pub struct Params<T: Float> {
    shape: Shape,
    tensors: Vec<DMatrix<T>>,
}

/// The gradients: one per parameter, of its shape, in the same order (llm.c's rule: the
/// gradients are a set of parameters).
pub type Grads<T> = Params<T>;

impl<T: Float> Params<T> {
    /// Every tensor a model of `config` with `shape`'s tensors has, each as the table shapes it
    /// and filled by `fill(row, block, rows, cols)`, in the table's order.
    pub fn from_fn(
        config: &Config,
        shape: Shape,
        mut fill: impl FnMut(&Spec, Option<usize>, usize, usize) -> DMatrix<T>,
    ) -> Self {
        let tensors = shape
            .order()
            .into_iter()
            .map(|(s, l)| fill(s, l, s.rows.of(config), s.cols.of(config)))
            .collect();
        Params { shape, tensors }
    }

    /// Zeros in every tensor (a gradient's or a moment's start).
    pub fn zeros(config: &Config, shape: Shape) -> Self {
        Params::from_fn(config, shape, |_, _, r, c| DMatrix::zeros(r, c))
    }

    /// A store holding no tensor (a workspace's before it is sized).
    pub fn empty() -> Self {
        let shape = Shape { layers: 0, learned_positions: false, untied: false };
        Params { shape, tensors: Vec::new() }
    }

    /// Which optional tensors the store holds.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Where tensor `p` of block `layer` (any `layer` for a tensor outside the blocks) sits.
    fn position(&self, p: Param, layer: usize) -> Option<usize> {
        self.shape.index(p, layer).filter(|&i| i < self.tensors.len())
    }

    /// Tensor `p` (of block `layer` for a block tensor), if the model has it.
    pub fn get(&self, p: Param, layer: Option<usize>) -> Option<&DMatrix<T>> {
        self.position(p, layer.unwrap_or(0)).map(|i| &self.tensors[i])
    }

    /// Tensor `p`, mutable.
    pub fn get_mut(&mut self, p: Param, layer: Option<usize>) -> Option<&mut DMatrix<T>> {
        self.position(p, layer.unwrap_or(0)).map(|i| &mut self.tensors[i])
    }

    /// The position of tensor `p` of block `layer` in the order, for a tensor the model has
    /// (W_E's for an absent one: callers ask only for what the shape holds).
    pub fn at(&self, p: Param, layer: usize) -> usize {
        self.position(p, layer).unwrap_or(0)
    }

    /// Tensor `p` of block `layer` (the layer is ignored outside the blocks). Panics on a tensor
    /// the model lacks, as a slice does past its end: ask [`Params::get`] where it may be absent.
    pub fn of(&self, p: Param, layer: usize) -> &DMatrix<T> {
        &self.tensors[self.position(p, layer).unwrap_or(usize::MAX)]
    }

    /// Tensor `p` of block `layer`, mutable (panics as [`Params::of`] does).
    pub fn of_mut(&mut self, p: Param, layer: usize) -> &mut DMatrix<T> {
        let i = self.position(p, layer).unwrap_or(usize::MAX);
        &mut self.tensors[i]
    }

    /// The column blocks of a Q, K, V tensor (W_QKV or b_QKV of block `layer`) as views: W_Q, W_K
    /// and W_V (or b_Q, b_K, b_V) where they are held, so that Q = X W_Q reads W_QKV's first d
    /// columns. `None` for another tensor or a block the model lacks.
    pub fn q_k_v(&self, p: Param, layer: usize) -> Option<[DMatrixView<'_, T>; 3]> {
        let maps = spec_of(p).maps;
        let m = self.get(p, Some(layer)).filter(|_| maps == 3 && spec_of(p).part == Part::Block)?;
        let d = m.ncols() / 3;
        Some([0, 1, 2].map(|k| m.columns(k * d, d)))
    }

    /// The tensors with their full names (`h.{l}.attn.c_attn.weight`, …), in order.
    pub fn named(&self) -> impl Iterator<Item = (String, &DMatrix<T>)> {
        self.shape
            .order()
            .into_iter()
            .zip(&self.tensors)
            .map(|((s, l), m)| (full_name(s.name, l), m))
    }
}

impl<T: Float> std::ops::Deref for Params<T> {
    type Target = [DMatrix<T>];
    fn deref(&self) -> &[DMatrix<T>] {
        &self.tensors
    }
}

impl<T: Float> std::ops::DerefMut for Params<T> {
    fn deref_mut(&mut self) -> &mut [DMatrix<T>] {
        &mut self.tensors
    }
}

impl<'a, T: Float> IntoIterator for &'a Params<T> {
    type Item = &'a DMatrix<T>;
    type IntoIter = std::slice::Iter<'a, DMatrix<T>>;
    fn into_iter(self) -> Self::IntoIter {
        self.tensors.iter()
    }
}

impl<T: Float> Gpt<T> {
    /// Which optional tensors this model has.
    pub fn shape(&self) -> Shape {
        self.params.shape()
    }

    /// Tensor `p` (of block `layer` for a block tensor), if the model has it.
    pub fn tensor(&self, p: Param, layer: Option<usize>) -> Option<&DMatrix<T>> {
        self.params.get(p, layer)
    }

    /// Tensor `p`, mutable.
    pub fn tensor_mut(&mut self, p: Param, layer: Option<usize>) -> Option<&mut DMatrix<T>> {
        self.params.get_mut(p, layer)
    }

    /// Every parameter tensor with its name, in the table's order
    /// ([`PARAMETERS`](super::PARAMETERS)): `wte`, `wpe` (if learned), each block's 12 tensors
    /// ([`block_tensor_name`](super::table::block_tensor_name)), `ln_f.weight`, `ln_f.bias`,
    /// `lm_head.weight` (if untied).
    pub fn tensors(&self) -> Vec<(String, &DMatrix<T>)> {
        self.params.named().collect()
    }

    /// The same tensors, mutable, in the same order.
    pub fn tensors_mut(&mut self) -> Vec<&mut DMatrix<T>> {
        self.params.iter_mut().collect()
    }

    /// Which tensors AdamW decays, in [`Gpt::tensors`] order (the table's `decays`).
    pub fn decay_mask(&self) -> Vec<bool> {
        self.shape().order().into_iter().map(|(s, _)| s.decays).collect()
    }

    /// The number of parameters (equals
    /// [`Config::parameter_count`](crate::ch09_gpt::config::Config::parameter_count) by
    /// construction; a test checks it).
    pub fn parameter_count(&self) -> usize {
        self.params.iter().map(|m| m.len()).sum()
    }

    /// Replaces every parameter tensor, in [`Gpt::tensors`] order; shapes must match.
    pub fn set_tensors(&mut self, values: &[DMatrix<T>]) -> Result<()> {
        if values.len() != self.params.len() {
            return Err(invalid(
                "Gpt::set_tensors",
                "values",
                format!("{} tensors given, the model has {}", values.len(), self.params.len()),
            ));
        }
        let names: Vec<String> = self.params.named().map(|(n, _)| n).collect();
        for ((slot, v), name) in self.params.iter_mut().zip(values).zip(&names) {
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

    /// The model in another float type (f64 for checks, f32 for speed): every tensor (and a
    /// fixed position table) converted, the rest as it is.
    pub fn cast<U: Float>(&self) -> Gpt<U> {
        let c = |m: &DMatrix<T>| crate::float::cast::<T, U>(m);
        Gpt {
            config: self.config,
            params: Params {
                shape: self.params.shape,
                tensors: self.params.iter().map(c).collect(),
            },
            fixed_positions: c(&self.fixed_positions),
            blocks: self.blocks.clone(),
            ln_f: self.ln_f,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ch09_gpt::config::Positions;
    use crate::ch09_gpt::model::PARAMETERS;

    fn configs() -> Vec<Config> {
        let base = Config::new(11, 6, 2, 2, 4);
        let untied = Config { tied: false, ..base };
        let sinusoidal = Config { positions: Positions::Sinusoidal, ..base };
        vec![base, untied, sinusoidal, Config { tied: false, ..sinusoidal }]
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
            assert_eq!(listed.len(), order.len(), "{c:?}");
            assert_eq!(m.shape().len(), order.len());
            // … is found under its row of the table, and the order is GPT-2's.
            for (k, ((name, t), (s, l))) in listed.iter().zip(&order).enumerate() {
                assert_eq!(*name, full_name(s.name, *l));
                assert_eq!(t.shape(), (s.rows.of(&c), s.cols.of(&c)), "{name}");
                assert_eq!(m.tensor(s.param, *l).map(|t| t[(0, 0)]), Some(k as f64), "{name}");
                assert_eq!(m.params.at(s.param, l.unwrap_or(0)), k, "{name}");
            }
            assert_eq!(m.decay_mask(), order.iter().map(|(s, _)| s.decays).collect::<Vec<_>>());
        }
    }

    #[test]
    fn the_gpt2_layout_fuses_q_k_v_in_that_order_and_the_slots_follow_the_order() {
        let c = Config { tied: false, ..Config::new(11, 6, 2, 2, 4) };
        let mut m = Gpt::<f64>::new(c, 2).unwrap();
        let w = m.params.get_mut(Param::WQkv, Some(1)).unwrap();
        assert_eq!(w.shape(), (4, 12));
        for (j, mut column) in w.column_iter_mut().enumerate() {
            column.fill(j as f64);
        }
        let [q, k, v] = m.params.q_k_v(Param::WQkv, 1).unwrap();
        assert!(q.iter().all(|&x| x < 4.0) && k.iter().all(|&x| (4.0..8.0).contains(&x)));
        assert!(v.iter().all(|&x| x >= 8.0) && v[(0, 0)] == 8.0);
        assert!(m.params.q_k_v(Param::WO, 1).is_none() && m.params.q_k_v(Param::WQkv, 2).is_none());
        assert_eq!(c.tensor_shapes().len(), m.tensors().len());
    }

    /// Every GPT-2 tensor name appears once as a string literal in the crate's sources: in the
    /// parameter table. A second literal would be a second place that lists the tensors.
    #[test]
    fn every_gpt2_tensor_name_is_written_once_in_the_sources_in_the_table() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut sources = Vec::new();
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    sources.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
                }
            }
        }
        for s in &PARAMETERS {
            let literal = format!("\"{}\"", s.name);
            let found: Vec<String> = sources
                .iter()
                .flat_map(|(p, text)| {
                    let n = text.matches(&literal).count();
                    std::iter::repeat_n(p.display().to_string(), n)
                })
                .collect();
            assert_eq!(found.len(), 1, "{literal} is written in {found:?}");
            assert!(found[0].ends_with("table.rs"), "{literal} is written in {found:?}");
        }
    }
}
