//! Choosing slots on one node: pure, so that every rule is unit- and property-tested.
//!
//! - On a node with NVLink fabric partitions (an NVSwitch system), a 2-, 4- or 8-GPU request
//!   takes exactly one fully free partition of that size; any other set would have no NVLink
//!   between its GPUs. Of those, it takes the one that breaks the fewest fully free larger
//!   partitions (keep 8s whole before 4s); a single GPU likewise comes from an already broken
//!   partition when one exists.
//! - Without partitions (PCIe hosts), any `count` free slots of the node will do; it prefers
//!   one NUMA node, the one with the fewest free slots that still fits (best fit), and only
//!   spans NUMA nodes when no single one has room.

use cp_base::ids::SlotId;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreeSlot {
    pub id: SlotId,
    pub index: i32,
    pub numa: i32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    pub id: i32,
    pub slots: Vec<SlotId>,
}

/// What placement knows about one node: its free slots and its partitions (all of them).
#[derive(Clone, Debug, Default)]
pub struct NodeView {
    pub free: Vec<FreeSlot>,
    pub partitions: Vec<Partition>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub slots: Vec<SlotId>,
    /// Why these slots, in a sentence.
    pub why: String,
}

impl NodeView {
    fn is_free(&self, id: SlotId) -> bool {
        self.free.iter().any(|s| s.id == id)
    }

    fn fully_free(&self, p: &Partition) -> bool {
        p.slots.iter().all(|&s| self.is_free(s))
    }

    /// How many fully free partitions larger than `size` containing any of `slots` a choice
    /// would break, largest size first (compared lexicographically).
    fn breaks(&self, slots: &[SlotId], size: usize) -> [usize; 3] {
        let mut out = [0; 3];
        for (i, larger) in [8, 4, 2].into_iter().enumerate() {
            if larger <= size {
                continue;
            }
            out[i] = self
                .partitions
                .iter()
                .filter(|p| p.slots.len() == larger && self.fully_free(p))
                .filter(|p| p.slots.iter().any(|s| slots.contains(s)))
                .count();
        }
        out
    }

    /// How many disjoint `count`-slot sets this node could give right now: what the catalog
    /// counts (the database computes the same in `refresh_node_free_blocks`).
    pub fn blocks(&self, count: usize) -> usize {
        if count == 1 {
            self.free.len()
        } else if self.partitions.is_empty() {
            self.free.len() / count
        } else {
            self.partitions
                .iter()
                .filter(|p| p.slots.len() == count && self.fully_free(p))
                .count()
        }
    }

