//! Where the members of a cluster go: all of them within one leaf switch, one spine group or
//! one fabric, on as few leaves as possible, or none of them.
//!
//! [`choose`] is the decision, in memory and without I/O, over the room each node has now
//! ([`Room`]: how many members of the SKU it could take). [`super::place_cluster`] reads the
//! rooms, asks, locks what was chosen and picks the slots. Keeping the decision pure lets the
//! tests hold it against a brute force on small fleets.
//!
//! Fewest leaves first, because traffic between leaves crosses a spine, where the fabric is
//! oversubscribed; then the group with the least room left over (best fit: a small group is
//! filled before a large one is broken into); then names, so the answer is the same each time.

use std::collections::BTreeMap;
use std::fmt;

use cp_base::ids::NodeId;
use serde::{Deserialize, Serialize};

/// The most members one cluster may have.
pub const MAX_MEMBERS: u32 = 128;

/// How close the members must be: under one leaf switch, one group of spine switches, or
/// anywhere on one fabric (which is the widest a cluster can be: one InfiniBand partition
/// does not cross fabrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Locality {
    Leaf,
    Spine,
    Fabric,
}

impl Locality {
    pub const ALL: [Locality; 3] = [Locality::Leaf, Locality::Spine, Locality::Fabric];

    pub fn as_str(self) -> &'static str {
        match self {
            Locality::Leaf => "leaf",
            Locality::Spine => "spine",
            Locality::Fabric => "fabric",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == s.trim())
    }

    /// This and the wider ones, narrowest first.
    fn and_wider(self) -> impl Iterator<Item = Locality> {
        Self::ALL.into_iter().filter(move |l| *l >= self)
    }
}

impl fmt::Display for Locality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a cluster asks of placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    pub members: u32,
    pub locality: Locality,
    /// False: `locality` if it can be had, else the next wider one.
    pub required: bool,
}

/// A node's place in the fabric and how many members of the SKU it can take now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Room {
    pub node: NodeId,
    pub hostname: String,
    pub fabric: String,
    pub spine: String,
    pub leaf: String,
    pub members: u32,
}

impl Room {
    /// The name of the group of `locality` this node is in, as people read it.
    fn group(&self, locality: Locality) -> Group<'_> {
        match locality {
            Locality::Leaf => Group(vec![&self.fabric, &self.spine, &self.leaf]),
            Locality::Spine => Group(vec![&self.fabric, &self.spine]),
            Locality::Fabric => Group(vec![&self.fabric]),
        }
    }

    fn leaf_key(&self) -> (&str, &str, &str) {
        (&self.fabric, &self.spine, &self.leaf)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Group<'a>(Vec<&'a String>);

impl Group<'_> {
    fn place(&self) -> Where {
        Where {
            fabric: self.0.first().map(|s| s.to_string()).unwrap_or_default(),
            spine: self.0.get(1).map(|s| s.to_string()),
            leaf: self.0.get(2).map(|s| s.to_string()),
        }
    }
}

impl fmt::Display for Group<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.place().fmt(f)
    }
}

/// The decision: how many members go on each chosen node (indexes into the rooms given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pick {
    /// (index into the rooms, members there), leaf by leaf.
    pub nodes: Vec<(usize, u32)>,
    /// The locality it was placed within (wider than asked only when preferred).
    pub within: Locality,
    pub leaves: usize,
    pub spines: usize,
    /// "4 members on leaf l1 (spine s1, fabric ib0)".
    pub why: String,
}

/// Why no pick: the most members each locality could hold now, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub want: Want,
    /// For each locality, narrowest first: the most members one group of it can take now,
    /// and that group (none when no node has room at all).
    pub best: Vec<(Locality, u32, Option<Where>)>,
}

/// A group of nodes in the fabric: a fabric, a spine group in it, or a leaf under that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Where {
    pub fabric: String,
    pub spine: Option<String>,
    pub leaf: Option<String>,
}

impl fmt::Display for Where {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fabric = &self.fabric;
        match (&self.spine, &self.leaf) {
            (Some(spine), Some(leaf)) => write!(f, "leaf {leaf} (spine {spine}, fabric {fabric})"),
            (Some(spine), None) => write!(f, "spine {spine} (fabric {fabric})"),
            _ => write!(f, "fabric {fabric}"),
        }
    }
}

