//! How the step's operations are queued: back to back, or with the host waiting after each one,
//! as a naive training loop does (code that checks every launch, or reads the loss, does).

use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::Result;

/// The stream the operations go to and whether the host waits after each.
#[derive(Clone, Copy)]
pub struct Exec<'a> {
    pub gpu: &'a Gpu,
    sync_every_op: bool,
}

impl<'a> Exec<'a> {
    /// Operations queued back to back on the GPU's stream; the caller synchronizes when it must.
    pub fn queued(gpu: &'a Gpu) -> Exec<'a> {
        Exec {
            gpu,
            sync_every_op: false,
        }
    }

    /// The host waits for the GPU after every operation.
    pub fn synced(gpu: &'a Gpu) -> Exec<'a> {
        Exec {
            gpu,
            sync_every_op: true,
        }
    }

    /// Call after queuing an operation (`what` names it in errors): waits when synced.
    pub fn done(&self, what: &str) -> Result<()> {
        if self.sync_every_op {
            self.gpu
                .stream
                .synchronize()
                .cuda(&format!("synchronizing after {what}"))?;
        }
        Ok(())
    }
}
