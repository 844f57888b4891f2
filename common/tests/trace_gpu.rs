//! GPU tests of the built-in CUPTI trace: run with `cargo test -- --ignored` on a machine with
//! an NVIDIA GPU and CUPTI.

use common::bench::{measure, BenchConfig, Timer};
use common::gpu::Gpu;
use common::kernels::{self, KernelSource};
use common::stop::StopRule;
use common::{nvtx, trace};
use cudarc::driver::{LaunchConfig, PushKernelArg};

const KERNELS: KernelSource = KernelSource {
    name: "trace-test",
    code: r#"
typedef unsigned long long u64;
extern "C" __global__ void trace_first_fill(float* x, u64 n) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 1.0f;
}
extern "C" __global__ void trace_second_scale(float* x, u64 n) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
extern "C" __global__ void trace_third_shift(float* x, u64 n) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 3.0f;
}
// Spins for `ns` nanoseconds of GPU time: a kernel of known, long duration.
extern "C" __global__ void trace_spin(u64 ns) {
    u64 start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"#,
};

/// One trace session per process: the tests take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn cfg(n: u64) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn gpu_kernel_names(doc: &serde_json::Value) -> Vec<String> {
    let mut kernels: Vec<(f64, String)> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "kernel")
        .map(|e| {
            (
                e["ts"].as_f64().unwrap(),
                e["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    kernels.sort_by(|a, b| a.0.total_cmp(&b.0));
    kernels.into_iter().map(|k| k.1).collect()
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_known_sequence_is_traced_in_order_with_copies_and_ranges() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let gpu = Gpu::open(0).unwrap();
    let module = kernels::load(&gpu, KERNELS, &[]).unwrap();
    let f = |name: &str| module.function(name).unwrap();
    let (fill, scale, shift) = (
        f("trace_first_fill"),
        f("trace_second_scale"),
        f("trace_third_shift"),
    );
    let n: u64 = 1 << 20;
    let mut x = gpu.alloc_zeros::<f32>(n as usize, "x").unwrap();
    let path = std::env::temp_dir().join(format!("trace-test-{}.json", std::process::id()));

    let session = trace::Session::start(&path).unwrap();
    assert!(
        trace::Session::start(&path).is_err(),
        "one session at a time"
    );
    let region = trace::region_begin().expect("a session is open");
    {
        let _range = nvtx::range("known sequence");
        for k in [&fill, &scale, &shift, &fill] {
            // SAFETY: (float*, u64) over n elements.
            unsafe {
                gpu.stream
                    .launch_builder(k)
                    .arg(&mut x)
                    .arg(&n)
                    .launch(cfg(n))
            }
            .unwrap();
        }
        gpu.stream.memset_zeros(&mut x).unwrap();
        let back = gpu.download(&x).unwrap();
        assert_eq!(back.len(), n as usize);
    }
    gpu.sync().unwrap();
    let summary = trace::region_end(region, "known sequence", 1).unwrap();
    let written = session.finish().unwrap();
    assert!(!trace::active());

    let calls = |name: &str| {
        summary
            .kernels
            .iter()
            .find(|k| k.name == name)
            .map(|k| k.calls)
    };
    assert_eq!(calls("trace_first_fill"), Some(2), "{summary:#?}");
    assert_eq!(calls("trace_second_scale"), Some(1));
    assert_eq!(calls("trace_third_shift"), Some(1));
    assert!(
        summary.transfers.iter().any(|t| t.name == "memset"),
        "{summary:#?}"
    );
    let dtoh = summary
        .transfers
        .iter()
        .find(|t| t.name == "memcpy DtoH")
        .expect("the download is traced");
    assert_eq!(dtoh.bytes, 4 * n);
    assert!(summary.gpu_busy_fraction > 0.0 && summary.gpu_busy_fraction <= 1.0);

    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&written).unwrap()).expect("valid JSON");
    assert_eq!(
        gpu_kernel_names(&doc),
        [
            "trace_first_fill",
            "trace_second_scale",
            "trace_third_shift",
            "trace_first_fill"
        ]
    );
    let events = doc["traceEvents"].as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["cat"] == "nvtx" && e["name"] == "known sequence"),
        "the NVTX range is in the trace"
    );
    std::fs::remove_file(&written).unwrap();
}

/// A 300 us kernel timed by the harness (CUDA events) and traced by CUPTI: the two agree
/// within 5%, and the summary lands in the measurement.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn trace_durations_agree_with_event_timing() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let gpu = Gpu::open(0).unwrap();
    let module = kernels::load(&gpu, KERNELS, &[]).unwrap();
    let spin = module.function("trace_spin").unwrap();
    let mut timer = Timer::new(&gpu).unwrap();
    let bench = BenchConfig {
        stop: StopRule::quick(),
        ..BenchConfig::default()
    };
    let path = std::env::temp_dir().join(format!("trace-spin-{}.json", std::process::id()));
    let session = trace::Session::start(&path).unwrap();
    let ns: u64 = 300_000;
    let m = {
        let _range = nvtx::range("test:spin");
        measure(&gpu, &mut timer, &bench, &mut || {
            let one = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: trace_spin(u64).
            unsafe { gpu.stream.launch_builder(&spin).arg(&ns).launch(one) }
                .map(|_| ())
                .map_err(|e| common::Error::invalid(e.to_string()))
        })
        .unwrap()
    };
    session.finish().unwrap();
    let t = m.trace.as_ref().expect("a summary while tracing");
    assert_eq!(t.region, "test:spin", "the caller's range names the region");
    assert_eq!(t.kernels.len(), 1, "{t:#?}");
    let k = &t.kernels[0];
    assert_eq!(k.name, "trace_spin");
    assert_eq!(k.calls, t.runs, "one kernel per run");
    assert_eq!(t.runs as usize, m.samples_s.len() * m.batch);
    let mut samples = m.samples_s.clone();
    samples.sort_by(f64::total_cmp);
    let event_median = samples[samples.len() / 2];
    let ratio = k.median_s / event_median;
    println!(
        "spin kernel: CUPTI median {:.2} us, CUDA events median {:.2} us, ratio {ratio:.4}",
        k.median_s * 1e6,
        event_median * 1e6
    );
    assert!((ratio - 1.0).abs() < 0.05, "ratio {ratio}");
    assert!(
        t.harness_kernels > 0,
        "the hold kernels are counted, not tabled"
    );
    std::fs::remove_file(&path).unwrap();
}
