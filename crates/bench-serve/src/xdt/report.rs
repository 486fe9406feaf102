//! The report as markdown tables and SVG plots.
use super::{AppCell, Cell, Phases, Report, CROSS, CROSS_PHASES, METHODS, PHASES};
use thaw_bench::stats::Summary;

pub(super) fn human(size: u64) -> String {
    match size {
        s if s >= 1_000_000 => format!("{} MB", s / 1_000_000),
        s if s >= 1_000 => format!("{} KB", s / 1_000),
        s => format!("{s} B"),
    }
}

pub(super) fn ms_cols(m: &Option<Summary>) -> String {
    match m {
        Some(m) => format!("{} | {:.3} | {:.3} | {:.3}", m.n, m.min, m.median, m.p99),
        None => "- | - | - | -".into(),
    }
}

/// A method as the tables print it: the store is always labelled emulated.
pub(super) fn label(method: &str) -> &str {
    match method {
        "store" => "store (emulated)",
        CROSS => "xdt across workers",
        m => m,
    }
}

pub(super) fn ratio(num: Option<&Summary>, den: Option<&Summary>) -> String {
    match (num, den) {
        (Some(n), Some(d)) => format!("{:.2}", n.median / d.median),
        _ => "-".into(),
    }
}

pub fn markdown(r: &Report) -> String {
    let mut s = format!(
        "Store: {} (emulated).\n\nWorkers (xdt across workers): {}.\n\n",
        r.store, r.workers
    );
    s += "1-1 transfers\n\n\
          | size | method | n | min ms | median ms | p99 ms | MB/s (median) | store / this | this / inline | note |\n\
          |---|---|---|---|---|---|---|---|---|---|\n";
    let find = |size: u64, m: &str| {
        r.transfers
            .iter()
            .find(|o| o.size == size && o.method == m)
            .and_then(|o| o.ms.as_ref())
    };
    for c in &r.transfers {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            human(c.size),
            label(&c.method),
            ms_cols(&c.ms),
            c.mb_per_s.map_or("-".into(), |v| format!("{v:.0}")),
            ratio(find(c.size, "store"), c.ms.as_ref()),
            ratio(c.ms.as_ref(), find(c.size, "inline")),
            c.note
        );
    }
    let steps = [
        (
            "xdt",
            &PHASES[..],
            "By reference on one worker, step by step (median ms; `get` and `touch` are inside `invoke`; `invoke_empty` is the consumer's invocation with no data, its fixed cost)",
        ),
        (
            CROSS,
            &CROSS_PHASES[..],
            "Across workers, step by step (median ms; `get` (waiting for the pull) and `touch` are inside `invoke`; `pull` is worker B's own time for it; `total` = put + invoke)",
        ),
    ];
    for (method, keys, title) in steps {
        let rows: Vec<&Phases> = r.phases.iter().filter(|p| p.method == method).collect();
        if rows.is_empty() {
            continue;
        }
        s += &format!("\n{title}\n\n| size | {} |\n|---|", keys.join(" | "));
        s += &"---|".repeat(keys.len());
        s += "\n";
        for p in rows {
            s += &format!("| {} |", human(p.size));
            for k in keys {
                s += &format!(" {:.3} |", p.median_ms.get(*k).copied().unwrap_or(f64::NAN));
            }
            s += "\n";
        }
    }
    if !r.overlap.is_empty() {
        s += "\nOverlap across workers: a cold consumer (`?force=cold`), the pull started when the invocation arrives vs at `thaw.get` (ms, consumer invocation)\n\n\
              | size | n | at arrival: median | p99 | at get: median | p99 | saved (median) |\n\
              |---|---|---|---|---|---|---|\n";
        for o in &r.overlap {
            s += &format!(
                "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
                human(o.size),
                o.at_arrival.n,
                o.at_arrival.median,
                o.at_arrival.p99,
                o.at_get.median,
                o.at_get.p99,
                o.at_get.median - o.at_arrival.median
            );
        }
    }
    if !r.patterns.is_empty() {
        s += "\nPatterns (one object per consumer or producer; time until every consumer has touched every page)\n\n\
              | pattern | degree | size | method | n | min ms | median ms | p99 ms | MB/s (median, all objects) | store / this | note |\n\
              |---|---|---|---|---|---|---|---|---|---|---|\n";
        for c in &r.patterns {
            let store = r
                .patterns
                .iter()
                .find(|o| {
                    o.pattern == c.pattern && o.degree == c.degree && o.cell.method == "store"
                })
                .and_then(|o| o.cell.ms.as_ref());
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                c.pattern,
                c.degree,
                human(c.cell.size),
                label(&c.cell.method),
                ms_cols(&c.cell.ms),
                c.cell.mb_per_s.map_or("-".into(), |v| format!("{v:.0}")),
                ratio(store, c.cell.ms.as_ref()),
                c.cell.note
            );
        }
    }
    if !r.apps.is_empty() {
        s += "\nApplications (end to end; cost per run at published us-east-1 prices, median run)\n\n\
              | application | method | n | min ms | median ms | p99 ms | store / this | function GB-s | requests | store PUT / GET | USD functions | USD store | USD total |\n\
              |---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for c in &r.apps {
            let store = r
                .apps
                .iter()
                .find(|o| o.app == c.app && o.method == "store")
                .map(|o| &o.e2e_ms);
            let k = &c.cost;
            s += &format!(
                "| {} | {} | {} | {} | {:.3} | {} | {} / {} | {:.3e} | {:.3e} | {:.3e} |\n",
                c.app,
                label(&c.method),
                ms_cols(&Some(c.e2e_ms)),
                ratio(store, Some(&c.e2e_ms)),
                k.function_gb_s,
                k.requests,
                k.store_puts,
                k.store_gets,
                k.usd_functions,
                k.usd_store,
                k.usd_total
            );
        }
        s += &app_stages(&r.apps);
    }
    s
}

