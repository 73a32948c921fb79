//! The roofline with a roof for every level of the memory hierarchy: attainable GFLOP/s =
//! min(peak, bandwidth × intensity), with the bandwidth of L1, L2, L3 and memory each measured
//! by the benchmark on one core, and every measured product drawn under the roof of the level
//! that holds its operands.
//!
//! The measurements live in [`ROOFLINE_FILE`], written by `cargo bench --features peers --bench
//! ch10_matmul -- roofline --write`: `# key: value` lines (the machine, the kernel, the date, the
//! load), then rows `kind,name,n,bytes,intensity,value`:
//! - `peak,<what>,,,,<GFLOP/s>`: the FMA peak of one core, the flat roof;
//! - `roof,<level>,,<capacity bytes or empty for memory>,,<GB/s>`: a sloped roof;
//! - `point,<contender>,<n>,<working-set bytes>,<flops per byte>,<GFLOP/s>`: a measured product.

use crate::{Error, Result};

/// Where the roofline measurements live, relative to the repository root.
pub const ROOFLINE_FILE: &str = "data/ch10_roofline.csv";

/// The committed measurements (see the module's documentation), as they were when the crate was
/// compiled: the figure is drawn from them, never from timings taken by the main job.
const ROOFLINE: &str = include_str!("../../data/ch10_roofline.csv");

/// One sloped roof: a level of the memory hierarchy and the read bandwidth measured from it.
#[derive(Clone, Debug, PartialEq)]
pub struct Roof {
    /// `L1`, `L2`, `L3` or `memory`.
    pub level: String,
    /// Capacity in bytes (one core's share for L1 and L2); `None` for memory, which holds all.
    pub bytes: Option<u64>,
    /// Read bandwidth in GB/s on one core.
    pub gbs: f64,
}

/// One measured product on the roofline.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Who computed it (`naive loop`, `ours`).
    pub contender: String,
    /// The size of the square n×n×n product.
    pub n: usize,
    /// Bytes of its operands A, B and C: 3·n²·4 in f32.
    pub working_set: u64,
    /// Flops per byte moved (see [`super::traffic`]).
    pub intensity: f64,
    /// Measured GFLOP/s.
    pub gflops: f64,
}

/// A roofline's measurements: where, the roofs and the points.
#[derive(Clone, Debug, PartialEq)]
pub struct Roofline {
    /// The processor, the kernel, the date and the load average, as `# key: value` lines.
    pub meta: Vec<(String, String)>,
    /// The FMA peak of one core in GFLOP/s: the flat roof.
    pub peak: f64,
    /// The sloped roofs from the smallest level to memory.
    pub roofs: Vec<Roof>,
    /// The measured products.
    pub points: Vec<Point>,
}

/// Attainable GFLOP/s at `intensity` flops per byte under a roof of `gbs` GB/s and a peak of
/// `peak` GFLOP/s: min(peak, gbs × intensity).
pub fn attainable(peak: f64, gbs: f64, intensity: f64) -> f64 {
    peak.min(gbs * intensity)
}

/// The roof a working set of `bytes` sits under: the smallest level that holds it (the last
/// roof, memory, when no cache does). Errors on an empty list.
pub fn roof_of(roofs: &[Roof], bytes: u64) -> Result<&Roof> {
    roofs.iter().find(|r| r.bytes.is_none_or(|c| bytes <= c)).or(roofs.last()).ok_or_else(|| {
        Error::Parse { file: ROOFLINE_FILE.into(), line: None, reason: "no roof".into() }
    })
}

/// The roof min(peak, gbs × intensity) over intensities `lo` … `hi`, as the points a straight
/// line on log–log axes needs: its two ends and, between them, the knee at peak/gbs.
pub fn roof_line(peak: f64, gbs: f64, (lo, hi): (f64, f64)) -> Vec<(f64, f64)> {
    let knee = peak / gbs;
    let mut xs = vec![lo];
    if knee > lo && knee < hi {
        xs.push(knee);
    }
    xs.push(hi);
    xs.into_iter().map(|x| (x, attainable(peak, gbs, x))).collect()
}

