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
    /// A curve computed from a formula (a roof, a bound), drawn as a plain line even where the
    /// chart marks its measured points with dots.
    pub unmarked: bool,
}

impl Series {
    /// A series from a label and points.
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series { label: label.into(), points, unmarked: false }
    }

    /// A curve from a formula: never marked with dots (see [`Series::unmarked`]).
    pub fn unmarked(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series { unmarked: true, ..Series::new(label, points) }
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
    /// See [`BarChart`].
    Bars(BarChart),
    /// A [`LineChart`] on logarithmic axes: see [`LogAxes`]. Every drawn value on a log axis must
    /// be positive (others are left out).
    LogLine(LineChart, LogAxes),
}

/// Which axes of a [`Figure::LogLine`] are logarithmic, marked by their real values, not by
/// their logarithms; the data are given in real values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogAxes {
    /// x logarithmic in powers of two, y linear (a size that doubles along x, a rate along y).
    X,
    /// x linear, y logarithmic in powers of ten (a loss falling over decades, ticks 0.01, 0.1,
    /// 1 …).
    YDecades,
    /// Both axes logarithmic in powers of two (a roofline).
    Both,
    /// Both axes logarithmic in powers of ten (an error against a step over many decades).
    Decades,
}

impl LogAxes {
    /// The base of the x axis's logarithm, or `None` for a linear x axis.
    fn x_base(self) -> Option<f64> {
        match self {
            LogAxes::X | LogAxes::Both => Some(2.0),
            LogAxes::YDecades => None,
            LogAxes::Decades => Some(10.0),
        }
    }

    /// The base of the y axis's logarithm, or `None` for a linear y axis.
    fn y_base(self) -> Option<f64> {
        match self {
            LogAxes::X => None,
            LogAxes::YDecades | LogAxes::Decades => Some(10.0),
            LogAxes::Both => Some(2.0),
        }
    }
}

/// The label of the tick at `base`^`power` on a log axis: powers of two as whole numbers (64)
/// or fractions (1/16, narrower than 0.0625), powers of ten as decimals from 0.0001 to 100000
/// and as 10⁻⁵, 10⁶ … beyond; nothing between whole powers.
pub fn log_tick_label(base: f64, power: f64) -> String {
    if power.fract() != 0.0 || !power.is_finite() {
        return String::new();
    }
    let p = power as i32;
    if base == 2.0 {
        return if p >= 0 {
            format!("{}", 1u64 << p.min(62))
        } else {
            format!("1/{}", 1u64 << (-p).min(62))
        };
    }
    if (-4..=5).contains(&p) {
        return tick_label(10f64.powi(p), 10f64.powi(p));
    }
    power_of_ten(p)
}

/// The label of the tick at `base`^`power` on a log axis over the powers `lo` to `hi`: as
/// [`log_tick_label`], except that a base-10 axis reaching past the decimals' range (10⁻⁴ to
/// 10⁵) labels every tick as a power, 10⁻⁶ … 10⁰ … 10², so one axis never mixes 0.0001 with
/// 10⁻⁵.
pub fn log_axis_tick_label(base: f64, power: f64, (lo, hi): (f64, f64)) -> String {
    let decimals = |p: f64| (-4.0..=5.0).contains(&p);
    if base != 10.0 || (decimals(lo.ceil()) && decimals(hi.floor())) {
        return log_tick_label(base, power);
    }
    if power.fract() != 0.0 || !power.is_finite() {
        return String::new();
    }
    power_of_ten(power as i32)
}

/// 10 to the whole power `p` in superscripts: 10⁻⁵, 10⁰, 10¹².
fn power_of_ten(p: i32) -> String {
    const SUPERSCRIPT: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    let digits: String =
        p.unsigned_abs().to_string().bytes().map(|b| SUPERSCRIPT[(b - b'0') as usize]).collect();
    format!("10{}{digits}", if p < 0 { "⁻" } else { "" })
}

/// The most ticks a log axis labels: with more whole powers than this, every second one.
const MAX_LOG_TICKS: usize = 14;

