//! Small SVG charts for the benchmark reports (no dependencies, no fonts to
//! install): grouped bars for "one figure per category and method" tables and
//! lines for "figure against a swept parameter" ones. Both write a standalone
//! SVG document that a browser or a Markdown viewer shows as it is.
//!
//! Missing values (`None`, NaN, or <= 0 on a log axis) are left out, so a
//! refused or skipped cell shows as a gap, never as a zero.
use std::fmt::Write;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 64.0;
/// Colour-blind-safe palette (Okabe-Ito), cycled per series.
const COLOURS: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
];

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

/// Maps data values to one pixel axis.
struct Axis {
    scale: Scale,
    lo: f64,
    hi: f64,
}

impl Axis {
    /// An axis covering `values` (the usable ones), with round limits.
    fn fit(scale: Scale, values: impl Iterator<Item = f64>) -> Axis {
        let usable: Vec<f64> = values.filter(|v| usable(scale, *v)).collect();
        let max = usable.iter().cloned().fold(f64::NAN, f64::max);
        let min = usable.iter().cloned().fold(f64::NAN, f64::min);
        match scale {
            Scale::Linear => {
                let hi = if max.is_finite() && max > 0.0 {
                    nice_ceil(max)
                } else {
                    1.0
                };
                let lo = if min.is_finite() && min < 0.0 {
                    -nice_ceil(-min)
                } else {
                    0.0
                };
                Axis { scale, lo, hi }
            }
            Scale::Log => {
                let (lo, hi) = if max.is_finite() {
                    (
                        min.log10().floor(),
                        max.log10().ceil().max(min.log10().floor() + 1.0),
                    )
                } else {
                    (0.0, 1.0)
                };
                Axis { scale, lo, hi }
            }
        }
    }

    /// Position of `v` in 0..=1 along the axis.
    fn frac(&self, v: f64) -> f64 {
        let x = match self.scale {
            Scale::Linear => v,
            Scale::Log => v.log10(),
        };
        ((x - self.lo) / (self.hi - self.lo)).clamp(0.0, 1.0)
    }

    /// Tick values with their labels.
    fn ticks(&self) -> Vec<(f64, String)> {
        match self.scale {
            Scale::Linear => (0..=5)
                .map(|i| {
                    let v = self.lo + (self.hi - self.lo) * i as f64 / 5.0;
                    (v, number(v))
                })
                .collect(),
            Scale::Log => (self.lo as i32..=self.hi as i32)
                .map(|e| {
                    let v = 10f64.powi(e);
                    (v, number(v))
                })
                .collect(),
        }
    }
}

fn usable(scale: Scale, v: f64) -> bool {
    v.is_finite() && (scale == Scale::Linear || v > 0.0)
}

/// The smallest of 1, 2, 2.5, 5 x 10^k that is >= v.
fn nice_ceil(v: f64) -> f64 {
    let e = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * e)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * e)
}

/// A short label: 0.25, 12, 1.5k, 3M.
fn number(v: f64) -> String {
    let a = v.abs();
    let (x, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{suffix}")
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The frame every chart shares: title, y axis with grid and ticks, legend.
fn frame(out: &mut String, title: &str, y_label: &str, y: &Axis, names: &[&str]) {
    let plot_h = HEIGHT - TOP - BOTTOM;
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>
<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">{}</text>
"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        escape(title),
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    for (v, label) in y.ticks() {
        let py = TOP + plot_h * (1.0 - y.frac(v));
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            py + 4.0
        );
    }
    let _ = writeln!(
        out,
        r#"<rect x="{LEFT}" y="{TOP}" width="{}" height="{plot_h}" fill="none" stroke="black"/>"#,
        WIDTH - RIGHT - LEFT
    );
    for (i, name) in names.iter().enumerate() {
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = WIDTH - RIGHT + 12.0;
        let _ = writeln!(
            out,
            r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{ly}">{}</text>"#,
            ly - 10.0,
            COLOURS[i % COLOURS.len()],
            lx + 18.0,
            escape(name)
        );
    }
}

impl Bars {
    pub fn svg(&self) -> String {
        let values = self
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().flatten().cloned());
        let y = Axis::fit(self.scale, values);
        let names: Vec<&str> = self.series.iter().map(|(n, _)| n.as_str()).collect();
        let mut out = String::new();
        frame(&mut out, &self.title, &self.y_label, &y, &names);
        let plot_w = WIDTH - RIGHT - LEFT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let group_w = plot_w / self.categories.len().max(1) as f64;
        let bar_w = group_w * 0.8 / self.series.len().max(1) as f64;
        let base = TOP
            + plot_h
                * (1.0
                    - y.frac(if self.scale == Scale::Log {
                        0.0
                    } else {
                        0.0f64.max(y.lo)
                    }));
        for (c, category) in self.categories.iter().enumerate() {
            let gx = LEFT + group_w * c as f64;
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                gx + group_w / 2.0,
                HEIGHT - BOTTOM + 18.0,
                escape(category)
            );
            for (s, (name, vals)) in self.series.iter().enumerate() {
                let Some(v) = vals
                    .get(c)
                    .copied()
                    .flatten()
                    .filter(|v| usable(self.scale, *v))
                else {
                    continue;
                };
                let top = TOP + plot_h * (1.0 - y.frac(v));
                let bottom = if self.scale == Scale::Log {
                    TOP + plot_h
                } else {
                    base
                };
                let (y0, h) = (top.min(bottom), (bottom - top).abs());
                let _ = writeln!(
                    out,
                    r#"<rect x="{:.1}" y="{y0:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                    gx + group_w * 0.1 + bar_w * s as f64,
                    bar_w * 0.95,
                    COLOURS[s % COLOURS.len()],
                    escape(name),
                    number(v)
                );
            }
        }
        out.push_str("</svg>\n");
        out
    }
}

