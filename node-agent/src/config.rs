//! The agent's settings: a TOML file (`--config`, e.g. `/etc/gpu-node-agent.toml`) under
//! command-line flags. A flag wins over the file; the file wins over the defaults.
//!
//! ```toml
//! state_dir = "/var/lib/gpu-node-agent"
//! driver = "libvirt"                 # or "simulated" (with fixture = "…")
//! root = "/"                         # where sysfs is read
//! libvirt_uri = "qemu:///system"
//! telemetry_listen = "10.100.0.1:9400"
//! heartbeat_s = 15
//! metrics_listen = "127.0.0.1:9401"  # Prometheus; "off" for none
//! uplink = "eth0"                    # manage the slot network (bridge, nftables, dnsmasq)
//! public_address = "203.0.113.7"     # where tenants' public ports arrive
//! ```
//!
//! Traces are configured as every OpenTelemetry SDK is, by the environment
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, …; see `otel::export`), and are off without it.

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The state directory: credential, leases, allocations' seeds and domain XML.
    #[arg(long, env = "NODE_AGENT_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// `libvirt` (a real host) or `simulated` (a host described by a fixture).
    #[arg(long)]
    pub driver: Option<String>,
    /// The simulated host: a fixture directory (sys/, proc/, tools/).
    #[arg(long)]
    pub fixture: Option<PathBuf>,
    /// The root to read sysfs under (libvirt driver).
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// The libvirt connection, e.g. `qemu:///system`, or `test:///default` to try the driver.
    #[arg(long)]
    pub libvirt_uri: Option<String>,
    /// Keep each NVMe namespace as a file here instead of using `/dev/nvme…` (hosts without
    /// NVMe; overwrite-verify wipes only).
    #[arg(long)]
    pub disk_dir: Option<PathBuf>,
    /// The operator's image directory (libvirt driver; default /var/lib/gpuaas/images): a
    /// listing's image source names a file directly in it, and nothing else is read.
    #[arg(long)]
    pub image_dir: Option<PathBuf>,
    /// How the libvirt driver decides a guest is up: `ssh` or `domain-running`.
    #[arg(long)]
    pub guest_ready: Option<String>,
    /// Where the guest telemetry sink listens (the host's slot-network address).
    #[arg(long)]
    pub telemetry_listen: Option<String>,
    /// The simulated driver's time per phase, in milliseconds.
    #[arg(long)]
    pub phase_ms: Option<u64>,
    /// The command that prints the NVLink fabric partition table, split on spaces.
    #[arg(long, env = "NODE_AGENT_FABRIC_PARTITIONS_CMD")]
    pub fabric_partitions_cmd: Option<String>,
    #[arg(long)]
    pub heartbeat_s: Option<u64>,
    /// Where `/metrics` (Prometheus) listens: default `127.0.0.1:9401`; `off` for none.
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// A scrape token: callers other than loopback must send `Authorization: Bearer` with it
    /// (without one, only loopback may scrape).
    #[arg(long, env = "NODE_AGENT_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
    /// The host's uplink interface: guests leave through it (NAT) and their published ports
    /// arrive on it. Set on a real host to manage the slot network (bridge, nftables,
    /// dnsmasq); without it the network is only rendered into the state directory.
    #[arg(long)]
    pub uplink: Option<String>,
    /// The host's IPv4 address on the uplink that public ports are forwarded from.
    #[arg(long)]
    pub public_address: Option<String>,
    /// Networks guests may not reach through the uplink (default: private, shared, loopback
    /// and link-local ranges).
    #[arg(long, value_delimiter = ',')]
    pub blocked_egress: Option<Vec<String>>,
    /// The interface to the other hosts that carries projects' private networks (VXLAN);
    /// with `vtep_address`. Without them a project's private network stays on this host.
    #[arg(long)]
    pub vtep_device: Option<String>,
    /// This host's IPv4 address on `vtep_device`, its tunnel endpoint.
    #[arg(long)]
    pub vtep_address: Option<String>,
    /// OpenSM's partition file, which the agent writes (with `ib_reload`); without it the IB
    /// partitions are simulated under the state directory.
    #[arg(long)]
    pub ib_partitions_file: Option<PathBuf>,
    /// The command that makes OpenSM reread its partition file, split on spaces (default
    /// `pkill -HUP opensm`).
    #[arg(long)]
    pub ib_reload: Option<String>,
    /// Fabric Manager's partition tool with its connection options, split on spaces (e.g.
    /// `fmpm --unix-domain-socket /var/run/nvidia-fabricmanager/fm.sock`); the agent adds
    /// `-l`, `-a ID` or `-d ID`. Without it NVLink partitions are simulated.
    #[arg(long)]
    pub fabric_manager: Option<String>,
    /// Test knob: fail this phase.
    #[arg(long)]
    pub fail_at: Option<String>,
    /// Test knob: exit the moment this phase starts (as a crash would).
    #[arg(long)]
    pub crash_at: Option<String>,
}

