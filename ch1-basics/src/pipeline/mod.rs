//! # Double buffering
//!
//! A large pinned host array (1 GiB of fp32 by default) goes through the GPU in chunks: copy in,
//! compute (an elementwise map with about as much arithmetic per chunk as its copy takes), copy
//! out. Three engines do that work: the host-to-device copy engine, the SMs and the
//! device-to-host copy engine.
//!
//! - **serial** (the baseline): one stream, each chunk's three stages back to back, so at any
//!   moment two of the three engines sit idle. Its time is the sum of the stages.
//! - **overlapped**: one stream per stage, events ordering them, `buffers` device buffers in
//!   flight, so chunk k+1 is copied in while chunk k computes and chunk k-1 is copied out. Its
//!   time approaches the slowest stage alone; the outputs are the same, bit for bit.
//!
//! Both are checked against the float64 closed form of the map, element by element, and the
//! overlapped output against the serial one with tolerance 0. When both ran, each stage is
//! timed alone to say how close the overlap came to the slowest stage and how the copies
//! compare with the pinned copy ceilings; when the whole part runs, the pinned copy rate is
//! measured across sizes, from a training microbatch to 256 MiB.
//!
//! The engine (plan, overlap model, the pass in each mode) is [engine]; the copy-rate table is
//! [copy_rates].

pub mod copy_rates;
pub mod engine;

pub use engine::{plan, reference_value, simulate, Chunk, Mode, Pipeline, TOLERANCE};

use serde::Serialize;
use serde_json::json;

use common::ceilings::{self, Ceiling};
use common::counters::Work;
use common::error::human_bytes;
use common::gpu::{check_host_fits, Gpu};
use common::nvtx;
use common::report::{Section, Status, VariantReport};
use common::runner::{range_name, Lesson, Meter, Output, Reference, Timed, VariantSpec};
use common::stats::Summary;
use common::table::{format_ms, percent, Table};
use common::verify::Precision;
use common::Result;

/// The output part compared with the serial run's (tolerance 0: bitwise-equal values).
pub const SAME_AS_SERIAL: &str = "output vs serial";

/// The sizes of the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PipelineConfig {
    /// fp32 elements pushed through the GPU.
    pub elements: usize,
    /// Elements per chunk.
    pub chunk: usize,
    /// Device buffers in flight in the overlapped run.
    pub buffers: usize,
    /// FMAs per element in the compute stage.
    pub iterations: u32,
    pub seed: u64,
}

impl PipelineConfig {
    /// The sizes must make a plan; the message says what to change.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.chunk > self.elements {
            return Err(format!(
                "--chunk ({}) is larger than --pipeline-elements ({}): use a smaller chunk",
                self.chunk, self.elements
            ));
        }
        if self.elements == 0 || self.chunk == 0 || self.buffers == 0 {
            return Err("elements, chunk and buffers must be at least 1".into());
        }
        Ok(())
    }
}

/// The pair's variants, baseline first.
pub const VARIANTS: [(&str, Mode); 2] =
    [("serial", Mode::Serial), ("overlapped", Mode::Overlapped)];

pub struct PipelineLesson {
    cfg: PipelineConfig,
    pipeline: Pipeline,
    /// Both variants run: compare their outputs and measure the copy-rate table.
    whole: bool,
    refresh_ceilings: bool,
}

impl PipelineLesson {
    /// Check host memory first (the pinned arrays and, when both variants run, the outputs the
    /// comparison keeps), then allocate and fill the input.
    pub fn new(gpu: &Gpu, cfg: PipelineConfig, whole: bool) -> Result<PipelineLesson> {
        cfg.validate().map_err(common::Error::invalid)?;
        let n = cfg.elements as u64;
        // Pinned input and output; with the comparison, one output copy (f32) and the serial
        // output the runner keeps in float64.
        let per_element = if whole { 4 + 4 + 4 + 8 } else { 4 + 4 };
        check_host_fits(
            "the pipeline's pinned input and output and the outputs its checks keep",
            per_element * n,
        )?;
        let pipeline = Pipeline::new(
            gpu,
            cfg.elements,
            cfg.chunk,
            cfg.buffers,
            cfg.iterations,
            cfg.seed,
        )?;
        Ok(PipelineLesson {
            cfg,
            pipeline,
            whole,
            refresh_ceilings: false,
        })
    }

    /// Re-measure the pinned copy ceilings instead of using the cached ones.
    pub fn refreshing_ceilings(self, refresh: bool) -> PipelineLesson {
        PipelineLesson {
            refresh_ceilings: refresh,
            ..self
        }
    }

