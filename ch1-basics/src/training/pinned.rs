//! **pinned**: the baseline, but the data sits in page-locked host memory (pinned once, when it
//! is loaded, as a data loader with pinned memory does), so each copy is one asynchronous DMA
//! the host does not wait for, instead of the driver's copy through a bounce buffer that it
//! does wait for. A small gain: the copies are small (latency-bound) and the other waits remain.

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
            e.data.copy_pinned(gpu, samples, buf)?;
            e.train.pass(&ex, buf, 0..mb, first)?;
            // The buffers are freed here: cuMemFree waits for the whole device.
        }
        e.train.update(&ex)?;
    }
    Ok(())
}