/// Grouped bars over named categories: for each category, one bar per series, side by side.
/// For data whose x axis is a set of names (classes, tokens), where a line between categories
/// would suggest values in between.
#[derive(Clone, Debug, PartialEq)]
pub struct BarChart {
    /// The caption.
    pub title: String,
    /// The x-axis description.
    pub x_label: String,
    /// The y-axis description.
    pub y_label: String,
    /// The categories along x, in order.
    pub categories: Vec<String>,
    /// One series per colour: its legend entry and one value per category.
    pub series: Vec<(String, Vec<f64>)>,
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

/// Pixels of the legend's glyph column (the line or dot drawn before each label).
const LEGEND_GLYPH: u32 = 30;
/// Pixels between the plotting area and the legend, and around the legend's text.
const LEGEND_GAP: u32 = 10;
/// Approximate width of one character of the 14-pixel legend font (DejaVu Sans averages about
/// 0.55 em), used to reserve room for the legend beside the plot.
const LEGEND_CHAR_PX: f64 = 7.5;
/// Pixel size of a caption of `text` across `width` pixels: `largest`, or smaller so that the
/// whole caption fits (DejaVu Sans averages about half an em a character), never under 12.
pub fn caption_size(text: &str, width: u32, largest: u32) -> u32 {
    let room = 0.97 * width as f64 / (0.5 * text.chars().count().max(1) as f64);
    (room.floor() as u32).clamp(12, largest)
}

/// Series with more points than this are drawn one pixel wide: the bitmap backend joins the
/// segments of a wider line with mitres, which shoot far past the data at the sharp turns of
/// a noisy training curve.
const THIN_LINE_POINTS: usize = 500;

/// Right margin of a chart without a legend: room for half of the last x tick label.
const RIGHT_MARGIN: u32 = 34;

/// How wide the legend of these labels is, in pixels (0 when every label is empty).
fn legend_width<'s>(labels: impl Iterator<Item = &'s str>) -> u32 {
    let longest = labels.map(|l| l.chars().count()).max().unwrap_or(0);
    if longest == 0 {
        return 0;
    }
    LEGEND_GLYPH + 3 * LEGEND_GAP + (longest as f64 * LEGEND_CHAR_PX).ceil() as u32
}

/// A tick label: as few decimals as the axis span needs, trailing zeros dropped, and never
/// `-0` (a value within rounding of zero prints as `0`).
pub fn tick_label(value: f64, span: f64) -> String {
    let decimals = if span > 0.0 && span.is_finite() {
        (2.0 - span.log10().floor()).clamp(0.0, 10.0) as usize
    } else {
        2
    };
    let mut text = format!("{value:.decimals$}");
    if text.contains('.') {
        text = text.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    if text == "-0" { "0".to_string() } else { text }
}

/// The parts of the polyline `points` that lie inside the rectangle `x` × `y`: each segment cut
/// where it crosses an edge (Liang–Barsky), consecutive inside pieces joined. A line that leaves
/// the chart is cut at its edge, never pinned to a corner.
pub fn clip_polyline(points: &[(f64, f64)], x: (f64, f64), y: (f64, f64)) -> Vec<Vec<(f64, f64)>> {
    let mut pieces: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut open = false;
    for pair in points.windows(2) {
        let Some((a, b)) = clip_segment(pair[0], pair[1], x, y) else {
            open = false;
            continue;
        };
        match pieces.last_mut() {
            Some(piece) if open && piece.last() == Some(&a) => piece.push(b),
            _ => pieces.push(vec![a, b]),
        }
        // The next segment continues this piece only if this one ended at its own end point.
        open = b == pair[1];
    }
    if points.len() == 1 {
        let (px, py) = points[0];
        if (x.0..=x.1).contains(&px) && (y.0..=y.1).contains(&py) {
            pieces.push(vec![points[0]]);
        }
    }
    pieces
}

/// The part of the segment from `a` to `b` inside the rectangle, if any (Liang–Barsky: the
/// segment is a + t·(b − a), t in [0, 1]; each edge bounds t from one side).
fn clip_segment(
    a: (f64, f64),
    b: (f64, f64),
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> Option<((f64, f64), (f64, f64))> {
    if ![a.0, a.1, b.0, b.1].iter().all(|v| v.is_finite()) {
        return None;
    }
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let (mut t0, mut t1) = (0.0_f64, 1.0_f64);
    // Each pair is (p, q) with the inside being p·t ≤ q.
    for (p, q) in [(-dx, a.0 - x0), (dx, x1 - a.0), (-dy, a.1 - y0), (dy, y1 - a.1)] {
        if p == 0.0 {
            if q < 0.0 {
                return None;
            }
        } else if p < 0.0 {
            t0 = t0.max(q / p);
        } else {
            t1 = t1.min(q / p);
        }
    }
    if t0 > t1 {
        return None;
    }
    let at = |t: f64| {
        if t == 0.0 {
            a
        } else if t == 1.0 {
            b
        } else {
            (a.0 + t * dx, a.1 + t * dy)
        }
    };
    Some((at(t0), at(t1)))
}

/// The frame every line and scatter chart starts from: title, margins, label areas and axis
/// ranges, with `right` pixels kept free beside the plot for [`draw_legend`]; the caller draws its
/// background (regions) before [`draw_mesh`] if it has one.
fn xy_chart<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
    right: u32,
) -> std::result::Result<XyChart<'a, DB>, DrawError<DB>> {
    let right = right.max(RIGHT_MARGIN);
    // The caption is centred over the chart left of the legend: it must fit that width.
    let room = root.dim_in_pixel().0.saturating_sub(right);
    ChartBuilder::on(root)
        .caption(title, (FONT, caption_size(title, room, 22)))
        .margin(14)
        .margin_right(right)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)
}

