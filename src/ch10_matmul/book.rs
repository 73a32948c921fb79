//! What the book shows about chapter 10: the worked-number table (no errata: no source document),
//! the walk-through of one tiny packed product, the measurement-free figures and the chapter's
//! entry. The measured tables and figures come from the benchmark, `benches/ch10_matmul.rs`.

use super::blocks::{
    ZEN3_CACHES, ZEN4_CACHES, accumulator_registers, fma_fingerprint_f32, footprint, tile_calls,
    tile_use,
};
use super::roofline::{Roofline, meta, roof_line, roof_of};
use super::traffic::{blocked_traffic_bytes, flops, intensity, naive_traffic_bytes};
use crate::errata::Erratum;
use crate::error::{Result, invalid};
use crate::matmul::lab::{Blocking, Caches, SCALAR_TILE, model_blocking, tile_shape};
use crate::matmul::{self, Op, ProductStats, Settings};
use crate::plot::{Figure, LineChart, LogAxes, Series};
use crate::report::{Chapter, Walk, Worked};
use crate::simd::Kernel;
use crate::sources::THIS_CRATE;
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

/// No source document, so no errata.
pub const ERRATA: &[Erratum] = &[];

/// The analytical model's KC, MC and NC for every kernel's tuned constants on the caches of the
/// machine they were tuned on (written out, so the rows read the same anywhere): three rows per
/// kernel and element type, each beside the tuned value.
fn model_rows() -> Result<Vec<Worked>> {
    // The values worked out by hand in the test that pins them: KC, MC, NC.
    type Row = (&'static str, Kernel, usize, Blocking, Caches, [&'static str; 3]);
    let (z3, z4) = (ZEN3_CACHES, ZEN4_CACHES);
    let kernels: [Row; 5] = [
        ("AVX2 f32 on the Zen 3", Kernel::Avx2, 4, matmul::lab::AVX2_F32_BLOCKING, z3, AVX2_F32),
        ("AVX2 f64 on the Zen 3", Kernel::Avx2, 8, matmul::lab::AVX2_F64_BLOCKING, z3, AVX2_F64),
        (
            "the portable f64 on the Zen 3",
            Kernel::Scalar,
            8,
            matmul::lab::SCALAR_BLOCKING,
            z3,
            SCALAR,
        ),
        (
            "AVX-512 f32 on the Zen 4",
            Kernel::Avx512,
            4,
            matmul::lab::AVX512_F32_BLOCKING,
            z4,
            Z4_F32,
        ),
        (
            "AVX-512 f64 on the Zen 4",
            Kernel::Avx512,
            8,
            matmul::lab::AVX512_F64_BLOCKING,
            z4,
            Z4_F64,
        ),
    ];
    const AVX2_F32: [&str; 3] = ["320", "256", "9552"];
    const AVX2_F64: [&str; 3] = ["256", "192", "7164"];
    const SCALAR: [&str; 3] = ["384", "192", "7168"];
    const Z4_F32: [&str; 3] = ["160", "768", "14336"];
    const Z4_F64: [&str; 3] = ["128", "384", "7168"];
    let mut rows = Vec::new();
    for (label, kernel, elem, tuned, caches, printed) in kernels {
        let (mr, nr) =
            if elem == 4 { tile_shape::<f32>(kernel)? } else { tile_shape::<f64>(kernel)? };
        let model = model_blocking(&caches, (mr, nr), elem, tuned.kc).ok_or_else(|| {
            invalid("ch10 worked", "caches", format!("{label}: the model has no blocking"))
        })?;
        let b = model.blocking;
        let values =
            [("KC", model.model_kc, tuned.kc), ("MC", b.mc, tuned.mc), ("NC", b.nc, tuned.nc)];
        for ((name, value, tuned_value), printed) in values.into_iter().zip(printed) {
            rows.push(Worked::number(
                "the_analytical_model_blocks_for_the_written_out_caches",
                THIS_CRATE,
                format!("model {name} for {label} (tuned {tuned_value})"),
                printed,
                value as f64,
            ));
        }
    }
    Ok(rows)
}

