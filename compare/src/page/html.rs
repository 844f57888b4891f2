//! The page as one HTML document, written with maud (which escapes every value it is given):
//! styles and charts inline, images as base64 data URIs, and a self-check script that writes
//! what the browser drew into the page.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use common::table::format_ms;
use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::charts::{self, color, Bar};
use super::folder::{Folder, Image, LessonColumn, Placed};
use common::report::Status;

use crate::outcome::RunStatus;

/// What the page holds, for its self-check and the caller's summary line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub bars: usize,
    pub points: usize,
    pub images: usize,
}

/// `data:<mime>;base64,...`, so an image travels inside the page.
pub fn data_uri(image: &Image) -> String {
    format!(
        "data:{};base64,{}",
        image.mime,
        STANDARD.encode(&image.bytes)
    )
}

const STYLE: &str = r#"
body { font-family: "DejaVu Sans", "Helvetica Neue", Arial, sans-serif; margin: 2em auto; max-width: 1400px; padding: 0 1.5em; color: #222; background: #fff; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
p.lead, .caption { color: #555; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.6em; }
th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.no, td.bad { color: #b00; font-weight: bold; }
.gpus { display: grid; grid-template-columns: repeat(auto-fit, minmax(620px, 1fr)); gap: 1.5em; }
figure { margin: 0; }
figcaption { font-weight: bold; margin-bottom: 0.4em; }
ul.notes li { color: #8a5a00; }
ol.legend { font-size: 0.9em; }
img.sweep-plot { width: 100%; height: auto; border: 1px solid #eee; }
svg.chart { max-width: 100%; height: auto; font-size: 12px; }
.roofline-chart svg { max-width: 100%; height: auto; }
svg .grid { stroke: #e6e6e6; }
svg .grid.one { stroke: #888; }
svg .tick, svg .legend, svg .value, svg .label { fill: #333; }
svg .whisker { stroke: #111; stroke-width: 1.3; fill: none; }
#self-check { color: #777; font-size: 0.85em; }
"#;

/// Errors while the page loads are collected (uncaught exceptions, resources that failed).
const ERROR_CAPTURE: &str = r#"window.pageErrors = [];
addEventListener('error', function (e) { pageErrors.push(String(e.message || (e.target && (e.target.src || e.target.href)) || 'error')); }, true);
"#;

/// After load, count what was drawn with a size on screen and write it into the page.
const SELF_CHECK: &str = r#"addEventListener('load', function () {
  function shown(el) { var b = el.getBoundingClientRect(); return b.width > 0 && b.height > 0; }
  function count(sel) { return Array.prototype.filter.call(document.querySelectorAll(sel), shown).length; }
  var images = Array.prototype.filter.call(document.images, function (i) { return i.complete && i.naturalWidth > 0; }).length;
  var out = document.getElementById('self-check');
  out.setAttribute('data-bars', count('svg .bar'));
  var points = Array.prototype.filter.call(document.querySelectorAll('.roofline-chart'), function (c) {
    var svg = c.querySelector('svg'); return svg && shown(svg);
  }).reduce(function (n, c) { return n + Number(c.getAttribute('data-points')); }, 0);
  out.setAttribute('data-points', points);
  out.setAttribute('data-images', images);
  out.setAttribute('data-errors', pageErrors.length);
  out.setAttribute('data-done', 'yes');
  out.textContent = 'Drawn by this browser: ' + out.getAttribute('data-bars') + ' bars, ' +
    out.getAttribute('data-points') + ' roofline points, ' + images + ' images, ' +
    pageErrors.length + ' errors.';
});
"#;

/// Every pair id of every folder, in the order first seen.
fn pair_ids(folders: &[Folder]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for f in folders {
        for p in f.compare.iter().flat_map(|c| &c.pairs) {
            if !ids.contains(&p.id) {
                ids.push(p.id.clone());
            }
        }
    }
    ids
}

fn ms(seconds: Option<f64>) -> String {
    seconds.map(|s| format_ms(s * 1e3)).unwrap_or("-".into())
}

fn pairs_table(folders: &[Folder], gpus: &[String], ids: &[String]) -> Markup {
    html! {
        table class="pairs" {
            thead {
                tr {
                    th rowspan="2" { "pair" }
                    @for g in gpus { th colspan="4" { (g) } }
                }
                tr {
                    @for _ in gpus {
                        th { "baseline → optimized" } th { "speedup ± u" } th { "verified" } th { "of its ceiling" }
                    }
                }
            }
            tbody {
                @for id in ids {
                    tr {
                        td { (id) }
                        @for f in folders {
                            @match f.pair(id) {
                                None => td colspan="4" class="num" { "not run" },
                                Some(p) => {
                                    td class="num" { (ms(p.baseline_s)) " → " (ms(p.optimized_s)) }
                                    td class="num" {
                                        @match (p.speedup, p.speedup_uncertainty) {
                                            (Some(x), Some(u)) => (format!("{x:.2}x ± {u:.2}")),
                                            _ => "-",
                                        }
                                    }
                                    td class=(if p.verified { "yes" } else { "no" }) {
                                        (if p.verified { "yes" } else { "NO" })
                                    }
                                    td class="num" {
                                        @match &p.of_ceiling {
                                            Some((n, f)) => { (format!("{:.0}% ", 100.0 * f)) (n) },
                                            None => "-",
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One lesson's variants on one GPU and on several GPUs of a host, a column group per file.
fn several_table(stem: &str, columns: &[LessonColumn]) -> Markup {
    let mut ids: Vec<String> = Vec::new();
    for c in columns {
        for v in &c.report.variants {
            if !ids.contains(&v.id()) {
                ids.push(v.id());
            }
        }
    }
    html! {
        h3 { (stem) }
        table class="several" {
            thead {
                tr {
                    th rowspan="2" { "variant" }
                    @for c in columns { th colspan="3" { (c.label) } }
                }
                tr {
                    @for _ in columns { th { "median" } th { "speedup" } th { "verified" } }
                }
            }
            tbody {
                @for id in &ids {
                    tr {
                        td { (id) }
                        @for c in columns {
                            @match c.report.variants.iter().find(|v| &v.id() == id) {
                                None => td colspan="3" class="num" { "not run" },
                                Some(v) => {
                                    @let ok = v.status == Status::Ok;
                                    td class="num" {
                                        (ms(v.time_ms.as_ref().filter(|_| ok).map(|t| t.median / 1e3)))
                                    }
                                    td class="num" {
                                        (v.speedup.filter(|_| ok).map_or("-".into(), |x| format!("{x:.2}x")))
                                    }
                                    td class=(if ok { "yes" } else { "no" }) {
                                        (if ok { "yes" } else { "NO" })
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        p class="caption" {
            "From "
            @for (i, c) in columns.iter().enumerate() {
                @if i > 0 { ", " }
                (c.file.display())
            }
            ". Speedup against the group's baseline."
        }
    }
}

fn verdicts(f: &Folder) -> Markup {
    let Some(c) = &f.compare else {
        return html! { p { "No compare results." } };
    };
    html! {
        details {
            summary { (c.verdict_counts()) }
            table {
                thead {
                    tr {
                        th { "variant" } th { "paced by" } th { "median" } th { "noise" }
                        th { "expected" } th { "change" } th { "verdict" }
                    }
                }
                tbody {
                    @for v in &c.variants {
                        @let status = match &v.status {
                            RunStatus::Ok => None,
                            RunStatus::Failed => Some("FAILED".to_string()),
                            RunStatus::Error(e) => Some(format!("ERROR: {e}")),
                        };
                        @let bad = status.is_some() || v.verdict.is_some_and(|v| v.label() == "SLOWER");
                        @let verdict = status
                            .or_else(|| v.verdict.map(|v| v.label().to_string()))
                            .unwrap_or("-".into());
                        tr {
                            td { (v.id()) }
                            td { (v.paced_by.map(|p| p.label()).unwrap_or("-")) }
                            td class="num" { (ms(v.timing.map(|t| t.median_s))) }
                            td class="num" {
                                (v.timing.map(|t| format!("{:.1}%", 100.0 * t.noise)).unwrap_or("-".into()))
                            }
                            td class="num" { (ms(v.expected.map(|t| t.median_s))) }
                            td class="num" {
                                (v.change
                                    .filter(|c| c.is_finite())
                                    .map(|c| format!("{:+.1}%", 100.0 * c))
                                    .unwrap_or("-".into()))
                            }
                            td class=(if bad { "bad" } else { "" }) title=(v.note.as_deref().unwrap_or("")) {
                                (verdict)
                            }
                        }
                    }
                }
            }
            @if let Some(h) = &c.host {
                p class="caption" { "machine: " (h.label()) }
            }
        }
    }
}

/// A GPU's roofline with its pairs and their legend; adds the pair points drawn to `points`.
fn roofline_figure(gpu: &str, f: &Folder, points: &mut usize) -> Markup {
    let placements = f.placements();
    let placed: Vec<(usize, &Placed)> = placements
        .iter()
        .enumerate()
        .filter_map(|(n, (_, p))| p.as_ref().ok().map(|p| (n, p)))
        .collect();
    let chart = f.roofline.as_ref().map(|r| charts::roofline(r, &placed));
    if let Some(Ok((_, n))) = &chart {
        *points += n;
    }
    html! {
        figure {
            figcaption { (gpu) }
            @match chart {
                None => p { "No roofline for this GPU." },
                Some(Err(e)) => p { "The roofline could not be drawn: " (e) },
                Some(Ok((svg, _))) => (svg),
            }
            @if !placements.is_empty() {
                ol class="legend" {
                    @for (n, (id, p)) in placements.iter().enumerate() {
                        @match p {
                            Ok(_) if f.roofline.is_some() => li style={ "color:" (color(n)) } {
                                span style="color:#222" { (id) ": baseline (ring) → optimized (dot)" }
                            },
                            Ok(_) => li { (id) },
                            Err(why) => li { (id) ": not on the roofline: " (why) },
                        }
                    }
                }
            }
        }
    }
}

/// The whole page and what it draws: `folders` of one GPU each, side by side, and the lessons
/// run on several GPUs of a host (from [super::several_gpus]).
pub fn page(folders: &[Folder], several: &[(String, Vec<LessonColumn>)]) -> (String, Counts) {
    let gpus: Vec<String> = folders.iter().map(Folder::gpu).collect();
    let ids = pair_ids(folders);
    let bars: Vec<Bar> = folders
        .iter()
        .enumerate()
        .flat_map(|(gpu, f)| {
            f.compare.iter().flat_map(move |c| {
                c.pairs.iter().filter_map(move |p| {
                    Some(Bar {
                        pair: p.id.clone(),
                        gpu,
                        speedup: p.speedup.filter(|s| *s > 0.0)?,
                        uncertainty: p.speedup_uncertainty.unwrap_or(0.0),
                    })
                })
            })
        })
        .collect();
    let (bar_svg, bar_count) = charts::speedup_bars(&ids, &gpus, &bars);
    let mut points = 0;
    let rooflines: Vec<Markup> = folders
        .iter()
        .zip(&gpus)
        .filter(|(f, _)| f.roofline.is_some())
        .map(|(f, g)| roofline_figure(g, f, &mut points))
        .collect();
    let sweeps: Vec<(&Image, &String)> = folders
        .iter()
        .zip(&gpus)
        .filter_map(|(f, g)| Some((f.sweep_plot.as_ref()?, g)))
        .collect();
    let images = sweeps.len();
    let counts = Counts {
        bars: bar_count,
        points,
        images,
    };
    let notes: Vec<&String> = folders.iter().flat_map(|f| &f.notes).collect();
    let title = "Chapter 1: performance basics, pair by pair";
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(STYLE)) }
                script { (PreEscaped(ERROR_CAPTURE)) }
            }
            body {
                header {
                    h1 { (title) }
                    p class="lead" {
                        "Each pair computes the same thing two ways; both sides are verified against a float64 reference and timed with CUDA events on the GPU, each in its own process. From "
                        @for (i, (f, g)) in folders.iter().zip(&gpus).enumerate() {
                            @if i > 0 { "; " }
                            b { (g) } ": " (f.path.display())
                            @if let Some(c) = &f.compare {
                                ", compare of " (c.provenance.time) " (commit " (c.provenance.git_commit) ")"
                            }
                        }
                        "."
                    }
                }
                @if !notes.is_empty() {
                    section id="notes" {
                        h2 { "Notes" }
                        ul class="notes" { @for n in &notes { li { (n) } } }
                    }
                }
                section id="pairs" {
                    h2 { "Pairs" }
                    (pairs_table(folders, &gpus, &ids))
                    p class="caption" { "Times are medians; u is the speedup's standard uncertainty, from each median's standard error. \"Of its ceiling\" is the optimized side's rate over the measured ceiling that bounds it." }
                }
                @if !several.is_empty() {
                    section id="several-gpus" {
                        h2 { "Several GPUs" }
                        p class="caption" { "Lessons run on several GPUs of one host (results folders named for the GPU and their count, such as h100x2), beside their runs on one GPU where there is one." }
                        @for (stem, columns) in several { (several_table(stem, columns)) }
                    }
                }
                section id="speedups" {
                    h2 { "Speedups" }
                    @if bar_count == 0 {
                        p { "No verified pair to show." }
                    } @else {
                        (bar_svg)
                        p class="caption" { "Log scale from 1x; whiskers span 95% (1.96 standard uncertainties)." }
                    }
                }
                @if !rooflines.is_empty() {
                    section id="roofline" {
                        h2 { "Roofline" }
                        div class="gpus" { @for r in &rooflines { (r) } }
                        p class="caption" { "Roofs from the ceilings measured on each GPU (ch1-roofline); grey dots are the roofline lesson's own operations, for scale. A pair is placed when both sides do floating-point work on DRAM traffic." }
                    }
                }
                @if !sweeps.is_empty() {
                    section id="sweep" {
                        h2 { "Tuner sweep" }
                        div class="gpus" {
                            @for (image, g) in &sweeps {
                                figure {
                                    figcaption { (g) }
                                    img class="sweep-plot"
                                        alt={ "tuner sweep on the " (g) " (" (image.name) ")" }
                                        src=(data_uri(image));
                                }
                            }
                        }
                    }
                }
                section id="gate" {
                    h2 { "The gate" }
                    p class="caption" { "Each variant against the expectations: a device-paced one against its GPU model's timing, a host-paced one against the runs recorded on the same machine. NO EXPECTATION is never a failure." }
                    div class="gpus" {
                        @for (f, g) in folders.iter().zip(&gpus) {
                            div { h3 { (g) } (verdicts(f)) }
                        }
                    }
                }
                footer {
                    p id="self-check" data-expected-bars=(counts.bars) data-expected-points=(counts.points)
                        data-expected-images=(counts.images) {
                        "This page draws " (counts.bars) " bars, " (counts.points) " roofline points and "
                        (counts.images) " images."
                    }
                    p class="caption" { "Written by " code { "compare --html" } " from committed results; nothing on it is fetched from the network." }
                }
                script { (PreEscaped(SELF_CHECK)) }
            }
        }
    };
    (page.into_string() + "\n", counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_travel_as_base64() {
        let image = |bytes: &[u8]| Image {
            name: "x".into(),
            mime: "image/png",
            bytes: bytes.to_vec(),
        };
        assert_eq!(data_uri(&image(b"")), "data:image/png;base64,");
        assert_eq!(data_uri(&image(b"fo")), "data:image/png;base64,Zm8=");
        assert_eq!(
            data_uri(&image(&[0xff, 0xfe])),
            "data:image/png;base64,//4="
        );
    }
}
