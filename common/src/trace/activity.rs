//! CUPTI activity records, read robustly across CUDA versions.
//!
//! CUPTI fills its buffers with the newest record struct of the library in the process, not
//! the one these bindings were generated from: CUDA 13.0's CUPTI writes `CUpti_ActivityKernel10`,
//! 13.1 `Kernel11`, 13.3 `Kernel12`, 12.x `Kernel9`; each new version appends fields. So this
//! reads only the common prefix every kernel record since `Kernel4` shares (kind, start, end,
//! device, context, stream, grid, block, correlation id, name), by offset; the compile-time
//! checks below hold those offsets against both `Kernel4` and `Kernel10` of the bindings.
//! Memcpy (`Memcpy` .. `Memcpy7`) and memset (`Memset` .. `Memset5`) records share their
//! prefixes the same way. [record_layout] names the struct a reported CUPTI version writes and
//! refuses versions older than any layout known here.

use std::ffi::c_char;

use serde::{Deserialize, Serialize};

/// `CUpti_ActivityKind` values read here.
pub const KIND_MEMCPY: u32 = 1;
pub const KIND_MEMSET: u32 = 2;
pub const KIND_KERNEL: u32 = 3;
pub const KIND_CONCURRENT_KERNEL: u32 = 10;

/// Byte offsets of the kernel record prefix (Kernel4 .. Kernel13).
mod kernel {
    pub const START: usize = 16;
    pub const END: usize = 24;
    pub const DEVICE: usize = 40;
    pub const CONTEXT: usize = 44;
    pub const STREAM: usize = 48;
    pub const GRID: usize = 52;
    pub const BLOCK: usize = 64;
    pub const CORRELATION: usize = 92;
    pub const NAME: usize = 104;
}

/// Byte offsets of the memcpy and memset record prefixes (the same from `bytes` on).
mod transfer {
    pub const COPY_KIND: usize = 4;
    pub const BYTES: usize = 8;
    pub const START: usize = 16;
    pub const END: usize = 24;
    pub const DEVICE: usize = 32;
    pub const CONTEXT: usize = 36;
    pub const STREAM: usize = 40;
    pub const CORRELATION: usize = 44;
}

// The offsets above, checked against the generated bindings at compile time.
const _: () = {
    use cudarc::cupti::sys as s;
    use std::mem::offset_of;
    macro_rules! same_prefix {
        ($t:ty) => {
            assert!(offset_of!($t, start) == kernel::START);
            assert!(offset_of!($t, end) == kernel::END);
            assert!(offset_of!($t, deviceId) == kernel::DEVICE);
            assert!(offset_of!($t, contextId) == kernel::CONTEXT);
            assert!(offset_of!($t, streamId) == kernel::STREAM);
            assert!(offset_of!($t, gridX) == kernel::GRID);
            assert!(offset_of!($t, blockX) == kernel::BLOCK);
            assert!(offset_of!($t, correlationId) == kernel::CORRELATION);
            assert!(offset_of!($t, name) == kernel::NAME);
        };
    }
    same_prefix!(s::CUpti_ActivityKernel4);
    same_prefix!(s::CUpti_ActivityKernel10);
    macro_rules! same_transfer {
        ($t:ty) => {
            assert!(offset_of!($t, bytes) == transfer::BYTES);
            assert!(offset_of!($t, start) == transfer::START);
            assert!(offset_of!($t, end) == transfer::END);
            assert!(offset_of!($t, deviceId) == transfer::DEVICE);
            assert!(offset_of!($t, contextId) == transfer::CONTEXT);
            assert!(offset_of!($t, streamId) == transfer::STREAM);
            assert!(offset_of!($t, correlationId) == transfer::CORRELATION);
        };
    }
    same_transfer!(s::CUpti_ActivityMemcpy);
    same_transfer!(s::CUpti_ActivityMemcpy6);
    same_transfer!(s::CUpti_ActivityMemset);
    same_transfer!(s::CUpti_ActivityMemset4);
    assert!(offset_of!(s::CUpti_ActivityMemcpy6, copyKind) == transfer::COPY_KIND);
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivityKind {
    Kernel,
    Memcpy,
    Memset,
}

/// One thing the GPU did, on CUPTI's clock (nanoseconds, the CPU time base: CUPTI converts the
/// GPU's timestamps, and `cuptiGetTimestamp` reads the same clock on the host).
#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    pub kind: ActivityKind,
    /// Kernel name as compiled (C++ names stay mangled), or "memcpy HtoD", "memset".
    pub name: String,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Bytes moved or set; 0 for kernels.
    pub bytes: u64,
    pub correlation: u32,
    pub grid: [i32; 3],
    pub block: [i32; 3],
}

