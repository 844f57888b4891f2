//! **baseline**: what a first training loop often does. Each step is 8 microbatches of 32 with
//! gradient accumulation; every microbatch allocates its device buffers with `cuMemAlloc` and
//! frees them with `cuMemFree` (the free waits for the whole device), copies its input from
//! pageable host memory (the host waits for the copy), and the host waits after every
//! operation. Most of the time the GPU is idle, waiting for the host.

use common::Result;
use mlp::{Allocator, Exec};

use super::engine::{Buffers, Engine};

pub fn run(e: &mut Engine) -> Result<()> {
    let (gpu, cfg) = (e.gpu, e.cfg);
    let mb = cfg.microbatch;
    let ex = Exec::synced(gpu);
    for step in 0..cfg.steps() {
        for first in (0..cfg.step_batch).step_by(mb) {
            let buf = &mut Buffers::new(gpu, cfg.arch(), mb, Allocator::Driver)?;
            let samples = cfg.samples_of(step, first, mb);
            e.data.copy_pageable(gpu, samples, buf)?;
            ex.done("copying the input")?;
            e.train.pass(&ex, buf, 0..mb, first)?;
            // The buffers are freed here: cuMemFree waits for the whole device.
        }
        e.train.update(&ex)?;
    }
    Ok(())
}