/// The chapter's derived numbers, recomputed (see the prose for each derivation).
pub fn worked() -> Result<Vec<Worked>> {
    let (t, d) = (768, 128);
    let avx2_f32 = matmul::lab::AVX2_F32_BLOCKING;
    let fp = footprint(16, 6, avx2_f32, 4);
    let n = 1024;
    let (separate, fused) = fma_fingerprint_f32(2f32.powi(-12));
    let mut rows = vec![
        Worked::number(
            "flops_of_the_qkv_projection_are_2_m_n_k",
            THIS_CRATE,
            "flops of the QKV projection, 768×128 · 128×384 (2·m·n·k)",
            "75497472",
            flops(t, 3 * d, d) as f64,
        ),
        Worked::number(
            "the_avx2_f32_tile_uses_12_of_16_registers_for_accumulators",
            THIS_CRATE,
            "AVX2 f32 tile 16×6 in 8-lane registers: accumulators",
            "12",
            accumulator_registers(16, 6, 8)? as f64,
        ),
        Worked::number(
            "packed_blocks_fit_their_caches",
            THIS_CRATE,
            "B̃ sliver KC×NR×4 B, AVX2 f32, KC = 384 (L1 is 32768 B)",
            "9216",
            fp.b_sliver as f64,
        ),
        Worked::number(
            "packed_blocks_fit_their_caches",
            THIS_CRATE,
            "Ã sliver MR×KC×4 B, AVX2 f32",
            "24576",
            fp.a_sliver as f64,
        ),
        Worked::number(
            "packed_blocks_fit_their_caches",
            THIS_CRATE,
            "Ã block MC×KC×4 B, AVX2 f32, MC = 96 (L2 is 524288 B)",
            "147456",
            fp.a_block as f64,
        ),
        Worked::number(
            "packed_blocks_fit_their_caches",
            THIS_CRATE,
            "B̃ panel KC×NC×4 B, AVX2 f32, NC = 1032 (L3 is 33554432 B)",
            "1585152",
            fp.b_panel as f64,
        ),
        Worked::number(
            "naive_and_blocked_arithmetic_intensity",
            THIS_CRATE,
            "naive loop, f32, n = 1024: flops per byte from memory",
            "0.25",
            intensity(flops(n, n, n), naive_traffic_bytes(n, n, n, 4)),
        ),
        Worked::number(
            "naive_and_blocked_arithmetic_intensity",
            THIS_CRATE,
            "blocked (AVX2 f32 constants), n = 1024: flops per byte from memory",
            "64",
            intensity(flops(n, n, n), blocked_traffic_bytes(n, n, n, 4, avx2_f32)),
        ),
        Worked::number(
            "tile_counts_follow_from_mr_nr_kc",
            THIS_CRATE,
            "AVX2 f32 micro-kernel calls for 37×600 · 600×29 (⌈37/16⌉·⌈29/6⌉·⌈600/384⌉)",
            "30",
            tile_calls(37, 29, 600, 16, 6, avx2_f32.kc) as f64,
        ),
        Worked::number(
            "tile_use_of_a_one_row_product",
            THIS_CRATE,
            "share of useful work, 1×384 product, 16×6 tiles",
            "0.0625",
            tile_use(1, 384, 16, 6),
        ),
        Worked::number(
            "packing_pads_with_zeros",
            THIS_CRATE,
            "zeros in Ã for 5×3 A, MR = 4 (3 pad rows × 3)",
            "9",
            zeros_in_packed_5x3()? as f64,
        ),
        Worked::number(
            "simd_kernels_fuse_multiply_and_add_and_the_scalar_kernel_does_not",
            THIS_CRATE,
            "−1·1 + x·x, x = 1 + 2⁻¹², f32, separately rounded (2⁻¹¹)",
            "0.00048828125",
            separate,
        ),
        Worked::number(
            "simd_kernels_fuse_multiply_and_add_and_the_scalar_kernel_does_not",
            THIS_CRATE,
            "the same with one fused multiply-add (2⁻¹¹ + 2⁻²⁴)",
            "0.000488340854644775390625",
            fused,
        ),
    ];
    rows.extend(model_rows()?);
    Ok(rows)
}

fn walk_operands() -> (DMatrix<f64>, DMatrix<f64>) {
    let a = DMatrix::from_row_slice(
        5,
        3,
        &[1.0, 2.0, 0.0, 0.0, 1.0, 3.0, 2.0, 0.0, 1.0, 1.0, 1.0, 1.0, 3.0, 2.0, 1.0],
    );
    let b = DMatrix::from_row_slice(
        3,
        5,
        &[1.0, 0.0, 2.0, 1.0, 0.0, 0.0, 1.0, 1.0, 2.0, 1.0, 2.0, 1.0, 0.0, 1.0, 3.0],
    );
    (a, b)
}

fn zeros_in_packed_5x3() -> Result<usize> {
    let (a, _) = walk_operands();
    let packed = matmul::lab::pack_a_block(&a, Op::N, 0..5, 0..3, SCALAR_TILE.0)?;
    Ok(packed.iter().filter(|&&v| v == 0.0).count() - a.iter().filter(|&&v| v == 0.0).count())
}

/// A slice of a packed buffer shown as a matrix with one row per depth index p.
fn sliver_matrix(values: &[f64], width: usize) -> DMatrix<f64> {
    DMatrix::from_row_slice(values.len() / width, width, values)
}