/// The applications' stages side by side per method (xdt against store).
pub(super) fn app_stages(apps: &[AppCell]) -> String {
    let mut s = String::from(
        "\nApplications step by step (ms over the runs: median (min / p99); a called \
         function's stage: its slowest invocation per run; \"dispatch\": from the \
         driver's invoke until the function runs)\n\n\
         | application | function | stage | xdt | store (emulated) | store - xdt (medians) |\n\
         |---|---|---|---|---|---|\n",
    );
    let cell = |m: Option<&Summary>| {
        m.map_or("-".into(), |m| {
            format!("{:.1} ({:.1} / {:.1})", m.median, m.min, m.p99)
        })
    };
    for x in apps.iter().filter(|a| a.method == "xdt") {
        let store = apps.iter().find(|o| o.app == x.app && o.method == "store");
        for st in &x.stages {
            let other = store.and_then(|o| {
                o.stages
                    .iter()
                    .find(|t| t.function == st.function && t.stage == st.stage)
                    .map(|t| &t.ms)
            });
            s += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                x.app,
                st.function,
                st.stage,
                cell(Some(&st.ms)),
                cell(other),
                other.map_or("-".into(), |o| format!("{:+.1}", o.median - st.ms.median))
            );
        }
    }
    s
}

/// The report's plots, each an SVG (file-name suffix, document): 1-1
/// latency and bandwidth per size and method, each pattern's latency per
/// degree and method, and the applications' end-to-end time.
pub fn plots(r: &Report) -> Vec<(String, String)> {
    use thaw_plot::{Bars, Lines, Scale};
    let mut methods: Vec<&str> = METHODS.to_vec();
    if r.transfers.iter().any(|c| c.method == CROSS) {
        methods.push(CROSS);
    }
    let per_size = |f: &dyn Fn(&Cell) -> Option<f64>| -> Vec<(String, Vec<(f64, f64)>)> {
        methods
            .iter()
            .map(|m| {
                let pts = r
                    .transfers
                    .iter()
                    .filter(|c| c.method == *m)
                    .filter_map(|c| Some((c.size as f64, f(c)?)))
                    .collect();
                (label(m).to_string(), pts)
            })
            .collect()
    };
    let mut out = vec![
        (
            "latency".to_string(),
            Lines {
                title: "1-1 transfer latency (median)".into(),
                x_label: "object size, bytes".into(),
                y_label: "ms".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                series: per_size(&|c| c.ms.map(|m| m.median)),
            }
            .svg(),
        ),
        (
            "latency-p99".to_string(),
            Lines {
                title: "1-1 transfer latency (p99)".into(),
                x_label: "object size, bytes".into(),
                y_label: "ms".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                series: per_size(&|c| c.ms.map(|m| m.p99)),
            }
            .svg(),
        ),
        (
            "bandwidth".to_string(),
            Lines {
                title: "1-1 effective bandwidth (size / median latency)".into(),
                x_label: "object size, bytes".into(),
                y_label: "MB/s".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                series: per_size(&|c| c.mb_per_s),
            }
            .svg(),
        ),
    ];
    for pattern in ["scatter", "gather", "broadcast"] {
        let series: Vec<(String, Vec<(f64, f64)>)> = methods
            .iter()
            .map(|m| {
                let pts = r
                    .patterns
                    .iter()
                    .filter(|c| c.pattern == pattern && c.cell.method == *m)
                    .filter_map(|c| Some((c.degree as f64, c.cell.ms?.median)))
                    .collect();
                (label(m).to_string(), pts)
            })
            .collect();
        if series.iter().all(|(_, p)| p.is_empty()) {
            continue;
        }
        out.push((
            pattern.to_string(),
            Lines {
                title: format!("{pattern}: latency per degree (median)"),
                x_label: "degree".into(),
                y_label: "ms".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                series,
            }
            .svg(),
        ));
    }
    if !r.apps.is_empty() {
        let mut apps: Vec<String> = r.apps.iter().map(|a| a.app.clone()).collect();
        apps.dedup();
        let series = ["xdt", "store"]
            .iter()
            .map(|m| {
                let v = apps
                    .iter()
                    .map(|app| {
                        r.apps
                            .iter()
                            .find(|a| &a.app == app && a.method == *m)
                            .map(|a| a.e2e_ms.median)
                    })
                    .collect();
                (label(m).to_string(), v)
            })
            .collect();
        out.push((
            "apps".to_string(),
            Bars {
                title: "Applications: end-to-end time (median)".into(),
                y_label: "ms".into(),
                scale: Scale::Linear,
                categories: apps,
                series,
            }
            .svg(),
        ));
    }
    out
}