    fn bytes(&self) -> u64 {
        4 * self.cfg.elements as u64
    }

    fn chunks(&self) -> usize {
        self.pipeline.plan().len()
    }

    /// One stage alone, timed like the variants.
    fn time_alone(&mut self, gpu: &Gpu, meter: &mut Meter, mode: Mode) -> Result<Timed> {
        let name = match mode {
            Mode::CopyInOnly => "copy-in-alone",
            Mode::ComputeOnly => "compute-alone",
            _ => "copy-out-alone",
        };
        let _range = nvtx::range(&range_name(self.name(), &format!("pipeline:{name}")));
        let cfg = meter.bench;
        let main = gpu.stream.clone();
        let pipeline = &mut self.pipeline;
        meter.measure(&cfg, &mut || pipeline.queue(&main, mode))
    }

    /// Each stage alone against the two modes: the slowest stage, how much of the time that
    /// could be hidden was hidden, and the copies as a share of the pinned ceilings.
    fn overlap_section(
        &mut self,
        gpu: &Gpu,
        serial: &Summary,
        (overlapped, overlapped_ms): (&VariantReport, &Summary),
        meter: &mut Meter,
    ) -> Result<Section> {
        let copy_in = self.time_alone(gpu, meter, Mode::CopyInOnly)?.time_ms;
        let compute = self.time_alone(gpu, meter, Mode::ComputeOnly)?.time_ms;
        let copy_out = self.time_alone(gpu, meter, Mode::CopyOutOnly)?.time_ms;
        let transfers = ceilings::transfers(gpu, meter.timer(), self.refresh_ceilings)?;
        let figures = OverlapFigures::new(
            [&copy_in, &compute, &copy_out],
            overlapped_ms.median,
            self.bytes(),
            (&transfers.h2d_pinned, &transfers.d2h_pinned),
        );
        let per_chunk = |total: f64| total * self.pipeline.chunk as f64 / self.cfg.elements as f64;
        let model_ms = simulate(
            &self.pipeline.plan(),
            (
                per_chunk(copy_in.median),
                per_chunk(compute.median),
                per_chunk(copy_out.median),
            ),
            true,
        );
        let bitwise = overlapped
            .checks
            .iter()
            .find(|c| c.part == SAME_AS_SERIAL)
            .map(|c| c.passed && c.rel_l2_error == 0.0);

        let mut table = Table::new().left("what").right("median").right("p10..p90");
        let rows: [(&str, &Summary); 5] = [
            ("copy in alone", &copy_in),
            ("compute alone", &compute),
            ("copy out alone", &copy_out),
            ("serial, one stream", serial),
            ("overlapped, three streams", overlapped_ms),
        ];
        for (what, s) in rows {
            table.row(vec![
                what.to_string(),
                format_ms(s.median),
                format!("{}..{}", format_ms(s.p10), format_ms(s.p90)),
            ]);
        }
        let c = &self.cfg;
        let mut lines = vec![
            format!(
                "{} fp32 ({}) in {} chunks of {} ({} buffers), {} FMAs per element",
                c.elements,
                human_bytes(self.bytes()),
                self.chunks(),
                self.pipeline.chunk,
                c.buffers,
                c.iterations
            ),
            format!(
                "slowest stage: {} ({}); the stages add up to {} and serial took {}",
                figures.slowest_stage,
                format_ms(figures.slowest_stage_ms),
                format_ms(figures.sum_of_stages_ms),
                format_ms(serial.median)
            ),
            format!(
                "overlapped / slowest stage: {:.3}x; overlap achieved: {} of the hideable time (sum of stages - overlapped) / (sum - slowest)",
                figures.overlapped_over_slowest,
                percent(figures.overlap_achieved)
            ),
            format!(
                "the plan's model (each engine one thing at a time, stage times as measured alone) gives {} for the overlapped run",
                format_ms(model_ms)
            ),
            format!(
                "pinned ceilings (median of 256 MiB pinned copies, the harness's measurement): host-to-device {:.1} GB/s, device-to-host {:.1} GB/s",
                figures.pinned_htod_ceiling_gb_per_s, figures.pinned_dtoh_ceiling_gb_per_s
            ),
            format!(
                "copy-in stage {:.1} GB/s = {} of the ceiling; copy-out stage {:.1} GB/s = {}",
                figures.copy_in_gb_per_s,
                percent(figures.copy_in_fraction_of_ceiling),
                figures.copy_out_gb_per_s,
                percent(figures.copy_out_fraction_of_ceiling)
            ),
        ];
        if let Some(equal) = bitwise {
            lines.push(format!(
                "serial and overlapped outputs bitwise equal: {}",
                if equal { "yes" } else { "NO" }
            ));
        }
        let mut data = serde_json::to_value(&figures).map_err(json_error)?;
        data["copy_in_alone_ms"] = serde_json::to_value(&copy_in).map_err(json_error)?;
        data["compute_alone_ms"] = serde_json::to_value(&compute).map_err(json_error)?;
        data["copy_out_alone_ms"] = serde_json::to_value(&copy_out).map_err(json_error)?;
        data["model_overlapped_ms"] = json!(model_ms);
        data["serial_and_overlapped_bitwise_equal"] = json!(bitwise);
        data["pinned_ceilings"] = json!([
            transfers.h2d_pinned.as_ref_named("host-to-device, pinned"),
            transfers.d2h_pinned.as_ref_named("device-to-host, pinned"),
        ]);
        Ok(Section {
            table: Some(table),
            lines,
            data,
            ..Section::new("double buffering: each stage alone and the overlap")
        })
    }
}