impl Activity {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// The kernel record struct a CUPTI API version (from `cuptiGetVersion`) writes; all of them
/// share the prefix read here. Older than CUDA 11.4 (version 14) is refused.
pub fn record_layout(cupti_api_version: u32) -> Result<&'static str, String> {
    Ok(match cupti_api_version {
        v if v >= 130_401 => "CUpti_ActivityKernel13",
        v if v >= 130_301 => "CUpti_ActivityKernel12",
        v if v >= 130_101 => "CUpti_ActivityKernel11",
        v if v >= 130_001 => "CUpti_ActivityKernel10",
        18..=130_000 => "CUpti_ActivityKernel8/9 (CUDA 11.8 to 12.x)",
        14..=17 => "CUpti_ActivityKernel6/7 (CUDA 11.4 to 11.7)",
        v => {
            return Err(format!(
                "CUPTI API version {v} is older than CUDA 11.4's (14), whose kernel record layout \
                 is not known here: update the NVIDIA driver and CUDA libraries"
            ))
        }
    })
}

/// "memcpy HtoD" for a `CUpti_ActivityMemcpyKind`.
pub fn memcpy_name(copy_kind: u8) -> &'static str {
    match copy_kind {
        1 => "memcpy HtoD",
        2 => "memcpy DtoH",
        3 => "memcpy HtoA",
        4 => "memcpy AtoH",
        5 => "memcpy AtoA",
        6 => "memcpy AtoD",
        7 => "memcpy DtoA",
        8 => "memcpy DtoD",
        9 => "memcpy HtoH",
        10 => "memcpy PtoP",
        _ => "memcpy",
    }
}