/// The points that lie above the roof of the level holding their working set ([`roof_of`]),
/// each described in a line; empty when every point is under its roof.
pub fn points_above_roofs(r: &Roofline) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for p in &r.points {
        let roof = roof_of(&r.roofs, p.working_set)?;
        let limit = attainable(r.peak, roof.gbs, p.intensity);
        if p.gflops > limit {
            out.push(format!(
                "{} at n = {}: {:.1} GFLOP/s above the {} roof's {limit:.1} at {:.2} flops/byte",
                p.contender, p.n, p.gflops, roof.level, p.intensity
            ));
        }
    }
    Ok(out)
}

/// The value of the `# key: value` line `key`, or an error naming it.
pub fn meta<'r>(r: &'r Roofline, key: &str) -> Result<&'r str> {
    r.meta.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).ok_or_else(|| Error::Parse {
        file: ROOFLINE_FILE.into(),
        line: None,
        reason: format!("no `# {key}:` line"),
    })
}

/// Parses the text of a file like [`ROOFLINE_FILE`] (see the module's documentation); a bad
/// line is an error naming it.
pub fn parse_roofline(text: &str) -> Result<Roofline> {
    let bad = |line: usize, reason: String| Error::Parse {
        file: ROOFLINE_FILE.into(),
        line: Some(line),
        reason,
    };
    let mut r = Roofline { meta: Vec::new(), peak: 0.0, roofs: Vec::new(), points: Vec::new() };
    let mut header = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(kv) = line.strip_prefix("# ") {
            if let Some((k, v)) = kv.split_once(": ") {
                r.meta.push((k.to_string(), v.to_string()));
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        if !header {
            header = true;
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 6 {
            return Err(bad(i + 1, format!("{} fields, want 6", f.len())));
        }
        let num = |s: &str, what: &str| -> Result<f64> {
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0)
                .ok_or_else(|| bad(i + 1, format!("{what} {s:?} is not a positive number")))
        };
        let value = num(f[5], "value")?;
        match f[0] {
            "peak" => r.peak = value,
            "roof" => r.roofs.push(Roof {
                level: f[1].to_string(),
                bytes: if f[3].is_empty() { None } else { Some(num(f[3], "bytes")? as u64) },
                gbs: value,
            }),
            "point" => r.points.push(Point {
                contender: f[1].to_string(),
                n: num(f[2], "n")? as usize,
                working_set: num(f[3], "bytes")? as u64,
                intensity: num(f[4], "intensity")?,
                gflops: value,
            }),
            other => return Err(bad(i + 1, format!("kind {other:?}: want peak, roof or point"))),
        }
    }
    if r.peak <= 0.0 || r.roofs.is_empty() {
        return Err(bad(text.lines().count(), "want a peak row and at least one roof".into()));
    }
    Ok(r)
}

/// The committed measurements ([`ROOFLINE_FILE`]).
pub fn committed_roofline() -> Result<Roofline> {
    parse_roofline(ROOFLINE)
}

/// `r` as the text of [`ROOFLINE_FILE`]: what [`parse_roofline`] reads back.
pub fn roofline_text(r: &Roofline) -> String {
    let mut out: String = r.meta.iter().map(|(k, v)| format!("# {k}: {v}\n")).collect();
    out.push_str("kind,name,n,bytes,intensity,value\n");
    out.push_str(&format!("peak,FMA peak one core,,,,{:.2}\n", r.peak));
    for roof in &r.roofs {
        let bytes = roof.bytes.map_or(String::new(), |b| b.to_string());
        out.push_str(&format!("roof,{},,{bytes},,{:.2}\n", roof.level, roof.gbs));
    }
    for p in &r.points {
        out.push_str(&format!(
            "point,{},{},{},{:.4},{:.3}\n",
            p.contender, p.n, p.working_set, p.intensity, p.gflops
        ));
    }
    out
}
