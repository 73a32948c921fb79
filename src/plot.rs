//! Plots as data first, pictures second.
//!
//! A chapter describes each figure as a [`Figure`] value (the series, points and grids it shows),
//! so tests can assert on exactly what would be drawn. The main job then calls [`Figure::save`],
//! which draws it twice, as `<stem>.png` and `<stem>.svg`, into `chapters/img/`. Text is
//! rasterised in pure Rust from the DejaVu Sans bytes of the `dejavu` crate, registered once, so
//! no system font or library is ever needed.

use crate::error::{Error, Result};
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The font family every chart uses; [`register_font`] binds it to DejaVu Sans.
pub const FONT: &str = "sans-serif";
/// Width and height of every figure, in pixels.
pub const SIZE: (u32, u32) = (900, 560);

/// Registers DejaVu Sans (from the `dejavu` crate, its licence shipped inside that crate) as
/// [`FONT`]. Safe to call many times; the first call does the work.
pub fn register_font() -> Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(Error::Plot {
            path: "<font>".into(),
            reason: "the embedded DejaVu Sans font could not be parsed".into(),
        })
    }
}

/// One named line (or set of points) of a chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The legend entry.
    pub label: String,
    /// (x, y) points in order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A series from a label and points.
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series { label: label.into(), points }
    }
}

/// Lines over a shared x axis.
#[derive(Clone, Debug, PartialEq)]
pub struct LineChart {
    /// The caption.
    pub title: String,
    /// The x-axis description.
    pub x_label: String,
    /// The y-axis description.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
    /// Also mark each point with a dot.
    pub markers: bool,
}

/// Labelled points, optionally over coloured class regions.
#[derive(Clone, Debug, PartialEq)]
pub struct ScatterChart {
    /// The caption.
    pub title: String,
    /// The x-axis description.
    pub x_label: String,
    /// The y-axis description.
    pub y_label: String,
    /// One series per class.
    pub classes: Vec<Series>,
    /// The class a model predicts over a grid, drawn underneath in light colours.
    pub regions: Option<Regions>,
    /// Extra lines, e.g. a decision boundary.
    pub lines: Vec<Series>,
}

/// A grid of predicted classes over a rectangle: `class[iy * nx + ix]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Regions {
    /// x range covered.
    pub x: (f64, f64),
    /// y range covered.
    pub y: (f64, f64),
    /// Cells along x.
    pub nx: usize,
    /// Cells along y.
    pub ny: usize,
    /// The predicted class of each cell, row by row from the bottom.
    pub class: Vec<usize>,
}

impl Regions {
    /// Evaluates `predict` at the centre of every cell of an nx×ny grid.
    pub fn evaluate(
        x: (f64, f64),
        y: (f64, f64),
        nx: usize,
        ny: usize,
        mut predict: impl FnMut(f64, f64) -> usize,
    ) -> Self {
        let mut class = Vec::with_capacity(nx * ny);
        for iy in 0..ny {
            for ix in 0..nx {
                let cx = x.0 + (ix as f64 + 0.5) * (x.1 - x.0) / nx as f64;
                let cy = y.0 + (iy as f64 + 0.5) * (y.1 - y.0) / ny as f64;
                class.push(predict(cx, cy));
            }
        }
        Regions { x, y, nx, ny, class }
    }
}

/// A matrix drawn as coloured cells, row 0 at the top.
#[derive(Clone, Debug, PartialEq)]
pub struct Heatmap {
    /// The caption.
    pub title: String,
    /// The x-axis (column) description.
    pub x_label: String,
    /// The y-axis (row) description.
    pub y_label: String,
    /// The values, row-major: `values[r][c]`.
    pub values: Vec<Vec<f64>>,
    /// Names of the columns (tokens, dimensions); numbers when empty.
    pub col_names: Vec<String>,
    /// Names of the rows; numbers when empty.
    pub row_names: Vec<String>,
    /// Print each value in its cell (for small matrices).
    pub annotate: bool,
}

/// Any of the figures a chapter draws.
#[derive(Clone, Debug, PartialEq)]
pub enum Figure {
    /// See [`LineChart`].
    Line(LineChart),
    /// See [`ScatterChart`].
    Scatter(ScatterChart),
    /// See [`Heatmap`].
    Heatmap(Heatmap),
}

type DrawResult<DB> =
    std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn color(i: usize) -> RGBColor {
    const PALETTE: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    PALETTE[i % PALETTE.len()]
}

