//! Where each node hangs off the InfiniBand fabric: its leaf switch and the group of spines
//! above that leaf, read from what operators already have, `ibnetdiscover`'s output or a
//! Slurm `topology.conf`. Parsing only: what a proposal becomes once approved is the fleet's.
//!
//! Both parsers treat their input as hostile (it is pasted or uploaded by an operator, but
//! produced by tools on hosts): bounded in size, names allowlisted, and every refusal names
//! the line and the rule.

use std::collections::{BTreeMap, BTreeSet};

use cp_base::Error;

/// The most a topology may hold: well above the largest fabrics (a few thousand nodes per
/// InfiniBand subnet), so that a mistaken upload is refused rather than stored.
pub const MAX_INPUT_BYTES: usize = 4 * 1024 * 1024;
pub const MAX_NODES: usize = 20_000;
pub const MAX_NAME_LEN: usize = 64;

/// One node's place: the leaf switch its HCA is cabled to and the spines that leaf reaches
/// (named by the lowest spine's name, so that leaves wired to the same spines share a group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricPlace {
    pub node: String,
    pub leaf: String,
    pub spine_group: String,
}

/// A fabric's places, one per node, sorted by node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FabricMap {
    pub places: Vec<FabricPlace>,
}

impl FabricMap {
    /// The leaves under each spine group, and the nodes under each leaf.
    pub fn tree(&self) -> BTreeMap<&str, BTreeMap<&str, Vec<&str>>> {
        let mut tree: BTreeMap<&str, BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
        for p in &self.places {
            tree.entry(&p.spine_group)
                .or_default()
                .entry(&p.leaf)
                .or_default()
                .push(&p.node);
        }
        tree
    }
}

fn invalid(line: usize, reason: impl std::fmt::Display) -> Error {
    Error::Invalid {
        field: "topology",
        reason: format!("line {line}: {reason}"),
    }
}

/// A switch's or node's name as it may be stored: letters, digits, `-`, `_`, `.`, at most
/// [`MAX_NAME_LEN`] long.
fn checked_name(line: usize, what: &str, name: &str) -> Result<String, Error> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(name.to_string())
    } else {
        Err(invalid(
            line,
            format!(
                "{what} {name:?} is not a name (letters, digits, '-', '_', '.', at most {MAX_NAME_LEN})"
            ),
        ))
    }
}

/// A fabric's name as an operator gives it on import, checked as the switches' names are.
pub fn checked_fabric_name(name: &str) -> Result<String, Error> {
    checked_place_name("fabric", name)
}

/// A fabric's, spine group's or leaf's name as an operator types it into `field`, checked as
/// the parsers check the names they read.
pub fn checked_place_name(field: &'static str, name: &str) -> Result<String, Error> {
    checked_name(0, field, name.trim()).map_err(|_| Error::Invalid {
        field,
        reason: format!(
            "{name:?} is not a name (letters, digits, '-', '_', '.', at most {MAX_NAME_LEN})"
        ),
    })
}

fn bounded(text: &str) -> Result<(), Error> {
    if text.len() > MAX_INPUT_BYTES {
        return Err(Error::Invalid {
            field: "topology",
            reason: format!("is {} bytes; at most {MAX_INPUT_BYTES}", text.len()),
        });
    }
    Ok(())
}

/// From leaves (with their nodes) and the spines each leaf reaches, the places; a node on two
/// leaves is refused (dual-rail fabrics are imported one rail at a time).
fn places(
    leaves: &BTreeMap<String, (usize, Vec<String>)>,
    spines_of: &BTreeMap<String, BTreeSet<String>>,
) -> Result<FabricMap, Error> {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    let mut places = Vec::new();
    for (leaf, (line, nodes)) in leaves {
        let group = spines_of
            .get(leaf)
            .and_then(|s| s.iter().next())
            .cloned()
            .unwrap_or_else(|| leaf.clone());
        for node in nodes {
            if let Some(other) = seen.insert(node, leaf) {
                return Err(invalid(
                    *line,
                    format!(
                        "node {node} is on leaf {other} and on leaf {leaf}; import one rail at a time"
                    ),
                ));
            }
            places.push(FabricPlace {
                node: node.clone(),
                leaf: leaf.clone(),
                spine_group: group.clone(),
            });
        }
    }
    if places.len() > MAX_NODES {
        return Err(Error::Invalid {
            field: "topology",
            reason: format!("names {} nodes; at most {MAX_NODES}", places.len()),
        });
    }
    places.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(FabricMap { places })
}

