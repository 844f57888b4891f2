//! The built-in kernel trace: `--trace FILE` on every lesson binary.
//!
//! While a [Session] is open, CUPTI records every kernel, memcpy and memset (name, stream,
//! start, end, bytes). [crate::bench::measure] marks its timed sample loop as a region; at the
//! region's end the records are flushed, the ones inside the region kept, and a [TraceSummary]
//! (kernel table like Nsight Systems' GPU kernel summary, GPU busy fraction) goes into the
//! variant's measurement. [Session::finish] writes the regions, their GPU activity and the NVTX
//! ranges open during them as Chrome trace-event JSON, which ui.perfetto.dev opens.
//!
//! NVTX ranges: CUPTI can record NVTX ranges as activity only when NVTX is injected into it
//! (NVTX_INJECTION64_PATH at process start). Instead the harness records its own ranges
//! ([crate::nvtx::record_with]) with `cuptiGetTimestamp`, the clock CUPTI puts the kernel
//! records on (CUPTI converts GPU timestamps to it), so host ranges and GPU work line up with no
//! conversion here, and ranges appear even where no NVTX library is installed.
//!
//! Cost: CUPTI's kernel records are taken by the driver at launch and completion; launches are
//! queued behind the blocking kernel, so the host-side cost stays out of the event timings. The
//! docs/profiling.md states the measured difference with and without `--trace`.
//!
//! The runner ([crate::runner::run_lesson]) opens a session when its options name a trace file;
//! a tool measuring outside it opens one with `trace::Session::start_if(path)` and finishes it
//! with `t.finish()`.

mod activity;
mod chrome;
mod cupti;
mod summary;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use activity::{memcpy_name, parse_record, record_layout, Activity, ActivityKind};
pub use chrome::{trace_events, TraceInput};
pub use summary::{
    busy_time_ns, short_name, summarize, KernelStats, Region, TraceSummary, TransferStats,
};

use crate::error::{Error, Result};
use crate::files::write_atomically;
use crate::kernels::HARNESS_KERNEL_NAMES;
use crate::nvtx;

struct State {
    /// Delivered records not yet sorted into a region.
    pending: Vec<Activity>,
    /// Records inside a region, for the file.
    kept: Vec<Activity>,
    regions: Vec<Region>,
    dropped: u64,
    source: String,
    version: u32,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Called from CUPTI's buffer-completion callback.
fn deliver(activities: Vec<Activity>, dropped: u64) {
    if let Ok(mut guard) = STATE.lock() {
        if let Some(state) = guard.as_mut() {
            state.pending.extend(activities);
            state.dropped += dropped;
        }
    }
}

/// Is a trace being recorded in this process?
pub fn active() -> bool {
    STATE.lock().map(|g| g.is_some()).unwrap_or(false)
}

/// An open trace; [Session::finish] writes the file. Dropped unfinished, it stops recording and
/// writes nothing.
pub struct Session {
    path: PathBuf,
    recording: Option<cupti::Recording>,
}

impl Session {
    /// Start recording GPU activity for a trace to be written to `path`.
    pub fn start(path: &Path) -> Result<Session> {
        if active() {
            return Err(Error::invalid(
                "a trace is already being recorded in this process",
            ));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::File {
                path: path.display().to_string(),
                message: format!("cannot create the trace's folder: {e}"),
            })?;
        }
        cupti::probe()?;
        let version = cupti::version()?;
        let layout = record_layout(version).map_err(Error::invalid)?;
        *STATE
            .lock()
            .map_err(|_| Error::invalid("trace state poisoned"))? = Some(State {
            pending: Vec::new(),
            kept: Vec::new(),
            regions: Vec::new(),
            dropped: 0,
            source: format!("CUPTI {version}, {layout} prefix"),
            version,
        });
        match cupti::start(deliver) {
            Ok(recording) => {
                nvtx::record_with(cupti::now);
                Ok(Session {
                    path: path.to_path_buf(),
                    recording: Some(recording),
                })
            }
            Err(e) => {
                clear();
                Err(e)
            }
        }
    }

    /// Start one when a trace file is asked for and none is open yet.
    pub fn start_if(path: Option<&Path>) -> Result<Option<Session>> {
        match path {
            Some(path) if !active() => Session::start(path).map(Some),
            _ => Ok(None),
        }
    }

