//! `latency.svg` and `throughput.svg`, drawn with `plotters` into a string.
//!
//! A latency point is drawn once per 2×2 pixels, shape and colour: a five-minute
//! run has tens of thousands of operations, most of them on top of each
//! other, and the file should stay small enough to open without changing
//! what it shows.

use std::collections::BTreeSet;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{ms, num, Outcome, Run};

const WIDTH_PX: u32 = 1100;
const HEIGHT_PX: u32 = 520;
const FONT: &str = "sans-serif";
/// Radius of a latency point.
const POINT_PX: i32 = 2;
/// Of the latency points of one shape and colour, one is drawn per square
/// cell this wide: the others would be mostly under it.
const DEDUP_CELL_PX: i32 = 2;
/// The fastest latency the log axis shows; anything faster sits on it.
const LATENCY_FLOOR_MS: f64 = 0.001;
/// Runs shorter than this get 100 ms throughput buckets instead of 1 s.
const SHORT_RUN_NS: u64 = 10_000_000_000;

const NEMESIS: RGBColor = RGBColor(0x80, 0x80, 0x80);
/// How the SVG writes the fill of a fault period (tests look for it).
#[cfg(test)]
pub(super) const NEMESIS_FILL: &str = "#808080";
const NEMESIS_OPACITY: f64 = 0.18;

fn color(outcome: Outcome) -> RGBColor {
    match outcome {
        Outcome::Ok => RGBColor(0x2c, 0xa0, 0x2c),
        Outcome::Fail => RGBColor(0xd6, 0x27, 0x28),
        Outcome::Info => RGBColor(0xff, 0x8c, 0x00),
    }
}

/// The shape of `f`'s points, by its position among the run's functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    Dot,
    Triangle,
    Square,
    Cross,
    Ring,
}

impl Shape {
    const ALL: [Shape; 5] = [
        Shape::Dot,
        Shape::Triangle,
        Shape::Square,
        Shape::Cross,
        Shape::Ring,
    ];

    fn of(f_index: usize) -> Shape {
        Shape::ALL[f_index % Shape::ALL.len()]
    }
}

/// The latency chart's coordinates: seconds across, log ms up.
type LatencyChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, LogCoord<f64>>>;

/// Draws points of one shape. (One series per shape: `plotters` can mix
/// element types only through `DynElement`, whose bounds demand a
/// `'static` backend, and ours borrows its output string.)
fn draw_points<'a, 'b: 'a>(
    chart: &mut LatencyChart<'a, 'b>,
    shape: Shape,
    points: &[((f64, f64), RGBColor)],
) -> std::io::Result<()> {
    let r = POINT_PX;
    let points = points.iter().copied();
    match shape {
        Shape::Dot => chart.draw_series(points.map(|(at, c)| Circle::new(at, r, c.filled()))),
        Shape::Triangle => {
            chart.draw_series(points.map(|(at, c)| TriangleMarker::new(at, r + 1, c.filled())))
        }
        Shape::Square => {
            chart.draw_series(points.map(|(at, c)| {
                EmptyElement::at(at) + Rectangle::new([(-r, -r), (r, r)], c.filled())
            }))
        }
        Shape::Cross => {
            chart.draw_series(points.map(|(at, c)| Cross::new(at, r + 1, c.stroke_width(1))))
        }
        Shape::Ring => {
            chart.draw_series(points.map(|(at, c)| Circle::new(at, r + 1, c.stroke_width(1))))
        }
    }
    .map(|_| ())
    .map_err(plot_error)
}

/// A legend entry showing `shape` (for a function, in grey).
fn shape_legend<'a, 'b: 'a>(
    chart: &mut LatencyChart<'a, 'b>,
    shape: Shape,
    label: &str,
) -> std::io::Result<()> {
    let c = RGBColor(0x44, 0x44, 0x44);
    let r = POINT_PX + 1;
    let anno = chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
        .map_err(plot_error)?
        .label(label);
    match shape {
        Shape::Dot => anno.legend(move |at| Circle::new(at, r, c.filled())),
        Shape::Triangle => anno.legend(move |at| TriangleMarker::new(at, r + 1, c.filled())),
        Shape::Square => anno.legend(move |at| {
            EmptyElement::at(at) + Rectangle::new([(-r, -r), (r, r)], c.filled())
        }),
        Shape::Cross => anno.legend(move |at| Cross::new(at, r + 1, c.stroke_width(1))),
        Shape::Ring => anno.legend(move |at| Circle::new(at, r + 1, c.stroke_width(1))),
    };
    Ok(())
}

