//! The workspace's charts, all drawn with plotters into standalone SVG
//! documents (no fonts to install: text stays SVG text): grouped bars for
//! "one figure per category and method" tables, lines for "figure against a
//! swept parameter" ones, and the palette, frame and legend that the load
//! generator's and the simulator's own plots share.
//!
//! Missing values (`None`, NaN, or <= 0 on a log axis) are left out, so a
//! refused or skipped cell shows as a gap, never as a zero.
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

const SIZE: (u32, u32) = (800, 460);

/// Colour-blind-safe palette (Okabe-Ito), cycled per series.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0xF0, 0xE4, 0x42),
    RGBColor(0x00, 0x00, 0x00),
];

/// The colour of series `i`.
pub fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// `#RRGGBB` of series `i`'s colour, as the SVG writes its fills.
pub fn fill_of(i: usize) -> String {
    let c = colour(i);
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// A plotting failure, with what plotters said.
#[derive(Debug, thiserror::Error)]
#[error("plotting: {0}")]
pub struct PlotError(String);

/// Wraps any plotters error.
pub fn err<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError(format!("{e:?}"))
}

/// A vertical axis: linear from zero, or logarithmic (decades).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

/// Grouped bars: one group per category, one bar per series in each group.
#[derive(Debug, Clone)]
pub struct Bars {
    pub title: String,
    pub y_label: String,
    pub scale: Scale,
    pub categories: Vec<String>,
    /// (series name, one value per category)
    pub series: Vec<(String, Vec<Option<f64>>)>,
}

/// Lines over a numeric x axis (for example concurrency or object size).
#[derive(Debug, Clone)]
pub struct Lines {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_scale: Scale,
    pub y_scale: Scale,
    /// (series name, points)
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

fn usable(scale: Scale, v: f64) -> bool {
    v.is_finite() && (scale == Scale::Linear || v > 0.0)
}

/// Axis limits covering `values` (the usable ones): from zero (linear) or
/// a little below the least (log) to a little above the greatest.
fn limits(scale: Scale, values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| usable(scale, *v))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    match scale {
        _ if !lo.is_finite() => (if scale == Scale::Log { 0.1 } else { 0.0 }, 1.0),
        Scale::Linear => (lo.min(0.0), if hi > 0.0 { hi * 1.1 } else { 1.0 }),
        Scale::Log => (lo / 1.5, (hi * 1.5).max(lo * 10.0)),
    }
}

/// A compact tick label: 1500, 25k, 3M, 0.5.
fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 && (v / 1e6).fract() == 0.0 {
        format!("{}M", v / 1e6)
    } else if a >= 1e4 && (v / 1e3).fract() == 0.0 {
        format!("{}k", v / 1e3)
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{}", (v * 1000.0).round() / 1000.0)
    }
}

/// A white canvas drawing into `out`.
pub fn canvas(
    out: &mut String,
    size: (u32, u32),
) -> Result<DrawingArea<SVGBackend<'_>, Shift>, PlotError> {
    let root = SVGBackend::with_string(out, size).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    Ok(root)
}

/// The title and axis areas every chart here has.
pub fn frame<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    b
}

/// The series legend every chart here draws.
pub fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> Result<(), PlotError> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(at)
        .draw()
        .map_err(err)
}

impl Bars {
    pub fn svg(&self) -> String {
        let mut out = String::new();
        if let Err(e) = self.draw(&mut out) {
            return failed(&self.title, &e);
        }
        out
    }

    fn draw(&self, out: &mut String) -> Result<(), PlotError> {
        let values = self
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().flatten().copied());
        let (lo, hi) = limits(self.scale, values);
        let n = self.categories.len().max(1) as f64;
        let root = canvas(out, SIZE)?;
        match self.scale {
            Scale::Linear => self.bars(&root, 0.0..n, lo..hi, 0.0f64.max(lo))?,
            Scale::Log => self.bars(&root, 0.0..n, (lo..hi).log_scale(), lo)?,
        }
        root.present().map_err(err)
    }

    fn bars<Y>(
        &self,
        root: &DrawingArea<SVGBackend<'_>, Shift>,
        x: std::ops::Range<f64>,
        y: Y,
        base: f64,
    ) -> Result<(), PlotError>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let mut chart = frame(root, &self.title)
            .build_cartesian_2d(x, y)
            .map_err(err)?;
        let categories = &self.categories;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&|_| String::new())
            .y_label_formatter(&|v| number(*v))
            .y_desc(self.y_label.as_str())
            .draw()
            .map_err(err)?;
        // each category's name under its group's middle
        for (i, name) in categories.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(i as f64 + 0.5, base));
            let style = ("sans-serif", 14).into_font().into_text_style(root).pos(
                plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Top,
                ),
            );
            root.draw(&Text::new(name.as_str(), (px, py + 8), style))
                .map_err(err)?;
        }
        let width = 0.8 / self.series.len().max(1) as f64;
        for (s, (name, vals)) in self.series.iter().enumerate() {
            let c = colour(s);
            let bars = vals.iter().enumerate().filter_map(|(i, v)| {
                let v = v.filter(|v| usable(self.scale, *v))?;
                let x0 = i as f64 + 0.1 + width * s as f64;
                Some(Rectangle::new(
                    [(x0, base), (x0 + width * 0.95, v)],
                    c.filled(),
                ))
            });
            chart
                .draw_series(bars)
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    }
}

