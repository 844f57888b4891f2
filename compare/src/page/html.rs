//! The page as one HTML document: styles and charts inline, images as data URIs, and a
//! self-check script that writes what the browser drew into the page.

use common::table::format_ms;

use super::charts::{self, color, Bar};
use super::{Counts, Folder};
use crate::outcome::RunStatus;

/// Text safe inside HTML and SVG elements and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `data:<mime>;base64,...`, so an image travels inside the page.
pub fn data_uri(mime: &str, bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = format!("data:{mime};base64,");
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
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
svg .grid { stroke: #e6e6e6; }
svg .grid.one { stroke: #888; }
svg .tick, svg .legend, svg .value, svg .label, svg .axis, svg .roof-label { fill: #333; }
svg .axis { font-size: 13px; }
svg .roof { stroke: #111; stroke-width: 2.5; }
svg .roof.compute { stroke: #555; stroke-width: 2; }
svg .roof-label { font-size: 11px; }
svg .op { fill: #bbb; }
svg .whisker { stroke: #111; stroke-width: 1.3; fill: none; }
svg .pair-arrow { stroke-width: 2; }
svg .pair-point.baseline { fill: #fff; stroke-width: 2.5; }
svg .pair-number { font-weight: bold; }
svg .frame { fill: none; stroke: #999; }
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
  out.setAttribute('data-points', count('svg .pair-point'));
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

fn pairs_table(folders: &[Folder], gpus: &[String], ids: &[String]) -> String {
    let mut s = String::from("<table class=\"pairs\"><thead><tr><th rowspan=\"2\">pair</th>");
    for g in gpus {
        s.push_str(&format!("<th colspan=\"4\">{}</th>", escape(g)));
    }
    s.push_str("</tr><tr>");
    for _ in gpus {
        s.push_str("<th>baseline → optimized</th><th>speedup ± u</th><th>verified</th><th>of its ceiling</th>");
    }
    s.push_str("</tr></thead><tbody>");
    for id in ids {
        s.push_str(&format!("<tr><td>{}</td>", escape(id)));
        for f in folders {
            match f.pair(id) {
                None => s.push_str("<td colspan=\"4\" class=\"num\">not run</td>"),
                Some(p) => {
                    let ms = |v: Option<f64>| v.map(|s| format_ms(s * 1e3)).unwrap_or("-".into());
                    s.push_str(&format!(
                        "<td class=\"num\">{} → {}</td><td class=\"num\">{}</td><td class=\"{}\">{}</td><td class=\"num\">{}</td>",
                        ms(p.baseline_s),
                        ms(p.optimized_s),
                        match (p.speedup, p.speedup_uncertainty) {
                            (Some(x), Some(u)) => format!("{x:.2}x ± {u:.2}"),
                            _ => "-".into(),
                        },
                        if p.verified { "yes" } else { "no" },
                        if p.verified { "yes" } else { "NO" },
                        p.of_ceiling
                            .as_ref()
                            .map(|(n, f)| format!("{:.0}% {}", 100.0 * f, escape(n)))
                            .unwrap_or("-".into()),
                    ));
                }
            }
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table>");
    s
}

fn verdicts(f: &Folder) -> String {
    let Some(c) = &f.compare else {
        return "<p>No compare results.</p>".into();
    };
    let mut s = format!(
        "<details><summary>{}</summary><table><thead><tr><th>variant</th><th>paced by</th><th>median</th><th>noise</th><th>expected</th><th>change</th><th>verdict</th></tr></thead><tbody>",
        escape(&c.verdict_counts())
    );
    for v in &c.variants {
        let status = match &v.status {
            RunStatus::Ok => None,
            RunStatus::Failed => Some("FAILED".to_string()),
            RunStatus::Error(e) => Some(format!("ERROR: {e}")),
        };
        let verdict = status
            .clone()
            .or_else(|| v.verdict.map(|v| v.label().to_string()))
            .unwrap_or("-".into());
        s.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"{}\" title=\"{}\">{}</td></tr>",
            escape(&v.id()),
            v.paced_by.map(|p| p.label()).unwrap_or("-"),
            v.timing.map(|t| format_ms(t.median_s * 1e3)).unwrap_or("-".into()),
            v.timing.map(|t| format!("{:.1}%", 100.0 * t.noise)).unwrap_or("-".into()),
            v.expected.map(|t| format_ms(t.median_s * 1e3)).unwrap_or("-".into()),
            v.change
                .filter(|c| c.is_finite())
                .map(|c| format!("{:+.1}%", 100.0 * c))
                .unwrap_or("-".into()),
            if status.is_some() || verdict == "SLOWER" { "bad" } else { "" },
            escape(v.note.as_deref().unwrap_or("")),
            escape(&verdict)
        ));
    }
    s.push_str("</tbody></table>");
    if let Some(h) = &c.host {
        s.push_str(&format!(
            "<p class=\"caption\">machine: {}</p>",
            escape(&h.label())
        ));
    }
    s.push_str("</details>");
    s
}

/// The whole page and what it draws.
pub fn page(folders: &[Folder]) -> (String, Counts) {
    let gpus: Vec<String> = folders.iter().map(Folder::gpu).collect();
    let ids = pair_ids(folders);
    let mut s = String::from("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    s.push_str("<title>Chapter 1: performance basics, pair by pair</title>");
    s.push_str(&format!(
        "<style>{STYLE}</style><script>{ERROR_CAPTURE}</script></head><body>"
    ));
    s.push_str("<header><h1>Chapter 1: performance basics, pair by pair</h1><p class=\"lead\">Each pair computes the same thing two ways; both sides are verified against a float64 reference and timed with CUDA events on the GPU, each in its own process. From ");
    let sources: Vec<String> = folders
        .iter()
        .zip(&gpus)
        .map(|(f, g)| {
            let when = f
                .compare
                .as_ref()
                .map(|c| {
                    format!(
                        ", compare of {} (commit {})",
                        c.provenance.time, c.provenance.git_commit
                    )
                })
                .unwrap_or_default();
            format!(
                "<b>{}</b>: {}{}",
                escape(g),
                escape(&f.path.display().to_string()),
                escape(&when)
            )
        })
        .collect();
    s.push_str(&sources.join("; "));
    s.push_str(".</p></header>");

    let notes: Vec<&String> = folders.iter().flat_map(|f| &f.notes).collect();
    if !notes.is_empty() {
        s.push_str("<section id=\"notes\"><h2>Notes</h2><ul class=\"notes\">");
        for n in notes {
            s.push_str(&format!("<li>{}</li>", escape(n)));
        }
        s.push_str("</ul></section>");
    }

    s.push_str("<section id=\"pairs\"><h2>Pairs</h2>");
    s.push_str(&pairs_table(folders, &gpus, &ids));
    s.push_str("<p class=\"caption\">Times are medians; u is the speedup's standard uncertainty, from each median's standard error. \"Of its ceiling\" is the optimized side's rate over the measured ceiling that bounds it.</p></section>");

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
    s.push_str("<section id=\"speedups\"><h2>Speedups</h2>");
    if bar_count == 0 {
        s.push_str("<p>No verified pair to show.</p>");
    } else {
        s.push_str(&bar_svg);
        s.push_str("<p class=\"caption\">Log scale from 1x; whiskers span 95% (1.96 standard uncertainties).</p>");
    }
    s.push_str("</section>");

    s.push_str("<section id=\"roofline\"><h2>Roofline</h2><div class=\"gpus\">");
    let mut points = 0;
    for (i, (f, g)) in folders.iter().zip(&gpus).enumerate() {
        s.push_str(&format!("<figure><figcaption>{}</figcaption>", escape(g)));
        let placements = f.placements();
        match &f.roofline {
            None => s.push_str("<p>No roofline for this GPU (see the notes).</p>"),
            Some(r) => {
                let placed: Vec<(usize, &super::Placed)> = placements
                    .iter()
                    .enumerate()
                    .filter_map(|(n, (_, p))| p.as_ref().ok().map(|p| (n, p)))
                    .collect();
                let (svg, n) = charts::roofline(r, &placed, i);
                points += n;
                s.push_str(&svg);
            }
        }
        if !placements.is_empty() {
            s.push_str("<ol class=\"legend\">");
            for (n, (id, p)) in placements.iter().enumerate() {
                match p {
                    Ok(_) if f.roofline.is_some() => s.push_str(&format!(
                        "<li style=\"color:{}\"><span style=\"color:#222\">{}: baseline (ring) → optimized (dot)</span></li>",
                        color(n),
                        escape(id)
                    )),
                    Ok(_) => s.push_str(&format!("<li>{}</li>", escape(id))),
                    Err(why) => s.push_str(&format!(
                        "<li>{}: not on the roofline: {}</li>",
                        escape(id),
                        escape(why)
                    )),
                }
            }
            s.push_str("</ol>");
        }
        s.push_str("</figure>");
    }
    s.push_str("</div><p class=\"caption\">Roofs from the ceilings measured on each GPU (ch1-roofline); grey dots are the roofline lesson's own operations, for scale. A pair is placed when both sides do floating-point work on DRAM traffic.</p></section>");

    s.push_str("<section id=\"sweep\"><h2>Tuner sweep</h2><div class=\"gpus\">");
    let mut images = 0;
    for (f, g) in folders.iter().zip(&gpus) {
        s.push_str(&format!("<figure><figcaption>{}</figcaption>", escape(g)));
        match &f.sweep_plot {
            Some((name, uri)) => {
                images += 1;
                s.push_str(&format!(
                    "<img class=\"sweep-plot\" alt=\"tuner sweep on the {} ({})\" src=\"{uri}\">",
                    escape(g),
                    escape(name)
                ));
            }
            None => s.push_str("<p>No sweep plot for this GPU (see the notes).</p>"),
        }
        s.push_str("</figure>");
    }
    s.push_str("</div></section>");

    s.push_str("<section id=\"gate\"><h2>The gate</h2><p class=\"caption\">Each variant against the expectations: a device-paced one against its GPU model's timing, a host-paced one against the runs recorded on the same machine. NO EXPECTATION is never a failure.</p><div class=\"gpus\">");
    for (f, g) in folders.iter().zip(&gpus) {
        s.push_str(&format!("<div><h3>{}</h3>{}</div>", escape(g), verdicts(f)));
    }
    s.push_str("</div></section>");

    let counts = Counts {
        bars: bar_count,
        points,
        images,
    };
    s.push_str(&format!(
        "<footer><p id=\"self-check\" data-expected-bars=\"{}\" data-expected-points=\"{}\" data-expected-images=\"{}\">This page draws {} bars, {} roofline points and {} images.</p><p class=\"caption\">Written by <code>compare --html</code> from committed results; nothing on it is fetched from the network.</p></footer>",
        counts.bars, counts.points, counts.images, counts.bars, counts.points, counts.images
    ));
    s.push_str(&format!("<script>{SELF_CHECK}</script></body></html>\n"));
    (s, counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_base64() {
        assert_eq!(
            escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(data_uri("text/plain", b""), "data:text/plain;base64,");
        assert_eq!(data_uri("t", b"f"), "data:t;base64,Zg==");
        assert_eq!(data_uri("t", b"fo"), "data:t;base64,Zm8=");
        assert_eq!(data_uri("t", b"foo"), "data:t;base64,Zm9v");
        assert_eq!(data_uri("t", b"foobar"), "data:t;base64,Zm9vYmFy");
        assert_eq!(data_uri("t", &[0xff, 0xfe]), "data:t;base64,//4=");
    }
}
