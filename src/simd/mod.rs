//! The one dispatcher: which instruction set runs a loop, asked of the CPU once.
//!
//! Every loop of the crate that has a SIMD form — the f32 and f64 micro-kernels of the product,
//! the one-row product's column dots and row sums (f32), the bf16 pair tile, the block-quantized
//! dots of chapter 11, the FMA throughput probe ([`crate::peak`]) and the element-wise map
//! ([`crate::simd_map`]) — is chosen here by one value, a [`Kernel`]: the portable Rust loop
//! ([`Kernel::Scalar`], on every CPU, the specification), or the same loop written for AVX2 with
//! FMA ([`Kernel::Avx2`]) or for AVX-512 ([`Kernel::Avx512`]). The CPU is asked once, on the
//! first question, which of them it runs ([`cpu`]); no other module of the crate asks the CPU or
//! names an instruction set of its own (a repository test holds that).
//!
//! The process's kernel is chosen here too ([`active_kernel`]: [`set_kernel`],
//! `LLM_WORKBOOK_KERNEL`, else [`best_kernel`]). The callers pass a `Kernel` (the one their
//! settings name, or the process's); the
//! functions here run the SIMD body where the CPU has it and say so, and the caller runs its
//! portable loop otherwise. The SIMD bodies themselves live in `src/simd/x86.rs`, the crate's
//! only file allowed `unsafe` code, whose header gives the safety argument: the bodies run only
//! with a token of the CPU's features, which only the detection below can make.

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86;

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{
    AVX2_F32_MR, AVX2_F32_NR, AVX2_F64_MR, AVX2_F64_NR, AVX512_F32_MR, AVX512_F32_NR,
    AVX512_F64_MR, AVX512_F64_NR, BF16_PAIR_MR, BF16_PAIR_NR, NARROW, SimdKernel, prefetch_lines,
    transpose_f32, transpose_f64,
};

/// Asks the cache for every 64-byte line of `s`: a hint, which changes no value (and does
/// nothing off x86-64). Packing fetches the next run of a block with it while copying this one.
pub fn prefetch<T>(s: &[T]) {
    #[cfg(target_arch = "x86_64")]
    prefetch_lines(s);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = s;
}

use crate::error::{Result, invalid};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// The environment variable that forces a kernel for the whole process: `scalar`, `avx2`,
/// `avx512` or `auto`.
pub const KERNEL_ENV: &str = "LLM_WORKBOOK_KERNEL";

/// The instruction set a loop runs in: the one value every SIMD choice of the crate is made by.
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

    /// Whether this CPU runs the kernel ([`cpu`], asked once per process).
    pub fn is_available(self) -> bool {
        let cpu = cpu();
        match self {
            Kernel::Scalar => true,
            Kernel::Avx2 => cpu.avx2_fma,
            Kernel::Avx512 => cpu.avx512f,
        }
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What this CPU runs, as far as the crate's loops care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    /// AVX2 and FMA: [`Kernel::Avx2`].
    pub avx2_fma: bool,
    /// AVX-512F with AVX2 and FMA: [`Kernel::Avx512`].
    pub avx512f: bool,
    /// AVX512-BF16 with AVX-512F: VDPBF16PS, the bf16 pair tile under [`Kernel::Avx512`].
    pub avx512_bf16: bool,
}

/// The tokens of what the CPU runs, made once by the detection (x86-64), with the CPU's answers.
struct Found {
    cpu: Cpu,
    /// AVX (the 8×8 transposes of packing need only it).
    avx: bool,
    #[cfg(target_arch = "x86_64")]
    avx2: Option<x86::Avx2>,
    #[cfg(target_arch = "x86_64")]
    avx512: Option<x86::Avx512>,
    #[cfg(target_arch = "x86_64")]
    bf16: Option<x86::Avx512Bf16>,
}

