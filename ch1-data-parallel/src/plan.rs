//! The bucket plan: which gradients are reduced together, and when.
//!
//! The gradients sit in one flat buffer, layer by layer `[W0 | b0 | W1 | b1 | ...]`
//! ([mlp::arch]). Backward produces them from the last layer down, so the plan walks the
//! tensors in that order (`bL, WL, bL-1, WL-1, ...`) and packs them into buckets of at most
//! `bucket_bytes`, never splitting a tensor: one larger than a bucket gets a bucket of its own.
//! Tensors adjacent in backward order are adjacent in the buffer, so every bucket is one
//! contiguous range and one all-reduce. A bucket is complete once backward has passed the
//! lowest layer it holds; the schedule lists, after each layer's backward, the buckets that
//! became complete there, each launched exactly once.

use std::ops::Range;

use mlp::Arch;

/// One gradient tensor in the flat buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    pub layer: usize,
    /// "W" or "b".
    pub kind: &'static str,
    pub range: Range<usize>,
}

/// Gradients reduced by one all-reduce: a contiguous range of the flat buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// Indices into [Plan::tensors], in backward order.
    pub tensors: Vec<usize>,
    /// Elements of the flat gradient buffer.
    pub range: Range<usize>,
    /// Backward has produced every tensor of the bucket once this layer's backward is queued.
    pub ready_after_layer: usize,
}

/// The buckets and when each is reduced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Every gradient tensor, in backward order.
    pub tensors: Vec<Tensor>,
    pub buckets: Vec<Bucket>,
    /// `schedule[l]`: the buckets to all-reduce right after layer `l`'s backward.
    pub schedule: Vec<Vec<usize>>,
}

/// Bytes of one gradient element (fp32).
pub const ELEMENT_BYTES: usize = 4;

impl Plan {
    /// Buckets of at most `bucket_bytes` (at least one element) over `arch`'s gradients.
    pub fn new(arch: &Arch, bucket_bytes: usize) -> Plan {
        let cap = (bucket_bytes / ELEMENT_BYTES).max(1);
        let layers = arch.layers();
        let tensors: Vec<Tensor> = layers
            .iter()
            .enumerate()
            .rev()
            .flat_map(|(l, layer)| {
                [
                    Tensor {
                        layer: l,
                        kind: "b",
                        range: layer.b.clone(),
                    },
                    Tensor {
                        layer: l,
                        kind: "W",
                        range: layer.w.clone(),
                    },
                ]
            })
            .collect();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut open: Vec<usize> = Vec::new();
        let mut open_len = 0;
        for (i, t) in tensors.iter().enumerate() {
            let len = t.range.len();
            if !open.is_empty() && open_len + len > cap {
                groups.push(std::mem::take(&mut open));
                open_len = 0;
            }
            open.push(i);
            open_len += len;
            if open_len >= cap {
                groups.push(std::mem::take(&mut open));
                open_len = 0;
            }
        }
        if !open.is_empty() {
            groups.push(open);
        }
        let buckets: Vec<Bucket> = groups
            .into_iter()
            .map(|members| {
                let start = members.iter().map(|&i| tensors[i].range.start).min();
                let end = members.iter().map(|&i| tensors[i].range.end).max();
                let ready = members.iter().map(|&i| tensors[i].layer).min();
                Bucket {
                    range: start.unwrap_or(0)..end.unwrap_or(0),
                    ready_after_layer: ready.unwrap_or(0),
                    tensors: members,
                }
            })
            .collect();
        let mut schedule = vec![Vec::new(); layers.len()];
        for (b, bucket) in buckets.iter().enumerate() {
            schedule[bucket.ready_after_layer].push(b);
        }
        Plan {
            tensors,
            buckets,
            schedule,
        }
    }