/// The most distinct whole-number x values for which the x axis gets one tick per value.
const MAX_WHOLE_TICKS: usize = 20;

/// How many x ticks an axis over these x values needs if every value is a whole number and there
/// are few of them (n = 1 … 5, a layer count): one tick per whole number, never a fractional
/// tick between two values that cannot occur. `None` for continuous data.
pub fn whole_number_ticks(xs: impl Iterator<Item = f64>) -> Option<usize> {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for x in xs {
        if !x.is_finite() || x.fract() != 0.0 {
            return None;
        }
        lo = lo.min(x);
        hi = hi.max(x);
    }
    let count = hi - lo + 1.0;
    (lo.is_finite() && count >= 2.0 && count <= MAX_WHOLE_TICKS as f64).then_some(count as usize)
}

/// The axes, their descriptions and ticks (see [`tick_label`]), without the light grid; with
/// `x_ticks`, exactly that many x ticks (one per whole number, see [`whole_number_ticks`]).
fn draw_mesh<DB: DrawingBackend>(
    chart: &mut XyChart<'_, DB>,
    x_label: &str,
    y_label: &str,
    x_ticks: Option<usize>,
) -> std::result::Result<(), DrawError<DB>> {
    let (xr, yr) = (chart.x_range(), chart.y_range());
    let (x_span, y_span) = (xr.end - xr.start, yr.end - yr.start);
    let x_tick = move |v: &f64| tick_label(*v, x_span);
    let y_tick = move |v: &f64| tick_label(*v, y_span);
    let mut mesh = chart.configure_mesh();
    if let Some(n) = x_ticks {
        mesh.x_labels(n);
    }
    mesh.x_desc(x_label)
        .y_desc(y_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(WHITE.mix(0.0))
        .x_label_formatter(&x_tick)
        .y_label_formatter(&y_tick)
        .draw()
}

/// What a legend entry shows before its label.
#[derive(Clone, Copy)]
enum Glyph {
    /// A short stroke of the series' line.
    Line(RGBColor),
    /// A dot like the series' points.
    Dot(RGBColor),
    /// A small filled square like the series' bars.
    Bar(RGBColor),
}

/// The legend box, drawn on `root` in the room [`xy_chart`] kept beside the plotting area
/// `plot` (its pixel ranges), so it never covers the data. Entries with an empty label are
/// skipped.
fn draw_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    (plot_x, plot_y): (std::ops::Range<i32>, std::ops::Range<i32>),
    entries: &[(&str, Glyph)],
) -> DrawResult<DB> {
    const ROW: i32 = 20;
    let entries: Vec<&(&str, Glyph)> = entries.iter().filter(|(l, _)| !l.is_empty()).collect();
    // The room kept beside the plot, less a gap on either side of the box.
    let width = legend_width(entries.iter().map(|(l, _)| *l)) as i32 - 2 * LEGEND_GAP as i32;
    if entries.is_empty() || width <= 0 {
        return Ok(());
    }
    let gap = LEGEND_GAP as i32;
    let (x0, y0) = (plot_x.end + gap, plot_y.start);
    let height = entries.len() as i32 * ROW + gap;
    let corners = [(x0, y0), (x0 + width, y0 + height)];
    root.draw(&Rectangle::new(corners, WHITE.filled()))?;
    root.draw(&Rectangle::new(corners, BLACK))?;
    let font = (FONT, 14).into_font().color(&BLACK).pos(plotters::style::text_anchor::Pos::new(
        plotters::style::text_anchor::HPos::Left,
        plotters::style::text_anchor::VPos::Center,
    ));
    for (i, (label, glyph)) in entries.into_iter().enumerate() {
        let cy = y0 + gap / 2 + i as i32 * ROW + ROW / 2;
        let gx = x0 + gap / 2;
        match *glyph {
            Glyph::Line(c) => {
                root.draw(&PathElement::new(vec![(gx, cy), (gx + 20, cy)], c.stroke_width(2)))?
            }
            Glyph::Dot(c) => root.draw(&Circle::new((gx + 10, cy), 4, c.filled()))?,
            Glyph::Bar(c) => {
                root.draw(&Rectangle::new([(gx + 5, cy - 5), (gx + 15, cy + 5)], c.filled()))?
            }
        }
        root.draw(&Text::new(label.to_string(), (gx + LEGEND_GLYPH as i32, cy), font.clone()))?;
    }
    Ok(())
}

