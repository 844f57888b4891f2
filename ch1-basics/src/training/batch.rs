//! **batch**: the baseline, but one batch of 256 per step instead of 8 microbatches of 32: 8x
//! fewer launches, waits, allocations and copies, and GEMMs large enough to use the GPU. Same
//! samples, same steps, same gradient (up to the order of the sums). The largest single gain.

use common::Result;
use mlp::{Allocator, Exec};

use super::engine::{Buffers, Engine};

pub fn run(e: &mut Engine) -> Result<()> {
    let (gpu, cfg) = (e.gpu, e.cfg);
    let mb = cfg.step_batch;
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
