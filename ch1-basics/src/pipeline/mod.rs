//! # Double buffering
//!
//! A large pinned array goes through the GPU in chunks (copy in, compute, copy out), once on
//! one stream, chunk after chunk (the baseline), and once on a stream per stage with `buffers`
//! device buffers in flight, so that the three engines (two copy engines, the SMs) overlap. Both
//! are checked against the map's float64 closed form, and the overlapped output against the
//! serial one with tolerance 0. When both run, each stage is timed alone ([overlap]); when the
//! whole part runs, pinned copy rates are measured by size ([copy_rates]).

pub mod copy_rates;
pub mod engine;
pub mod overlap;

pub use engine::{
    plan, reference_value, simulate, Chunk, Mode, Pipeline, PipelineConfig, TOLERANCE,
};

use serde_json::json;

use common::ceilings;
use common::counters::Work;
use common::gpu::{check_host_fits, Gpu};
use common::nvtx;
use common::report::{Section, Status, VariantReport};
use common::runner::{range_name, Lesson, Meter, Output, Reference, VariantSpec};
use common::stats::Summary;
use common::verify::Precision;
use common::Result;

use overlap::Measured;

pub const SAME_AS_SERIAL: &str = "output vs serial";

/// The pair's variants, baseline first.
pub const VARIANTS: [(&str, Mode); 2] =
    [("serial", Mode::Serial), ("overlapped", Mode::Overlapped)];

pub fn specs(cfg: &PipelineConfig) -> Vec<VariantSpec> {
    let n = cfg.elements as u64;
    let work = Work {
        bytes_read: 4 * n,
        bytes_written: 4 * n,
        flops: 2 * cfg.iterations as u64 * n,
    };
    let chunks = cfg.chunks();
    let descriptions = [
        format!("one stream: copy in, compute, copy out, chunk after chunk ({chunks} chunks)"),
        format!(
            "three streams ordered by events, {} buffers in flight",
            cfg.buffers
        ),
    ];
    VARIANTS
        .iter()
        .zip(descriptions)
        .map(|((name, _), description)| {
            VariantSpec::new(*name, description, Precision::Fp32, work)
                .with_tolerance(TOLERANCE)
                .host_device()
        })
        .collect()
}

pub struct PipelineLesson {
    pipeline: Pipeline,
    /// Both variants run: compare their outputs, measure the copy rates.
    whole: bool,
    refresh_ceilings: bool,
}

impl PipelineLesson {
    pub fn new(
        gpu: &Gpu,
        cfg: PipelineConfig,
        whole: bool,
        refresh_ceilings: bool,
    ) -> Result<PipelineLesson> {
        cfg.validate().map_err(common::Error::invalid)?;
        // Pinned input and output; with the comparison, one output copy (f32) and the serial
        // output the runner keeps (f32 too).
        let per_element = if whole { 4 + 4 + 4 + 4 } else { 4 + 4 };
        check_host_fits(
            "the pipeline's pinned input and output and the outputs its checks keep",
            per_element * cfg.elements as u64,
        )?;
        Ok(PipelineLesson {
            pipeline: Pipeline::new(gpu, cfg)?,
            whole,
            refresh_ceilings,
        })
    }

    fn bytes(&self) -> u64 {
        4 * self.pipeline.cfg.elements as u64
    }
}

impl Lesson for PipelineLesson {
    fn name(&self) -> &str {
        "ch1-basics"
    }

    fn parameters(&self) -> serde_json::Value {
        let c = &self.pipeline.cfg;
        json!({
            "elements": c.elements,
            "bytes": self.bytes(),
            "chunk_elements": c.chunk,
            "chunks": c.chunks(),
            "buffers": c.buffers,
            "iterations": c.iterations,
            "seed": c.seed,
            "dtype": "f32",
            "tolerance": TOLERANCE,
        })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        specs(&self.pipeline.cfg)
    }

    fn reference(&self, _index: usize) -> Option<&Reference> {
        None // the closed form, on the fly in `output`
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
            out.part(
                SAME_AS_SERIAL,
                common::par::copy_of(self.pipeline.output()),
                Some(0.0),
            )
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
            let pipeline = &mut self.pipeline;
            let mut alone = |mode: Mode, name: &str| -> Result<Summary> {
                let _range = nvtx::range(&range_name("ch1-basics", &format!("pipeline:{name}")));
                let (cfg, main) = (meter.bench, gpu.stream.clone());
                Ok(meter
                    .measure(&cfg, &mut || pipeline.queue(&main, mode))?
                    .time_ms)
            };
            let stages = [
                alone(Mode::CopyInOnly, "copy-in-alone")?,
                alone(Mode::ComputeOnly, "compute-alone")?,
                alone(Mode::CopyOutOnly, "copy-out-alone")?,
            ];
            let transfers = ceilings::transfers(gpu, meter.timer(), self.refresh_ceilings)?;
            let same = overlapped
                .0
                .checks
                .iter()
                .find(|c| c.part == SAME_AS_SERIAL);
            let measured = Measured {
                stages,
                serial: serial.1.clone(),
                overlapped: overlapped.1.clone(),
                bitwise: same.map(|c| c.passed && c.rel_l2_error == 0.0),
            };
            let pinned = (&transfers.h2d_pinned, &transfers.d2h_pinned);
            sections.push(overlap::section(measured, &self.pipeline.cfg, pinned));
        }
        if self.whole {
            let sizes = copy_rates::sizes(4 * self.pipeline.cfg.chunk);
            let rates = copy_rates::measure(gpu, meter, &sizes)?;
            sections.push(copy_rates::section(&rates));
        }
        Ok(sections)
    }
}
