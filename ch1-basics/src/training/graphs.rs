//! **graphs**: the whole step (copies in, forward, backward, update, for each of the 8
//! microbatches) captured once as a CUDA graph and replayed: one launch and one wait per step
//! instead of about a hundred. A graph replays fixed addresses from a page-locked source, so it
//! starts from prealloc and the host first stages the step's samples into pinned memory.

use common::Result;
use mlp::Exec;

use super::engine::{Captured, Engine};

pub fn run(e: &mut Engine) -> Result<()> {
    let (gpu, cfg) = (e.gpu, e.cfg);
    let mb = cfg.microbatch;
    let ex = Exec::queued(gpu);
    for step in 0..cfg.steps() {
        e.data.stage(step, 0);
        e.graphs.replay(gpu, Captured::StepWithCopies, || {
            for first in (0..cfg.step_batch).step_by(mb) {
                let buf = &mut e.pre;
                e.data.copy_staged(first..first + mb, buf, &gpu.stream)?;
                e.train.pass(&ex, buf, first..first + mb, first)?;
            }
            e.train.update(&ex)
        })?;
        gpu.sync()?;
    }
    Ok(())
}