/// The CPU's answers, asked on the first call and kept for the life of the process.
fn found() -> &'static Found {
    static FOUND: OnceLock<Found> = OnceLock::new();
    FOUND.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Found {
    let (avx2, avx512, bf16) =
        (x86::Avx2::detect(), x86::Avx512::detect(), x86::Avx512Bf16::detect());
    let cpu =
        Cpu { avx2_fma: avx2.is_some(), avx512f: avx512.is_some(), avx512_bf16: bf16.is_some() };
    Found { cpu, avx: std::arch::is_x86_feature_detected!("avx"), avx2, avx512, bf16 }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Found {
    Found { cpu: Cpu { avx2_fma: false, avx512f: false, avx512_bf16: false }, avx: false }
}

/// What this CPU runs (asked once per process).
pub fn cpu() -> Cpu {
    found().cpu
}

/// Whether the CPU has AVX (packing's transposes).
#[cfg(target_arch = "x86_64")]
fn has_avx() -> bool {
    found().avx
}

/// The kernels this CPU runs, slowest first (always starts with [`Kernel::Scalar`]).
pub fn available_kernels() -> Vec<Kernel> {
    Kernel::ALL.into_iter().filter(|k| k.is_available()).collect()
}

/// The fastest kernel this CPU runs.
pub fn best_kernel() -> Kernel {
    available_kernels().into_iter().next_back().unwrap_or(Kernel::Scalar)
}

/// The error for a kernel this CPU lacks, naming the operation, the argument and what it has.
pub(crate) fn unavailable(op: &'static str, k: Kernel) -> crate::Error {
    let names: Vec<_> = available_kernels().iter().map(|k| k.name()).collect();
    invalid(
        op,
        "kernel",
        format!("{k} is not available on this CPU (available: {})", names.join(", ")),
    )
}

/// Interprets a value of `LLM_WORKBOOK_KERNEL` (`None` when the variable is unset): `Ok(None)`
/// when unset, empty or `auto`; an error when it names no kernel or one this CPU lacks.
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
                let names: Vec<_> = available_kernels().iter().map(|k| k.name()).collect();
                Err(invalid(
                    "parse_kernel_setting",
                    KERNEL_ENV,
                    format!("{k} is not available on this CPU (available: {})", names.join(", ")),
                ))
            }
        }
    }
}

/// What `LLM_WORKBOOK_KERNEL` asks for, read once per process: `Ok(None)` when unset, empty or
/// `auto`.
pub(crate) fn env_kernel() -> Result<Option<Kernel>> {
    static ENV: OnceLock<std::result::Result<Option<Kernel>, String>> = OnceLock::new();
    let parsed = ENV.get_or_init(|| {
        parse_kernel_setting(std::env::var(KERNEL_ENV).ok().as_deref()).map_err(|e| e.to_string())
    });
    parsed.clone().map_err(|reason| invalid("env_kernel", KERNEL_ENV, reason))
}

// ───────────────────────────── which kernel runs ─────────────────────────────
//
// A product whose settings name no kernel ([`crate::matmul::Settings`]) runs the process's
// kernel, chosen by, in this order of precedence:
//
// 1. [`set_kernel`], a process-wide choice (the main job sets the portable kernel for the book, so
//    that every figure and table it computes is the same bits on every CPU);
// 2. the environment variable `LLM_WORKBOOK_KERNEL` (`scalar`, `avx2`, `avx512` or `auto`), read
//    once;
// 3. the best kernel the CPU runs.
//
// A product that must run another kernel says so in its settings, by argument: nothing here
// depends on the thread a product starts on.

const NO_KERNEL: u8 = u8::MAX;
static GLOBAL_KERNEL: AtomicU8 = AtomicU8::new(NO_KERNEL);

/// `Ok` when the CPU runs `k`, else the error naming `op`.
fn check_available(op: &'static str, k: Kernel) -> Result<()> {
    if k.is_available() { Ok(()) } else { Err(unavailable(op, k)) }
}

/// Forces `kernel` for every product of the process whose settings name none (`None` returns to
/// the environment variable or detection). Fails if the CPU cannot run it.
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