    /// Elements of the whole gradient buffer.
    pub fn elements(&self) -> usize {
        self.buckets.iter().map(|b| b.range.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deep() -> Arch {
        Arch {
            input: 64,
            hidden: 128,
            depth: 3,
            classes: 10,
        }
    }

    /// Every element of the buffer in exactly one bucket, every bucket one contiguous run of
    /// whole tensors, in backward order.
    fn assert_covers(arch: &Arch, plan: &Plan) {
        let n = arch.param_count();
        let mut seen = vec![0u8; n];
        for b in &plan.buckets {
            for i in b.range.clone() {
                seen[i] += 1;
            }
            let len: usize = b.tensors.iter().map(|&t| plan.tensors[t].range.len()).sum();
            assert_eq!(
                len,
                b.range.len(),
                "a bucket is its tensors, nothing between"
            );
        }
        assert!(seen.iter().all(|&c| c == 1), "every gradient exactly once");
        let order: Vec<usize> = plan
            .buckets
            .iter()
            .flat_map(|b| b.tensors.clone())
            .collect();
        assert_eq!(order, (0..plan.tensors.len()).collect::<Vec<_>>());
        // Backward order: the last layer's bias first, the first layer's weights last.
        let first = &plan.tensors[0];
        assert_eq!((first.layer, first.kind), (arch.depth, "b"));
        let last = plan.tensors.last().unwrap();
        assert_eq!((last.layer, last.kind), (0, "W"));
        assert!(plan
            .buckets
            .windows(2)
            .all(|w| w[0].range.start > w[1].range.start));
        assert_eq!(plan.elements(), n);
    }

    #[test]
    fn buckets_cover_every_gradient_once_in_backward_order() {
        for arch in [deep(), Arch::one_hidden_layer(4096)] {
            for bytes in [4, 1000, 64 << 10, 1 << 20, 25 << 20, 1 << 30] {
                assert_covers(&arch, &Plan::new(&arch, bytes));
            }
        }
    }

    #[test]
    fn sizes_are_respected_and_large_tensors_stand_alone() {
        let arch = deep();
        let bytes = 40_000; // 10000 elements: W1, W2 (128x128 = 16384) are larger
        let plan = Plan::new(&arch, bytes);
        for b in &plan.buckets {
            if b.tensors.len() > 1 {
                assert!(b.range.len() * ELEMENT_BYTES <= bytes, "{b:?}");
            } else {
                let t = &plan.tensors[b.tensors[0]];
                assert_eq!(b.range, t.range);
            }
        }
        let big: Vec<&Bucket> = plan
            .buckets
            .iter()
            .filter(|b| b.range.len() * ELEMENT_BYTES > bytes)
            .collect();
        assert_eq!(big.len(), 2, "W1 and W2 each alone");
        assert!(big.iter().all(|b| b.tensors.len() == 1));
        // One bucket larger than everything: the whole buffer in one reduction.
        let one = Plan::new(&arch, 1 << 30);
        assert_eq!(one.buckets.len(), 1);
        assert_eq!(one.buckets[0].range, 0..arch.param_count());
        assert_eq!(
            one.schedule[0],
            vec![0],
            "complete only after the first layer"
        );
    }

    #[test]
    fn each_bucket_is_launched_once_after_all_its_tensors_exist() {
        for bytes in [4, 1000, 40_000, 1 << 20] {
            let plan = Plan::new(&deep(), bytes);
            let mut launched = vec![0; plan.buckets.len()];
            // Backward visits layers top down; after layer l, tensors of layers >= l exist.
            for l in (0..plan.schedule.len()).rev() {
                for &b in &plan.schedule[l] {
                    launched[b] += 1;
                    for &t in &plan.buckets[b].tensors {
                        assert!(plan.tensors[t].layer >= l, "bucket {b} launched early");
                    }
                    // Not later than needed: its lowest layer is this one.
                    assert!(plan.buckets[b]
                        .tensors
                        .iter()
                        .any(|&t| plan.tensors[t].layer == l));
                }
            }
            assert!(launched.iter().all(|&n| n == 1), "{launched:?}");
        }
    }

    #[test]
    fn the_lessons_model_in_25_mib_buckets() {
        let arch = Arch {
            depth: 4,
            ..Arch::one_hidden_layer(4096)
        };
        let plan = Plan::new(&arch, 25 << 20);
        let kinds = |b: &Bucket| -> Vec<String> {
            b.tensors
                .iter()
                .map(|&t| format!("{}{}", plan.tensors[t].kind, plan.tensors[t].layer))
                .collect()
        };
        let buckets: Vec<Vec<String>> = plan.buckets.iter().map(kinds).collect();
        // Each 64 MiB hidden W alone; the output layer's gradients with b3; W0 (4 MiB) with b0.
        assert_eq!(
            buckets,
            [
                vec!["b4", "W4", "b3"],
                vec!["W3"],
                vec!["b2"],
                vec!["W2"],
                vec!["b1"],
                vec!["W1"],
                vec!["b0", "W0"],
            ]
        );
        assert_eq!(
            plan.schedule,
            vec![vec![6], vec![4, 5], vec![2, 3], vec![0, 1], vec![]]
        );
    }
}