fn draw_line<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &LineChart) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (x, y) = bounds(c.series.iter().flat_map(|s| s.points.iter().copied()));
    let legend = legend_width(c.series.iter().map(|s| s.label.as_str()));
    let mut chart = xy_chart(root, &c.title, x, y, legend)?;
    let whole = whole_number_ticks(c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)));
    draw_mesh(&mut chart, &c.x_label, &c.y_label, whole)?;
    let mut entries = Vec::new();
    for (i, s) in c.series.iter().enumerate() {
        let col = color(i);
        let pieces = clip_polyline(&s.points, x, y);
        let stroke = if s.points.len() > THIN_LINE_POINTS { 1 } else { 2 };
        chart.draw_series(
            pieces.into_iter().map(|p| PathElement::new(p, col.stroke_width(stroke))),
        )?;
        if c.markers && !s.unmarked {
            chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, col.filled())))?;
        }
        entries.push((s.label.as_str(), Glyph::Line(col)));
    }
    draw_legend(root, chart.plotting_area().get_pixel_range(), &entries)?;
    root.present()
}

/// A line chart on log axes ([`Figure::LogLine`]): a log axis is drawn in logarithms (base 2
/// or 10, see [`LogAxes`]) over whole powers, one tick per power (every second one when there
/// are more than [`MAX_LOG_TICKS`]), each labelled with its real value ([`log_tick_label`]),
/// not with its logarithm. (plotters' own log scale loops forever on some ranges below 1.)
fn draw_log_line<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &LineChart,
    axes: LogAxes,
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (x_base, y_base) = (axes.x_base(), axes.y_base());
    let positive = |v: f64, base: Option<f64>| base.is_none() || v > 0.0;
    let keep = |&(x, y): &(f64, f64)| positive(x, x_base) && positive(y, y_base);
    let log = |v: f64, base: Option<f64>| match base {
        Some(2.0) => v.log2(),
        Some(b) => v.log10() / b.log10(),
        None => v,
    };
    let to_plot = |(x, y): (f64, f64)| (log(x, x_base), log(y, y_base));
    let series: Vec<Vec<(f64, f64)>> = c
        .series
        .iter()
        .map(|s| s.points.iter().copied().filter(keep).map(to_plot).collect())
        .collect();
    let ((x0, x1), (y0, y1)) = bounds(series.iter().flatten().copied());
    let whole = |lo: f64, hi: f64| (lo.floor(), hi.ceil().max(lo.floor() + 1.0));
    let (x0, x1) = if x_base.is_some() { whole(x0, x1) } else { (x0, x1) };
    let (y0, y1) = if y_base.is_some() { whole(y0, y1) } else { (y0.min(0.0), y1) };
    let legend = legend_width(c.series.iter().map(|s| s.label.as_str()));
    let mut chart = xy_chart(root, &c.title, (x0, x1), (y0, y1), legend)?;
    let ticks = |lo: f64, hi: f64| {
        let powers = (hi - lo) as usize + 1;
        if powers > MAX_LOG_TICKS { powers.div_ceil(2) } else { powers }
    };
    let x_tick = move |v: &f64| match x_base {
        Some(b) => log_axis_tick_label(b, *v, (x0, x1)),
        None => tick_label(*v, x1 - x0),
    };
    let y_tick = move |v: &f64| match y_base {
        Some(b) => log_axis_tick_label(b, *v, (y0, y1)),
        None => tick_label(*v, y1 - y0),
    };
    let mut mesh = chart.configure_mesh();
    if x_base.is_some() {
        mesh.x_labels(ticks(x0, x1));
    }
    if y_base.is_some() {
        mesh.y_labels(ticks(y0, y1));
    }
    mesh.x_desc(c.x_label.as_str())
        .y_desc(c.y_label.as_str())
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(WHITE.mix(0.0))
        .x_label_formatter(&x_tick)
        .y_label_formatter(&y_tick)
        .draw()?;
    let mut entries = Vec::new();
    for (i, (s, pts)) in c.series.iter().zip(&series).enumerate() {
        let col = color(i);
        let pieces = clip_polyline(pts, (x0, x1), (y0, y1));
        let stroke = if pts.len() > THIN_LINE_POINTS { 1 } else { 2 };
        chart.draw_series(
            pieces.into_iter().map(|p| PathElement::new(p, col.stroke_width(stroke))),
        )?;
        if c.markers && !s.unmarked {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, col.filled())))?;
        }
        entries.push((s.label.as_str(), Glyph::Line(col)));
    }
    draw_legend(root, chart.plotting_area().get_pixel_range(), &entries)?;
    root.present()
}