/// The kernel of the process: what a product whose settings name no kernel runs ([`set_kernel`],
/// else `LLM_WORKBOOK_KERNEL`, else [`best_kernel`]).
pub fn active_kernel() -> Kernel {
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

// ───────────────────────────── the loops, by kernel ─────────────────────────────

/// The SIMD f32 micro-kernel of `kernel`, if it has one and the CPU runs it (`None` for
/// [`Kernel::Scalar`]: the product's portable kernel is in `src/matmul/scalar.rs`).
#[cfg(target_arch = "x86_64")]
pub(crate) fn f32_micro_kernel(kernel: Kernel) -> Option<SimdKernel<f32>> {
    match kernel {
        Kernel::Scalar => None,
        Kernel::Avx2 => found().avx2.map(x86::Avx2::f32_kernel),
        Kernel::Avx512 => found().avx512.map(x86::Avx512::f32_kernel),
    }
}

/// The SIMD f64 micro-kernel of `kernel`, as [`f32_micro_kernel`].
#[cfg(target_arch = "x86_64")]
pub(crate) fn f64_micro_kernel(kernel: Kernel) -> Option<SimdKernel<f64>> {
    match kernel {
        Kernel::Scalar => None,
        Kernel::Avx2 => found().avx2.map(x86::Avx2::f64_kernel),
        Kernel::Avx512 => found().avx512.map(x86::Avx512::f64_kernel),
    }
}

/// `iterations` rounds of the FMA throughput probe in `kernel`'s registers, f64 or f32: (flops,
/// checksum); `None` for [`Kernel::Scalar`] (the portable probe is [`crate::peak`]'s) or a kernel
/// the CPU lacks.
pub(crate) fn fma_probe(kernel: Kernel, f64_lanes: bool, iterations: u64) -> Option<(u64, f64)> {
    #[cfg(target_arch = "x86_64")]
    match kernel {
        Kernel::Scalar => {}
        Kernel::Avx2 => {
            let t = found().avx2?;
            return Some(if f64_lanes { t.probe_f64(iterations) } else { t.probe_f32(iterations) });
        }
        Kernel::Avx512 => {
            let t = found().avx512?;
            return Some(if f64_lanes { t.probe_f64(iterations) } else { t.probe_f32(iterations) });
        }
    }
    let _ = (kernel, f64_lanes, iterations);
    None
}

/// yᵢ ← f(xᵢ, yᵢ) compiled for `kernel`'s registers; `false` (nothing done) for
/// [`Kernel::Scalar`] or a kernel the CPU lacks, where the caller runs the plain loop.
pub(crate) fn map_f32<F: Fn(f32, f32) -> f32>(
    kernel: Kernel,
    x: &[f32],
    y: &mut [f32],
    f: F,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    match kernel {
        Kernel::Scalar => {}
        Kernel::Avx2 => {
            if let Some(t) = found().avx2 {
                t.map_f32(x, y, f);
                return true;
            }
        }
        Kernel::Avx512 => {
            if let Some(t) = found().avx512 {
                t.map_f32(x, y, f);
                return true;
            }
        }
    }
    let _ = (kernel, x, y, f);
    false
}

/// The one-row product's column dots in `kernel`'s registers: out_j = Σ_{p<k} x_p·b\[j·ld + p\]
/// for every j < `out.len()`, k = `x.len()` (a·B, B column-major: one dot per column; the order
/// of the sums is the SIMD body's, `src/simd/x86.rs`, `dots_body`). `false` (nothing done) for
/// [`Kernel::Scalar`] or a kernel the CPU lacks, where the caller runs its portable dot. Panics
/// before reading memory when a column reaches past `b`.
pub(crate) fn row_dots(kernel: Kernel, x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    match kernel {
        Kernel::Scalar => {}
        Kernel::Avx2 => {
            if let Some(t) = found().avx2 {
                t.row_dots(x, b, ld, out);
                return true;
            }
        }
        Kernel::Avx512 => {
            if let Some(t) = found().avx512 {
                t.row_dots(x, b, ld, out);
                return true;
            }
        }
    }
    let _ = (kernel, x, b, ld, out);
    false
}

/// The one-row product's sums of rows in `kernel`'s registers: out_j = Σ_{p<k} x_p·b\[p·ld + j\]
/// for every j < `out.len()`, k = `x.len()` (a·Bᵀ, B column-major n×k: row p of Bᵀ added in with
/// weight x_p, each output summed over p in order by fused multiply-adds). `false` (nothing done)
/// for [`Kernel::Scalar`] or a kernel the CPU lacks. Panics before reading memory when a row
/// reaches past `b`.
pub(crate) fn row_sums(kernel: Kernel, x: &[f32], b: &[f32], ld: usize, out: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    match kernel {
        Kernel::Scalar => {}
        Kernel::Avx2 => {
            if let Some(t) = found().avx2 {
                t.row_sums(x, b, ld, out);
                return true;
            }
        }
        Kernel::Avx512 => {
            if let Some(t) = found().avx512 {
                t.row_sums(x, b, ld, out);
                return true;
            }
        }
    }
    let _ = (kernel, x, b, ld, out);
    false
}

/// The block-quantized column dots (chapter 11's int8 and 4-bit steps) with AVX2 and FMA, for
/// [`Kernel::Avx2`] and [`Kernel::Avx512`] (every AVX-512 CPU has AVX2; the dot has no wider
/// body); `false` (nothing done) for [`Kernel::Scalar`] or a CPU without AVX2, where the caller
/// runs its reference. The arguments are those of the SIMD body (`src/simd/x86.rs`,
/// `quant_columns_dot`), which panics before reading memory when their lengths disagree.
pub(crate) fn quant_columns_dot(
    kernel: Kernel,
    x: &[f32],
    scales: &[f32],
    codes: &[u8],
    four_bit: bool,
    out: &mut [f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if kernel != Kernel::Scalar
        && let Some(t) = found().avx2
    {
        x86::quant_columns_dot(t, x, scales, codes, four_bit, out);
        return true;
    }
    let _ = (kernel, x, scales, codes, four_bit, out);
    false
}

/// The bf16 pair tile with VDPBF16PS, where `kernel` is [`Kernel::Avx512`] and the CPU has
/// AVX512-BF16: a token to run it with ([`PairTile::run`]); `None` otherwise.
pub(crate) fn bf16_pair_tile(kernel: Kernel) -> Option<PairTile> {
    #[cfg(target_arch = "x86_64")]
    if kernel == Kernel::Avx512 {
        return found().bf16.map(PairTile);
    }
    let _ = kernel;
    None
}

/// The AVX512-BF16 pair tile, obtainable only from [`bf16_pair_tile`] on a CPU that runs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PairTile(#[cfg(target_arch = "x86_64")] x86::Avx512Bf16);

impl PairTile {
    /// C ← α·Ã·B̃ + β·C on one pair tile (`src/simd/x86.rs`, `bf16_pair_tile`, states the layout
    /// and panics before touching memory if a slice is too short).
    #[allow(clippy::too_many_arguments)]
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn run(
        self,
        pairs: usize,
        a: &[u16],
        b: &[u16],
        alpha: f32,
        beta: f32,
        c: &mut [&mut [f32]],
        row: usize,
    ) {
        x86::bf16_pair_tile(self.0, pairs, a, b, alpha, beta, c, row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scalar_kernel_runs_everywhere_and_the_best_is_available() {
        assert_eq!(available_kernels()[0], Kernel::Scalar);
        assert!(best_kernel().is_available());
        let cpu = cpu();
        assert!(!cpu.avx512f || cpu.avx2_fma, "every AVX-512 kernel CPU has AVX2 and FMA");
        assert!(!cpu.avx512_bf16 || cpu.avx512f, "the pair tile needs AVX-512F too");
    }

    #[test]
    fn a_kernel_setting_names_a_kernel_this_cpu_runs() {
        assert_eq!(parse_kernel_setting(None).unwrap(), None);
        assert_eq!(parse_kernel_setting(Some(" AUTO ")).unwrap(), None);
        assert_eq!(parse_kernel_setting(Some("Scalar")).unwrap(), Some(Kernel::Scalar));
        let e = parse_kernel_setting(Some("neon")).unwrap_err().to_string();
        assert!(e.contains(KERNEL_ENV) && e.contains("\"neon\""), "{e}");
        for k in Kernel::ALL.into_iter().filter(|k| !k.is_available()) {
            let e = parse_kernel_setting(Some(k.name())).unwrap_err().to_string();
            assert!(e.contains("not available"), "{e}");
        }
    }

    #[test]
    fn the_portable_kernel_leaves_every_loop_to_its_caller() {
        let mut y = [1.0f32; 3];
        assert!(!map_f32(Kernel::Scalar, &[1.0; 3], &mut y, |x, y| x + y));
        assert_eq!(y, [1.0; 3]);
        assert!(fma_probe(Kernel::Scalar, false, 1).is_none());
        let mut out = [0.0f32; 1];
        assert!(!quant_columns_dot(Kernel::Scalar, &[0.0; 32], &[1.0], &[0; 32], false, &mut out));
        assert!(!row_dots(Kernel::Scalar, &[1.0; 2], &[1.0; 2], 2, &mut out));
        assert!(!row_sums(Kernel::Scalar, &[1.0; 2], &[1.0; 2], 1, &mut out));
        assert_eq!(out, [0.0]);
        assert!(bf16_pair_tile(Kernel::Scalar).is_none() && bf16_pair_tile(Kernel::Avx2).is_none());
    }
}
