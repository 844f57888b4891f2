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
//! The engine (plan, overlap model, the pass in each mode) is [engine]; what the stages alone
//! say about the modes is [overlap]; the copy-rate table is [copy_rates].

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
use plotting::format::human_bytes;

use overlap::Measured;

/// The output part compared with the serial run's (tolerance 0: bitwise-equal values).
pub const SAME_AS_SERIAL: &str = "output vs serial";

/// The pair's variants, baseline first.
pub const VARIANTS: [(&str, Mode); 2] =
    [("serial", Mode::Serial), ("overlapped", Mode::Overlapped)];

/// The variants of the pair at `cfg`: every element copied in, mapped by `iterations` FMAs and
/// copied out.
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
    /// Both variants run: compare their outputs and measure the copy-rate table.
    whole: bool,
    refresh_ceilings: bool,
}

impl PipelineLesson {
    /// Check host memory first (the pinned arrays and, when both variants run, the outputs the
    /// comparison keeps), then allocate and fill the input. `refresh_ceilings`: re-measure the
    /// pinned copy ceilings instead of using the cached ones.
    pub fn new(
        gpu: &Gpu,
        cfg: PipelineConfig,
        whole: bool,
        refresh_ceilings: bool,
    ) -> Result<PipelineLesson> {
        cfg.validate().map_err(common::Error::invalid)?;
        // Pinned input and output; with the comparison, one output copy (f32) and the serial
        // output the runner keeps in float64.
        let per_element = if whole { 4 + 4 + 4 + 8 } else { 4 + 4 };
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

    /// One stage alone, timed like the variants.
    fn time_alone(&mut self, gpu: &Gpu, meter: &mut Meter, mode: Mode) -> Result<Summary> {
        let name = match mode {
            Mode::CopyInOnly => "copy-in-alone",
            Mode::ComputeOnly => "compute-alone",
            _ => "copy-out-alone",
        };
        let _range = nvtx::range(&range_name(self.name(), &format!("pipeline:{name}")));
        let cfg = meter.bench;
        let main = gpu.stream.clone();
        let pipeline = &mut self.pipeline;
        Ok(meter
            .measure(&cfg, &mut || pipeline.queue(&main, mode))?
            .time_ms)
    }

    /// Each stage alone against the two modes (serial's and the overlapped run's times, and
    /// the overlapped report for its comparison with the serial output).
    fn overlap_section(
        &mut self,
        gpu: &Gpu,
        meter: &mut Meter,
        serial: &Summary,
        (overlapped, overlapped_ms): (&VariantReport, &Summary),
    ) -> Result<Section> {
        let stages = [
            self.time_alone(gpu, meter, Mode::CopyInOnly)?,
            self.time_alone(gpu, meter, Mode::ComputeOnly)?,
            self.time_alone(gpu, meter, Mode::CopyOutOnly)?,
        ];
        let transfers = ceilings::transfers(gpu, meter.timer(), self.refresh_ceilings)?;
        let bitwise = overlapped
            .checks
            .iter()
            .find(|c| c.part == SAME_AS_SERIAL)
            .map(|c| c.passed && c.rel_l2_error == 0.0);
        let (c, plan) = (&self.pipeline.cfg, self.pipeline.cfg.plan());
        let headline = format!(
            "{} fp32 ({}) in {} chunks of {} ({} buffers), {} FMAs per element",
            c.elements,
            human_bytes(self.bytes()),
            plan.len(),
            c.chunk,
            c.buffers,
            c.iterations
        );
        let measured = Measured {
            stages,
            serial: serial.clone(),
            overlapped: overlapped_ms.clone(),
        };
        let pinned = (&transfers.h2d_pinned, &transfers.d2h_pinned);
        Ok(overlap::section(
            measured,
            &plan,
            self.bytes(),
            pinned,
            bitwise,
            headline,
        ))
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
            sections.push(self.overlap_section(gpu, meter, serial.1, overlapped)?);
        }
        if self.whole {
            let sizes = copy_rates::sizes(4 * self.pipeline.cfg.chunk);
            let rates = copy_rates::measure(gpu, meter, &sizes)?;
            sections.push(copy_rates::section(&rates));
        }
        Ok(sections)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_rate_sizes_are_sorted_and_distinct() {
        assert_eq!(
            copy_rates::sizes(4 << 20),
            vec![32 * 1024, 256 * 1024, 4 << 20, 256 << 20]
        );
        assert_eq!(copy_rates::sizes(32 << 20)[3], 32 << 20);
    }
}
