//! The batch finder on several GPUs of one model, against the fake training program: a round
//! runs as many sizes as there are GPUs side by side, each on its own GPU, and the answer is the
//! one GPU's, confirmed, in fewer rounds. A round likely to hold the answer runs as
//! confirmations, on one GPU too: the size that held there is the answer, with no run of its
//! own, and a size that fits until steady but does not hold for every step does not fit.

mod fake;

use std::collections::BTreeSet;

use fake::{every_trial, Scratch};
use tuner::autobatch::{autobatch, AutobatchReport, Confirmation};
use tuner::config::Overrides;
use tuner::granularity::Granularity;
use tuner::run::Run;

fn find(dir: &Scratch, gpus: usize, vars: &[(&str, &str)]) -> AutobatchReport {
    let run = Run::new(fake::run_options(dir, vars, gpus), "autobatch").unwrap();
    let settings = Overrides {
        workers: Some(vec![0]),
        ..Overrides::default()
    }
    .resolve()
    .unwrap();
    autobatch(
        &run,
        settings,
        &fake::finder_options(Granularity::Multiple(8)),
    )
    .unwrap()
}

/// The answer's confirmation: the last, of the answer, held for every step.
fn answer_confirmation(r: &AutobatchReport) -> &Confirmation {
    let c = r.confirmations.last().expect("a confirmation");
    assert_eq!(
        (c.batch_size, c.steps, c.held),
        (r.maximum, 20, true),
        "{c:?}"
    );
    assert!(c.trial.reached_steps && c.trial.measured.reported_steps == 20);
    c
}

/// The rounds one after another: the search's, and each confirmation run after it.
fn sequential_rounds(r: &AutobatchReport) -> usize {
    r.found.rounds + r.confirmations.iter().filter(|c| c.round.is_none()).count()
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
            let all = every_trial(&r);
            let labels: BTreeSet<&str> = all.iter().map(|t| t.device.as_str()).collect();
            assert_eq!(labels.len(), gpus.min(all.len()), "{vars:?}: {labels:?}");
            for (t, &(batch, fitted)) in r.search.iter().zip(&r.found.trials) {
                assert_eq!(t.params.batch_size, batch);
                assert_eq!(t.fits(), Some(fitted), "{vars:?} batch {batch}");
            }
            // Every trial numbered once, in the order it ran.
            let indices: Vec<usize> = all.iter().map(|t| t.index).collect();
            assert_eq!(indices, (0..all.len()).collect::<Vec<_>>());
            let c = answer_confirmation(&r);
            let said = tuner::autobatch::render(&r);
            let rounds = format!("in {} rounds side by side", r.found.rounds);
            assert_eq!(said.contains(&rounds), gpus > 1, "{said}");
            if gpus > 1 {
                // The round that settled the answer confirmed it: no run after the search.
                assert!(c.round.is_some(), "{vars:?} {gpus}: {:?}", r.confirmations);
                assert!(
                    said.contains(&format!(
                        "**maximum {}**: held for 20 steps, its trial in round {} of the search",
                        r.maximum,
                        c.round.unwrap()
                    )),
                    "{said}"
                );
            }
            answers.push((r.maximum, r.next_failing, sequential_rounds(&r)));
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

#[test]
fn one_gpu_confirms_in_the_trial_of_the_last_open_size() {
    // Doubling to 512, which fails, then bisecting: the last size open, 296, is tried for the
    // confirmation's steps, holds, and is the answer with no run of its own.
    let dir = Scratch::new("last-open");
    let r = find(&dir, 1, &[("FAKE_OOM_ABOVE", "300")]);
    assert_eq!((r.maximum, r.next_failing), (296, Some(304)));
    let c = answer_confirmation(&r);
    assert_eq!(r.confirmations.len(), 1);
    assert_eq!(c.round, Some(r.found.rounds), "the search's last round");
    assert_eq!(r.found.confirmations, [(296, true)]);
    assert!(
        r.confirm_wall_s < 0.1,
        "no run after the search: {} s",
        r.confirm_wall_s
    );
    // One trial a round, each size once.
    assert_eq!(every_trial(&r).len(), r.found.rounds);
    let said = tuner::autobatch::render(&r);
    let search = format!("{} trials, 1 held as confirmations", r.found.rounds);
    assert!(said.contains(&search), "{said}");
    assert!(said.contains("296 held for 20 steps"), "{said}");
    assert!(!said.contains("\nconfirmation: "), "{said}");
    let answer = format!(
        "**maximum 296**: held for 20 steps, its trial in round {} of the search; 304 ran out of memory",
        r.found.rounds
    );
    assert!(said.contains(&answer), "{said}");
    // The other sizes that fit ran until their memory was steady.
    for t in r.search.iter().filter(|t| t.fits() == Some(true)) {
        assert_eq!(t.steady_at, Some(3), "batch {}", t.params.batch_size);
    }
}

#[test]
fn a_size_that_does_not_hold_in_a_round_of_confirmations_does_not_fit() {
    // Above 1900 a batch runs out of memory at the fifth step: steady at the third, it would
    // pass a search trial. The rounds aimed at the line's 1960 run as confirmations, where it
    // does not hold: the answer is 1896, held for every step.
    let vars = [
        ("FAKE_MEMORY", "600000000,40000000,79000000000"),
        ("FAKE_LATE_OOM", "1900,5"),
    ];
    for gpus in [2, 4] {
        let dir = Scratch::new("late-rounds");
        let r = find(&dir, gpus, &vars);
        assert_eq!((r.maximum, r.next_failing), (1896, Some(1904)), "{gpus}");
        answer_confirmation(&r);
        assert!(r.found.trials.contains(&(1960, false)), "{:?}", r.found);
        for t in r.search.iter().filter(|t| t.params.batch_size > 1900) {
            assert_eq!(t.fits(), Some(false));
        }
        assert!(r
            .confirmations
            .iter()
            .all(|c| c.held && c.batch_size <= 1900));
    }
}