impl ScatterChart {
    /// The x and y ranges of the drawn chart. Over regions, the regions' rectangle exactly (so
    /// the shading fills the chart), widened to every point if one lies outside it; without
    /// regions, every point with 5 % to spare on each side (no dot is cut at the frame).
    pub fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let points = || self.classes.iter().flat_map(|s| s.points.iter().copied());
        let Some(r) = &self.regions else {
            let ((x0, x1), y) = bounds(points());
            let p = 0.05 * (x1 - x0);
            return ((x0 - p, x1 + p), y);
        };
        let inside = |(px, py): (f64, f64)| {
            !(px.is_finite() && py.is_finite())
                || ((r.x.0..=r.x.1).contains(&px) && (r.y.0..=r.y.1).contains(&py))
        };
        if points().all(inside) {
            return (r.x, r.y);
        }
        bounds(points().chain([(r.x.0, r.y.0), (r.x.1, r.y.1)]))
    }

    /// Each of [`ScatterChart::lines`] as it is drawn: clipped to [`ScatterChart::ranges`].
    pub fn drawn_lines(&self) -> Vec<Vec<Vec<(f64, f64)>>> {
        let (x, y) = self.ranges();
        self.lines.iter().map(|s| clip_polyline(&s.points, x, y)).collect()
    }
}

fn draw_scatter<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &ScatterChart,
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (x, y) = c.ranges();
    let labels = c.classes.iter().chain(&c.lines).map(|s| s.label.as_str());
    let mut chart = xy_chart(root, &c.title, x, y, legend_width(labels))?;
    if let Some(r) = &c.regions {
        let (dx, dy) = ((r.x.1 - r.x.0) / r.nx as f64, (r.y.1 - r.y.0) / r.ny as f64);
        chart.draw_series(r.class.iter().enumerate().map(|(i, &k)| {
            let (ix, iy) = (i % r.nx, i / r.nx);
            let (ax, ay) = (r.x.0 + ix as f64 * dx, r.y.0 + iy as f64 * dy);
            Rectangle::new([(ax, ay), (ax + dx, ay + dy)], color(k).mix(0.18).filled())
        }))?;
    }
    draw_mesh(&mut chart, &c.x_label, &c.y_label, None)?;
    let mut entries = Vec::new();
    for (i, s) in c.classes.iter().enumerate() {
        let col = color(i);
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, col.filled())))?;
        entries.push((s.label.as_str(), Glyph::Dot(col)));
    }
    for (s, pieces) in c.lines.iter().zip(c.drawn_lines()) {
        chart
            .draw_series(pieces.into_iter().map(|p| PathElement::new(p, BLACK.stroke_width(2))))?;
        entries.push((s.label.as_str(), Glyph::Line(BLACK)));
    }
    draw_legend(root, chart.plotting_area().get_pixel_range(), &entries)?;
    root.present()
}

