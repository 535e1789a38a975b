//! The report's PNG charts, drawn with plotters on its bitmap backend. Text is rendered with
//! a bundled DejaVu Sans (plotters' `ab_glyph` feature), so no system font is needed.

use crate::JobError;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// DejaVu Sans (Bitstream Vera licence, in `assets/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

const SIZE: (u32, u32) = (1200, 440);
const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
];

fn register_font(path: &Path) -> Result<(), JobError> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(chart_error(path, "the bundled font could not be read"))
    }
}

fn chart_error(path: &Path, message: impl std::fmt::Display) -> JobError {
    JobError::Chart {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// What drawing can fail with, as text (plotters' errors are generic over the backend).
type Drawn = Result<(), String>;

/// A proportion `k / n` with its 95% interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Proportion {
    /// What was measured (an axis label).
    pub label: String,
    /// The proportion.
    pub value: f64,
    /// The interval's ends.
    pub interval: (f64, f64),
}

/// A line of a panel: its name and (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend's text.
    pub name: String,
    /// The points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// One chart of a figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// Its caption.
    pub title: String,
    /// The x axis' description.
    pub x_label: String,
    /// The y axis' description.
    pub y_label: String,
    /// Fixed y range (else fitted to the data).
    pub y_range: Option<(f64, f64)>,
    /// The lines.
    pub series: Vec<Series>,
    /// Points with 95% intervals drawn as error bars, joined by a line (e.g. validation
    /// accuracy); `(x, proportion)`.
    pub intervals: Vec<(f64, Proportion)>,
}

/// Draws `panels` side by side into one PNG.
pub fn figure(path: &Path, panels: &[Panel]) -> Result<(), JobError> {
    register_font(path)?;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| chart_error(path, e))?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (panel, area) in panels.iter().zip(&areas) {
        draw_panel(area, panel)
            .map_err(|e| chart_error(path, format!("drawing `{}`: {e}", panel.title)))?;
    }
    root.present().map_err(|e| chart_error(path, e))
}

fn draw_panel(area: &DrawingArea<BitMapBackend<'_>, Shift>, panel: &Panel) -> Drawn {
    let e = |e: plotters::drawing::DrawingAreaErrorKind<_>| e.to_string();
    let xs = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(panel.intervals.iter().map(|p| p.0));
    let (x0, x1) = bounds(xs).unwrap_or((0.0, 1.0));
    // Room either side, so the end points and their error bars are not on the frame.
    let pad = ((x1 - x0) * 0.04).max(0.25);
    let (x0, x1) = (x0 - pad, x1 + pad);
    let (y0, y1) = match panel.y_range {
        Some(r) => r,
        None => {
            let ys = panel
                .series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1))
                .chain(
                    panel
                        .intervals
                        .iter()
                        .flat_map(|(_, p)| [p.interval.0, p.interval.1]),
                );
            let (lo, hi) = bounds(ys).unwrap_or((0.0, 1.0));
            let pad = ((hi - lo) * 0.08).max(1e-3);
            (lo - pad, hi + pad)
        }
    };
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(&panel.x_label)
        .y_desc(&panel.y_label)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    for (i, s) in panel.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(&s.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        if s.points.len() <= 60 {
            chart
                .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(e)?;
        }
    }
    if !panel.intervals.is_empty() {
        let color = COLORS[panel.series.len() % COLORS.len()];
        let name = panel.intervals[0].1.label.clone();
        chart
            .draw_series(LineSeries::new(
                panel.intervals.iter().map(|(x, p)| (*x, p.value)),
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(panel.intervals.iter().map(|(x, p)| {
                ErrorBar::new_vertical(*x, p.interval.0, p.value, p.interval.1, color.filled(), 10)
            }))
            .map_err(e)?;
    }
    if panel.series.len() + usize::from(!panel.intervals.is_empty()) > 0 {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(e)?;
    }
    Ok(())
}

/// Proportions with their 95% intervals, one column each (the test accuracy of each stage).
pub fn proportions(path: &Path, title: &str, items: &[Proportion]) -> Result<(), JobError> {
    register_font(path)?;
    let root = BitMapBackend::new(path, (SIZE.0 * 2 / 3, SIZE.1)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| chart_error(path, e))?;
    draw_proportions(&root, title, items).map_err(|e| chart_error(path, e))?;
    root.present().map_err(|e| chart_error(path, e))
}

fn draw_proportions(
    root: &DrawingArea<BitMapBackend<'_>, Shift>,
    title: &str,
    items: &[Proportion],
) -> Drawn {
    let e = |e: plotters::drawing::DrawingAreaErrorKind<_>| e.to_string();
    let n = items.len().max(1);
    let labels: Vec<String> = items.iter().map(|p| p.label.clone()).collect();
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..1.0)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc("accuracy (95% interval)")
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                labels.get(*i).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    for (i, p) in items.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(std::iter::once(ErrorBar::new_vertical(
                SegmentValue::CenterOf(i),
                p.interval.0,
                p.value,
                p.interval.1,
                color.stroke_width(3),
                24,
            )))
            .map_err(e)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{:.0}%", p.value * 100.0),
                (SegmentValue::CenterOf(i), (p.interval.1 + 0.03).min(0.97)),
                ("sans-serif", 15),
            )))
            .map_err(e)?;
    }
    Ok(())
}

fn bounds(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_size(path: &Path) -> (u32, u32) {
        let bytes = std::fs::read(path).unwrap();
        assert_eq!(
            &bytes[..8],
            b"\x89PNG\r\n\x1a\n",
            "{} is not a PNG",
            path.display()
        );
        let be = |o: usize| u32::from_be_bytes(bytes[o..o + 4].try_into().unwrap());
        (be(16), be(20))
    }

    /// The compressed size: a chart with lines and text compresses worse than an empty one.
    fn encoded_len(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    #[test]
    fn draws_labelled_panels_and_intervals() {
        let dir = tempfile::tempdir().unwrap();
        let curves = dir.path().join("curves.png");
        let panel = |series: Vec<Series>| Panel {
            title: "reward".into(),
            x_label: "step".into(),
            y_label: "mean".into(),
            y_range: None,
            series,
            intervals: vec![(
                4.0,
                Proportion {
                    label: "validation".into(),
                    value: 0.5,
                    interval: (0.36, 0.64),
                },
            )],
        };
        let line = Series {
            name: "train".into(),
            points: (1..=10)
                .map(|s| (f64::from(s), f64::from(s) / 10.0))
                .collect(),
        };
        figure(&curves, &[panel(vec![line.clone()]), panel(vec![line])]).unwrap();
        assert_eq!(png_size(&curves), SIZE);
        // A figure with no data is still a valid, smaller picture.
        let blank = dir.path().join("blank.png");
        figure(
            &blank,
            &[Panel {
                intervals: vec![],
                ..panel(vec![])
            }],
        )
        .unwrap();
        assert!(
            encoded_len(&curves) > encoded_len(&blank) + 2000,
            "the curves drew nothing"
        );

        let bars = dir.path().join("bars.png");
        let p = |label: &str, v: f64| Proportion {
            label: label.into(),
            value: v,
            interval: (v - 0.1, v + 0.1),
        };
        proportions(
            &bars,
            "test accuracy",
            &[p("initial", 0.1), p("after RL", 0.7)],
        )
        .unwrap();
        assert_eq!(png_size(&bars), (SIZE.0 * 2 / 3, SIZE.1));
    }
}
