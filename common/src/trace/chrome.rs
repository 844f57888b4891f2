//! The Chrome trace-event JSON format (the "JSON Object Format" with `traceEvents`), which
//! ui.perfetto.dev and chrome://tracing open. Complete events ("X") carry a start `ts` and a
//! `dur` in microseconds (fractions keep the nanoseconds); metadata events ("M") name the
//! tracks.
//!
//! Tracks: one process per GPU with a thread per CUDA stream (kernels, copies, sets); one
//! "host" process with the timed regions and the NVTX ranges of each host thread. Times are
//! relative to the first event, on CUPTI's clock.

use serde_json::{json, Value};

use super::activity::{Activity, ActivityKind};
use super::summary::Region;
use crate::nvtx::RecordedRange;

/// Process id of the host track; GPUs are `GPU_PID_BASE + device`.
pub const HOST_PID: u64 = 1;
pub const GPU_PID_BASE: u64 = 100;
/// Thread id, in the host process, of the timed-regions track.
pub const REGIONS_TID: u64 = 0;

/// Everything one trace file holds.
pub struct TraceInput<'a> {
    pub regions: &'a [Region],
    pub activities: &'a [Activity],
    pub ranges: &'a [RecordedRange],
    /// Names of the harness's kernels, put in category "harness".
    pub harness_kernels: &'a [&'a str],
    /// Free-form facts kept under `otherData` (command line, CUPTI version, ...).
    pub other_data: Value,
}

/// Microseconds since `origin`, keeping the nanoseconds as three decimals.
fn us(t: u64, origin: u64) -> f64 {
    t.saturating_sub(origin) as f64 / 1e3
}