/// Pixels at the right of a heat map for its colour bar and the bar's tick labels.
const COLOUR_BAR_WIDTH: u32 = 96;
/// Pixels above and below the colour bar, so that it spans the heat map's rows (the caption
/// and margin above, the x labels and margin below).
const COLOUR_BAR_TOP: u32 = 48;
const COLOUR_BAR_BOTTOM: u32 = 58;
/// Colour steps drawn in the bar.
const COLOUR_BAR_STEPS: usize = 64;

/// How close (as a share of the span) an end of a colour bar must lie to a round value for the
/// bar to end on that value instead: a sine's minimum of −0.99999 labels its end −1.
pub const COLOUR_BAR_SNAP: f64 = 0.005;

/// The range a colour bar over data from `lo` to `hi` spans: each end moved to the nearest round
/// value (a multiple of a tenth of the span's power of ten) when that lies within
/// [`COLOUR_BAR_SNAP`] of the span, so that the axis labels its ends (−1 and 1 for a sinusoid
/// whose extremes are ±0.99999); ends far from a round value stay where the data end. The
/// colours still map the data: a moved end moves the bar by at most half a percent.
pub fn colour_bar_range(lo: f64, hi: f64) -> (f64, f64) {
    let span = hi - lo;
    if !(span > 0.0 && span.is_finite()) {
        return (lo, hi);
    }
    let step = 10f64.powf(span.log10().floor() - 1.0);
    let snap = |v: f64| {
        let round = (v / step).round() * step;
        if (round - v).abs() <= COLOUR_BAR_SNAP * span { round } else { v }
    };
    (snap(lo).min(lo), snap(hi).max(hi))
}

/// The heat map's key: the viridis scale from `lo` (bottom) to `hi` (top) with ticks, its ends
/// moved to round values by [`colour_bar_range`] so that both are labelled.
fn draw_colour_bar<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    lo: f64,
    hi: f64,
) -> DrawResult<DB> {
    let (lo, hi) = colour_bar_range(lo, hi);
    let span = hi - lo;
    let mut bar = ChartBuilder::on(area)
        .margin_top(COLOUR_BAR_TOP)
        .margin_bottom(COLOUR_BAR_BOTTOM)
        .margin_left(8)
        .set_label_area_size(LabelAreaPosition::Right, 60)
        .build_cartesian_2d(0.0..1.0, lo..hi)?;
    // The colours first, then the axis, so no colour covers a tick label.
    bar.draw_series((0..COLOUR_BAR_STEPS).map(|i| {
        let at = |k: usize| lo + span * k as f64 / COLOUR_BAR_STEPS as f64;
        let t = (i as f64 + 0.5) / COLOUR_BAR_STEPS as f64;
        Rectangle::new([(0.0, at(i)), (1.0, at(i + 1))], viridis(t).filled())
    }))?;
    bar.configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(6)
        // plotters clips the first characters of right-hand labels at the bar's edge: pad them.
        .y_label_formatter(&|v| format!("   {}", tick_label(*v, span)))
        .label_style((FONT, 12))
        .draw()?;
    Ok(())
}