    /// The slots for a `count`-GPU request, or `None` when this node can't give them.
    pub fn choose(&self, count: usize) -> Option<Choice> {
        if count == 0 || self.free.len() < count {
            return None;
        }
        if !self.partitions.is_empty() {
            if count == 1 {
                let best = self
                    .free
                    .iter()
                    .min_by_key(|s| (self.breaks(&[s.id], 1), s.index))?;
                let broken = self.breaks(&[best.id], 1);
                return Some(Choice {
                    slots: vec![best.id],
                    why: if broken == [0, 0, 0] {
                        format!(
                            "slot {}: from an already broken NVLink partition",
                            best.index
                        )
                    } else {
                        format!(
                            "slot {}: no broken NVLink partition had a free GPU",
                            best.index
                        )
                    },
                });
            }
            let best = self
                .partitions
                .iter()
                .filter(|p| p.slots.len() == count && self.fully_free(p))
                .min_by_key(|p| (self.breaks(&p.slots, count), p.id))?;
            let broken = self.breaks(&best.slots, count);
            let mut slots = best.slots.clone();
            slots.sort_by_key(|id| self.index_of(*id));
            return Some(Choice {
                why: format!(
                    "NVLink partition {} ({} GPUs){}",
                    best.id,
                    count,
                    if broken.iter().all(|&b| b == 0) {
                        ", leaving every larger free partition whole".to_string()
                    } else {
                        format!(
                            ", breaking {} larger free partition(s): no smaller hole fits",
                            broken.iter().sum::<usize>()
                        )
                    }
                ),
                slots,
            });
        }
        // No fabric: prefer one NUMA node, the fullest that still fits.
        let mut numas: Vec<i32> = self.free.iter().map(|s| s.numa).collect();
        numas.sort();
        numas.dedup();
        let on = |n: i32| -> Vec<&FreeSlot> {
            let mut v: Vec<&FreeSlot> = self.free.iter().filter(|s| s.numa == n).collect();
            v.sort_by_key(|s| s.index);
            v
        };
        if let Some(n) = numas
            .iter()
            .copied()
            .filter(|&n| on(n).len() >= count)
            .min_by_key(|&n| (on(n).len(), n))
        {
            return Some(Choice {
                slots: on(n).iter().take(count).map(|s| s.id).collect(),
                why: format!("{count} slot(s) on NUMA node {n} (best fit)"),
            });
        }
        // Span NUMA nodes, taking from the fullest ones first.
        numas.sort_by_key(|&n| (std::cmp::Reverse(on(n).len()), n));
        let mut slots = Vec::new();
        let mut used = Vec::new();
        for n in numas {
            for s in on(n) {
                if slots.len() < count {
                    slots.push(s.id);
                    if !used.contains(&n) {
                        used.push(n);
                    }
                }
            }
        }
        Some(Choice {
            why: format!(
                "{count} slots across NUMA nodes {}: no single NUMA node has {count} free",
                used.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
            slots,
        })
    }

    /// The slot index of a free slot.
    pub fn index_of(&self, id: SlotId) -> i32 {
        self.free
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.index)
            .unwrap_or(i32::MAX)
    }

