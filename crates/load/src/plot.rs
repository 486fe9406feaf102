//! SVG plots (plotters): latency CDF per start type, latency over time.

use crate::record::Tally;
use anyhow::Result;
use plotters::prelude::*;
use std::path::Path;
use thaw_plot::{colour, err, frame, legend};

type Canvas<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn canvas(path: &Path) -> Result<Canvas<'_>> {
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    Ok(root)
}

/// Latency CDF, one line per start type, log-scaled latency axis.
pub fn cdf(path: &Path, tally: &Tally, title: &str) -> Result<()> {
    let series: Vec<(String, Vec<(f64, f64)>)> = tally
        .latency
        .iter()
        .map(|(k, h)| (k.clone(), h.cdf()))
        .collect();
    let lo = series
        .iter()
        .flat_map(|(_, p)| p.first().map(|x| x.0))
        .fold(f64::INFINITY, f64::min);
    let hi = series
        .iter()
        .flat_map(|(_, p)| p.last().map(|x| x.0))
        .fold(0.0f64, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > 0.0 {
        (lo.max(0.001) / 1.2, hi * 1.2)
    } else {
        (0.1, 10.0)
    };
    let root = canvas(path)?;
    let mut chart = frame(&root, title)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("latency from intended send time (ms)")
        .y_desc("fraction of requests")
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = colour(i);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
            .map_err(err)?
            .label(format!("{name} ({})", tally.latency[name].latency().count))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Latency of each (sampled) request against its scheduled time, by start type.
pub fn over_time(path: &Path, tally: &Tally, title: &str) -> Result<()> {
    let pts = &tally.over_time;
    let t_max = pts.iter().map(|p| p.0).fold(1.0f64, f64::max) / 1000.0;
    let l_max = pts.iter().map(|p| p.1).fold(0.1f64, f64::max);
    let l_min = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let l_min = if l_min.is_finite() {
        l_min.max(0.001) / 1.2
    } else {
        0.01
    };
    let root = canvas(path)?;
    let mut chart = frame(&root, title)
        .build_cartesian_2d(0.0..t_max * 1.02, (l_min..l_max * 1.2).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("scheduled send time (s)")
        .y_desc("latency (ms)")
        .draw()
        .map_err(err)?;
    let kinds: Vec<&String> = tally.latency.keys().collect();
    for (i, kind) in kinds.iter().enumerate() {
        let c = colour(i);
        chart
            .draw_series(
                pts.iter()
                    .filter(|p| &p.2 == *kind)
                    .map(|p| Circle::new((p.0 / 1000.0, p.1), 2, c.filled())),
            )
            .map_err(err)?
            .label(kind.as_str())
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, c.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::MiddleRight)?;
    root.present().map_err(err)?;
    Ok(())
}