fn plot_error<E: std::fmt::Debug>(e: E) -> std::io::Error {
    std::io::Error::other(format!("drawing a plot: {e:?}"))
}

/// The run's length in seconds, never zero (so that axes have a range).
fn x_max_s(run: &Run) -> f64 {
    (run.end_ns as f64 / 1e9).max(0.001)
}

/// Shades each fault period over `y_lo..y_hi`, labelled with its kind;
/// labels of overlapping periods are stacked.
fn shade_faults<Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<RangedCoordf64, Y>>,
    run: &Run,
    y_lo: Y::ValueType,
    y_hi: Y::ValueType,
) -> std::io::Result<()>
where
    Y: Ranged,
    Y::ValueType: Clone + 'static,
{
    let x_max = x_max_s(run);
    let span = |start: u64, end: Option<u64>| {
        (
            start as f64 / 1e9,
            end.map(|e| e as f64 / 1e9).unwrap_or(x_max),
        )
    };
    chart
        .draw_series(run.faults.iter().map(|p| {
            let (s, e) = span(p.start, p.end);
            Rectangle::new(
                [(s, y_lo.clone()), (e, y_hi.clone())],
                NEMESIS.mix(NEMESIS_OPACITY).filled(),
            )
        }))
        .map_err(plot_error)?;
    let grey = BLACK.mix(0.7);
    let label = TextStyle::from((FONT, 12).into_font()).color(&grey);
    chart
        .draw_series(run.faults.iter().enumerate().map(|(i, p)| {
            // How many earlier periods are still in force when this one starts.
            let stack = run.faults[..i]
                .iter()
                .filter(|q| q.end.is_none_or(|e| e > p.start))
                .count() as i32;
            let (s, _) = span(p.start, p.end);
            EmptyElement::at((s, y_hi.clone()))
                + Text::new(p.kind.clone(), (3, 3 + 14 * (stack % 4)), label.clone())
        }))
        .map_err(plot_error)?;
    Ok(())
}

fn legend<'a, 'b: 'a>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, impl CoordTranslate>,
) -> std::io::Result<()> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font((FONT, 12))
        .draw()
        .map_err(plot_error)
}