fn json_error(e: serde_json::Error) -> common::Error {
    common::Error::invalid(format!(
        "could not write the pipeline's figures as JSON: {e}"
    ))
}

/// What the stages alone say about the overlapped run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverlapFigures {
    pub slowest_stage: &'static str,
    pub slowest_stage_ms: f64,
    pub sum_of_stages_ms: f64,
    /// Overlapped total / slowest stage alone (1.0 = perfect overlap).
    pub overlapped_over_slowest: f64,
    /// (sum of stages - overlapped) / (sum of stages - slowest): 1.0 = all the time that
    /// could be hidden was hidden.
    pub overlap_achieved: f64,
    /// Median of 256 MiB pinned copies, GB/s.
    pub pinned_htod_ceiling_gb_per_s: f64,
    pub pinned_dtoh_ceiling_gb_per_s: f64,
    /// Copy-in stage alone, GB/s, and its fraction of the pinned host-to-device ceiling.
    pub copy_in_gb_per_s: f64,
    pub copy_in_fraction_of_ceiling: f64,
    pub copy_out_gb_per_s: f64,
    pub copy_out_fraction_of_ceiling: f64,
}

impl OverlapFigures {
    /// From the stages alone (copy in, compute, copy out), the overlapped median, the bytes
    /// each copy stage moves and the pinned ceilings (host-to-device, device-to-host).
    pub fn new(
        stages: [&Summary; 3],
        overlapped_ms: f64,
        bytes: u64,
        (htod, dtoh): (&Ceiling, &Ceiling),
    ) -> OverlapFigures {
        let named = [
            ("copy in", stages[0].median),
            ("compute", stages[1].median),
            ("copy out", stages[2].median),
        ];
        let (slowest_stage, slowest) =
            named
                .into_iter()
                .fold(("", 0.0), |a, s| if s.1 > a.1 { s } else { a });
        let sum: f64 = named.iter().map(|s| s.1).sum();
        let gbps = |ms: f64| bytes as f64 / (ms / 1e3) / 1e9;
        let (copy_in, copy_out) = (gbps(stages[0].median), gbps(stages[2].median));
        OverlapFigures {
            slowest_stage,
            slowest_stage_ms: slowest,
            sum_of_stages_ms: sum,
            overlapped_over_slowest: overlapped_ms / slowest,
            overlap_achieved: (sum - overlapped_ms) / (sum - slowest),
            pinned_htod_ceiling_gb_per_s: htod.value,
            pinned_dtoh_ceiling_gb_per_s: dtoh.value,
            copy_in_gb_per_s: copy_in,
            copy_in_fraction_of_ceiling: copy_in / htod.value,
            copy_out_gb_per_s: copy_out,
            copy_out_fraction_of_ceiling: copy_out / dtoh.value,
        }
    }
}

impl Lesson for PipelineLesson {
    fn name(&self) -> &str {
        "ch1-basics"
    }

    fn parameters(&self) -> serde_json::Value {
        let c = &self.cfg;
        json!({
            "elements": c.elements,
            "bytes": self.bytes(),
            "chunk_elements": self.pipeline.chunk,
            "chunks": self.chunks(),
            "buffers": c.buffers,
            "iterations": c.iterations,
            "seed": c.seed,
            "dtype": "f32",
            "tolerance": TOLERANCE,
        })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        let n = self.cfg.elements as u64;
        // Every element is copied in, mapped by `iterations` FMAs and copied out.
        let work = Work {
            bytes_read: 4 * n,
            bytes_written: 4 * n,
            flops: 2 * self.cfg.iterations as u64 * n,
        };
        let (chunks, buffers) = (self.chunks(), self.cfg.buffers);
        let descriptions = [
            format!("one stream: copy in, compute, copy out, chunk after chunk ({chunks} chunks)"),
            format!("three streams ordered by events, {buffers} buffers in flight"),
        ];
        VARIANTS
            .iter()
            .zip(descriptions)
            .map(|((name, _), description)| {
                VariantSpec::new(*name, description, Precision::Fp32, work)
                    .with_tolerance(TOLERANCE)
            })
            .collect()
    }

