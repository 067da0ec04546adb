//! NVIDIA's tools, as discovery sees them: GPU names and UUIDs from `nvidia-smi`, and the NVLink
//! fabric partitions from the fabric manager. On a real host they are run (when installed); a
//! fixture holds their captured output in `tools/`. Both go through the same parsers.

use std::path::PathBuf;
use std::process::Command;

use agent_protocol::FabricPartition;

/// One line of `nvidia-smi --query-gpu=pci.bus_id,name,uuid --format=csv,noheader`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmiGpu {
    pub pci_address: String,
    pub name: String,
    pub uuid: String,
}

pub trait Tools {
    /// GPUs as `nvidia-smi` names them; empty when it is not installed.
    fn nvidia_smi_gpus(&self, warnings: &mut Vec<String>) -> Vec<SmiGpu>;
    /// The fabric partitions, with GPU physical ids resolved to PCI addresses; empty when the
    /// host has no fabric manager.
    fn fabric_partitions(
        &self,
        gpus: &[String],
        warnings: &mut Vec<String>,
    ) -> Vec<FabricPartition>;
}

/// The real host's tools.
pub struct HostTools {
    /// The command that prints the partition table (NVIDIA ships no stable CLI for it; sites
    /// use their fabric-manager client, e.g. `fmctl --address 127.0.0.1:6666 list`).
    pub fabric_partitions_cmd: Option<Vec<String>>,
}

impl Tools for HostTools {
    fn nvidia_smi_gpus(&self, warnings: &mut Vec<String>) -> Vec<SmiGpu> {
        let out = Command::new("nvidia-smi")
            .args(["--query-gpu=pci.bus_id,name,uuid", "--format=csv,noheader"])
            .output();
        match out {
            Ok(o) if o.status.success() => {
                parse_smi_csv(&String::from_utf8_lossy(&o.stdout), warnings)
            }
            Ok(o) => {
                warnings.push(format!(
                    "nvidia-smi failed ({}): {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
                Vec::new()
            }
            // Not installed: GPU names come from the PCI ids instead.
            Err(_) => Vec::new(),
        }
    }

    fn fabric_partitions(
        &self,
        gpus: &[String],
        warnings: &mut Vec<String>,
    ) -> Vec<FabricPartition> {
        let Some((program, args)) = self
            .fabric_partitions_cmd
            .as_ref()
            .and_then(|c| c.split_first())
        else {
            return Vec::new();
        };
        match Command::new(program).args(args).output() {
            Ok(o) if o.status.success() => {
                parse_partition_table(&String::from_utf8_lossy(&o.stdout), gpus, warnings)
            }
            Ok(o) => {
                warnings.push(format!("{program} failed ({})", o.status));
                Vec::new()
            }
            Err(e) => {
                warnings.push(format!("{program}: {e}"));
                Vec::new()
            }
        }
    }
}

/// A fixture's captured tool output: `tools/nvidia-smi.csv` and `tools/fabric-partitions.txt`,
/// each optional.
pub struct FixtureTools {
    pub dir: PathBuf,
}

impl Tools for FixtureTools {
    fn nvidia_smi_gpus(&self, warnings: &mut Vec<String>) -> Vec<SmiGpu> {
        std::fs::read_to_string(self.dir.join("nvidia-smi.csv"))
            .map(|s| parse_smi_csv(&s, warnings))
            .unwrap_or_default()
    }

    fn fabric_partitions(
        &self,
        gpus: &[String],
        warnings: &mut Vec<String>,
    ) -> Vec<FabricPartition> {
        std::fs::read_to_string(self.dir.join("fabric-partitions.txt"))
            .map(|s| parse_partition_table(&s, gpus, warnings))
            .unwrap_or_default()
    }
}

/// `00000000:1B:00.0, NVIDIA H100 80GB HBM3, GPU-…` → `0000:1b:00.0`.
pub fn parse_smi_csv(text: &str, warnings: &mut Vec<String>) -> Vec<SmiGpu> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [bus_id, name, uuid] = fields[..] else {
            warnings.push(format!("nvidia-smi: unexpected line {line:?}"));
            continue;
        };
        out.push(SmiGpu {
            pci_address: normalize_bus_id(bus_id),
            name: name.to_string(),
            uuid: uuid.to_string(),
        });
    }
    out
}

/// nvidia-smi writes an 8-digit domain in upper case; sysfs a 4-digit one in lower case.
pub fn normalize_bus_id(bus_id: &str) -> String {
    let lower = bus_id.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => lower,
    }
}

/// The fabric manager's partition table:
///
/// ```text
/// PARTITION ID STATUS GPUs NVLINKS GPU PHYSICAL IDs
/// 0 Inactive 8 144 1,2,3,4,5,6,7,8
/// ```
///
/// GPU physical ids are 1-based module numbers. We map module `n` to the `n`-th GPU in PCI
/// address order, which is how HGX baseboards we have documentation for number them; a real
/// host's capture (see the fixtures' README) is the check on that assumption.
pub fn parse_partition_table(
    text: &str,
    gpus: &[String],
    warnings: &mut Vec<String>,
) -> Vec<FabricPartition> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let [id, status, count, _nvlinks, ids] = cols[..] else {
            continue;
        };
        let Ok(id) = id.parse::<u32>() else {
            continue; // the header and the ---- rule
        };
        let physical: Result<Vec<usize>, _> = ids.split(',').map(str::parse::<usize>).collect();
        let Ok(physical) = physical else {
            warnings.push(format!("fabric partition {id}: unreadable GPU ids {ids:?}"));
            continue;
        };
        if count.parse::<usize>().ok() != Some(physical.len()) {
            warnings.push(format!(
                "fabric partition {id}: says {count} GPUs but lists {}",
                physical.len()
            ));
            continue;
        }
        let resolved: Option<Vec<String>> = physical
            .iter()
            .map(|p| p.checked_sub(1).and_then(|i| gpus.get(i)).cloned())
            .collect();
        let Some(resolved) = resolved else {
            warnings.push(format!(
                "fabric partition {id}: names a GPU this host does not have ({ids})"
            ));
            continue;
        };
        out.push(FabricPartition {
            id,
            active: status.eq_ignore_ascii_case("active"),
            gpus: resolved,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_are_normalized_to_sysfs_form() {
        assert_eq!(normalize_bus_id("00000000:1B:00.0"), "0000:1b:00.0");
        assert_eq!(normalize_bus_id("0000:1b:00.0"), "0000:1b:00.0");
    }

    #[test]
    fn partition_table_resolves_modules_and_reports_nonsense() {
        let gpus = vec!["0000:18:00.0".to_string(), "0000:2a:00.0".to_string()];
        let mut warnings = Vec::new();
        let table = "PARTITION ID STATUS GPUs NVLINKS GPU PHYSICAL IDs\n\
                     ------------ ------ ---- ------- ----------------\n\
                     0 Inactive 2 36 1,2\n\
                     1 Active 1 0 2\n\
                     2 Active 1 0 3\n\
                     3 Inactive 3 0 1,2\n";
        let parts = parse_partition_table(table, &gpus, &mut warnings);
        assert_eq!(
            parts,
            vec![
                FabricPartition {
                    id: 0,
                    active: false,
                    gpus: gpus.clone()
                },
                FabricPartition {
                    id: 1,
                    active: true,
                    gpus: vec![gpus[1].clone()]
                },
            ]
        );
        assert_eq!(
            warnings,
            vec![
                "fabric partition 2: names a GPU this host does not have (3)".to_string(),
                "fabric partition 3: says 3 GPUs but lists 2".to_string(),
            ]
        );
    }
}
