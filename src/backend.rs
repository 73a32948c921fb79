//! Who computes the products: the crate's own kernels, or nalgebra's `gemm` (the in-run peer of
//! chapter 9's benchmark), chosen per thread ([`with_backend`]) or per process
//! (`LLM_WORKBOOK_BACKEND`), and a counter of the products nalgebra computed.
//!
//! [`crate::matmul::gemm`] and its wrappers ask [`active_backend`] before each product.

use crate::error::{Result, invalid};
use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that chooses the product backend for the whole process: `ours` (the
/// default) or `nalgebra`.
pub const BACKEND_ENV: &str = "LLM_WORKBOOK_BACKEND";

/// Who computes the products that go through [`crate::matmul::gemm`] and its wrappers.
///
/// [`Backend::Nalgebra`] exists so a benchmark can run the very same code with every product done
/// by nalgebra's own `gemm` (the in-run peer of chapter 9's benchmark). It ignores the kernel,
/// blocking and thread settings (nalgebra's product runs on one thread) and records no
/// [`crate::matmul::ProductStats`]; [`nalgebra_products`] counts its products instead.
/// [`crate::matmul::gemm_with`] always runs our kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The crate's blocked product and micro-kernels.
    Ours,
    /// nalgebra's `gemm`/`gemm_tr` (through the `matrixmultiply` crate).
    Nalgebra,
}

impl Backend {
    /// The name used by `LLM_WORKBOOK_BACKEND` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Ours => "ours",
            Backend::Nalgebra => "nalgebra",
        }
    }
}

/// Interprets a value of `LLM_WORKBOOK_BACKEND` (`None` when unset): unset, empty or `ours` is
/// [`Backend::Ours`], `nalgebra` is [`Backend::Nalgebra`] (case-insensitive); anything else is an
/// error naming the variable.
pub fn parse_backend_setting(value: Option<&str>) -> Result<Backend> {
    match value.map(str::trim) {
        None | Some("") => Ok(Backend::Ours),
        Some(v) if v.eq_ignore_ascii_case("ours") => Ok(Backend::Ours),
        Some(v) if v.eq_ignore_ascii_case("nalgebra") => Ok(Backend::Nalgebra),
        Some(v) => Err(invalid(
            "parse_backend_setting",
            BACKEND_ENV,
            format!("expected ours or nalgebra; got {v:?}"),
        )),
    }
}

thread_local! {
    static THREAD_BACKEND: Cell<Option<Backend>> = const { Cell::new(None) };
}

/// This thread's [`with_backend`] choice (carried into new threads by
/// [`crate::matmul::ProductChoices`]).
pub(crate) fn thread_choice() -> Option<Backend> {
    THREAD_BACKEND.with(Cell::get)
}

/// Sets this thread's choice (`None`: back to the process-wide one).
pub(crate) fn set_thread_choice(backend: Option<Backend>) {
    THREAD_BACKEND.with(|c| c.set(backend));
}

/// Runs `f` with `backend` computing the products started on this thread, then restores the
/// previous choice (tests use it, so tests running in parallel cannot disturb each other).
pub fn with_backend<R>(backend: Backend, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Backend>);
    impl Drop for Restore {
        fn drop(&mut self) {
            THREAD_BACKEND.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(THREAD_BACKEND.with(|c| c.replace(Some(backend))));
    f()
}

/// The backend a product started now on this thread would use: the [`with_backend`] choice, else
/// `LLM_WORKBOOK_BACKEND` (read once; an unusable value is reported once on stderr and ignored).
pub fn active_backend() -> Backend {
    if let Some(b) = THREAD_BACKEND.with(Cell::get) {
        return b;
    }
    static ENV: OnceLock<Backend> = OnceLock::new();
    *ENV.get_or_init(|| match parse_backend_setting(std::env::var(BACKEND_ENV).ok().as_deref()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("llm-workbook: ignoring {BACKEND_ENV}: {e}; using ours");
            Backend::Ours
        }
    })
}

static NALGEBRA_PRODUCTS: AtomicU64 = AtomicU64::new(0);

pub(crate) fn record_nalgebra_product() {
    NALGEBRA_PRODUCTS.fetch_add(1, Ordering::Relaxed);
}

/// Products computed by [`Backend::Nalgebra`] so far, summed over the whole process.
pub fn nalgebra_products() -> u64 {
    NALGEBRA_PRODUCTS.load(Ordering::Relaxed)
}