/// One tiny packed product, step by step: A is 5×3, B is 3×5, the portable kernel's tile is 4×4,
/// and KC = 2 so the depth 3 takes two rank-KC updates.
pub fn walk(out: &mut Walk) -> Result<()> {
    let (mr, nr) = SCALAR_TILE;
    let kc = 2;
    let (a, b) = walk_operands();
    let (m, k) = a.shape();
    let n = b.ncols();
    out.decimals = 0;
    out.step("1. The operands (column-major, as nalgebra stores them)")?;
    out.matrix("A", &a)?;
    out.matrix("B", &b)?;
    out.say(&format!("C = A·B is {m}×{n}; {} flops (2·m·n·k).", flops(m, n, k)))?;
    out.say(&format!(
        "Register tile MR×NR = {mr}×{nr}, so C is covered by ⌈5/4⌉·⌈5/4⌉ = 4 tiles; KC = {kc}, \
         so depth 3 is 2 + 1."
    ))?;
    let mut c = DMatrix::<f64>::zeros(m, n);
    for (update, pc) in (0..k).step_by(kc).enumerate() {
        let depth = pc..(pc + kc).min(k);
        let d = depth.len();
        out.step(&format!(
            "{}. Rank-{d} update over p = {}..{}: pack, then one micro-kernel call per tile",
            update + 2,
            depth.start,
            depth.end
        ))?;
        let b_packed = matmul::lab::pack_b_panel(&b, Op::N, depth.clone(), 0..n, nr)?;
        let a_packed = matmul::lab::pack_a_block(&a, Op::N, 0..m, depth.clone(), mr)?;
        for (q, s) in b_packed.chunks(d * nr).enumerate() {
            out.matrix(
                &format!(
                    "B̃ sliver {q} (columns {}..{}, one row per p; zeros pad past column {})",
                    q * nr,
                    q * nr + nr,
                    n
                ),
                &sliver_matrix(s, nr),
            )?;
        }
        for (q, s) in a_packed.chunks(d * mr).enumerate() {
            out.matrix(
                &format!(
                    "Ã sliver {q} (rows {}..{}, one row per p; zeros pad past row {})",
                    q * mr,
                    q * mr + mr,
                    m
                ),
                &sliver_matrix(s, mr),
            )?;
        }
        for (jq, b_s) in b_packed.chunks(d * nr).enumerate() {
            for (iq, a_s) in a_packed.chunks(d * mr).enumerate() {
                let mut tile = DMatrix::zeros(mr, nr);
                matmul::lab::scalar_update(d, a_s, b_s, 1.0, 0.0, &mut tile)?;
                out.matrix(
                    &format!(
                        "tile ({iq}, {jq}) = Ã sliver {iq} · B̃ sliver {jq}  (Σₚ column p of Ã \
                         ⊗ row p of B̃)"
                    ),
                    &tile,
                )?;
                for j in 0..nr.min(n - jq * nr) {
                    for i in 0..mr.min(m - iq * mr) {
                        c[(iq * mr + i, jq * nr + j)] += tile[(i, j)];
                    }
                }
            }
        }
        out.matrix(
            &format!(
                "C after this update ({})",
                if pc == 0 {
                    "the first update uses β = 0: C's old contents are ignored"
                } else {
                    "later updates use β = 1: added on"
                }
            ),
            &c,
        )?;
    }
    out.step(&format!("{}. The same product through the public entry point", k.div_ceil(kc) + 2))?;
    let mut check = DMatrix::zeros(m, n);
    let ours = Settings { backend: Some(crate::backend::Backend::Ours), ..Settings::default() };
    let ran: ProductStats = matmul::gemm_with(ours, 1.0, &a, Op::N, &b, Op::N, 0.0, &mut check)?
        .ok_or_else(|| crate::error::invalid("walk", "backend", "our kernels did not run"))?;
    out.matrix("matmul(A, B)", &check)?;
    out.say(if check == c {
        "equal to the tiles assembled above, entry for entry"
    } else {
        "DIFFERS from the tiles above"
    })?;
    out.say(&format!("kernel that ran: {}", ran.kernel))?;
    Ok(())
}

// ───────────────────────────── figures ─────────────────────────────