/// Read one record. Kinds other than kernels, memcpys and memsets give None.
///
/// # Safety
/// `record` points at a whole CUPTI activity record (at least its kind's prefix, 112 bytes for
/// kernels, 48 for memcpy and memset); `name_of` is given the kernel's name pointer as CUPTI
/// wrote it (NUL-terminated or null).
pub unsafe fn parse_record(
    record: *const u8,
    name_of: &mut dyn FnMut(*const c_char) -> String,
) -> Option<Activity> {
    let u32_at = |off: usize| unsafe { record.add(off).cast::<u32>().read_unaligned() };
    let i32_at = |off: usize| unsafe { record.add(off).cast::<i32>().read_unaligned() };
    let u64_at = |off: usize| unsafe { record.add(off).cast::<u64>().read_unaligned() };
    match u32_at(0) {
        KIND_KERNEL | KIND_CONCURRENT_KERNEL => {
            let name_ptr = unsafe { record.add(kernel::NAME).cast::<usize>().read_unaligned() };
            Some(Activity {
                kind: ActivityKind::Kernel,
                name: name_of(name_ptr as *const c_char),
                device: u32_at(kernel::DEVICE),
                context: u32_at(kernel::CONTEXT),
                stream: u32_at(kernel::STREAM),
                start_ns: u64_at(kernel::START),
                end_ns: u64_at(kernel::END),
                bytes: 0,
                correlation: u32_at(kernel::CORRELATION),
                grid: [0, 1, 2].map(|i| i32_at(kernel::GRID + 4 * i)),
                block: [0, 1, 2].map(|i| i32_at(kernel::BLOCK + 4 * i)),
            })
        }
        kind @ (KIND_MEMCPY | KIND_MEMSET) => {
            let name = if kind == KIND_MEMCPY {
                memcpy_name(unsafe { *record.add(transfer::COPY_KIND) })
            } else {
                "memset"
            };
            Some(Activity {
                kind: if kind == KIND_MEMCPY {
                    ActivityKind::Memcpy
                } else {
                    ActivityKind::Memset
                },
                name: name.to_string(),
                device: u32_at(transfer::DEVICE),
                context: u32_at(transfer::CONTEXT),
                stream: u32_at(transfer::STREAM),
                start_ns: u64_at(transfer::START),
                end_ns: u64_at(transfer::END),
                bytes: u64_at(transfer::BYTES),
                correlation: u32_at(transfer::CORRELATION),
                grid: [0; 3],
                block: [0; 3],
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::cupti::sys as s;
    use std::ffi::{CStr, CString};

    fn read_name(p: *const c_char) -> String {
        if p.is_null() {
            return "<unnamed>".into();
        }
        // SAFETY: the tests point it at a live CString.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_kernel10_record_reads_back_through_the_prefix() {
        let name = CString::new("fused_vec4").unwrap();
        // SAFETY: a plain-data record; all-zero bytes are a valid value of every field.
        let mut r: s::CUpti_ActivityKernel10 = unsafe { std::mem::zeroed() };
        r.kind = s::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        r.start = 1_000;
        r.end = 187_500;
        r.deviceId = 0;
        r.contextId = 1;
        r.streamId = 13;
        (r.gridX, r.gridY, r.gridZ) = (65_536, 1, 1);
        (r.blockX, r.blockY, r.blockZ) = (256, 1, 1);
        r.correlationId = 77;
        r.name = name.as_ptr();
        // SAFETY: points at a whole Kernel10 record.
        let a = unsafe {
            parse_record(
                (&r as *const s::CUpti_ActivityKernel10).cast(),
                &mut read_name,
            )
        }
        .unwrap();
        assert_eq!(a.kind, ActivityKind::Kernel);
        assert_eq!(a.name, "fused_vec4");
        assert_eq!(
            (a.start_ns, a.end_ns, a.duration_ns()),
            (1_000, 187_500, 186_500)
        );
        assert_eq!((a.context, a.stream, a.correlation), (1, 13, 77));
        assert_eq!((a.grid, a.block), ([65_536, 1, 1], [256, 1, 1]));
    }

    #[test]
    fn memcpy_and_memset_records_read_back() {
        // SAFETY: plain-data records.
        let mut m: s::CUpti_ActivityMemcpy6 = unsafe { std::mem::zeroed() };
        m.kind = s::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY;
        m.copyKind = 2;
        m.bytes = 4096;
        m.start = 10;
        m.end = 30;
        m.streamId = 7;
        let a = unsafe {
            parse_record(
                (&m as *const s::CUpti_ActivityMemcpy6).cast(),
                &mut read_name,
            )
        }
        .unwrap();
        assert_eq!(
            (a.kind, a.name.as_str(), a.bytes, a.stream, a.duration_ns()),
            (ActivityKind::Memcpy, "memcpy DtoH", 4096, 7, 20)
        );
        let mut z: s::CUpti_ActivityMemset4 = unsafe { std::mem::zeroed() };
        z.kind = s::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET;
        z.bytes = 1 << 20;
        z.start = 5;
        z.end = 9;
        let a = unsafe {
            parse_record(
                (&z as *const s::CUpti_ActivityMemset4).cast(),
                &mut read_name,
            )
        }
        .unwrap();
        assert_eq!(
            (a.kind, a.name.as_str(), a.bytes),
            (ActivityKind::Memset, "memset", 1 << 20)
        );
    }

    #[test]
    fn other_kinds_are_skipped() {
        let mut bytes = [0u8; 128];
        bytes[0] = 5; // CUPTI_ACTIVITY_KIND_DRIVER
        assert!(unsafe { parse_record(bytes.as_ptr(), &mut read_name) }.is_none());
    }

    #[test]
    fn versions_map_to_layouts_and_old_ones_are_refused() {
        assert_eq!(record_layout(130_001).unwrap(), "CUpti_ActivityKernel10");
        assert_eq!(record_layout(130_101).unwrap(), "CUpti_ActivityKernel11");
        assert_eq!(record_layout(130_202).unwrap(), "CUpti_ActivityKernel11");
        assert_eq!(record_layout(130_401).unwrap(), "CUpti_ActivityKernel13");
        assert!(record_layout(28).unwrap().contains("12.x"));
        assert!(record_layout(14).is_ok());
        assert!(record_layout(12)
            .unwrap_err()
            .contains("older than CUDA 11.4"));
    }
}