impl Settings {
    /// `self` (the flags) over the file at `path`.
    pub fn over_file(self, path: Option<&Path>) -> Result<Settings, String> {
        let Some(path) = path else {
            return Ok(self);
        };
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file: Settings =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Settings {
            state_dir: self.state_dir.or(file.state_dir),
            driver: self.driver.or(file.driver),
            fixture: self.fixture.or(file.fixture),
            root: self.root.or(file.root),
            libvirt_uri: self.libvirt_uri.or(file.libvirt_uri),
            disk_dir: self.disk_dir.or(file.disk_dir),
            image_dir: self.image_dir.or(file.image_dir),
            guest_ready: self.guest_ready.or(file.guest_ready),
            telemetry_listen: self.telemetry_listen.or(file.telemetry_listen),
            phase_ms: self.phase_ms.or(file.phase_ms),
            fabric_partitions_cmd: self.fabric_partitions_cmd.or(file.fabric_partitions_cmd),
            heartbeat_s: self.heartbeat_s.or(file.heartbeat_s),
            metrics_listen: self.metrics_listen.or(file.metrics_listen),
            metrics_token: self.metrics_token.or(file.metrics_token),
            uplink: self.uplink.or(file.uplink),
            public_address: self.public_address.or(file.public_address),
            blocked_egress: self.blocked_egress.or(file.blocked_egress),
            vtep_device: self.vtep_device.or(file.vtep_device),
            vtep_address: self.vtep_address.or(file.vtep_address),
            ib_partitions_file: self.ib_partitions_file.or(file.ib_partitions_file),
            ib_reload: self.ib_reload.or(file.ib_reload),
            fabric_manager: self.fabric_manager.or(file.fabric_manager),
            fail_at: self.fail_at.or(file.fail_at),
            crash_at: self.crash_at.or(file.crash_at),
        })
    }

    pub fn state_dir(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/var/lib/gpu-node-agent"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file_and_unknown_keys_are_refused() {
        let dir = std::env::temp_dir().join(format!("agent-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("agent.toml");
        std::fs::write(
            &path,
            "state_dir = \"/srv/agent\"\ndriver = \"libvirt\"\nheartbeat_s = 5\n",
        )
        .unwrap();
        let flags = Settings {
            driver: Some("simulated".into()),
            ..Default::default()
        };
        let s = flags.over_file(Some(&path)).unwrap();
        assert_eq!(s.driver.as_deref(), Some("simulated"));
        assert_eq!(s.state_dir(), PathBuf::from("/srv/agent"));
        assert_eq!(s.heartbeat_s, Some(5));
        std::fs::write(&path, "stat_dir = \"/srv\"\n").unwrap();
        let e = Settings::default().over_file(Some(&path)).unwrap_err();
        assert!(e.contains("unknown field `stat_dir`"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