/// Share of a category's slot the group of bars fills (the rest separates the groups).
const BAR_GROUP_WIDTH: f64 = 0.8;

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &BarChart) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let n = c.categories.len().max(1);
    let values = c.series.iter().flat_map(|(_, v)| v.iter().copied());
    let (_, (y0, y1)) = bounds(values.chain([0.0]).map(|v| (0.0, v)));
    let legend = legend_width(c.series.iter().map(|(l, _)| l.as_str()));
    // Category k occupies [k − 0.5, k + 0.5]; its ticks sit at the whole numbers.
    let mut chart = xy_chart(root, &c.title, (-0.5, n as f64 - 0.5), (y0.min(0.0), y1), legend)?;
    let categories = c.categories.clone();
    let y_span = y1 - y0.min(0.0);
    chart
        .configure_mesh()
        .x_desc(&c.x_label)
        .y_desc(&c.y_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(WHITE.mix(0.0))
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|v| {
            let k = v.round();
            if (v - k).abs() < 1e-9 && k >= 0.0 {
                categories.get(k as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| tick_label(*v, y_span))
        .draw()?;
    let bars = c.series.len().max(1) as f64;
    let width = BAR_GROUP_WIDTH / bars;
    let mut entries = Vec::new();
    for (i, (label, v)) in c.series.iter().enumerate() {
        let col = color(i);
        chart.draw_series(v.iter().enumerate().map(|(k, &value)| {
            let left = k as f64 - BAR_GROUP_WIDTH / 2.0 + i as f64 * width;
            Rectangle::new([(left, 0.0), (left + width, value)], col.filled())
        }))?;
        entries.push((label.as_str(), Glyph::Bar(col)));
    }
    draw_legend(root, chart.plotting_area().get_pixel_range(), &entries)?;
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
    let (width, _) = root.dim_in_pixel();
    let (main, bar) = root.split_horizontally(width.saturating_sub(COLOUR_BAR_WIDTH));
    if lo.is_finite() {
        draw_colour_bar(&bar, lo, lo + span)?;
    }
    let caption = format!("{}   (min {:.3}, max {:.3})", h.title, lo, hi);
    let mut chart = ChartBuilder::on(&main)
        .caption(&caption, (FONT, caption_size(&caption, main.dim_in_pixel().0, 20)))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(80)
        // plotters treats an integer range as inclusive when it segments it (0..n gives n + 1
        // segments), so 0..n−1 gives exactly one segment per column and per row.
        .build_cartesian_2d(
            (0..cols.max(1) - 1).into_segmented(),
            (0..rows.max(1) - 1).into_segmented(),
        )?;
    // Every row and column gets a tick; every `step`-th is named, counted from the first, with
    // a step from a round series so that no more than 16 names crowd an axis (0, 4, 8, … for
    // 64 positions rather than wherever plotters' own ticks happen to fall).
    let step = |n: usize| {
        [1, 2, 4, 5, 8, 10, 16, 20, 25, 50, 100]
            .into_iter()
            .find(|s| n.div_ceil(*s) <= 16)
            .unwrap_or(n.div_ceil(16))
    };
    let (step_x, step_y) = (step(cols), step(rows));
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(&h.x_label)
        .y_desc(&h.y_label)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 16))
        .x_labels(cols)
        .y_labels(rows)
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
            Figure::Bars(b) => draw_bars(root, b),
            Figure::LogLine(c, axes) => draw_log_line(root, c, *axes),
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
        // A file that cannot be written is said in one line naming it, before the backends
        // (whose errors print as nested debug dumps) meet it.
        for (tmp, fin) in [(tmp_png, png), (tmp_svg, svg)] {
            std::fs::File::create(tmp)
                .map_err(|source| Error::Io { path: fin.display().to_string(), source })?;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The line w·x + b = 0 for w = (1, 2), b = 1: x₂ = −(1 + x₁)/2, drawn across a wide x range.
    fn boundary_points() -> Vec<(f64, f64)> {
        [-20.0, 20.0].iter().map(|&x1: &f64| (x1, -(1.0 + x1) / 2.0)).collect()
    }

    fn on_the_line((x1, x2): (f64, f64)) -> bool {
        (x1 + 2.0 * x2 + 1.0).abs() < 1e-9
    }

    fn on_an_edge((x, y): (f64, f64), (x0, x1): (f64, f64), (y0, y1): (f64, f64)) -> bool {
        [x - x0, x - x1].iter().any(|d| d.abs() < 1e-9) && (y0..=y1).contains(&y)
            || [y - y0, y - y1].iter().any(|d| d.abs() < 1e-9) && (x0..=x1).contains(&x)
    }

    /// What the drawing did before: each end point outside the chart pinned to the nearest point
    /// of the rectangle (plotters clamps coordinates), which moves it off the line.
    fn pinned(points: &[(f64, f64)], x: (f64, f64), y: (f64, f64)) -> Vec<(f64, f64)> {
        points.iter().map(|&(px, py)| (px.clamp(x.0, x.1), py.clamp(y.0, y.1))).collect()
    }

    #[test]
    fn a_clipped_line_ends_on_the_chart_edges_and_stays_on_its_line() {
        let (x, y) = ((-6.0, 6.0), (-5.5, 5.5));
        let pieces = clip_polyline(&boundary_points(), x, y);
        assert_eq!(pieces.len(), 1);
        let piece = &pieces[0];
        assert_eq!(piece.len(), 2);
        for &p in piece {
            assert!(on_the_line(p), "{p:?} left the line");
            assert!(on_an_edge(p, x, y), "{p:?} is not on the chart's edge");
        }
        // The planted mistake, the old pinned drawing, fails the same checks.
        let old = pinned(&boundary_points(), x, y);
        assert!(old.iter().any(|&p| !on_the_line(p)), "pinning kept {old:?} on the line");
    }

    #[test]
    fn clipping_keeps_inside_points_and_splits_a_polyline_that_leaves_and_returns() {
        let (x, y) = ((0.0, 10.0), (0.0, 10.0));
        let inside = [(1.0, 1.0), (2.0, 3.0), (4.0, 2.0)];
        assert_eq!(clip_polyline(&inside, x, y), vec![inside.to_vec()]);
        let out_and_back = [(1.0, 5.0), (5.0, 20.0), (9.0, 5.0)];
        let pieces = clip_polyline(&out_and_back, x, y);
        assert_eq!(pieces.len(), 2, "{pieces:?}");
        assert_eq!(pieces[0][1].1, 10.0);
        assert_eq!(pieces[1][0].1, 10.0);
        assert!(clip_polyline(&[(20.0, 20.0), (30.0, 40.0)], x, y).is_empty());
        assert!(clip_polyline(&[(1.0, f64::NAN), (2.0, 2.0)], x, y).is_empty());
    }

    #[test]
    fn tick_labels_never_read_minus_zero_and_drop_trailing_zeros() {
        assert_eq!(tick_label(-0.0, 10.0), "0");
        assert_eq!(tick_label(-1e-17, 2.0), "0");
        assert_eq!(tick_label(5.0, 10.0), "5");
        assert_eq!(tick_label(-2.5, 10.0), "-2.5");
        assert_eq!(tick_label(1600.0, 1600.0), "1600");
        assert_eq!(tick_label(0.125, 0.5), "0.125");
        assert_eq!(tick_label(0.30000000000000004, 1.0), "0.3");
    }

    #[test]
    fn log_ticks_read_as_real_values() {
        assert_eq!(log_tick_label(2.0, 6.0), "64");
        assert_eq!(log_tick_label(2.0, 0.0), "1");
        assert_eq!(log_tick_label(2.0, -4.0), "1/16");
        assert_eq!(log_tick_label(2.0, 0.5), "");
        assert_eq!(log_tick_label(10.0, -2.0), "0.01");
        assert_eq!(log_tick_label(10.0, 3.0), "1000");
        assert_eq!(log_tick_label(10.0, -6.0), "10⁻⁶");
        assert_eq!(log_tick_label(10.0, 12.0), "10¹²");
        // One axis, one style: past the decimals' range every tick is a power of ten.
        let wide = (-13.0, -1.0);
        assert_eq!(log_axis_tick_label(10.0, -4.0, wide), "10⁻⁴");
        assert_eq!(log_axis_tick_label(10.0, -1.0, wide), "10⁻¹");
        assert_eq!(log_axis_tick_label(10.0, 0.0, (-6.0, 2.0)), "10⁰");
        assert_eq!(log_axis_tick_label(10.0, -2.0, (-3.0, 1.0)), "0.01");
        assert_eq!(log_axis_tick_label(2.0, -4.0, wide), "1/16");
    }

    #[test]
    fn whole_number_x_values_get_one_tick_each_and_continuous_ones_none() {
        assert_eq!(whole_number_ticks([1.0, 2.0, 3.0, 5.0].into_iter()), Some(5));
        assert_eq!(whole_number_ticks([1.0, 2.5].into_iter()), None);
        assert_eq!(whole_number_ticks((0..300).map(f64::from)), None);
        assert_eq!(whole_number_ticks([4.0].into_iter()), None);
    }
}