impl Shortfall {
    /// The group of the asked locality that came closest, for the caller to say what holds
    /// it back ("3 of its nodes are draining").
    pub fn closest(&self) -> Option<&Where> {
        self.best
            .iter()
            .find(|(l, _, _)| *l == self.want.locality)
            .and_then(|(_, _, at)| at.as_ref())
    }
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Want {
            members, locality, ..
        } = self.want;
        if self.best.iter().all(|(_, n, _)| *n == 0) {
            return write!(
                f,
                "no node on an approved fabric place has room for a member now, so no cluster \
                 of {members} fits"
            );
        }
        let widest = if self.want.required {
            locality.to_string()
        } else {
            "fabric".to_string()
        };
        write!(f, "{members} members don't fit on one {widest} now: ")?;
        let parts: Vec<String> = self
            .best
            .iter()
            .map(|(l, n, name)| match name {
                Some(name) => format!("one {l} holds at most {n} ({name})"),
                None => format!("no {l} has room"),
            })
            .collect();
        f.write_str(&parts.join("; "))
    }
}

/// Chooses where `want.members` members go among `rooms`, or says why they don't fit.
pub fn choose(rooms: &[Room], want: Want) -> Result<Pick, Shortfall> {
    let localities: Vec<Locality> = if want.required {
        vec![want.locality]
    } else {
        want.locality.and_wider().collect()
    };
    for within in localities {
        if let Some(pick) = best_group(rooms, want.members, within) {
            return Ok(pick);
        }
    }
    Err(Shortfall {
        want,
        best: Locality::ALL
            .into_iter()
            .map(|l| {
                let (n, name) = most_in_one(rooms, l);
                (l, n, name)
            })
            .collect(),
    })
}

/// The room of each leaf of a group, with its nodes' indexes.
struct Leaf {
    spine: String,
    room: u32,
    nodes: Vec<usize>,
}

/// The best group of `within` that holds `members`, if any.
fn best_group(rooms: &[Room], members: u32, within: Locality) -> Option<Pick> {
    let mut groups: BTreeMap<Group, BTreeMap<(&str, &str, &str), Leaf>> = BTreeMap::new();
    for (i, r) in rooms.iter().enumerate().filter(|(_, r)| r.members > 0) {
        let leaf = groups
            .entry(r.group(within))
            .or_default()
            .entry(r.leaf_key())
            .or_insert_with(|| Leaf {
                spine: r.spine.clone(),
                room: 0,
                nodes: Vec::new(),
            });
        leaf.room = leaf.room.saturating_add(r.members);
        leaf.nodes.push(i);
    }
    // For each group that holds them, (leaves used, room left over): the smallest wins.
    struct Candidate<'g> {
        key: (usize, u32),
        group: &'g Group<'g>,
        used: Vec<(&'g Leaf, u32)>,
    }
    let mut best: Option<Candidate> = None;
    for (group, leaves) in &groups {
        let Some(used) = fewest_leaves(leaves.values().collect(), members) else {
            continue;
        };
        let total: u32 = leaves.values().map(|l| l.room).sum();
        let key = (used.len(), total - members);
        if best.as_ref().is_none_or(|b| key < b.key) {
            best = Some(Candidate { key, group, used });
        }
    }
    let Candidate {
        key: (leaves, _),
        group,
        used,
    } = best?;
    let spines = {
        let mut s: Vec<&str> = used.iter().map(|(l, _)| l.spine.as_str()).collect();
        s.sort_unstable();
        s.dedup();
        s.len()
    };
    let mut nodes = Vec::new();
    for (leaf, take) in &used {
        fill_leaf(rooms, &leaf.nodes, *take, &mut nodes);
    }
    Some(Pick {
        nodes,
        within,
        leaves,
        spines,
        why: match within {
            Locality::Leaf => format!("{members} members on {group}"),
            _ => format!(
                "{members} members on {leaves} leaf switch{} of {group}",
                if leaves == 1 { "" } else { "es" }
            ),
        },
    })
}

