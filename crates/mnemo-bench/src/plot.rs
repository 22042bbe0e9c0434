//! Grouped bar and line plots as SVG.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Register a font for text measurement (plotters' ab_glyph backend). Install Debian's
/// `fonts-dejavu-core` if none is found.
pub fn init_font() -> Result<(), String> {
    let _ = std::fs::create_dir_all(crate::bench_dir().join("plots"));
    for path in FONT_PATHS {
        if let Ok(bytes) = std::fs::read(path) {
            let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            return register_font("sans-serif", FontStyle::Normal, leaked)
                .map_err(|_| format!("{path}: not a usable font"));
        }
    }
    Err("no font found for plots: apt-get install fonts-dejavu-core".into())
}

/// One series of a line plot: a name and (x, y) points.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points, x ascending.
    pub points: Vec<(f64, f64)>,
}

/// The series colours of every plot (matplotlib's first eight).
pub(crate) const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// A log-log line plot (both axes log10) written to `path`.
pub fn loglog(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<PathBuf, String> {
    init_font()?;
    let (mut x_min, mut x_max, mut y_min, mut y_max) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for s in series {
        for &(x, y) in &s.points {
            x_min = x_min.min(x);
            x_max = x_max.max(x);
            y_min = y_min.min(y);
            y_max = y_max.max(y);
        }
    }
    if x_min > x_max {
        return Err("nothing to plot".into());
    }
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x_min..x_max * 1.05).log_scale(),
            (y_min * 0.8..y_max * 1.25).log_scale(),
        )
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(s.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(path.to_path_buf())
}

/// Horizontal bars: one bar per (label, value), written to `path`.
pub fn bars(
    path: &Path,
    title: &str,
    value_label: &str,
    rows: &[(String, f64)],
) -> Result<PathBuf, String> {
    init_font()?;
    let max = rows.iter().map(|r| r.1).fold(0.0, f64::max).max(1e-9);
    let height = 90 + 34 * rows.len() as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(300)
        .build_cartesian_2d(0.0..max * 1.15, (0..rows.len()).into_segmented())
        .map_err(|e| e.to_string())?;
    let labels: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc(value_label)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (_, value)) in rows.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i)),
                    (*value, SegmentValue::Exact(i + 1)),
                ],
                color.mix(0.8).filled(),
            )))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{value:.1}"),
                (*value + max * 0.01, SegmentValue::CenterOf(i)),
                ("sans-serif", 13),
            )))
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(path.to_path_buf())
}