/// Build the trace-event document.
pub fn trace_events(input: &TraceInput) -> Value {
    let origin = input
        .regions
        .iter()
        .map(|r| r.start_ns)
        .chain(input.activities.iter().map(|a| a.start_ns))
        .chain(input.ranges.iter().map(|r| r.start_ns))
        .min()
        .unwrap_or(0);
    let mut events = Vec::new();
    let meta = |pid: u64, tid: Option<u64>, name: &str, value: String| {
        let mut e = json!({"ph": "M", "pid": pid, "name": name, "args": {"name": value}});
        if let Some(tid) = tid {
            e["tid"] = json!(tid);
        }
        e
    };

    events.push(meta(HOST_PID, None, "process_name", "host".into()));
    events.push(meta(
        HOST_PID,
        Some(REGIONS_TID),
        "thread_name",
        "timed regions".into(),
    ));
    for r in input.regions {
        events.push(json!({
            "name": r.label, "cat": "region", "ph": "X", "pid": HOST_PID, "tid": REGIONS_TID,
            "ts": us(r.start_ns, origin), "dur": us(r.end_ns, r.start_ns),
            "args": {"runs": r.runs},
        }));
    }

    let mut threads: Vec<u64> = input.ranges.iter().map(|r| r.thread).collect();
    threads.sort_unstable();
    threads.dedup();
    for t in &threads {
        events.push(meta(
            HOST_PID,
            Some(*t),
            "thread_name",
            format!("NVTX ranges, host thread {t}"),
        ));
    }
    // Outer ranges first, so viewers that need it see parents before children.
    let mut ranges: Vec<&RecordedRange> = input.ranges.iter().collect();
    ranges.sort_by_key(|r| (r.start_ns, r.depth));
    for r in ranges {
        events.push(json!({
            "name": r.name, "cat": "nvtx", "ph": "X", "pid": HOST_PID, "tid": r.thread,
            "ts": us(r.start_ns, origin), "dur": us(r.end_ns, r.start_ns),
        }));
    }

    let mut tracks: Vec<(u32, u32)> = input
        .activities
        .iter()
        .map(|a| (a.device, a.stream))
        .collect();
    tracks.sort_unstable();
    tracks.dedup();
    let mut devices: Vec<u32> = tracks.iter().map(|t| t.0).collect();
    devices.dedup();
    for d in devices {
        events.push(meta(
            GPU_PID_BASE + d as u64,
            None,
            "process_name",
            format!("GPU {d}"),
        ));
    }
    for (d, s) in tracks {
        events.push(meta(
            GPU_PID_BASE + d as u64,
            Some(s as u64),
            "thread_name",
            format!("stream {s}"),
        ));
    }
    for a in input.activities {
        let (cat, args) = match a.kind {
            ActivityKind::Kernel => (
                if input.harness_kernels.contains(&a.name.as_str()) {
                    "harness"
                } else {
                    "kernel"
                },
                json!({"grid": a.grid, "block": a.block, "correlation": a.correlation}),
            ),
            ActivityKind::Memcpy => (
                "memcpy",
                json!({"bytes": a.bytes, "correlation": a.correlation}),
            ),
            ActivityKind::Memset => (
                "memset",
                json!({"bytes": a.bytes, "correlation": a.correlation}),
            ),
        };
        events.push(json!({
            "name": a.name, "cat": cat, "ph": "X",
            "pid": GPU_PID_BASE + a.device as u64, "tid": a.stream,
            "ts": us(a.start_ns, origin), "dur": us(a.end_ns, a.start_ns), "args": args,
        }));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": input.other_data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(name: &str, stream: u32, start: u64, end: u64) -> Activity {
        Activity {
            kind: ActivityKind::Kernel,
            name: name.into(),
            device: 0,
            context: 1,
            stream,
            start_ns: start,
            end_ns: end,
            bytes: 0,
            correlation: 9,
            grid: [4, 1, 1],
            block: [256, 1, 1],
        }
    }

    #[test]
    fn events_have_tracks_times_and_categories() {
        let regions = [Region {
            label: "lesson:fused".into(),
            start_ns: 10_000,
            end_ns: 20_000,
            runs: 2,
        }];
        let acts = [
            kernel("hold_stream", 13, 10_500, 11_000),
            kernel("fused \"quoted\"", 13, 11_000, 12_234),
            Activity {
                kind: ActivityKind::Memcpy,
                name: "memcpy DtoH".into(),
                bytes: 4,
                ..kernel("", 14, 12_300, 12_400)
            },
        ];
        let ranges = [RecordedRange {
            name: "timed".into(),
            start_ns: 10_100,
            end_ns: 19_000,
            depth: 1,
            thread: 1,
        }];
        let doc = trace_events(&TraceInput {
            regions: &regions,
            activities: &acts,
            ranges: &ranges,
            harness_kernels: &["hold_stream"],
            other_data: json!({"lesson": "x"}),
        });
        // It round-trips as JSON text (quotes in names escaped).
        let text = serde_json::to_string(&doc).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        let events = back["traceEvents"].as_array().unwrap();
        let find = |name: &str| events.iter().find(|e| e["name"] == name).unwrap();
        let fused = find("fused \"quoted\"");
        assert_eq!(fused["ph"], "X");
        assert_eq!(fused["cat"], "kernel");
        assert_eq!(fused["pid"], GPU_PID_BASE);
        assert_eq!(fused["tid"], 13);
        assert_eq!(
            fused["ts"].as_f64().unwrap(),
            1.0,
            "relative to the region start, in us"
        );
        assert_eq!(fused["dur"].as_f64().unwrap(), 1.234);
        assert_eq!(find("hold_stream")["cat"], "harness");
        assert_eq!(find("memcpy DtoH")["args"]["bytes"], 4);
        assert_eq!(find("timed")["cat"], "nvtx");
        assert_eq!(find("lesson:fused")["dur"].as_f64().unwrap(), 10.0);
        let names: Vec<&str> = events
            .iter()
            .filter(|e| e["ph"] == "M")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        for want in ["host", "timed regions", "GPU 0", "stream 13", "stream 14"] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        assert_eq!(back["otherData"]["lesson"], "x");
    }

    #[test]
    fn an_empty_trace_is_still_valid() {
        let doc = trace_events(&TraceInput {
            regions: &[],
            activities: &[],
            ranges: &[],
            harness_kernels: &[],
            other_data: Value::Null,
        });
        assert!(doc["traceEvents"].as_array().unwrap().len() >= 2);
    }
}
