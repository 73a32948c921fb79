//! Who computes the products: the crate's own kernels, or nalgebra's `gemm` (the in-run peer of
//! chapter 9's benchmark), chosen per thread ([`with_backend`]) or per process
//! (`LLM_WORKBOOK_BACKEND`), and a counter of the products nalgebra computed.
//!
//! A product reads one flag before it starts: until some code in the process chooses nalgebra
//! ([`with_backend`], or `LLM_WORKBOOK_BACKEND` read at the first product), every product runs
//! ours without asking further; once nalgebra has been chosen, [`crate::matmul::gemm`] and its
//! wrappers ask [`active_backend`].

use crate::error::{Result, invalid};
use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

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
/// [`crate::threads::share_pieces`]).
pub(crate) fn thread_choice() -> Option<Backend> {
    THREAD_BACKEND.with(Cell::get)
}

/// Sets this thread's choice (`None`: back to the process-wide one).
pub(crate) fn set_thread_choice(backend: Option<Backend>) {
    if backend == Some(Backend::Nalgebra) {
        PEER.store(PEER_CHOSEN, Ordering::Relaxed);
    }
    THREAD_BACKEND.with(|c| c.set(backend));
}

/// [`PEER`] before the first product has read `LLM_WORKBOOK_BACKEND`.
const PEER_UNKNOWN: u8 = 0;
/// [`PEER`] when nothing in the process has chosen nalgebra: every product runs ours.
const PEER_NEVER: u8 = 1;
/// [`PEER`] once anything in the process has chosen nalgebra (it stays so).
const PEER_CHOSEN: u8 = 2;
/// Whether a product must ask who computes it. It only ever rises to [`PEER_CHOSEN`], set before
/// the choice it announces, so a thread that sees a nalgebra choice sees the flag too.
static PEER: AtomicU8 = AtomicU8::new(PEER_UNKNOWN);

/// The backend of a product starting now on this thread: [`Backend::Ours`] after one load of a
/// flag while nothing in the process has chosen nalgebra, else [`active_backend`].
#[inline]
pub(crate) fn product_backend() -> Backend {
    if PEER.load(Ordering::Relaxed) == PEER_NEVER { Backend::Ours } else { asked_backend() }
}

/// [`product_backend`] when the flag does not settle it: the first product records whether the
/// environment chose nalgebra; a later one asks [`active_backend`].
#[cold]
fn asked_backend() -> Backend {
    let found = if process_backend() == Backend::Nalgebra { PEER_CHOSEN } else { PEER_NEVER };
    // A `with_backend` choice made meanwhile has set PEER_CHOSEN, which this does not lower.
    let _ = PEER.compare_exchange(PEER_UNKNOWN, found, Ordering::Relaxed, Ordering::Relaxed);
    active_backend()
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
    if backend == Backend::Nalgebra {
        PEER.store(PEER_CHOSEN, Ordering::Relaxed);
    }
    let _restore = Restore(THREAD_BACKEND.with(|c| c.replace(Some(backend))));
    f()
}

/// The backend a product started now on this thread would use: the [`with_backend`] choice, else
/// `LLM_WORKBOOK_BACKEND` (read once; an unusable value is reported once on stderr and ignored).
pub fn active_backend() -> Backend {
    THREAD_BACKEND.with(Cell::get).unwrap_or_else(process_backend)
}

/// The process-wide choice: `LLM_WORKBOOK_BACKEND`, read once.
fn process_backend() -> Backend {
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

#[cfg(test)]
mod tests {
    use super::*;
    use nalgebra::DMatrix;

    /// The flag a product reads first never hides a nalgebra choice made after products ran:
    /// the first product settles it (to "never chosen" here, unless another test chose nalgebra),
    /// and the next product, inside `with_backend`, is still computed by nalgebra.
    #[test]
    fn a_nalgebra_choice_made_after_products_ran_is_obeyed() {
        let a = DMatrix::from_row_slice(2, 2, &[1.0_f64, 2.0, 3.0, 4.0]);
        let ours = crate::matmul::matmul(&a, &a).unwrap();
        assert_ne!(PEER.load(Ordering::Relaxed), PEER_UNKNOWN, "the first product settles it");
        let before = nalgebra_products();
        let peer = with_backend(Backend::Nalgebra, || crate::matmul::matmul(&a, &a)).unwrap();
        assert!(nalgebra_products() > before, "nalgebra did not compute the product");
        assert_eq!(peer, ours);
        assert_eq!(active_backend(), Backend::Ours, "the choice is restored");
    }
}