impl Lines {
    pub fn svg(&self) -> String {
        let mut out = String::new();
        if let Err(e) = self.draw(&mut out) {
            return failed(&self.title, &e);
        }
        out
    }

    fn draw(&self, out: &mut String) -> Result<(), PlotError> {
        let points = || self.series.iter().flat_map(|(_, p)| p.iter().copied());
        let (x0, x1) = limits(self.x_scale, points().map(|p| p.0));
        let (y0, y1) = limits(self.y_scale, points().map(|p| p.1));
        let root = canvas(out, SIZE)?;
        match (self.x_scale, self.y_scale) {
            (Scale::Linear, Scale::Linear) => self.lines(&root, x0..x1, y0..y1)?,
            (Scale::Linear, Scale::Log) => self.lines(&root, x0..x1, (y0..y1).log_scale())?,
            (Scale::Log, Scale::Linear) => self.lines(&root, (x0..x1).log_scale(), y0..y1)?,
            (Scale::Log, Scale::Log) => {
                self.lines(&root, (x0..x1).log_scale(), (y0..y1).log_scale())?
            }
        }
        root.present().map_err(err)
    }

    fn lines<X, Y>(
        &self,
        root: &DrawingArea<SVGBackend<'_>, Shift>,
        x: X,
        y: Y,
    ) -> Result<(), PlotError>
    where
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
        Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let mut chart = frame(root, &self.title)
            .build_cartesian_2d(x, y)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|v| number(*v))
            .y_label_formatter(&|v| number(*v))
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .draw()
            .map_err(err)?;
        for (s, (name, pts)) in self.series.iter().enumerate() {
            let c = colour(s);
            let pts: Vec<(f64, f64)> = pts
                .iter()
                .copied()
                .filter(|(px, py)| usable(self.x_scale, *px) && usable(self.y_scale, *py))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3))
                });
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled())))
                .map_err(err)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    }
}

/// A chart that could not be drawn: an SVG saying why, so a report still
/// has its file and the reason.
fn failed(title: &str, e: &PlotError) -> String {
    let text = format!("{title}: {e}")
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\"><text x=\"20\" y=\"40\">{text}</text></svg>\n",
        SIZE.0, SIZE.1
    )
}

/// Writes `svg` to `path` through a temporary file and a rename, so a reader
/// never sees half a chart.
pub fn write(path: &std::path::Path, svg: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("svg.tmp");
    std::fs::write(&tmp, svg)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many shapes of series `i`'s colour the SVG holds.
    fn shapes_of(svg: &str, i: usize) -> usize {
        svg.matches(&format!("fill=\"{}\"", fill_of(i))).count()
    }

    #[test]
    fn bars_draw_one_bar_per_present_value_and_skip_gaps() {
        for scale in [Scale::Linear, Scale::Log] {
            let b = Bars {
                title: "t <&>".into(),
                y_label: "ms".into(),
                scale,
                categories: vec!["a".into(), "b".into(), "c".into()],
                series: vec![
                    ("one".into(), vec![Some(1.0), None, Some(30.0)]),
                    ("two".into(), vec![Some(f64::NAN), Some(2.0), Some(0.0)]),
                ],
            };
            let svg = b.svg();
            assert!(svg.starts_with("<svg"), "{svg}");
            assert!(svg.contains("t &lt;&amp;&gt;"), "{svg}");
            // each series' bars plus its legend swatch; zero is a gap only on a log axis
            let two = if scale == Scale::Log { 1 } else { 2 };
            assert_eq!(shapes_of(&svg, 0), 2 + 1, "{scale:?}: {svg}");
            assert_eq!(shapes_of(&svg, 1), two + 1, "{scale:?}: {svg}");
            for label in [">\na\n<", ">\nb\n<", ">\nc\n<"] {
                assert!(svg.contains(label), "missing category {label}");
            }
        }
    }

    #[test]
    fn lines_on_every_scale_leave_out_unusable_points() {
        for (xs, ys) in [
            (Scale::Linear, Scale::Linear),
            (Scale::Log, Scale::Log),
            (Scale::Log, Scale::Linear),
            (Scale::Linear, Scale::Log),
        ] {
            let l = Lines {
                title: "t".into(),
                x_label: "N".into(),
                y_label: "ms".into(),
                x_scale: xs,
                y_scale: ys,
                series: vec![(
                    "s".into(),
                    vec![(1.0, 2.0), (10.0, 20.0), (100.0, f64::NAN), (1000.0, 5.0)],
                )],
            };
            let svg = l.svg();
            assert!(svg.contains("<polyline"), "{xs:?}/{ys:?}: {svg}");
            // three points drawn as dots
            assert_eq!(svg.matches("<circle").count(), 3, "{xs:?}/{ys:?}");
        }
    }

    #[test]
    fn limits_and_labels() {
        assert_eq!(limits(Scale::Linear, [2.0, 10.0].into_iter()), (0.0, 11.0));
        assert_eq!(limits(Scale::Log, [0.0, f64::NAN].into_iter()), (0.1, 1.0));
        let (lo, hi) = limits(Scale::Log, [1.0, 1000.0].into_iter());
        assert!(lo < 1.0 && hi > 1000.0);
        assert_eq!(number(1500.0), "1500");
        assert_eq!(number(25000.0), "25k");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(3e6), "3M");
    }
}
