//! How the fused step's products run: their settings (chapter 10's [`Settings`]: kernel, threads,
//! backend) and the format of their inputs, where mixed precision (the inputs rounded to bf16 or
//! f16, [`ProductInputs`]; chapter 11 teaches it) enters the step.
//!
//! [`FusedStep::set_precision`](super::FusedStep::set_precision) chooses the format of the
//! products' inputs and [`FusedStep::set_settings`](super::FusedStep::set_settings) their
//! settings; each shard's forward and backward get a [`Rounder`] holding both, by argument (its
//! thread count is what the shards leave over), and hand it back with what its roundings did.
//! Then:
//!
//! - every product of whole matrices goes through [`Rounder::gemm`]: both inputs rounded, the
//!   product in f32, and the caller says which input, if any, is a gradient ([`Gradient`]);
//! - attention's products read views of buffers that only products read, so those buffers are
//!   rounded where they are by [`Rounder::round`]: \[Q K V\] after its bias, the weights A after
//!   the softmax (the softmax's backward then reads the rounded A too), ∂O after its product and
//!   ∂S after the softmax's backward.
//!
//! With [`ProductInputs::F32`] (the default) [`Rounder::gemm`] is chapter 10's product and
//! [`Rounder::round`] returns at once: the step's bits are chapter 9's.

use crate::error::Result;
use crate::float::Float;
use crate::matmul::inputs::{ProductInputs, StepRounding, gemm_rounded};
use crate::matmul::{MatMut, MatRef, Op, Settings, gemm_with};
use nalgebra::DMatrix;

/// Which input of a product is a gradient ∂Y flowing back: its rounding is tallied in
/// [`StepRounding::gradients`], every other input's in [`StepRounding::others`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gradient {
    /// Neither (every product of the forward pass).
    Neither,
    /// The left input A.
    A,
    /// The right input B.
    B,
}

/// How one shard's products run (their settings), the format they round their inputs to, and
/// what those roundings did so far.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Rounder {
    settings: Settings,
    inputs: ProductInputs,
    tally: StepRounding,
}

impl Rounder {
    /// Products run with `settings`, inputs rounded to `inputs`, nothing tallied yet.
    pub(crate) fn new(settings: Settings, inputs: ProductInputs) -> Rounder {
        Rounder { settings, inputs, tally: StepRounding::default() }
    }

    /// C ← α·op(A)·op(B) + β·C on views of buffers (attention's heads), with the shard's
    /// settings; inputs as they are (such buffers are rounded where they are, [`Rounder::round`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn view_gemm<T: Float>(
        &self,
        alpha: T,
        a: MatRef<T>,
        ta: Op,
        b: MatRef<T>,
        tb: Op,
        beta: T,
        c: MatMut<T>,
    ) -> Result<()> {
        gemm_with(self.settings, alpha, a, ta, b, tb, beta, c).map(|_| ())
    }

    /// What the roundings did since [`Rounder::new`].
    pub(crate) fn tally(&self) -> StepRounding {
        self.tally
    }

    /// C ← α·op(A)·op(B) + β·C with A and B rounded to the format ([`gemm_rounded`]; chapter
    /// 10's [`gemm_with`] itself with f32 inputs), run with the shard's settings, the rounding
    /// of the input named by `gradient` counted as a gradient's. Shapes and errors as that
    /// function.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemm<T: Float>(
        &mut self,
        gradient: Gradient,
        alpha: T,
        a: &DMatrix<T>,
        ta: Op,
        b: &DMatrix<T>,
        tb: Op,
        beta: T,
        c: &mut DMatrix<T>,
    ) -> Result<()> {
        let (of_a, of_b) = gemm_rounded(self.inputs, self.settings, alpha, a, ta, b, tb, beta, c)?;
        let tally = &mut self.tally;
        match gradient {
            Gradient::Neither => {
                tally.others += of_a;
                tally.others += of_b;
            }
            Gradient::A => {
                tally.gradients += of_a;
                tally.others += of_b;
            }
            Gradient::B => {
                tally.others += of_a;
                tally.gradients += of_b;
            }
        }
        Ok(())
    }

    /// Rounds a buffer that only products read to the format, in place, counting it as a
    /// gradient when `gradient` is set (nothing happens with f32 inputs).
    pub(crate) fn round<T: Float>(&mut self, values: &mut [T], gradient: bool) {
        if self.inputs != ProductInputs::F32 {
            let tally = crate::matmul::inputs::round_entries(self.inputs, values);
            if gradient {
                self.tally.gradients += tally;
            } else {
                self.tally.others += tally;
            }
        }
    }
}