/// The fewest leaves whose room adds up to `members`, with how many members each takes:
/// the largest leaves, but for the last, which is the smallest that holds what remains
/// (as few leaves either way, and the large leaves left whole). None if all of them together
/// are too few.
fn fewest_leaves(mut leaves: Vec<&Leaf>, members: u32) -> Option<Vec<(&Leaf, u32)>> {
    leaves.sort_by_key(|l| std::cmp::Reverse(l.room));
    let mut used = Vec::new();
    let mut left = members;
    let mut rest = leaves.as_slice();
    while left > 0 {
        let (first, after) = rest.split_first()?;
        if first.room >= left {
            // The smallest leaf that holds the rest: the last in descending order that does.
            let last = rest.iter().rev().find(|l| l.room >= left)?;
            used.push((*last, left));
            return Some(used);
        }
        used.push((*first, first.room));
        left -= first.room;
        rest = after;
    }
    Some(used)
}

/// Puts `take` members on the nodes of one leaf: nodes with the most room first, so the
/// members share as few hosts as they can.
fn fill_leaf(rooms: &[Room], nodes: &[usize], mut take: u32, out: &mut Vec<(usize, u32)>) {
    let mut order = nodes.to_vec();
    order.sort_by(|&a, &b| {
        rooms[b]
            .members
            .cmp(&rooms[a].members)
            .then_with(|| rooms[a].hostname.cmp(&rooms[b].hostname))
    });
    for i in order {
        if take == 0 {
            break;
        }
        let here = rooms[i].members.min(take);
        out.push((i, here));
        take -= here;
    }
}

