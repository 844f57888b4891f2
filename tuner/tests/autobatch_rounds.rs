//! The batch finder on several GPUs of one model, against the fake training program: a round
//! runs as many sizes as there are GPUs side by side, each on its own GPU, and the answer is the
//! one GPU's, confirmed, in fewer rounds.

mod fake;

use fake::{argv, Scratch};
use tuner::autobatch::{autobatch, AutobatchReport, Options};
use tuner::config::Overrides;
use tuner::gpu::Device;
use tuner::granularity::Granularity;
use tuner::program::Program;
use tuner::run::{Run, RunOptions};

fn find(dir: &Scratch, gpus: usize, vars: &[(&str, &str)]) -> AutobatchReport {
    let run = Run::new(
        RunOptions {
            program: Program::new(argv(vars)).unwrap(),
            devices: (0..gpus)
                .map(|i| Device::stand_in(&format!("GPU {i}"), &i.to_string()))
                .collect(),
            time_limit_s: 60.0,
            stall_limit_s: 60.0,
            trials_dir: Some(dir.path("trials")),
            json: Some(dir.path("autobatch.json")),
            progress: false,
            fork: true,
            ranks: 1,
        },
        "autobatch",
    )
    .unwrap();
    let settings = Overrides {
        workers: Some(vec![0]),
        ..Overrides::default()
    }
    .resolve()
    .unwrap();
    let o = Options {
        start: 8,
        granularity: Granularity::Multiple(8),
        margin: None,
        confirm_steps: 20,
        effective_batch: None,
        write: None,
        keys: tuner::writeback::Keys::tuner_config(),
        team: None,
        model_name: None,
    };
    autobatch(&run, settings, &o).unwrap()
}

#[test]
fn several_gpus_search_side_by_side_and_find_the_one_gpu_answer() {
    // Without memory figures (doubling and splitting) and with them (aiming by the line).
    for vars in [
        vec![("FAKE_OOM_ABOVE", "300")],
        vec![("FAKE_MEMORY", "600000000,40000000,79000000000")],
    ] {
        let mut answers = Vec::new();
        for gpus in [1, 2, 4] {
            let dir = Scratch::new("rounds");
            let r = find(&dir, gpus, &vars);
            let labels: std::collections::BTreeSet<&str> =
                r.search.iter().map(|t| t.device.as_str()).collect();
            assert_eq!(
                labels.len(),
                gpus.min(r.search.len()),
                "{vars:?}: {labels:?}"
            );
            for (t, &(batch, fitted)) in r.search.iter().zip(&r.found.trials) {
                assert_eq!(t.params.batch_size, batch);
                assert_eq!(t.fits(), Some(fitted), "{vars:?} batch {batch}");
            }
            let indices: Vec<usize> = r.search.iter().map(|t| t.index).collect();
            assert_eq!(indices, (0..r.search.len()).collect::<Vec<_>>());
            assert!(r.confirmations.iter().any(|c| c.held));
            let said = tuner::autobatch::render(&r);
            let rounds = format!("in {} rounds side by side", r.found.rounds);
            assert_eq!(said.contains(&rounds), gpus > 1, "{said}");
            answers.push((r.maximum, r.next_failing, r.found.rounds));
        }
        let (maximum, next, _) = answers[0];
        for &(m, n, _) in &answers {
            assert_eq!((m, n), (maximum, next), "{vars:?}: {answers:?}");
        }
        assert!(
            answers[2].2 < answers[0].2 && answers[1].2 <= answers[0].2,
            "{vars:?}: {answers:?}"
        );
    }
}
