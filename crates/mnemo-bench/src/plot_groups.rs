//! Grouped vertical bars: one group per category (a workload), one bar per series (a
//! server) in every group, one colour per series, a legend, the value above each bar, and a
//! log-scale value axis so that small and large values both show.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::plot::COLORS;

/// One series: its legend name and one value per group (NaN or <= 0: no bar).
#[derive(Debug, Clone)]
pub struct GroupSeries {
    /// Legend text.
    pub name: String,
    /// One value per group, in the groups' order.
    pub values: Vec<f64>,
}

/// "46.5k", "344": short enough to sit above a narrow bar.
fn compact(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 1000.0 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Writes grouped bars to `path`; the value axis is log10.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    groups: &[String],
    series: &[GroupSeries],
) -> Result<PathBuf, String> {
    crate::plot::init_font()?;
    let values = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if groups.is_empty() || lo > hi {
        return Err("nothing to plot".into());
    }
    let (y_min, y_max) = (lo / 2.0, hi * 3.0);
    let n = groups.len();
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, (y_min..y_max).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
                groups[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_desc(y_label)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())?;
    let width = 0.8 / series.len().max(1) as f64;
    for (j, s) in series.iter().enumerate() {
        let color = COLORS[j % COLORS.len()];
        let bars: Vec<(f64, f64)> = s
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite() && **v > 0.0)
            .map(|(i, &v)| (i as f64 - 0.4 + j as f64 * width, v))
            .collect();
        chart
            .draw_series(bars.iter().map(|&(x0, v)| {
                Rectangle::new(
                    [(x0, y_min), (x0 + width * 0.92, v)],
                    color.mix(0.85).filled(),
                )
            }))
            .map_err(|e| e.to_string())?
            .label(s.name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart
            .draw_series(bars.iter().map(|&(x0, v)| {
                Text::new(
                    compact(v),
                    (x0, v * 1.12),
                    ("sans-serif", 10).into_font().color(&BLACK),
                )
            }))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_values() {
        assert_eq!(compact(46_485.2), "46k");
        assert_eq!(compact(7_674.7), "7.7k");
        assert_eq!(compact(344.2), "344");
    }
}