/// Viridis, approximated by linear interpolation between five of its stops; t in [0, 1].
fn viridis(t: f64) -> RGBColor {
    const STOPS: [(f64, f64, f64); 5] = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 };
    let x = t * (STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |p: f64, q: f64| (p + (q - p) * f) as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

fn bounds(points: impl Iterator<Item = (f64, f64)>) -> ((f64, f64), (f64, f64)) {
    let (mut x0, mut x1, mut y0, mut y1) =
        (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
    for (x, y) in points.filter(|(x, y)| x.is_finite() && y.is_finite()) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    let pad = |lo: f64, hi: f64, frac: f64| {
        if !lo.is_finite() {
            (0.0, 1.0)
        } else if hi - lo < 1e-12 {
            (lo - 0.5, hi + 0.5)
        } else {
            let p = (hi - lo) * frac;
            (lo - p, hi + p)
        }
    };
    (pad(x0, x1, 0.0), pad(y0, y1, 0.05))
}

/// A chart whose coordinates are the data's: the axes the line and scatter charts share.
type XyChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
/// What drawing on a backend can fail with.
type DrawError<DB> = DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>;

/// The frame every line and scatter chart starts from: title, margins, label areas and axis
/// ranges; the caller draws its background (regions) before [`draw_mesh`] if it has one.
fn xy_chart<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> std::result::Result<XyChart<'a, DB>, DrawError<DB>> {
    ChartBuilder::on(root)
        .caption(title, (FONT, 22))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)
}

/// The axes, their descriptions and ticks, without the light grid.
fn draw_mesh<DB: DrawingBackend>(
    chart: &mut XyChart<'_, DB>,
    x_label: &str,
    y_label: &str,
) -> std::result::Result<(), DrawError<DB>> {
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(WHITE.mix(0.0))
        .draw()
}

/// The legend box of the labelled series.
fn draw_legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut XyChart<'a, DB>,
) -> std::result::Result<(), DrawError<DB>> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 14))
        .draw()
}

fn draw_line<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &LineChart) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (x, y) = bounds(c.series.iter().flat_map(|s| s.points.iter().copied()));
    let mut chart = xy_chart(root, &c.title, x, y)?;
    draw_mesh(&mut chart, &c.x_label, &c.y_label)?;
    for (i, s) in c.series.iter().enumerate() {
        let col = color(i);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), col.stroke_width(2)))?
            .label(&s.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
        if c.markers {
            chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, col.filled())))?;
        }
    }
    if c.series.iter().any(|s| !s.label.is_empty()) {
        draw_legend(&mut chart)?;
    }
    root.present()
}

fn draw_scatter<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &ScatterChart,
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let mut all: Vec<(f64, f64)> =
        c.classes.iter().flat_map(|s| s.points.iter().copied()).collect();
    if let Some(r) = &c.regions {
        all.push((r.x.0, r.y.0));
        all.push((r.x.1, r.y.1));
    }
    let (x, y) = bounds(all.into_iter());
    let mut chart = xy_chart(root, &c.title, x, y)?;
    if let Some(r) = &c.regions {
        let (dx, dy) = ((r.x.1 - r.x.0) / r.nx as f64, (r.y.1 - r.y.0) / r.ny as f64);
        chart.draw_series(r.class.iter().enumerate().map(|(i, &k)| {
            let (ix, iy) = (i % r.nx, i / r.nx);
            let (ax, ay) = (r.x.0 + ix as f64 * dx, r.y.0 + iy as f64 * dy);
            Rectangle::new([(ax, ay), (ax + dx, ay + dy)], color(k).mix(0.18).filled())
        }))?;
    }
    draw_mesh(&mut chart, &c.x_label, &c.y_label)?;
    for (i, s) in c.classes.iter().enumerate() {
        let col = color(i);
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, col.filled())))?
            .label(&s.label)
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, col.filled()));
    }
    for s in &c.lines {
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), BLACK.stroke_width(2)))?
            .label(&s.label)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    }
    draw_legend(&mut chart)?;
    root.present()
}

