//! `--report DIR`: a Markdown report (the result table, the JSON, the command) with SVG plots:
//! the latency CDF (when latency was measured), connected and in-sync nodes over time, and the
//! servers' memory over time.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::harness::{Outcome, Sample};

/// Writes `<name>.md` and its SVGs into `dir`; returns the Markdown file's path.
pub(crate) fn write(dir: &Path, o: &Outcome) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let mut md = format!(
        "# loadtest {}\n\nCommand: `{}`\n\n{}\n\n",
        o.name,
        std::env::args().collect::<Vec<_>>().join(" "),
        o.table
    );
    if let Some(h) = &o.latency
        && !h.is_empty()
    {
        let points: Vec<(f64, f64)> = (0..=1000)
            .map(|i| {
                let q = f64::from(i) / 1000.0;
                (h.value_at_quantile(q) as f64 / 1000.0, q * 100.0)
            })
            .collect();
        let file = format!("{}-latency-cdf.svg", o.name);
        line_chart(
            &dir.join(&file),
            "Write-to-receipt latency CDF",
            "latency (ms)",
            "% of (node, update) pairs",
            &[("latency", &points)],
        )?;
        md.push_str(&format!("![latency CDF]({file})\n\n"));
    }
    if !o.timeline.is_empty() {
        let series = |f: fn(&Sample) -> f64| -> Vec<(f64, f64)> {
            o.timeline.iter().map(|s| (s.t, f(s))).collect()
        };
        let connected = series(|s| s.connected as f64);
        let in_sync = series(|s| s.in_sync as f64);
        let file = format!("{}-nodes.svg", o.name);
        line_chart(
            &dir.join(&file),
            "Nodes over time",
            "seconds",
            "nodes",
            &[("connected", &connected), ("in sync", &in_sync)],
        )?;
        md.push_str(&format!("![nodes over time]({file})\n\n"));
        let rss = series(|s| s.server_rss_mib);
        let file = format!("{}-server-rss.svg", o.name);
        line_chart(
            &dir.join(&file),
            "Server memory over time",
            "seconds",
            "RSS (MiB)",
            &[("server RSS", &rss)],
        )?;
        md.push_str(&format!("![server RSS over time]({file})\n\n"));
    }
    md.push_str(&format!(
        "```json\n{}\n```\n",
        serde_json::to_string_pretty(&o.json)?
    ));
    let path = dir.join(format!("{}.md", o.name));
    std::fs::write(&path, md)?;
    std::fs::write(
        dir.join(format!("{}-timeline.json", o.name)),
        serde_json::to_vec(&o.timeline)?,
    )?;
    Ok(path)
}

/// Draws lines into an SVG file.
fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, &[(f64, f64)])],
) -> anyhow::Result<()> {
    let all = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x_max, mut y_max) = (0.0f64, 0.0f64);
    for (x, y) in all {
        x_max = x_max.max(*x);
        y_max = y_max.max(*y);
    }
    let (x_max, y_max) = (x_max.max(1e-3) * 1.02, y_max.max(1e-3) * 1.05);
    let root = SVGBackend::new(path, (800, 450)).into_drawing_area();
    let e = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("plotting {}: {e}", path.display());
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(e)?;
    let colors = [BLUE, RED, GREEN, MAGENTA];
    for (i, (name, points)) in series.iter().enumerate() {
        let color = colors.get(i % colors.len()).copied().unwrap_or(BLACK);
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    if series.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(e)?;
    }
    root.present().map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use crate::harness::{Outcome, Sample};

    #[test]
    fn writes_markdown_and_three_plots() {
        let mut h = crate::harness::histogram().unwrap();
        for us in [1_000u64, 2_000, 5_000, 40_000] {
            h.record(us).unwrap();
        }
        let timeline = (0..20)
            .map(|i| Sample {
                t: f64::from(i) * 0.25,
                connected: 10 * i as u64,
                in_sync: 8 * i as u64,
                server_rss_mib: 100.0 + f64::from(i),
            })
            .collect();
        let o = Outcome {
            name: "steady",
            table: "| measure | value |\n|---|---|\n| x | 1 |".into(),
            json: serde_json::json!({"x": 1}),
            ok: true,
            timeline,
            latency: Some(h),
        };
        let dir = tempfile::tempdir().unwrap();
        let md = super::write(dir.path(), &o).unwrap();
        let text = std::fs::read_to_string(md).unwrap();
        for f in [
            "steady-latency-cdf.svg",
            "steady-nodes.svg",
            "steady-server-rss.svg",
        ] {
            assert!(text.contains(f), "{f} linked");
            let svg = std::fs::read_to_string(dir.path().join(f)).unwrap();
            assert!(svg.starts_with("<svg") && svg.contains("<polyline"), "{f}");
        }
    }
}
