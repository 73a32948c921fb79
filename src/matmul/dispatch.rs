//! Which micro-kernel runs: detection, forcing, and the evidence of what ran.
//!
//! The CPU is asked once which instruction sets it has ([`best_kernel`] caches the answer). A
//! product then runs the kernel chosen by, in this order of precedence:
//!
//! 1. [`with_kernel`], a scoped choice for the current thread (what tests use, so tests running in
//!    parallel cannot disturb each other);
//! 2. [`set_kernel`], a process-wide choice;
//! 3. the environment variable `LLM_WORKBOOK_KERNEL` (`scalar`, `avx2`, `avx512` or `auto`), read
//!    once;
//! 4. the best kernel the CPU supports.
//!
//! Every product records what it did in a [`ProductStats`] ([`last_product`] returns the one of the
//! current thread) and adds its micro-kernel calls to a process-wide counter per kernel
//! (`kernel_calls`), so a test can show that a forced kernel really ran.

use crate::backend::{self, Backend};
use crate::error::{Result, invalid};
use crate::threads;
use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// The environment variable that forces a kernel for the whole process.
pub const KERNEL_ENV: &str = "LLM_WORKBOOK_KERNEL";

/// A micro-kernel family: the instruction set the innermost register-tiled loop is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kernel {
    /// Portable Rust loops, no intrinsics: the fallback on every CPU and the readable
    /// specification.
    Scalar,
    /// 256-bit AVX2 vectors with fused multiply-add (x86-64 with the `avx2` and `fma` features).
    Avx2,
    /// 512-bit AVX-512F vectors with fused multiply-add (x86-64 with the `avx512f` feature, and
    /// `avx2` and `fma`, which every AVX-512 CPU has).
    Avx512,
}

impl Kernel {
    /// Every kernel family, available here or not, from slowest to fastest.
    pub const ALL: [Kernel; 3] = [Kernel::Scalar, Kernel::Avx2, Kernel::Avx512];

    /// The name used by `LLM_WORKBOOK_KERNEL` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Scalar => "scalar",
            Kernel::Avx2 => "avx2",
            Kernel::Avx512 => "avx512",
        }
    }

    /// Parses a name as [`Kernel::name`] prints it (case-insensitive).
    pub fn from_name(name: &str) -> Result<Kernel> {
        let lower = name.trim().to_ascii_lowercase();
        Kernel::ALL.into_iter().find(|k| k.name() == lower).ok_or_else(|| {
            invalid(
                "Kernel::from_name",
                "name",
                format!("expected one of scalar, avx2, avx512; got {name:?}"),
            )
        })
    }

    /// Whether this CPU can run the kernel (asked once per process and remembered by the standard
    /// library's feature detection).
    pub fn is_available(self) -> bool {
        match self {
            Kernel::Scalar => true,
            Kernel::Avx2 => has_avx2_fma(),
            Kernel::Avx512 => has_avx512f(),
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn from_index(i: u8) -> Option<Kernel> {
        Kernel::ALL.get(usize::from(i)).copied()
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    crate::simd::Avx2::detect().is_some()
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx2_fma() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn has_avx512f() -> bool {
    crate::simd::Avx512::detect().is_some()
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx512f() -> bool {
    false
}

/// The kernels this CPU can run, slowest first (always starts with [`Kernel::Scalar`]).
pub fn available_kernels() -> Vec<Kernel> {
    Kernel::ALL.into_iter().filter(|k| k.is_available()).collect()
}

/// The fastest kernel this CPU supports, detected on the first call and cached.
pub fn best_kernel() -> Kernel {
    static BEST: OnceLock<Kernel> = OnceLock::new();
    *BEST.get_or_init(|| available_kernels().into_iter().next_back().unwrap_or(Kernel::Scalar))
}

/// What `LLM_WORKBOOK_KERNEL` asks for: `Ok(None)` when unset, empty or `auto`, an error when it
/// names no kernel or one this CPU lacks. Read once per process.
fn env_kernel() -> Result<Option<Kernel>> {
    static ENV: OnceLock<std::result::Result<Option<Kernel>, String>> = OnceLock::new();
    let parsed = ENV.get_or_init(|| {
        parse_kernel_setting(std::env::var(KERNEL_ENV).ok().as_deref()).map_err(|e| e.to_string())
    });
    parsed.clone().map_err(|reason| invalid("env_kernel", KERNEL_ENV, reason))
}

/// Interprets a value of `LLM_WORKBOOK_KERNEL` (`None` when the variable is unset).
pub fn parse_kernel_setting(value: Option<&str>) -> Result<Option<Kernel>> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("auto") => Ok(None),
        Some(v) => {
            let k = Kernel::from_name(v).map_err(|_| {
                invalid(
                    "parse_kernel_setting",
                    KERNEL_ENV,
                    format!("expected scalar, avx2, avx512 or auto; got {v:?}"),
                )
            })?;
            if k.is_available() {
                Ok(Some(k))
            } else {
                Err(invalid(
                    "parse_kernel_setting",
                    KERNEL_ENV,
                    format!(
                        "{k} is not available on this CPU (available: {})",
                        names(&available_kernels())
                    ),
                ))
            }
        }
    }
}

fn names(ks: &[Kernel]) -> String {
    ks.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
}

const NO_KERNEL: u8 = u8::MAX;
static GLOBAL_KERNEL: AtomicU8 = AtomicU8::new(NO_KERNEL);

thread_local! {
    static THREAD_KERNEL: Cell<Option<Kernel>> = const { Cell::new(None) };
    static LAST: Cell<Option<ProductStats>> = const { Cell::new(None) };
}

fn check_available(op: &'static str, k: Kernel) -> Result<()> {
    if k.is_available() {
        Ok(())
    } else {
        Err(invalid(
            op,
            "kernel",
            format!(
                "{k} is not available on this CPU (available: {})",
                names(&available_kernels())
            ),
        ))
    }
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
    if let Some(k) = Kernel::from_index(GLOBAL_KERNEL.load(Ordering::Relaxed)) {
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
    CALLS[stats.kernel.index()].fetch_add(stats.tiles, Ordering::Relaxed);
    LAST.with(|c| c.set(Some(stats)));
}

/// What the last product computed on this thread did (`None` before the first product).
pub fn last_product() -> Option<ProductStats> {
    LAST.with(Cell::get)
}

/// Micro-kernel calls made so far by `kernel`, summed over the whole process (the evidence that a
/// forced kernel ran).
#[cfg(test)]
pub(crate) fn kernel_calls(kernel: Kernel) -> u64 {
    CALLS[kernel.index()].load(Ordering::Relaxed)
}
