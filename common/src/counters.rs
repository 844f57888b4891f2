//! Work counters: bytes actually moved through device memory and floating-point operations,
//! and what they give per unit of time. An FMA counts as two FLOPs.

use serde::{Deserialize, Serialize};

/// The work one run of a variant does, counted by the lesson that knows its kernels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Work {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub flops: u64,
}

/// Where a variant's counted bytes move. A variant whose bytes cross the host link shares that
/// link, and the host's memory, with every other GPU of the host copying at the same moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Traffic {
    /// Through device memory: the runner gives their rate as a share of the measured copy
    /// bandwidth.
    #[default]
    DeviceMemory,
    /// Between host and device (copies in and out, over PCIe): no device-memory share is given.
    HostDevice,
}

/// Rates derived from a Work and a time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// (read + written) bytes / s, in units of 1e9.
    pub gb_per_s: f64,
    pub gflop_per_s: f64,
    /// FLOP per byte moved; 0 when nothing is moved.
    pub intensity: f64,
}

impl Work {
    pub fn bytes(&self) -> u64 {
        self.bytes_read + self.bytes_written
    }

    /// FLOP per byte of device-memory traffic.
    pub fn intensity(&self) -> f64 {
        if self.bytes() == 0 {
            0.0
        } else {
            self.flops as f64 / self.bytes() as f64
        }
    }

    pub fn throughput(&self, seconds: f64) -> Throughput {
        let per_s = |x: u64| {
            if seconds > 0.0 {
                x as f64 / seconds / 1e9
            } else {
                0.0
            }
        };
        Throughput {
            gb_per_s: per_s(self.bytes()),
            gflop_per_s: per_s(self.flops),
            intensity: self.intensity(),
        }
    }

    /// Elementwise work over `n` f32 elements: `reads` arrays read, `writes` written,
    /// `flops_per_element` operations each.
    pub fn elementwise_f32(n: u64, reads: u64, writes: u64, flops_per_element: u64) -> Work {
        Work {
            bytes_read: n * reads * 4,
            bytes_written: n * writes * 4,
            flops: n * flops_per_element,
        }
    }
}

impl std::ops::Add for Work {
    type Output = Work;
    fn add(self, o: Work) -> Work {
        Work {
            bytes_read: self.bytes_read + o.bytes_read,
            bytes_written: self.bytes_written + o.bytes_written,
            flops: self.flops + o.flops,
        }
    }
}

impl std::iter::Sum for Work {
    fn sum<I: Iterator<Item = Work>>(iter: I) -> Work {
        iter.fold(Work::default(), |a, b| a + b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_add_counts() {
        // c = a + b over 1M floats: 8 MB read, 4 MB written, 1M FLOPs.
        let w = Work::elementwise_f32(1 << 20, 2, 1, 1);
        assert_eq!(w.bytes_read, 8 << 20);
        assert_eq!(w.bytes_written, 4 << 20);
        assert_eq!(w.flops, 1 << 20);
        assert!((w.intensity() - 1.0 / 12.0).abs() < 1e-15);
        let t = w.throughput(1e-3);
        assert!((t.gb_per_s - (12u64 << 20) as f64 / 1e-3 / 1e9).abs() < 1e-9);
        assert!((t.gflop_per_s - (1u64 << 20) as f64 / 1e-3 / 1e9).abs() < 1e-9);
    }

    #[test]
    fn sums_add_fields() {
        let a = Work {
            bytes_read: 1,
            bytes_written: 2,
            flops: 3,
        };
        let total: Work = [a, a, a].into_iter().sum();
        assert_eq!(
            total,
            Work {
                bytes_read: 3,
                bytes_written: 6,
                flops: 9
            }
        );
    }

    #[test]
    fn nothing_moved_has_zero_intensity_and_zero_time_zero_rate() {
        assert_eq!(Work::default().intensity(), 0.0);
        assert_eq!(
            Work::elementwise_f32(8, 1, 1, 1).throughput(0.0).gb_per_s,
            0.0
        );
    }
}