/// Renders into a string (the backend writes nothing until presented).
fn render(
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> std::io::Result<()>,
) -> std::io::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        draw(&root)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// Latency of every completed client operation (ms, log scale) against
/// the time it was invoked (s): colour by outcome, shape by `f`.
pub(super) fn latency_svg(title: &str, run: &Run) -> std::io::Result<String> {
    // (outcome, f, invoked s, latency ms) of each completed client op.
    let points: Vec<(Outcome, usize, f64, f64)> = run
        .ops
        .iter()
        .filter_map(|op| {
            let c = op.complete.as_ref()?;
            let latency_ms = ms(c.time.saturating_sub(op.invoke.time)).max(LATENCY_FLOOR_MS);
            Some((
                Outcome::of(op),
                run.f_index(&op.invoke.f),
                op.invoke.time as f64 / 1e9,
                latency_ms,
            ))
        })
        .collect();
    let (lo, hi) = points.iter().fold((f64::INFINITY, 0f64), |(lo, hi), p| {
        (lo.min(p.3), hi.max(p.3))
    });
    let (y_lo, y_hi) = if points.is_empty() {
        (1.0, 1000.0)
    } else {
        // Whole decades, the slowest strictly inside so that it is not
        // drawn on the frame.
        (
            10f64.powf(lo.log10().floor()),
            10f64.powf(hi.log10().floor() + 1.0),
        )
    };

    render(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(format!("{title}: latency"), (FONT, 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max_s(run), (y_lo..y_hi).log_scale())
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("latency (ms)")
            .x_label_formatter(&|x| num(*x))
            .y_label_formatter(&|y| num(*y))
            .label_style((FONT, 12))
            .light_line_style(BLACK.mix(0.04))
            .draw()
            .map_err(plot_error)?;
        shade_faults(&mut chart, run, y_lo, y_hi)?;

        // One point per cell, shape and colour; rarer outcomes on top.
        let mut seen = BTreeSet::new();
        let mut drawn: Vec<(Outcome, Shape, (f64, f64))> = Vec::new();
        for &(outcome, f, x, y) in &points {
            let shape = Shape::of(f);
            let (px, py) = chart.backend_coord(&(x, y));
            let cell = (px.div_euclid(DEDUP_CELL_PX), py.div_euclid(DEDUP_CELL_PX));
            if seen.insert((outcome, shape, cell)) {
                drawn.push((outcome, shape, (x, y)));
            }
        }
        drawn.sort_by_key(|d| (d.0, d.1));
        for group in drawn.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
            let points: Vec<_> = group.iter().map(|d| (d.2, color(d.0))).collect();
            draw_points(&mut chart, group[0].1, &points)?;
        }

        for outcome in Outcome::ALL {
            if points.iter().any(|p| p.0 == outcome) {
                let c = color(outcome);
                chart
                    .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                    .map_err(plot_error)?
                    .label(outcome.name())
                    .legend(move |(x, y)| Circle::new((x, y), 4, c.filled()));
            }
        }
        if run.fs.len() > 1 {
            for (i, f) in run.fs.iter().enumerate() {
                shape_legend(&mut chart, Shape::of(i), f)?;
            }
        }
        if !points.is_empty() {
            legend(&mut chart)?;
        }
        Ok(())
    })
}

/// Completed client operations per second, one line per outcome (an `info`
/// counts when its completion was recorded; operations never completed do
/// not count).
pub(super) fn throughput_svg(title: &str, run: &Run) -> std::io::Result<String> {
    let bucket_ns: u64 = if run.end_ns < SHORT_RUN_NS {
        100_000_000
    } else {
        1_000_000_000
    };
    let bucket_s = bucket_ns as f64 / 1e9;
    let buckets = (run.end_ns / bucket_ns + 1) as usize;
    let mut counts = vec![[0u64; 3]; buckets];
    for op in &run.ops {
        if let Some(c) = &op.complete {
            let b = ((c.time / bucket_ns) as usize).min(buckets - 1);
            counts[b][Outcome::of(op) as usize] += 1;
        }
    }
    let peak = counts.iter().flatten().copied().max().unwrap_or(0) as f64 / bucket_s;
    // Headroom for the legend.
    let y_hi = (peak * 1.25).max(1.0);
    let x_max = x_max_s(run).max(buckets as f64 * bucket_s);

    render(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(format!("{title}: throughput"), (FONT, 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, 0f64..y_hi)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc(format!("completed ops/s ({} s buckets)", num(bucket_s)))
            .x_label_formatter(&|x| num(*x))
            .y_label_formatter(&|y| num(*y))
            .label_style((FONT, 12))
            .light_line_style(BLACK.mix(0.04))
            .draw()
            .map_err(plot_error)?;
        shade_faults(&mut chart, run, 0.0, y_hi)?;
        for outcome in Outcome::ALL {
            let i = outcome as usize;
            if counts.iter().all(|c| c[i] == 0) {
                continue;
            }
            let c = color(outcome);
            let line = counts
                .iter()
                .enumerate()
                .map(|(b, n)| ((b as f64 + 0.5) * bucket_s, n[i] as f64 / bucket_s));
            chart
                .draw_series(LineSeries::new(line, c.stroke_width(2)))
                .map_err(plot_error)?
                .label(outcome.name())
                .legend(move |(x, y)| {
                    PathElement::new([(x - 8, y), (x + 8, y)], c.stroke_width(2))
                });
        }
        if counts.iter().flatten().any(|&n| n > 0) {
            legend(&mut chart)?;
        }
        Ok(())
    })
}
