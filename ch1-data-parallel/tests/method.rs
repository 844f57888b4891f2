//! The check's method on the CPU, in float64: the ranks' shares of a step's gradient add up to
//! the gradient of the global batch, and a rank's share left out or counted twice moves it far
//! beyond the first-gradient tolerance, at every number of ranks the lesson can have on a host.

use ch1_data_parallel::checks::{end_tolerances, rotated, Distance, FIRST_GRADIENT_TOLERANCE};
use common::verify::check;
use mlp::reference::loss_and_gradient;
use mlp::{initial_params, Arch, Init, Samples};

fn arch() -> Arch {
    Arch {
        input: 32,
        hidden: 48,
        depth: 3,
        classes: 10,
    }
}

/// Each of `ranks` shares of a global batch of `ranks * per_rank` samples, scaled by 1 / the
/// global batch, and the whole batch's gradient.
fn shares(ranks: usize, per_rank: usize) -> (Vec<Vec<f64>>, Vec<f64>) {
    let arch = arch();
    let global = ranks * per_rank;
    let params: Vec<f64> = initial_params(&arch, 5, Init::HE_LECUN_OUTPUT)
        .iter()
        .map(|&p| p as f64)
        .collect();
    let data = Samples::synthetic(arch.input, arch.classes, global, 6);
    let scale = 1.0 / global as f64;
    let share = |r: usize| {
        let rows = r * per_rank..(r + 1) * per_rank;
        let x = &data.features[rows.start * arch.input..rows.end * arch.input];
        loss_and_gradient(&arch, &params, x, &data.labels[rows], scale).1
    };
    let whole = loss_and_gradient(&arch, &params, &data.features, &data.labels, scale).1;
    ((0..ranks).map(share).collect(), whole)
}

fn sum(parts: &[&Vec<f64>]) -> Vec<f64> {
    let mut out = vec![0.0; parts[0].len()];
    for p in parts {
        for (o, v) in out.iter_mut().zip(p.iter()) {
            *o += v;
        }
    }
    out
}

#[test]
fn the_shares_add_up_to_the_global_batch_s_gradient() {
    for ranks in [2, 4, 8] {
        let (shares, whole) = shares(ranks, 16);
        let all: Vec<&Vec<f64>> = shares.iter().collect();
        let err = check(&sum(&all), &whole, 1e-12, "the whole batch").rel_l2_error;
        assert!(err < 1e-12, "{ranks} ranks: {err:e}");
    }
}

#[test]
fn a_share_missing_or_counted_twice_is_far_beyond_the_tolerance() {
    for ranks in [2, 4, 8] {
        let (shares, whole) = shares(ranks, 16);
        for r in 0..ranks {
            let missing: Vec<&Vec<f64>> = shares
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != r)
                .map(|(_, s)| s)
                .collect();
            let mut twice: Vec<&Vec<f64>> = shares.iter().collect();
            twice.push(&shares[r]);
            for (what, parts) in [("missing", missing), ("twice", twice)] {
                let err = check(&sum(&parts), &whole, 0.0, "the whole batch").rel_l2_error;
                assert!(
                    err > 1000.0 * FIRST_GRADIENT_TOLERANCE,
                    "{ranks} ranks, rank {r} {what}: {err:e}"
                );
            }
        }
    }
}

#[test]
fn the_end_of_a_run_is_judged_within_four_spreads_never_below_the_floors() {
    let floors = end_tolerances(None);
    assert_eq!((floors.weight_change, floors.loss_curve), (5e-4, 2e-5));
    let small = end_tolerances(Some(Distance {
        weight_change: 1e-5,
        loss_curve: 1e-7,
    }));
    assert_eq!((small.weight_change, small.loss_curve), (5e-4, 2e-5));
    let wide = end_tolerances(Some(Distance {
        weight_change: 1e-2,
        loss_curve: 1e-4,
    }));
    assert_eq!((wide.weight_change, wide.loss_curve), (4e-2, 4e-4));
}

#[test]
fn the_other_order_is_the_ring_s_next_chunk() {
    assert_eq!(rotated(2), [1, 0]);
    assert_eq!(rotated(4), [1, 2, 3, 0]);
}
