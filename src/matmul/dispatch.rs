//! Which micro-kernel runs: detection, forcing, and the evidence of what ran.
//!
//! The CPU is asked once which instruction sets it has, by the crate's one dispatcher
//! ([`crate::simd`], which names the kernels). A product then runs the kernel chosen by, in this
//! order of precedence:
//!
//! 1. [`with_kernel`], a scoped choice for the current thread (what tests use, so tests running in
//!    parallel cannot disturb each other);
//! 2. [`set_kernel`], a process-wide choice;
//! 3. the environment variable `LLM_WORKBOOK_KERNEL` (`scalar`, `avx2`, `avx512` or `auto`), read
//!    once;
//! 4. the best kernel the CPU supports.
//!
//! A product run with explicit settings ([`super::gemm_with`]) returns what it did in a
//! [`ProductStats`], and every product adds its micro-kernel calls to a process-wide counter per
//! kernel (`kernel_calls`), so a test can show that a forced kernel really ran.

use crate::backend::{self, Backend};
use crate::error::Result;
pub(crate) use crate::simd::Kernel;
use crate::simd::{KERNEL_ENV, best_kernel};
use crate::simd::{env_kernel, unavailable};
use crate::threads;
use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

const NO_KERNEL: u8 = u8::MAX;
static GLOBAL_KERNEL: AtomicU8 = AtomicU8::new(NO_KERNEL);

thread_local! {
    static THREAD_KERNEL: Cell<Option<Kernel>> = const { Cell::new(None) };
}

fn check_available(op: &'static str, k: Kernel) -> Result<()> {
    if k.is_available() { Ok(()) } else { Err(unavailable(op, k)) }
}

/// Forces `kernel` for every product in the process (`None` returns to the environment variable
/// or detection). Fails if the CPU cannot run it.
pub fn set_kernel(kernel: Option<Kernel>) -> Result<()> {
    match kernel {
        Some(k) => {
            check_available("set_kernel", k)?;
            GLOBAL_KERNEL.store(k as u8, Ordering::Relaxed);
        }
        None => GLOBAL_KERNEL.store(NO_KERNEL, Ordering::Relaxed),
    }
    Ok(())
}

/// Runs `f` with `kernel` forced for products started on this thread (the threads a product
/// spawns inherit the choice), then restores the previous choice. Fails, without running `f`, if
/// the CPU cannot run the kernel.
pub fn with_kernel<R>(kernel: Kernel, f: impl FnOnce() -> R) -> Result<R> {
    check_available("with_kernel", kernel)?;
    struct Restore(Option<Kernel>);
    impl Drop for Restore {
        fn drop(&mut self) {
            THREAD_KERNEL.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(THREAD_KERNEL.with(|c| c.replace(Some(kernel))));
    Ok(f())
}

/// Runs `train`, a training whose numbers a committed figure or page shows, on the portable
/// micro-kernel ([`Kernel::Scalar`]) whatever kernel the process
/// or the calling thread chose, so that those numbers are the same bits on every CPU. The SIMD
/// kernels add a product's terms in other groupings (fused multiply-adds, 4 or 8 lanes), so a
/// model trained on them ends a few units of the last place away on each CPU, and after hundreds
/// of steps its curves and maps differ visibly; the main job would then change tracked figures on
/// every machine but the one that drew them. Products on threads the training spawns inherit the
/// choice ([`with_kernel`]).
pub fn same_on_every_cpu<R>(train: impl FnOnce() -> Result<R>) -> Result<R> {
    with_kernel(Kernel::Scalar, train)?
}

/// The kernel a product started now on this thread would use.
pub fn active_kernel() -> Kernel {
    if let Some(k) = THREAD_KERNEL.with(Cell::get) {
        return k;
    }
    if let Some(&k) = Kernel::ALL.get(usize::from(GLOBAL_KERNEL.load(Ordering::Relaxed))) {
        return k;
    }
    match env_kernel() {
        Ok(Some(k)) => k,
        Ok(None) => best_kernel(),
        Err(e) => {
            static WARNED: OnceLock<()> = OnceLock::new();
            WARNED.get_or_init(|| {
                eprintln!("llm-workbook: ignoring {KERNEL_ENV}: {e}; using {}", best_kernel())
            });
            best_kernel()
        }
    }
}

/// The product choices of the current thread (kernel, backend, threads), to be carried into a
/// thread it starts with [`ProductChoices::run`]: thread-local choices do not cross threads by
/// themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProductChoices {
    kernel: Option<Kernel>,
    backend: Option<Backend>,
    threads: Option<usize>,
}

/// This thread's product choices.
pub fn product_choices() -> ProductChoices {
    ProductChoices {
        kernel: THREAD_KERNEL.with(Cell::get),
        backend: backend::thread_choice(),
        threads: threads::thread_choice(),
    }
}

impl ProductChoices {
    /// Runs `f` on the current thread with these choices, then restores the thread's own.
    pub fn run<R>(self, f: impl FnOnce() -> R) -> R {
        struct Restore(ProductChoices);
        impl Drop for Restore {
            fn drop(&mut self) {
                THREAD_KERNEL.with(|c| c.set(self.0.kernel));
                backend::set_thread_choice(self.0.backend);
                threads::set_thread_choice(self.0.threads);
            }
        }
        let _restore = Restore(product_choices());
        THREAD_KERNEL.with(|c| c.set(self.kernel));
        backend::set_thread_choice(self.backend);
        threads::set_thread_choice(self.threads);
        f()
    }
}

/// The cache blocking of the five loops around the micro-kernel (see the chapter for the sweep
/// that chose the defaults). MR and NR belong to the micro-kernel and are not listed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocking {
    /// Rows of A packed per block (loop 3): the MC×KC block of Ã is meant to stay in L2.
    pub mc: usize,
    /// Depth of one rank-KC update (loop 4): a KC×NR sliver of B̃ is meant to stay in L1.
    pub kc: usize,
    /// Columns of B packed per panel (loop 5): the KC×NC panel B̃ is meant to stay in L3.
    pub nc: usize,
}

/// What one product did: the evidence tests use to show which kernel ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProductStats {
    /// The micro-kernel family that computed the tiles.
    pub kernel: Kernel,
    /// Rows of the register tile.
    pub mr: usize,
    /// Columns of the register tile.
    pub nr: usize,
    /// The cache blocking used.
    pub blocking: Blocking,
    /// Threads that computed tiles (1 for small products).
    pub threads: usize,
    /// Register tiles computed, one per MR×NR tile position and rank-KC update, however many
    /// narrower micro-kernel calls cover an edge tile (0 when m, n or k is 0 or α = 0: nothing to
    /// multiply).
    pub tiles: u64,
}

static CALLS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

pub(super) fn record(stats: ProductStats) {
    CALLS[stats.kernel as usize].fetch_add(stats.tiles, Ordering::Relaxed);
}

/// Micro-kernel calls made so far by `kernel`, summed over the whole process (the evidence that a
/// forced kernel ran).
#[cfg(test)]
pub(crate) fn kernel_calls(kernel: Kernel) -> u64 {
    CALLS[kernel as usize].load(Ordering::Relaxed)
}