impl Lines {
    pub fn svg(&self) -> String {
        let points = || self.series.iter().flat_map(|(_, p)| p.iter().cloned());
        let x = Axis::fit(self.x_scale, points().map(|p| p.0));
        let y = Axis::fit(self.y_scale, points().map(|p| p.1));
        let names: Vec<&str> = self.series.iter().map(|(n, _)| n.as_str()).collect();
        let mut out = String::new();
        frame(&mut out, &self.title, &self.y_label, &y, &names);
        let plot_w = WIDTH - RIGHT - LEFT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        for (v, label) in x.ticks() {
            let px = LEFT + plot_w * x.frac(v);
            let _ = writeln!(
                out,
                r#"<text x="{px:.1}" y="{}" text-anchor="middle">{label}</text>"#,
                HEIGHT - BOTTOM + 18.0
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            HEIGHT - 16.0,
            escape(&self.x_label)
        );
        for (s, (name, pts)) in self.series.iter().enumerate() {
            let colour = COLOURS[s % COLOURS.len()];
            let coords: Vec<(f64, f64)> = pts
                .iter()
                .filter(|(px, py)| usable(self.x_scale, *px) && usable(self.y_scale, *py))
                .map(|(px, py)| {
                    (
                        LEFT + plot_w * x.frac(*px),
                        TOP + plot_h * (1.0 - y.frac(*py)),
                    )
                })
                .collect();
            let path: Vec<String> = coords
                .iter()
                .map(|(a, b)| format!("{a:.1},{b:.1}"))
                .collect();
            let _ = writeln!(
                out,
                r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"><title>{}</title></polyline>"#,
                path.join(" "),
                escape(name)
            );
            for (a, b) in coords {
                let _ = writeln!(
                    out,
                    r#"<circle cx="{a:.1}" cy="{b:.1}" r="3" fill="{colour}"/>"#
                );
            }
        }
        out.push_str("</svg>\n");
        out
    }
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

    #[test]
    fn bars_draw_one_rect_per_present_value_and_skip_gaps() {
        let b = Bars {
            title: "t <&>".into(),
            y_label: "ms".into(),
            scale: Scale::Log,
            categories: vec!["a".into(), "b".into()],
            series: vec![
                ("x".into(), vec![Some(1.5), None]),
                ("y".into(), vec![Some(200.0), Some(0.0)]),
            ],
        };
        let svg = b.svg();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<title>").count(), 2, "{svg}");
        assert!(svg.contains("t &lt;&amp;&gt;"));
        // Log axis from 1 to 1000: ticks 1, 10, 100, 1000.
        for t in [">1<", ">10<", ">100<", ">1000<"] {
            assert!(svg.contains(t), "missing tick {t}");
        }
    }

    #[test]
    fn lines_place_points_inside_the_plot() {
        let l = Lines {
            title: "scaling".into(),
            x_label: "concurrency".into(),
            y_label: "ms".into(),
            x_scale: Scale::Log,
            y_scale: Scale::Linear,
            series: vec![(
                "nvme".into(),
                vec![(1.0, 3.0), (2.0, 5.0), (64.0, 40.0), (0.0, 9.0)],
            )],
        };
        let svg = l.svg();
        assert_eq!(
            svg.matches("<circle").count(),
            3,
            "the x=0 point is dropped on a log axis"
        );
        // the number in `name="..."` of one element's text
        let attr = |c: &str, name: &str| -> f64 {
            let after = c.split(&format!("{name}=\"")).nth(1).unwrap();
            after.split('"').next().unwrap().parse().unwrap()
        };
        for c in svg.split("<circle").skip(1) {
            let (cx, cy) = (attr(c, "cx"), attr(c, "cy"));
            assert!((LEFT..=WIDTH - RIGHT).contains(&cx) && (TOP..=HEIGHT - BOTTOM).contains(&cy));
        }
    }

    #[test]
    fn nice_limits_and_labels() {
        assert_eq!(nice_ceil(7.3), 10.0);
        assert_eq!(nice_ceil(180.0), 200.0);
        assert_eq!(nice_ceil(0.22), 0.25);
        assert_eq!(number(1500.0), "1500");
        assert_eq!(number(25000.0), "25k");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(3e6), "3M");
    }
}