/// The chapter's measurement-free figures: arithmetic intensity of the naive and blocked loop
/// nests against n, and the useful share of the register tiles against m. (The measured figures,
/// GFLOP/s against n, the roofline and the blocking sweep, are drawn by the benchmark.)
pub fn figures() -> Result<Vec<(String, Figure)>> {
    let ns: Vec<usize> = (4..=12).map(|e| 1usize << e).collect();
    let blocked = |b: Blocking| {
        ns.iter()
            .map(|&n| (n as f64, intensity(flops(n, n, n), blocked_traffic_bytes(n, n, n, 4, b))))
            .collect()
    };
    // n doubles and the intensity spans 1/4 … 2⁷: both axes in powers of two.
    let intensity_fig = Figure::LogLine(
        LineChart {
            title: "Flops per byte from memory, square f32 products".into(),
            x_label: "n (log scale)".into(),
            y_label: "flops / byte (log scale)".into(),
            series: vec![
                Series::new(
                    "naive loop, nothing reused from cache",
                    ns.iter()
                        .map(|&n| {
                            (n as f64, intensity(flops(n, n, n), naive_traffic_bytes(n, n, n, 4)))
                        })
                        .collect(),
                ),
                Series::new("blocked, AVX2 f32 constants", blocked(matmul::lab::AVX2_F32_BLOCKING)),
                Series::new(
                    "blocked, KC = 32 (too shallow)",
                    blocked(Blocking { kc: 32, ..matmul::lab::AVX2_F32_BLOCKING }),
                ),
            ],
            markers: true,
        },
        LogAxes::Both,
    );
    let ms: Vec<usize> = (1..=96).collect();
    let use_fig = Figure::Line(LineChart {
        title: "Useful share of the register tiles, m×768 products".into(),
        x_label: "m (rows of C)".into(),
        y_label: "share of multiply-adds inside C".into(),
        series: vec![
            Series::new(
                "AVX2 f32, 16×6",
                ms.iter().map(|&m| (m as f64, tile_use(m, 768, 16, 6))).collect(),
            ),
            Series::new(
                "AVX-512 f32, 32×8",
                ms.iter().map(|&m| (m as f64, tile_use(m, 768, 32, 8))).collect(),
            ),
            Series::new(
                "portable, 4×4",
                ms.iter()
                    .map(|&m| (m as f64, tile_use(m, 768, SCALAR_TILE.0, SCALAR_TILE.1)))
                    .collect(),
            ),
        ],
        markers: false,
    });
    Ok(vec![("ch10_intensity".into(), intensity_fig), ("ch10_tile_use".into(), use_fig)])
}

fn plots(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::plot::save_all(&figures()?, dir)
}

/// This chapter's entry in the book.
pub const CHAPTER: Chapter = Chapter {
    number: 10,
    stem: "ch10_matmul",
    title: "A packed, blocked, SIMD matrix product",
    worked,
    walk,
    plots,
    errata: ERRATA,
};

/// A byte count as KiB or MiB, whichever reads as a whole number first.
fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 20 { format!("{} MiB", bytes >> 20) } else { format!("{} KiB", bytes >> 10) }
}

/// The roofline figure on log–log axes: one straight roof per level (its ends and its knee,
/// [`roof_line`]), then each contender's points grouped by the roof
/// they sit under, labelled with that roof; the caption names the machine.
pub fn roofline_figure(r: &Roofline) -> Result<Figure> {
    let xs = r.points.iter().map(|p| p.intensity);
    let (lo, hi) = xs.fold((1.0f64 / 16.0, 64.0f64), |(l, h), x| (l.min(x / 2.0), h.max(x * 2.0)));
    let mut series = Vec::new();
    for roof in &r.roofs {
        let held = roof.bytes.map_or(String::new(), |b| format!(" (≤ {})", size_text(b)));
        series.push(Series::unmarked(
            format!("{} roof, {:.0} GB/s{held}", roof.level, roof.gbs),
            roof_line(r.peak, roof.gbs, (lo, hi)),
        ));
    }
    let mut groups: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for p in &r.points {
        let roof = roof_of(&r.roofs, p.working_set)?;
        let label = format!("{}, under {}", p.contender, roof.level);
        match groups.iter_mut().find(|g| g.0 == label) {
            Some(g) => g.1.push((p.intensity, p.gflops)),
            None => groups.push((label, vec![(p.intensity, p.gflops)])),
        }
    }
    for (label, pts) in groups {
        let ns: Vec<String> = r
            .points
            .iter()
            .filter(|p| pts.contains(&(p.intensity, p.gflops)))
            .map(|p| p.n.to_string())
            .collect();
        series.push(Series::new(format!("{label}: n = {}", ns.join(", ")), pts));
    }
    let cpu = meta(r, "cpu")?;
    let kernel = meta(r, "kernel")?;
    Ok(Figure::LogLine(
        LineChart {
            title: format!("Roofline, one core, f32, {cpu} ({kernel}): peak {:.0} GFLOP/s", r.peak),
            x_label: "arithmetic intensity, flops per byte (log scale)".into(),
            y_label: "GFLOP/s (log scale)".into(),
            series,
            markers: true,
        },
        LogAxes::Both,
    ))
}