    fn reference(&self, _index: usize) -> Option<&Reference> {
        // The closed form is evaluated on the fly in `output` instead: a stored float64
        // reference would be another 2 GiB at the default size.
        None
    }

    fn check_against_baseline(&self, _index: usize) -> bool {
        self.whole
    }

    fn poison(&mut self, _gpu: &Gpu, _index: usize) -> Result<()> {
        self.pipeline.poison_output();
        Ok(())
    }

    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        self.pipeline.queue(&gpu.stream, VARIANTS[index].1)
    }

    fn output(&mut self, _gpu: &Gpu, _index: usize) -> Result<Output> {
        let out = Output::checked(vec![self.pipeline.check_closed_form()]);
        Ok(if self.whole {
            out.part(SAME_AS_SERIAL, self.pipeline.output().to_vec(), Some(0.0))
        } else {
            out
        })
    }

    fn sections(
        &mut self,
        gpu: &Gpu,
        variants: &[VariantReport],
        meter: &mut Meter,
    ) -> Result<Vec<Section>> {
        let ran = |name: &str| {
            variants
                .iter()
                .filter(|v| v.name == name && v.status == Status::Ok)
                .find_map(|v| v.time_ms.as_ref().map(|t| (v, t)))
        };
        let mut sections = Vec::new();
        if let (Some(serial), Some(overlapped)) = (ran(VARIANTS[0].0), ran(VARIANTS[1].0)) {
            sections.push(self.overlap_section(gpu, serial.1, overlapped, meter)?);
        }
        if self.whole {
            let sizes = copy_rates::sizes(4 * self.pipeline.chunk);
            let rates = copy_rates::measure(gpu, meter, &sizes)?;
            sections.push(copy_rates::section(&rates)?);
        }
        Ok(sections)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(ms: f64) -> Summary {
        Summary::of(&[ms]).unwrap()
    }

    fn ceiling(value: f64) -> Ceiling {
        Ceiling {
            value,
            unit: "GB/s".into(),
            method: "test".into(),
            time_s: summary(1.0),
            candidates: Vec::new(),
            theoretical: None,
            sm_clock_mhz: None,
            verification_error: None,
        }
    }

    #[test]
    fn overlap_figures_from_the_stages_alone() {
        // 1 GB copied each way: 20 ms is 50 GB/s.
        let f = OverlapFigures::new(
            [&summary(20.0), &summary(25.0), &summary(20.0)],
            27.0,
            1_000_000_000,
            (&ceiling(50.0), &ceiling(40.0)),
        );
        assert_eq!(f.slowest_stage, "compute");
        assert_eq!(f.slowest_stage_ms, 25.0);
        assert_eq!(f.sum_of_stages_ms, 65.0);
        assert!((f.overlapped_over_slowest - 27.0 / 25.0).abs() < 1e-12);
        // 38 of the 40 ms that could be hidden were.
        assert!((f.overlap_achieved - 38.0 / 40.0).abs() < 1e-12);
        assert!((f.copy_in_gb_per_s - 50.0).abs() < 1e-9);
        assert!((f.copy_in_fraction_of_ceiling - 1.0).abs() < 1e-9);
        assert!((f.copy_out_fraction_of_ceiling - 1.25).abs() < 1e-9);
    }

    #[test]
    fn sizes_that_make_no_plan_say_what_to_change() {
        let ok = PipelineConfig {
            elements: 1 << 20,
            chunk: 1 << 16,
            buffers: 3,
            iterations: 8,
            seed: 1,
        };
        assert!(ok.validate().is_ok());
        let big_chunk = PipelineConfig {
            chunk: 2 << 20,
            ..ok
        };
        assert!(big_chunk
            .validate()
            .unwrap_err()
            .contains("larger than --pipeline-elements"));
        assert!(PipelineConfig { buffers: 0, ..ok }.validate().is_err());
    }

    #[test]
    fn the_copy_rate_sizes_are_sorted_and_distinct() {
        assert_eq!(
            copy_rates::sizes(4 << 20),
            vec![32 * 1024, 256 * 1024, 4 << 20, 256 << 20]
        );
        assert_eq!(copy_rates::sizes(32 << 20)[3], 32 << 20);
    }
}