fn draw_heatmap<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, h: &Heatmap) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let rows = h.values.len();
    let cols = h.values.first().map_or(0, |r| r.len());
    let finite = h.values.iter().flatten().copied().filter(|v| v.is_finite());
    let (lo, hi) =
        finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    let span = if hi > lo { hi - lo } else { 1.0 };
    let name =
        |names: &Vec<String>, i: usize| names.get(i).cloned().unwrap_or_else(|| i.to_string());
    let mut chart = ChartBuilder::on(root)
        .caption(format!("{}   (min {:.3}, max {:.3})", h.title, lo, hi), (FONT, 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(80)
        // plotters treats an integer range as inclusive when it segments it (0..n gives n + 1
        // segments), so 0..n−1 gives exactly one segment per column and per row.
        .build_cartesian_2d(
            (0..cols.max(1) - 1).into_segmented(),
            (0..rows.max(1) - 1).into_segmented(),
        )?;
    let step_x = (cols / 16).max(1);
    let step_y = (rows / 16).max(1);
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(&h.x_label)
        .y_desc(&h.y_label)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 16))
        .x_labels(cols.min(17))
        .y_labels(rows.min(17))
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) if i.is_multiple_of(step_x) => name(&h.col_names, *i),
            _ => String::new(),
        })
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) if *i < rows && (rows - 1 - i).is_multiple_of(step_y) => {
                name(&h.row_names, rows - 1 - i)
            }
            _ => String::new(),
        })
        .draw()?;
    for (r, row) in h.values.iter().enumerate() {
        let y = rows - 1 - r;
        for (c, &v) in row.iter().enumerate() {
            let fill =
                if v.is_finite() { viridis((v - lo) / span) } else { RGBColor(255, 255, 255) };
            chart.draw_series(std::iter::once(Rectangle::new(
                [
                    (SegmentValue::Exact(c), SegmentValue::Exact(y)),
                    (SegmentValue::Exact(c + 1), SegmentValue::Exact(y + 1)),
                ],
                fill.filled(),
            )))?;
            if h.annotate {
                let ink = if (v - lo) / span > 0.6 { BLACK } else { WHITE };
                let label = if v.is_finite() { format!("{v:.2}") } else { "−∞".to_string() };
                chart.draw_series(std::iter::once(Text::new(
                    label,
                    (SegmentValue::CenterOf(c), SegmentValue::CenterOf(y)),
                    (FONT, 13).into_font().color(&ink).pos(plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Center,
                    )),
                )))?;
            }
        }
    }
    root.present()
}

impl Figure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        match self {
            Figure::Line(c) => draw_line(root, c),
            Figure::Scatter(c) => draw_scatter(root, c),
            Figure::Heatmap(h) => draw_heatmap(root, h),
        }
    }

    /// Draws the figure as `<dir>/<stem>.png` and `<dir>/<stem>.svg` and returns both paths.
    ///
    /// The write is atomic per file: each picture is drawn into a temporary file in the same
    /// folder (named after the stem and this process), and both are renamed into place only after
    /// both have been drawn. When anything fails the temporary files are removed, so each of the
    /// two paths holds either its previous picture (or nothing) or the new one, always whole, and
    /// no stray temporary file is left behind.
    pub fn save(&self, dir: &Path, stem: &str) -> Result<Vec<PathBuf>> {
        register_font()?;
        std::fs::create_dir_all(dir)
            .map_err(|source| Error::Io { path: dir.display().to_string(), source })?;
        let png = dir.join(format!("{stem}.png"));
        let svg = dir.join(format!("{stem}.svg"));
        let pid = std::process::id();
        let tmp_png = dir.join(format!(".{stem}.tmp-{pid}.png"));
        let tmp_svg = dir.join(format!(".{stem}.tmp-{pid}.svg"));
        let result = self.draw_then_rename([(&tmp_png, &png), (&tmp_svg, &svg)]);
        if result.is_err() {
            // Whatever was drawn under a temporary name goes; a missing file is not an error here.
            let _ = std::fs::remove_file(&tmp_png);
            let _ = std::fs::remove_file(&tmp_svg);
        }
        result.map(|()| vec![png, svg])
    }

    /// Draws the PNG and the SVG into their temporary paths, then renames both into place.
    fn draw_then_rename(
        &self,
        [(tmp_png, png), (tmp_svg, svg)]: [(&PathBuf, &PathBuf); 2],
    ) -> Result<()> {
        let plot_err =
            |p: &Path, e: String| Error::Plot { path: p.display().to_string(), reason: e };
        {
            let root = BitMapBackend::new(tmp_png, SIZE).into_drawing_area();
            self.draw(&root).map_err(|e| plot_err(png, format!("{e:?}")))?;
        }
        {
            let root = SVGBackend::new(tmp_svg, SIZE).into_drawing_area();
            self.draw(&root).map_err(|e| plot_err(svg, format!("{e:?}")))?;
        }
        for (tmp, fin) in [(tmp_png, png), (tmp_svg, svg)] {
            if !tmp.is_file() {
                return Err(plot_err(
                    fin,
                    format!("the backend wrote nothing to {}", tmp.display()),
                ));
            }
            std::fs::rename(tmp, fin)
                .map_err(|source| Error::Io { path: fin.display().to_string(), source })?;
        }
        Ok(())
    }
}

/// Where the main job writes every chapter's figures: `chapters/img/` under the crate root.
pub fn image_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("chapters").join("img")
}

/// Draws every `(stem, figure)` pair into `dir` (see [`Figure::save`]); returns all files written.
pub fn save_all(figures: &[(String, Figure)], dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for (stem, figure) in figures {
        out.extend(figure.save(dir, stem)?);
    }
    Ok(out)
}
