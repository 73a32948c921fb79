//! Who computes the products: the crate's own kernels, or nalgebra's `gemm` (the in-run peer of
//! chapter 9's benchmark), chosen by a product's settings ([`crate::matmul::Settings::backend`])
//! or for the whole process (`LLM_WORKBOOK_BACKEND`), and a counter of the products nalgebra
//! computed.

use crate::error::{Result, invalid};
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
/// [`crate::matmul::ProductStats`] ([`crate::matmul::gemm_with`] returns `None`);
/// [`nalgebra_products`] counts its products instead.
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

/// The backend of the process: `LLM_WORKBOOK_BACKEND`, read once (an unusable value is reported
/// once on stderr and ignored). A product whose settings name no backend runs on it
/// ([`crate::matmul::Settings::backend`]).
pub fn active_backend() -> Backend {
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
    use crate::matmul::{Op, Settings, gemm_with, matmul};
    use nalgebra::DMatrix;

    /// A product whose settings name nalgebra is computed by nalgebra (its counter moves, no
    /// statistics of ours come back) and agrees with ours.
    #[test]
    fn a_product_whose_settings_name_nalgebra_is_computed_by_nalgebra() {
        let a = DMatrix::from_row_slice(2, 2, &[1.0_f64, 2.0, 3.0, 4.0]);
        let ours = matmul(&a, &a).unwrap();
        let before = nalgebra_products();
        let mut peer = DMatrix::zeros(2, 2);
        let nalgebra = Settings { backend: Some(Backend::Nalgebra), ..Settings::default() };
        let stats = gemm_with(nalgebra, 1.0, &a, Op::N, &a, Op::N, 0.0, &mut peer).unwrap();
        assert!(stats.is_none(), "our kernels ran: {stats:?}");
        assert!(nalgebra_products() > before, "nalgebra did not compute the product");
        assert_eq!(peer, ours);
    }
}