/// `ibnetdiscover` output (the default format, not `--ports`): each `Switch` block lists its
/// ports; a switch with hosts (`"H-…"`) on its ports is a leaf, and the switches on its other
/// ports are its spines. A host's name is the first word of its node description, which is
/// the hostname by default (`<hostname> <HCA>`).
pub fn parse_ibnetdiscover(text: &str) -> Result<FabricMap, Error> {
    bounded(text)?;
    // Switch GUID → description, and each switch's neighbours: hosts and switch GUIDs.
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut hosts: BTreeMap<String, (usize, Vec<String>)> = BTreeMap::new();
    let mut uplinks: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            current = None;
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix("Switch") {
            let guid =
                quoted(rest).ok_or_else(|| invalid(n, "a Switch line without its \"S-<guid>\""))?;
            let desc = comment_name(rest)
                .ok_or_else(|| invalid(n, "a Switch line without its description"))?;
            names.insert(guid.to_string(), checked_name(n, "switch", desc)?);
            current = Some(guid.to_string());
            continue;
        }
        if line.starts_with("Ca") || line.starts_with("Rt") {
            current = None;
            continue;
        }
        let Some(switch) = &current else { continue };
        if !line.starts_with('[') {
            continue;
        }
        let remote = quoted(line)
            .ok_or_else(|| invalid(n, "a port line without its remote \"H-…\" or \"S-…\""))?;
        if remote.starts_with("H-") {
            let desc = comment_name(line)
                .ok_or_else(|| invalid(n, "a host port without its node description"))?;
            let host = desc.split_whitespace().next().unwrap_or("");
            let host = checked_name(n, "host", host)?;
            hosts
                .entry(switch.clone())
                .or_insert((n, Vec::new()))
                .1
                .push(host);
        } else if remote.starts_with("S-") {
            uplinks
                .entry(switch.clone())
                .or_default()
                .insert(remote.to_string());
        } else {
            return Err(invalid(
                n,
                format!("the remote {remote:?} is neither a host nor a switch"),
            ));
        }
    }
    let mut leaves = BTreeMap::new();
    let mut spines_of = BTreeMap::new();
    for (guid, found) in hosts {
        let leaf = names[&guid].clone();
        let spines: BTreeSet<String> = uplinks
            .get(&guid)
            .into_iter()
            .flatten()
            .filter_map(|g| names.get(g).cloned())
            .collect();
        spines_of.insert(leaf.clone(), spines);
        leaves.insert(leaf, found);
    }
    places(&leaves, &spines_of)
}

/// The first `"…"` of a line, without its quotes.
fn quoted(s: &str) -> Option<&str> {
    let start = s.find('"')? + 1;
    let len = s[start..].find('"')?;
    Some(&s[start..start + len])
}

/// The first quoted text after the line's `#`: the node description ibnetdiscover prints.
fn comment_name(s: &str) -> Option<&str> {
    quoted(&s[s.find('#')?..]).map(str::trim)
}

/// A Slurm `topology.conf` for `topology/tree`: `SwitchName=… Nodes=…` lines are leaves,
/// `SwitchName=… Switches=…` lines are the switches above them. Node and switch lists are
/// Slurm hostlists (`gpu[001-016,020],login1`).
pub fn parse_slurm_topology(text: &str) -> Result<FabricMap, Error> {
    bounded(text)?;
    let mut leaves: BTreeMap<String, (usize, Vec<String>)> = BTreeMap::new();
    let mut above: Vec<(String, usize, Vec<String>)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut name = None;
        let mut nodes = None;
        let mut switches = None;
        for field in line.split_whitespace() {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| invalid(n, format!("{field:?} is not KEY=VALUE")))?;
            match key.to_ascii_lowercase().as_str() {
                "switchname" => name = Some(checked_name(n, "switch", value)?),
                "nodes" => nodes = Some(hostlist(n, value)?),
                "switches" => switches = Some(hostlist(n, value)?),
                // Link speeds weigh Slurm's own choice; placement here counts leaves.
                "linkspeed" => {}
                _ => {
                    return Err(invalid(
                        n,
                        format!("unknown key {key:?} (SwitchName, Nodes, Switches, LinkSpeed)"),
                    ));
                }
            }
        }
        let name = name.ok_or_else(|| invalid(n, "a line without SwitchName"))?;
        match (nodes, switches) {
            (Some(nodes), None) => {
                if leaves.insert(name.clone(), (n, nodes)).is_some() {
                    return Err(invalid(n, format!("switch {name} is defined twice")));
                }
            }
            (None, Some(below)) => above.push((name, n, below)),
            (Some(_), Some(_)) => {
                return Err(invalid(
                    n,
                    "a switch has either Nodes or Switches, not both",
                ));
            }
            (None, None) => return Err(invalid(n, "a switch without Nodes or Switches")),
        }
    }
    let mut spines_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (spine, n, below) in &above {
        for leaf in below {
            if !leaves.contains_key(leaf) && !above.iter().any(|a| &a.0 == leaf) {
                return Err(invalid(
                    *n,
                    format!("switch {spine} names {leaf}, which no line defines"),
                ));
            }
            if leaves.contains_key(leaf) {
                spines_of
                    .entry(leaf.clone())
                    .or_default()
                    .insert(spine.clone());
            }
        }
    }
    places(&leaves, &spines_of)
}

