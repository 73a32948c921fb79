//! The fused step's precision hook: where chapter 11's mixed precision
//! ([`crate::ch11_precision::mixed`]) enters the step.
//!
//! [`FusedStep::set_precision`](super::FusedStep::set_precision) chooses the format of the
//! products' inputs; each shard's forward and backward run inside [`with_inputs`], which holds
//! that choice for the thread running the shard. Then:
//!
//! - every product of whole matrices goes through [`gemm`] (the forward and backward files import
//!   it in place of chapter 10's): both inputs rounded, the product in f32;
//! - attention's products read views of buffers that only products read, so those buffers are
//!   rounded where they are by [`round_buffer`]: \[Q K V\] after its bias, the weights A after
//!   the softmax (the softmax's backward then reads the rounded A too), ∂O after its product and
//!   ∂S after the softmax's backward.
//!
//! With [`ProductInputs::F32`] (the default) [`gemm`] is chapter 10's product and
//! [`round_buffer`] returns at once: the step's bits are chapter 9's.
//!
//! The backward pass names its gradient buffers ([`gradient_buffers`]) so that the rounding of
//! an input read from one of them is counted as a gradient's ([`StepRounding::gradients`]).

use crate::ch11_precision::mixed::{self, ProductInputs, Rounding, StepRounding};
use crate::error::Result;
use crate::float::Float;
use crate::matmul::Op;
use nalgebra::DMatrix;
use std::cell::{Cell, RefCell};

thread_local! {
    /// The format of this thread's products' inputs while a shard runs.
    static INPUTS: Cell<ProductInputs> = const { Cell::new(ProductInputs::F32) };
    /// What this thread's roundings did since [`with_inputs`] began.
    static TALLY: Cell<StepRounding> = const { Cell::new(StepRounding {
        gradients: Rounding { underflows: 0, overflows: 0 },
        others: Rounding { underflows: 0, overflows: 0 },
    }) };
    /// The address ranges of the shard's gradient buffers (start, end in bytes).
    static GRADIENTS: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` (one shard's forward and backward) with its products' inputs rounded to `inputs`;
/// returns its result and what the roundings did. Restores the thread's state after.
pub(super) fn with_inputs<R>(inputs: ProductInputs, f: impl FnOnce() -> R) -> (R, StepRounding) {
    INPUTS.with(|c| c.set(inputs));
    TALLY.with(|c| c.set(StepRounding::default()));
    let r = f();
    INPUTS.with(|c| c.set(ProductInputs::F32));
    GRADIENTS.with(|g| g.borrow_mut().clear());
    (r, TALLY.with(Cell::get))
}

/// Names the buffers the backward pass keeps its gradients in (∂z, ∂x, ∂a₁/∂z₁, ∂\[Q K V\]): a
/// product input read from one of them is a gradient input.
pub(super) fn gradient_buffers<T>(buffers: &[&[T]]) {
    if INPUTS.with(Cell::get) == ProductInputs::F32 {
        return;
    }
    let ranges =
        buffers.iter().map(|b| (b.as_ptr() as usize, b.as_ptr() as usize + size_of_val(*b)));
    GRADIENTS.with(|g| {
        let mut g = g.borrow_mut();
        g.clear();
        g.extend(ranges);
    });
}

/// Whether `values` lie in one of the named gradient buffers.
fn is_gradient<T>(values: &[T]) -> bool {
    let at = values.as_ptr() as usize;
    GRADIENTS.with(|g| g.borrow().iter().any(|&(start, end)| (start..end).contains(&at)))
}

/// Adds one input's tally to the thread's, as a gradient's or another input's.
fn count(tally: Rounding, gradient: bool) {
    TALLY.with(|c| {
        let mut t = c.get();
        if gradient {
            t.gradients += tally;
        } else {
            t.others += tally;
        }
        c.set(t);
    });
}

/// C ← α·op(A)·op(B) + β·C with A and B rounded to this thread's input format
/// ([`mixed::gemm`]; chapter 10's [`crate::matmul::gemm`] itself with f32 inputs). Shapes and
/// errors as that function.
pub(super) fn gemm<T: Float>(
    alpha: T,
    a: &DMatrix<T>,
    ta: Op,
    b: &DMatrix<T>,
    tb: Op,
    beta: T,
    c: &mut DMatrix<T>,
) -> Result<()> {
    let inputs = INPUTS.with(Cell::get);
    let (of_a, of_b) = mixed::gemm(inputs, alpha, a, ta, b, tb, beta, c)?;
    if inputs != ProductInputs::F32 {
        count(of_a, is_gradient(a.as_slice()));
        count(of_b, is_gradient(b.as_slice()));
    }
    Ok(())
}

/// Rounds a buffer that only products read to this thread's input format, in place, counting it
/// as a gradient when `gradient` is set (nothing happens with f32 inputs).
pub(super) fn round_buffer<T: Float>(values: &mut [T], gradient: bool) {
    let inputs = INPUTS.with(Cell::get);
    if inputs != ProductInputs::F32 {
        count(mixed::round_entries(inputs, values), gradient);
    }
}
