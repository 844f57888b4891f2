//! **prealloc**: the baseline, but the device buffers are allocated once, before the run, and
//! reused: no `cuMemAlloc`/`cuMemFree` per microbatch, so two driver calls per buffer and the
//! device-wide wait in each free are gone.

use common::Result;
use mlp::Exec;

use super::engine::Engine;

pub fn run(e: &mut Engine) -> Result<()> {
    let (gpu, cfg) = (e.gpu, e.cfg);
    let mb = cfg.microbatch;
    let ex = Exec::synced(gpu);
    for step in 0..cfg.steps() {
        for first in (0..cfg.step_batch).step_by(mb) {
            let buf = &mut e.pre;
            let samples = cfg.samples_of(step, first, mb);
            e.data.copy_pageable(gpu, samples, buf)?;
            ex.done("copying the input")?;
            e.train.pass(&ex, buf, 0..mb, first)?;
        }
        e.train.update(&ex)?;
    }
    Ok(())
}
