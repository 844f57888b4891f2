//! **optimized**: pinned staging, preallocated buffers, one batch of 256 and the step as a CUDA
//! graph, and the step no longer waits for the host: step k computes on device slot k % 2 while
//! the copy stream brings step k + 1 into the other slot, and the host stages step k + 1 while
//! the GPU runs step k (it refills a pinned slot only once the GPU has copied out of it). No
//! wait per step: the GPU is busy computing most of the time.

use common::Result;
use mlp::Exec;

use super::engine::{Captured, Engine};

pub fn run(e: &mut Engine) -> Result<()> {
    let (gpu, cfg) = (e.gpu, e.cfg);
    let mb = cfg.step_batch;
    let ex = Exec::queued(gpu);
    e.data.stage(0, 0);
    e.data.copy_staged(0..mb, &mut e.pre, &gpu.stream)?;
    e.overlap.staging_copied(gpu, 0)?;
    for step in 0..cfg.steps() {
        let (slot, next) = (step % 2, (step + 1 < cfg.steps()).then_some((step + 1) % 2));
        if let Some(s) = next {
            e.overlap.wait_for_staging(s)?;
            e.data.stage(step + 1, s);
        }
        e.graphs.replay(gpu, Captured::Overlapped(slot, next), || {
            if let Some(s) = next {
                let rows = s * mb..(s + 1) * mb;
                let copies = e.overlap.fork(gpu)?;
                e.data.copy_staged(rows, &mut e.pre, copies)?;
            }
            let buf = &mut e.pre;
            e.train.pass(&ex, buf, slot * mb..(slot + 1) * mb, 0)?;
            e.train.update(&ex)?;
            next.map_or(Ok(()), |_| e.overlap.join(gpu))
        })?;
        if let Some(s) = next {
            e.overlap.staging_copied(gpu, s)?;
        }
    }
    Ok(())
}