    /// Marks `slots` taken (for simulations and tests).
    pub fn take(&mut self, slots: &[SlotId]) {
        self.free.retain(|s| !slots.contains(&s.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn id(n: u128) -> SlotId {
        SlotId(uuid::Uuid::from_u128(n + 1))
    }

    /// An HGX-like node: 8 GPUs, NUMA 0 for 0-3 and 1 for 4-7, partitions 8, 4+4, 2+2+2+2.
    fn hgx() -> NodeView {
        let free = (0..8)
            .map(|i| FreeSlot {
                id: id(i),
                index: i as i32,
                numa: (i / 4) as i32,
            })
            .collect();
        let part = |pid: i32, r: std::ops::Range<u128>| Partition {
            id: pid,
            slots: r.map(id).collect(),
        };
        NodeView {
            free,
            partitions: vec![
                part(0, 0..8),
                part(1, 0..4),
                part(2, 4..8),
                part(3, 0..2),
                part(4, 2..4),
                part(5, 4..6),
                part(6, 6..8),
            ],
        }
    }

    fn pcie(numa_of: &[i32]) -> NodeView {
        NodeView {
            free: numa_of
                .iter()
                .enumerate()
                .map(|(i, &n)| FreeSlot {
                    id: id(i as u128),
                    index: i as i32,
                    numa: n,
                })
                .collect(),
            partitions: vec![],
        }
    }

    fn indexes(c: &Choice) -> Vec<u128> {
        c.slots.iter().map(|s| s.0.as_u128() - 1).collect()
    }

    #[test]
    fn multi_gpu_requests_take_a_whole_partition_of_that_size() {
        let node = hgx();
        assert_eq!(
            indexes(&node.choose(8).unwrap()),
            (0..8).collect::<Vec<_>>()
        );
        assert_eq!(indexes(&node.choose(4).unwrap()), vec![0, 1, 2, 3]);
        assert_eq!(indexes(&node.choose(2).unwrap()), vec![0, 1]);
        // With slot 1 taken, no partition containing it is valid: the pair is 2,3.
        let mut node = hgx();
        node.take(&[id(1)]);
        assert_eq!(indexes(&node.choose(2).unwrap()), vec![2, 3]);
        assert!(node.choose(8).is_none(), "the 8-partition is broken");
        assert_eq!(indexes(&node.choose(4).unwrap()), vec![4, 5, 6, 7]);
    }

    #[test]
    fn a_set_that_is_not_a_partition_is_never_chosen() {
        // Free: 1, 2, 5, 6: four GPUs, but no 2-partition is whole.
        let mut node = hgx();
        node.take(&[id(0), id(3), id(4), id(7)]);
        assert_eq!(node.blocks(2), 0);
        assert!(node.choose(2).is_none());
        assert_eq!(node.blocks(1), 4);
    }

    #[test]
    fn packing_keeps_larger_partitions_whole() {
        // Slot 0 is taken: the 8 and the first 4 are broken. A pair should come from the
        // broken 4 (2,3), not from the whole 4 (4..8).
        let mut node = hgx();
        node.take(&[id(0)]);
        let c = node.choose(2).unwrap();
        assert_eq!(indexes(&c), vec![2, 3]);
        assert!(
            c.why.contains("leaving every larger free partition whole"),
            "{}",
            c.why
        );
        // A single GPU comes from the broken pair (slot 1), not from a whole one.
        let c = node.choose(1).unwrap();
        assert_eq!(indexes(&c), vec![1]);
        // On a whole node a pair must break the 8 and a 4: it says so.
        let c = hgx().choose(2).unwrap();
        assert!(
            c.why.contains("breaking 2 larger free partition(s)"),
            "{}",
            c.why
        );
    }

    #[test]
    fn without_partitions_one_numa_node_is_preferred_and_the_fullest_that_fits() {
        // NUMA 0 has 3 free, NUMA 1 has 2 free.
        let node = pcie(&[0, 0, 0, 1, 1]);
        let c = node.choose(2).unwrap();
        assert_eq!(
            indexes(&c),
            vec![3, 4],
            "best fit: NUMA 1 is the tighter hole"
        );
        assert!(c.why.contains("NUMA node 1"));
        let c = node.choose(3).unwrap();
        assert_eq!(indexes(&c), vec![0, 1, 2]);
        // Four only fit across NUMA nodes, and it says so.
        let c = node.choose(4).unwrap();
        assert_eq!(c.slots.len(), 4);
        assert!(c.why.contains("across NUMA nodes 0 and 1"), "{}", c.why);
        assert!(node.choose(6).is_none());
        assert_eq!(node.blocks(2), 2);
    }

    /// Property: for random nodes and random request sequences, choices are always free,
    /// distinct slots of this node, of the requested size, and partitions are respected;
    /// `blocks` agrees with whether `choose` succeeds.
    #[test]
    fn random_nodes_and_requests_never_double_book_and_respect_partitions() {
        for seed in 0..400u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut node = if rng.gen_bool(0.5) {
                hgx()
            } else {
                let n = rng.gen_range(1..=8);
                pcie(&(0..n).map(|_| rng.gen_range(0..2)).collect::<Vec<_>>())
            };
            let all_partitions = node.partitions.clone();
            let mut taken: Vec<SlotId> = Vec::new();
            for _ in 0..12 {
                let count = [1, 2, 4, 8][rng.gen_range(0..4)];
                let expected = node.blocks(count) > 0;
                match node.choose(count) {
                    Some(c) => {
                        assert!(
                            expected,
                            "seed {seed}: chose {count} where blocks said none"
                        );
                        assert_eq!(c.slots.len(), count, "seed {seed}");
                        for s in &c.slots {
                            assert!(!taken.contains(s), "seed {seed}: {s} double-booked");
                            assert!(node.is_free(*s), "seed {seed}: {s} not free");
                        }
                        let mut sorted = c.slots.clone();
                        sorted.sort();
                        sorted.dedup();
                        assert_eq!(sorted.len(), count, "seed {seed}: repeated slot");
                        if count > 1 && !all_partitions.is_empty() {
                            assert!(
                                all_partitions.iter().any(|p| {
                                    let mut ps = p.slots.clone();
                                    ps.sort();
                                    ps == sorted
                                }),
                                "seed {seed}: {count} GPUs that are not a partition"
                            );
                        }
                        taken.extend(&c.slots);
                        node.take(&c.slots);
                    }
                    None => assert!(!expected, "seed {seed}: blocks said {count} fits"),
                }
            }
        }
    }
}
