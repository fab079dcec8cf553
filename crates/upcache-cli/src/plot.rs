//! Line charts (plotters) as PNG or SVG, chosen by the file's extension: hit ratio against
//! cache size, throughput against threads or devices, latency CDFs.
//!
//! Text is laid out with a TrueType font read at run time (`UPCACHE_FONT`, else DejaVu Sans
//! from the usual Debian path): plotters has none of its own in this build (no system font
//! lookup, which would need fontconfig).

#[cfg(feature = "plots")]
use anyhow::Context;
use anyhow::{bail, Result};
#[cfg(feature = "plots")]
use plotters::prelude::*;
use std::path::Path;

/// One line: a name for the legend and its points.
// Without `plots` they are built and refused by `draw`, never read.
#[cfg_attr(not(feature = "plots"), allow(dead_code))]
#[derive(serde::Serialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A chart of several series over shared axes.
#[cfg_attr(not(feature = "plots"), allow(dead_code))]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// A logarithmic x axis (cache sizes, latencies).
    pub x_log: bool,
    /// y is a fraction q of ops (0 to 1) drawn as -log10(1 - q), labelled p50, p90, p99,
    /// p99.9...: a CDF whose tail is as wide as its body.
    pub y_tail: bool,
    pub series: Vec<Series>,
}

/// The highest percentile a tail axis shows (p99.999): a CDF's last point is 1.
#[cfg(feature = "plots")]
const TAIL_FLOOR: f64 = 1e-5;

/// Each engine's colour, the same in every chart: series named after an engine (their name's
/// first word) get its colour, others the palette's in order after them.
#[cfg(feature = "plots")]
const ENGINES: [&str; 7] = ["upcache", "kernel", "direct", "dontcache", "shared", "memory", "memory-indexed"];

#[cfg(feature = "plots")]
fn colour(name: &str, i: usize) -> RGBAColor {
    let first = name.split_whitespace().next().unwrap_or("");
    let pick = ENGINES.iter().position(|&e| e == first).unwrap_or(ENGINES.len() + i);
    Palette99::pick(pick).to_rgba()
}

#[cfg(feature = "plots")]
const FONT_PATHS: [&str; 2] =
    ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf"];

/// Registers a font for the bitmap backend, once.
#[cfg(feature = "plots")]
fn register_font() -> Result<()> {
    static REGISTERED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let path = std::env::var("UPCACHE_FONT")
                .ok()
                .or_else(|| FONT_PATHS.iter().find(|p| Path::new(p).exists()).map(|p| p.to_string()));
            let Some(path) = path else {
                return Err("no font to draw text with: set UPCACHE_FONT to a .ttf file".into());
            };
            let bytes = std::fs::read(&path).map_err(|e| format!("read font {path}: {e}"))?;
            // plotters keeps the font for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{path} is not a usable TrueType font"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// Draws `chart` to `path` (`.png` or `.svg`).
#[cfg(feature = "plots")]
pub fn draw(chart: &Chart, path: &Path) -> Result<()> {
    let size = (960, 600);
    crate::output::check_chart_path(path)?;
    let ext = path.extension().and_then(|e| e.to_str());
    register_font()?;
    if ext == Some("svg") {
        draw_on(chart, SVGBackend::new(path, size).into_drawing_area())
    } else {
        draw_on(chart, BitMapBackend::new(path, size).into_drawing_area())
    }
    .with_context(|| format!("draw {}", path.display()))
}

#[cfg(feature = "plots")]
fn draw_on<DB: DrawingBackend>(chart: &Chart, area: DrawingArea<DB, plotters::coord::Shift>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    // A logarithmic axis is drawn as a linear one over log10(x), labelled with x: plotters'
    // own log scale labels every minor tick, which overlap.
    let tx = |x: f64| if chart.x_log { x.log10() } else { x };
    let ty = |y: f64| if chart.y_tail { -(1.0 - y).max(TAIL_FLOOR).log10() } else { y };
    let points = chart.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0f64);
    for &(x, y) in points {
        if chart.x_log && x <= 0.0 {
            bail!("a logarithmic axis cannot show {x}");
        }
        x0 = x0.min(tx(x));
        x1 = x1.max(tx(x));
        y1 = y1.max(ty(y));
    }
    if !x0.is_finite() {
        bail!("nothing to plot");
    }
    if x1 <= x0 {
        (x0, x1) = (x0 - 0.5, x1 + 0.5);
    }
    let pad = (x1 - x0) * 0.03;
    let y1 = if y1 > 0.0 { y1 * 1.05 } else { 1.0 };
    area.fill(&WHITE).map_err(err)?;
    let mut c = ChartBuilder::on(&area)
        .caption(&chart.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x0 - pad..x1 + pad, 0f64..y1)
        .map_err(err)?;
    // Counts (threads, devices) get only whole ticks: no "1.50 threads".
    let whole_x = !chart.x_log && chart.series.iter().flat_map(|s| &s.points).all(|p| p.0 == p.0.round());
    let label = |v: &f64| {
        let x = if chart.x_log { 10f64.powf(*v) } else { *v };
        if whole_x && (x - x.round()).abs() > 1e-9 {
            String::new()
        } else {
            tick(x)
        }
    };
    c.configure_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .x_labels(10)
        // A tail axis: one tick per nine (p90, p99, p99.9, ...), none between.
        .y_labels(if chart.y_tail { y1.ceil() as usize + 1 } else { 10 })
        .x_label_formatter(&label)
        .y_label_formatter(&|v| {
            if chart.y_tail {
                // 1 -> p90, 2 -> p99, 3 -> p99.9; 0.3 -> p50.
                let p = (1.0 - 10f64.powf(-v)) * 100.0;
                format!("p{}", format!("{p:.3}").trim_end_matches('0').trim_end_matches('.'))
            } else {
                tick(*v)
            }
        })
        .draw()
        .map_err(err)?;
    for (i, s) in chart.series.iter().enumerate() {
        let color = colour(&s.name, i);
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), ty(y))).collect();
        c.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(err)?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        c.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(err)?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    area.present().map_err(err)?;
    Ok(())
}