/// A Slurm hostlist expanded: comma-separated names, each with at most one bracketed range
/// list (`gpu[001-004,010]`), zero padding kept.
fn hostlist(line: usize, list: &str) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    let mut rest = list;
    while !rest.is_empty() {
        // The next name ends at a comma outside brackets.
        let mut depth = 0;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '[' => depth += 1,
                    ']' => depth -= 1,
                    _ => {}
                }
                c == ',' && depth == 0
            })
            .map_or(rest.len(), |(i, _)| i);
        let item = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or("");
        match item.split_once('[') {
            None => out.push(checked_name(line, "host", item)?),
            Some((prefix, ranges)) => {
                let ranges = ranges.strip_suffix(']').ok_or_else(|| {
                    invalid(line, format!("{item:?}: a range list ends with ']'"))
                })?;
                for range in ranges.split(',') {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    let width = lo.len();
                    let (a, b) = match (lo.parse::<u32>(), hi.parse::<u32>()) {
                        (Ok(a), Ok(b)) if a <= b => (a, b),
                        _ => {
                            return Err(invalid(
                                line,
                                format!("{item:?}: {range:?} is not a range of numbers"),
                            ));
                        }
                    };
                    if out.len() + (b - a) as usize >= MAX_NODES {
                        return Err(invalid(
                            line,
                            format!("{item:?} names more than {MAX_NODES} hosts"),
                        ));
                    }
                    for k in a..=b {
                        out.push(checked_name(line, "host", &format!("{prefix}{k:0width$}"))?);
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(e: Error) -> String {
        match e {
            Error::Invalid {
                field: "topology",
                reason,
            } => reason,
            other => panic!("expected an invalid topology, got {other:?}"),
        }
    }

    #[test]
    fn an_ibnetdiscover_fabric_puts_each_host_under_its_leaf_and_the_leaves_under_their_spines() {
        let map = parse_ibnetdiscover(include_str!("fixtures/ibnetdiscover.txt")).unwrap();
        let tree = map.tree();
        assert_eq!(tree.len(), 1, "{tree:?}");
        let leaves = &tree["spine-01"];
        assert_eq!(
            leaves.keys().copied().collect::<Vec<_>>(),
            ["leaf-01", "leaf-02"]
        );
        assert_eq!(leaves["leaf-01"], ["gpu-001", "gpu-002"]);
        assert_eq!(leaves["leaf-02"], ["gpu-003", "gpu-004"]);
        assert_eq!(map.places.len(), 4);
    }

    #[test]
    fn a_slurm_topology_names_leaves_and_spine_groups_from_its_switch_lines() {
        let map = parse_slurm_topology(include_str!("fixtures/topology.conf")).unwrap();
        let tree = map.tree();
        assert_eq!(tree.keys().copied().collect::<Vec<_>>(), ["s-a1", "s-b1"]);
        assert_eq!(
            tree["s-a1"]["leaf1"],
            ["gpu001", "gpu002", "gpu003", "gpu004"]
        );
        assert_eq!(tree["s-a1"]["leaf2"], ["gpu005", "gpu006", "gpu010"]);
        assert_eq!(tree["s-b1"]["leaf3"], ["h100-a", "h100-b"]);
        assert_eq!(map.places.len(), 9);
    }

    #[test]
    fn hostlists_keep_their_padding_and_refuse_what_is_not_a_range() {
        assert_eq!(
            hostlist(1, "n[08-10],x").unwrap(),
            ["n08", "n09", "n10", "x"]
        );
        assert!(reason(hostlist(3, "n[5-2]").unwrap_err()).starts_with("line 3: "));
        assert!(reason(hostlist(1, "n[1-3").unwrap_err()).contains("ends with ']'"));
        assert!(reason(hostlist(1, "n[0-99999]").unwrap_err()).contains("more than 20000"));
        assert!(reason(hostlist(1, "a;rm").unwrap_err()).contains("is not a name"));
    }

    #[test]
    fn what_is_not_a_topology_is_refused_with_its_line() {
        let twice = "SwitchName=l1 Nodes=a[1-2]\nSwitchName=l2 Nodes=a2\n";
        assert!(
            reason(parse_slurm_topology(twice).unwrap_err())
                .contains("line 2: node a2 is on leaf l1 and on leaf l2")
        );
        let dangling = "SwitchName=l1 Nodes=a1\nSwitchName=s1 Switches=l1,l9\n";
        assert_eq!(
            reason(parse_slurm_topology(dangling).unwrap_err()),
            "line 2: switch s1 names l9, which no line defines"
        );
        assert!(
            reason(parse_slurm_topology("SwitchName=l1 Nodes=a1 Colour=red\n").unwrap_err())
                .contains("unknown key \"Colour\"")
        );
        assert!(
            reason(parse_slurm_topology("Nodes=a1\n").unwrap_err()).contains("without SwitchName")
        );
        let bad_host = "Switch\t36 \"S-01\"\t\t# \"leaf-01\" enhanced port 0 lid 3\n[1]\t\"H-02\"[1](3)\t\t# \"$(reboot) HCA-1\" lid 5 4xNDR\n";
        assert!(
            reason(parse_ibnetdiscover(bad_host).unwrap_err())
                .contains("line 2: host \"$(reboot)\"")
        );
        let huge = "#".repeat(MAX_INPUT_BYTES + 1);
        assert!(reason(parse_ibnetdiscover(&huge).unwrap_err()).contains("bytes; at most"));
    }
}
