//! GPU tests: run on a machine with an NVIDIA GPU with `cargo test -- --ignored`.

use std::process::Command;

use ch1_intensity::{grid, Intensity, Variant, KERNELS};
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels::{self, KernelSource};
use common::report::Status;
use common::runner::{run_lesson, Lesson, RunOptions, Values};
use common::stop::StopRule;
use common::testing::Planted;
use common::verify::check;
use cudarc::driver::PushKernelArg;

/// Odd on purpose: n % 4 == 3 exercises every tail path.
const N: u64 = (1 << 20) + 3;

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_variant_verifies_at_odd_and_tiny_sizes() {
    let gpu = Gpu::open(0).unwrap();
    for n in [N, 1, 2, 3, 4, 5, 1023] {
        let mut lesson = Intensity::new(&gpu, n, 7).unwrap();
        for (i, v) in Variant::ALL.iter().enumerate() {
            lesson.poison(&gpu, i).unwrap();
            lesson.run(&gpu, i).unwrap();
            gpu.sync().unwrap();
            let out = lesson.output(&gpu, i).unwrap();
            let Values::F32(got) = &out.parts[0].values else {
                panic!("an f32 output")
            };
            let reference = &lesson.reference(i).unwrap().parts[0].1;
            let c = check(got, reference, 1e-5, "ref");
            assert!(c.passed, "{} at n={n}: {c:?}", v.name());
        }
    }
}

/// The fused kernel with its tail forgotten: the classic vectorization bug.
const PLANTED: &str = r#"
extern "C" __global__ void fused_forgets_tail(const float* x, const float* y, float* out, u64 n,
                                              float inv_n) {
    u64 j = global_id();
    if (j < n / 4) {
        for (int k = 0; k < 4; k++) {
            u64 i = 4 * j + k;
            out[i] = fused_one(x[i], y[i], i, inv_n);
        }
    }
}
"#;

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_planted_wrong_kernel_is_caught_and_gets_no_speedup() {
    let gpu = Gpu::open(0).unwrap();
    let code: &'static str = Box::leak(format!("{}\n{PLANTED}", KERNELS.code).into_boxed_str());
    let module = kernels::load(
        &gpu,
        KernelSource {
            name: "intensity-planted",
            code,
        },
        &[],
    )
    .unwrap();
    let planted = module.function("fused_forgets_tail").unwrap();
    // The real lesson plus one planted wrong variant, run through the whole harness.
    let mut lesson = Planted::new(
        Intensity::new(&gpu, N, 3).unwrap(),
        "ch1-intensity-planted",
        ("planted", "forgets the tail", "fused"),
        |inner: &mut Intensity, gpu: &Gpu| {
            let n = inner.n();
            let inv_n = inner.inv_n();
            let (x, y, out) = inner.io_mut();
            unsafe {
                gpu.stream
                    .launch_builder(&planted)
                    .arg(x)
                    .arg(y)
                    .arg(out)
                    .arg(&n)
                    .arg(&inv_n)
                    .launch(grid(n / 4))
            }
            .cuda("planted")?;
            Ok(())
        },
    );
    let mut options = RunOptions::default().only(&["baseline", "planted"]);
    options.bench.stop = StopRule::quick();
    let report = run_lesson(&gpu, &mut lesson, &options).unwrap();
    let planted = report.variant("planted").unwrap();
    assert_eq!(planted.status, Status::Failed);
    assert_eq!(
        planted.checks[0].non_finite, 3,
        "the three tail elements stay poisoned"
    );
    assert_eq!(planted.speedup, None);
    assert!(report.variant("baseline").unwrap().status == Status::Ok);
    assert!(!report.all_passed());
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn out_of_memory_is_an_error_and_the_context_survives() {
    let gpu = Gpu::open(0).unwrap();
    let (free, _) = gpu.memory().unwrap();
    let err = match gpu.alloc::<f32>((free / 4 + (1 << 30)) as usize, "too much") {
        Err(e) => e,
        Ok(_) => panic!("allocating more than is free succeeded"),
    };
    assert!(err.is_out_of_memory(), "{err}");
    assert!(
        err.to_string()
            .contains("out of device memory: too much needs"),
        "{err}"
    );
    // The context is still usable.
    let small = gpu.upload(&[1.0f32, 2.0, 3.0], "small").unwrap();
    assert_eq!(gpu.download(&small).unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn an_absurd_element_count_exits_with_a_clear_message() {
    // On a GPU machine the binary travels apart from the build tree: CH1_INTENSITY_BIN says where.
    let bin =
        std::env::var("CH1_INTENSITY_BIN").unwrap_or(env!("CARGO_BIN_EXE_ch1-intensity").into());
    let out = Command::new(bin)
        .args(["--elements", "32G"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("out of device memory"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