/// The most members one group of `locality` can take, and its name.
fn most_in_one(rooms: &[Room], locality: Locality) -> (u32, Option<Where>) {
    let mut per: BTreeMap<Group, u32> = BTreeMap::new();
    for r in rooms.iter().filter(|r| r.members > 0) {
        let n = per.entry(r.group(locality)).or_default();
        *n = n.saturating_add(r.members);
    }
    per.into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
        .map_or((0, None), |(g, n)| (n, Some(g.place())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn room(fabric: &str, spine: &str, leaf: &str, host: &str, members: u32) -> Room {
        Room {
            node: NodeId(uuid::Uuid::new_v4()),
            hostname: host.into(),
            fabric: fabric.into(),
            spine: spine.into(),
            leaf: leaf.into(),
            members,
        }
    }

    /// The demo's shape: two spines, leaves of four nodes of one 8-GPU member each.
    fn demo() -> Vec<Room> {
        let mut rooms = Vec::new();
        for (spine, leaves) in [("s1", ["l1", "l2"]), ("s2", ["l3", "l4"])] {
            for leaf in leaves {
                for n in 0..4 {
                    rooms.push(room("ib0", spine, leaf, &format!("{leaf}-n{n}"), 1));
                }
            }
        }
        rooms
    }

    fn want(members: u32, locality: Locality, required: bool) -> Want {
        Want {
            members,
            locality,
            required,
        }
    }

    #[test]
    fn four_fit_on_one_leaf_and_eight_need_a_spine() {
        let rooms = demo();
        let four = choose(&rooms, want(4, Locality::Leaf, true)).unwrap();
        assert_eq!((four.leaves, four.within), (1, Locality::Leaf));
        assert_eq!(four.nodes.len(), 4);
        let eight = choose(&rooms, want(8, Locality::Leaf, true)).unwrap_err();
        assert_eq!(eight.best[0].1, 4);
        assert_eq!(
            eight.closest().unwrap().to_string(),
            "leaf l1 (spine s1, fabric ib0)"
        );
        assert!(
            eight
                .to_string()
                .contains("8 members don't fit on one leaf"),
            "{eight}"
        );
        let spine = choose(&rooms, want(8, Locality::Leaf, false)).unwrap();
        assert_eq!(
            (spine.within, spine.leaves, spine.spines),
            (Locality::Spine, 2, 1)
        );
        let fabric = choose(&rooms, want(12, Locality::Spine, false)).unwrap();
        assert_eq!(
            (fabric.within, fabric.leaves, fabric.spines),
            (Locality::Fabric, 3, 2)
        );
        let none = choose(&rooms, want(17, Locality::Fabric, true)).unwrap_err();
        assert!(
            none.to_string()
                .contains("one fabric holds at most 16 (fabric ib0)"),
            "{none}"
        );
    }

    #[test]
    fn the_last_leaf_is_the_smallest_that_holds_the_rest() {
        let mut rooms = vec![
            room("f", "s", "big", "a", 6),
            room("f", "s", "mid", "b", 4),
            room("f", "s", "small", "c", 2),
        ];
        let pick = choose(&rooms, want(8, Locality::Spine, true)).unwrap();
        let hosts: Vec<&str> = pick
            .nodes
            .iter()
            .map(|(i, _)| rooms[*i].hostname.as_str())
            .collect();
        assert_eq!(
            hosts,
            ["a", "c"],
            "6 on big, then 2 on small, leaving mid whole"
        );
        // A member per node within a leaf goes on the roomiest node first.
        rooms = vec![room("f", "s", "l", "x", 1), room("f", "s", "l", "y", 3)];
        let pick = choose(&rooms, want(3, Locality::Leaf, true)).unwrap();
        assert_eq!(pick.nodes, vec![(1, 3)]);
    }

    #[test]
    fn a_full_fleet_says_nothing_has_room() {
        let rooms = vec![room("f", "s", "l", "x", 0)];
        let e = choose(&rooms, want(2, Locality::Fabric, true)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("no node on an approved fabric place"),
            "{e}"
        );
        assert_eq!(e.closest(), None);
    }

    /// The fewest leaves any group of `within` could hold them with, by trying every subset
    /// of each group's leaves.
    fn brute_fewest(rooms: &[Room], members: u32, within: Locality) -> Option<usize> {
        let mut groups: BTreeMap<Group, BTreeMap<(&str, &str, &str), u32>> = BTreeMap::new();
        for r in rooms {
            *groups
                .entry(r.group(within))
                .or_default()
                .entry(r.leaf_key())
                .or_default() += r.members;
        }
        let mut best: Option<usize> = None;
        for leaves in groups.values() {
            let room: Vec<u32> = leaves.values().copied().collect();
            for mask in 1u32..(1 << room.len()) {
                let sum: u32 = (0..room.len())
                    .filter(|i| mask & (1 << i) != 0)
                    .map(|i| room[i])
                    .sum();
                let n = mask.count_ones() as usize;
                if sum >= members && best.is_none_or(|b| n < b) {
                    best = Some(n);
                }
            }
        }
        best
    }

    #[test]
    fn matches_brute_force_on_random_small_fleets() {
        let mut rng = StdRng::seed_from_u64(74);
        for _ in 0..2000 {
            let mut rooms = Vec::new();
            for n in 0..rng.gen_range(1..14) {
                rooms.push(room(
                    ["f1", "f2"][rng.gen_range(0..2)],
                    ["s1", "s2", "s3"][rng.gen_range(0..3)],
                    ["l1", "l2", "l3"][rng.gen_range(0..3)],
                    &format!("n{n}"),
                    rng.gen_range(0..4),
                ));
            }
            let w = want(
                rng.gen_range(1..12),
                Locality::ALL[rng.gen_range(0..3)],
                rng.gen_bool(0.5),
            );
            let got = choose(&rooms, w);
            let tries: Vec<Locality> = if w.required {
                vec![w.locality]
            } else {
                w.locality.and_wider().collect()
            };
            let expected = tries
                .iter()
                .find_map(|l| brute_fewest(&rooms, w.members, *l).map(|n| (*l, n)));
            match (got, expected) {
                (Ok(pick), Some((within, fewest))) => {
                    assert_eq!(
                        (pick.within, pick.leaves),
                        (within, fewest),
                        "{rooms:?} {w:?}"
                    );
                    // All of them, none twice, within each node's room, in one group.
                    let total: u32 = pick.nodes.iter().map(|(_, n)| n).sum();
                    assert_eq!(total, w.members);
                    let mut seen: Vec<usize> = pick.nodes.iter().map(|(i, _)| *i).collect();
                    seen.sort_unstable();
                    seen.dedup();
                    assert_eq!(seen.len(), pick.nodes.len());
                    assert!(
                        pick.nodes
                            .iter()
                            .all(|(i, n)| *n > 0 && *n <= rooms[*i].members)
                    );
                    let first = rooms[pick.nodes[0].0].group(within);
                    assert!(
                        pick.nodes
                            .iter()
                            .all(|(i, _)| rooms[*i].group(within) == first)
                    );
                }
                (Err(short), None) => {
                    // What it says is the truth: no group of the asked locality holds them.
                    let asked = short.best.iter().find(|(l, ..)| *l == w.locality).unwrap();
                    assert!(asked.1 < w.members);
                }
                (got, expected) => panic!("{rooms:?} {w:?}: {got:?} but brute force {expected:?}"),
            }
        }
    }
}