/// An axis label a reader takes in at a glance: 3.5M, 120k, 2.5, not 3500000.
#[cfg(feature = "plots")]
fn tick(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    for (scale, unit) in [(1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if v.abs() >= scale {
            return format!("{}{unit}", trim(format!("{:.2}", v / scale)));
        }
    }
    trim(format!("{v:.2}"))
}

#[cfg(feature = "plots")]
fn err<E: std::error::Error + Send + Sync + 'static>(e: E) -> anyhow::Error {
    anyhow::Error::new(e)
}

#[cfg(all(test, feature = "plots"))]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_short_and_never_a_long_raw_number() {
        assert_eq!(tick(3_500_000.0), "3.5M");
        assert_eq!(tick(35_000_000.0), "35M");
        assert_eq!(tick(120_000.0), "120k");
        assert_eq!(tick(1_250.0), "1.25k");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(4.0), "4");
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(2e9), "2G");
    }

    fn chart(x_log: bool) -> Chart {
        Chart {
            title: "hit ratio".into(),
            x_label: "cache (pages)".into(),
            y_label: "%".into(),
            x_log,
            y_tail: false,
            series: vec![
                Series { name: "a".into(), points: vec![(10.0, 5.0), (100.0, 30.0), (1000.0, 60.0)] },
                Series { name: "b".into(), points: vec![(10.0, 7.0), (100.0, 35.0), (1000.0, 62.0)] },
            ],
        }
    }

    #[test]
    fn svg_has_every_series_and_bad_input_is_an_error() {
        if register_font().is_err() {
            return; // checked by png_is_a_png_when_a_font_is_there
        }
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("c.svg");
        draw(&chart(true), &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg") && text.contains("\na\n") && text.contains("\nb\n"), "{text}");
        assert!(draw(&chart(false), &dir.path().join("c.txt")).is_err());
        let empty = Chart { series: vec![], ..chart(false) };
        assert!(draw(&empty, &svg).is_err());
    }

    /// A CDF's tail axis is labelled in percentiles, and an engine keeps its colour whatever
    /// its place in the chart.
    #[test]
    fn a_cdf_has_a_percentile_tail_and_engines_keep_their_colours() {
        assert_eq!(colour("kernel randread t1 run 1", 0), colour("kernel", 5));
        assert_ne!(colour("kernel", 0), colour("upcache", 0));
        assert_ne!(colour("a", 0), colour("b", 1));
        if register_font().is_err() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("cdf.svg");
        let cdf = Chart {
            y_tail: true,
            series: vec![Series {
                name: "upcache".into(),
                points: vec![(1.0, 0.5), (2.0, 0.99), (9.0, 1.0)],
            }],
            ..chart(true)
        };
        draw(&cdf, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        let ticks: Vec<&str> = text
            .split(['<', '>'])
            .map(str::trim)
            .filter(|t| t.starts_with('p') && !t.contains(' '))
            .collect();
        for label in ["p90", "p99", "p99.9"] {
            assert!(ticks.contains(&label), "no {label} tick in the tail axis: {ticks:?}");
        }
        assert!(!ticks.iter().any(|t| t.starts_with("p68")), "ticks between the nines: {ticks:?}");
    }

    #[test]
    fn png_is_a_png_when_a_font_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("c.png");
        match register_font() {
            Ok(()) => {
                draw(&chart(false), &png).unwrap();
                assert_eq!(&std::fs::read(&png).unwrap()[..4], b"\x89PNG");
            }
            // No font on this machine: the error says what to do.
            Err(e) => assert!(e.to_string().contains("UPCACHE_FONT")),
        }
    }
}

/// Without the `plots` feature there is nothing to draw with: a clear error, not a panic.
#[cfg(not(feature = "plots"))]
pub fn draw(_chart: &Chart, path: &Path) -> Result<()> {
    bail!("cannot draw {}: this upcache was built without the `plots` feature", path.display())
}