    /// Stop recording and write the trace; returns its path.
    pub fn finish(mut self) -> Result<PathBuf> {
        let stopped = self.recording.take().map(|r| r.stop()).unwrap_or(Ok(()));
        let ranges = nvtx::stop_recording();
        let state = take_state();
        stopped?;
        let state = state.ok_or_else(|| Error::invalid("the trace state vanished"))?;
        let ranges: Vec<nvtx::RecordedRange> = ranges
            .into_iter()
            .filter(|r| {
                state
                    .regions
                    .iter()
                    .any(|g| r.start_ns < g.end_ns && r.end_ns > g.start_ns)
            })
            .collect();
        let doc = trace_events(&TraceInput {
            regions: &state.regions,
            activities: &state.kept,
            ranges: &ranges,
            harness_kernels: &HARNESS_KERNEL_NAMES,
            other_data: serde_json::json!({
                "command_line": crate::files::recorded_command_line(std::env::args()),
                "source": state.source,
                "cupti_api_version": state.version,
                "clock": "cuptiGetTimestamp (ns); GPU records converted to it by CUPTI",
                "nvtx_library": nvtx::library(),
                "dropped_records": state.dropped,
            }),
        });
        let file_err = |message: String| Error::File {
            path: self.path.display().to_string(),
            message,
        };
        let bytes = serde_json::to_vec(&doc)
            .map_err(|e| file_err(format!("could not serialize the trace: {e}")))?;
        write_atomically(&self.path, &bytes)
            .map_err(|e| file_err(format!("could not write the trace: {e}")))?;
        println!(
            "trace: wrote {} ({} GPU activities in {} timed regions, {} NVTX ranges); open it in https://ui.perfetto.dev",
            self.path.display(),
            state.kept.len(),
            state.regions.len(),
            ranges.len()
        );
        Ok(self.path.clone())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(r) = self.recording.take() {
            let _ = r.stop();
            nvtx::stop_recording();
            clear();
        }
    }
}

fn take_state() -> Option<State> {
    STATE.lock().ok().and_then(|mut g| g.take())
}

fn clear() {
    drop(take_state());
}

/// Where a timed region began (from [region_begin]).
#[derive(Debug, Clone, Copy)]
pub struct RegionStart {
    start_ns: u64,
}

/// Mark the start of a timed region; None when no trace is being recorded.
pub fn region_begin() -> Option<RegionStart> {
    active().then(|| RegionStart {
        start_ns: cupti::now(),
    })
}

/// End the region (its work must have completed): flush CUPTI, keep the region's records, and
/// summarize them.
pub fn region_end(start: RegionStart, label: &str, runs: u64) -> Result<TraceSummary> {
    let end_ns = cupti::now();
    cupti::flush()?;
    let mut guard = STATE
        .lock()
        .map_err(|_| Error::invalid("trace state poisoned"))?;
    let state = guard
        .as_mut()
        .ok_or_else(|| Error::invalid("the trace stopped inside a timed region"))?;
    let region = Region {
        label: label.to_string(),
        start_ns: start.start_ns,
        end_ns,
        runs,
    };
    let inside: Vec<Activity> = std::mem::take(&mut state.pending)
        .into_iter()
        .filter(|a| a.start_ns < region.end_ns && a.end_ns > region.start_ns)
        .collect();
    let summary = summarize(
        &region,
        &inside,
        &HARNESS_KERNEL_NAMES,
        state.dropped,
        &state.source,
    );
    state.kept.extend(inside);
    state.regions.push(region);
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_cupti_a_trace_is_one_clear_error() {
        // SAFETY: only tries to open the library.
        if unsafe { cudarc::cupti::sys::is_culib_present() } {
            return; // a machine with CUPTI: the GPU tests cover it
        }
        let path = std::env::temp_dir().join("perf-lessons-no-cupti.json");
        let e = Session::start(&path).err().expect("no CUPTI here");
        assert!(matches!(e, Error::MissingLibrary(..)), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("libcupti") && msg.contains("--trace"), "{msg}");
        assert!(!active(), "a failed start leaves nothing behind");
        assert!(region_begin().is_none());
        assert!(!path.exists());
    }
}
