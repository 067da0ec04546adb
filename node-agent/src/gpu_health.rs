//! GPU health: what each GPU reads now (utilisation, memory, temperature, power, ECC counts,
//! thermal slowdown) from `nvidia-smi`, and the XID errors the NVIDIA driver writes to the
//! kernel log. A real host runs the tool and reads `/dev/kmsg`; a simulated one reads the same
//! formats from files (see `SimulatedDriver`), through the same parsers.
//!
//! [`Watch`] turns what it reads into events (an XID line; an uncorrectable ECC count that
//! went up; thermal slowdown that began), keeps them until a heartbeat carrying them is
//! answered, and keeps the figures `/metrics` shows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use agent_protocol::{GpuEvent, GpuEventKind};

use crate::tools::normalize_bus_id;

/// The `nvidia-smi` query the agent runs (CSV, no header, no units).
pub const SMI_HEALTH_QUERY: &str = "--query-gpu=pci.bus_id,utilization.gpu,memory.used,temperature.gpu,power.draw,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,clocks_throttle_reasons.hw_thermal_slowdown";

/// One GPU's figures. `None` where the GPU doesn't say (`[N/A]`, `[Not Supported]`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuSample {
    pub pci_address: String,
    pub utilization_pct: Option<f64>,
    pub memory_used_mib: Option<f64>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
    pub thermal_slowdown: Option<bool>,
}

fn figure(v: &str) -> Option<f64> {
    v.trim().parse::<f64>().ok().filter(|f| f.is_finite())
}

/// Parses the output of `nvidia-smi` with [`SMI_HEALTH_QUERY`]; malformed lines are skipped
/// with a warning.
pub fn parse_health_csv(text: &str, warnings: &mut Vec<String>) -> Vec<GpuSample> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 8 || !f[0].contains(':') {
            warnings.push(format!("nvidia-smi health line not understood: {line:?}"));
            continue;
        }
        out.push(GpuSample {
            pci_address: normalize_bus_id(f[0]),
            utilization_pct: figure(f[1]),
            memory_used_mib: figure(f[2]),
            temperature_c: figure(f[3]),
            power_w: figure(f[4]),
            ecc_corrected: f[5].parse().ok(),
            ecc_uncorrected: f[6].parse().ok(),
            thermal_slowdown: match f[7] {
                "Active" => Some(true),
                "Not Active" => Some(false),
                _ => None,
            },
        });
    }
    out
}

/// One XID from a kernel log record: the GPU (sysfs form), the number and the driver's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xid {
    /// The record's sequence number in the kernel log (`/dev/kmsg`), when known.
    pub seq: Option<u64>,
    pub pci_address: String,
    pub code: u32,
    pub detail: String,
}

/// Reads an XID from one kernel log record, either as `/dev/kmsg` gives it
/// (`4,1234,5678,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=…, GPU has fallen off the bus.`) or as
/// `dmesg` prints it. Anything else is `None`.
pub fn parse_xid(record: &str) -> Option<Xid> {
    let (seq, message) = match record.split_once(';') {
        Some((head, msg)) if head.split(',').count() >= 3 => {
            (head.split(',').nth(1).and_then(|s| s.parse().ok()), msg)
        }
        _ => (None, record),
    };
    let rest = &message[message.find("NVRM: Xid (PCI:")? + "NVRM: Xid (PCI:".len()..];
    let (bus, rest) = rest.split_once("):")?;
    let (code, detail) = match rest.split_once(',') {
        Some((c, d)) => (c, d),
        None => (rest, ""),
    };
    let code: u32 = code.trim().parse().ok().filter(|c| (1..=999).contains(c))?;
    let bus = bus.trim().to_ascii_lowercase();
    // The driver names the device (domain:bus:device); the GPU is its function 0.
    let parts: Vec<&str> = bus.split(':').collect();
    let pci_address = match parts.as_slice() {
        [d, b, dev] if !dev.contains('.') => normalize_bus_id(&format!("{d}:{b}:{dev}.0")),
        _ => normalize_bus_id(&bus),
    };
    // Newer drivers begin with the process (`pid=…, name=…, `): the GPU's trouble is the rest.
    let mut detail = detail.trim();
    while let Some((head, rest)) = detail.split_once(", ") {
        if !(head.starts_with("pid=") || head.starts_with("name=")) {
            break;
        }
        detail = rest.trim();
    }
    let detail: String = detail
        .chars()
        .filter(|c| !c.is_control())
        .take(400)
        .collect();
    Some(Xid {
        seq,
        pci_address,
        code,
        detail,
    })
}

fn valid_pci(p: &str) -> bool {
    let b = p.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11])
        && p[..4]
            .chars()
            .chain(p[5..7].chars())
            .chain(p[8..10].chars())
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

/// What the agent knows about its GPUs' health: the latest figures, counts for `/metrics`,
/// and the events not yet acknowledged by the control plane.
#[derive(Default)]
pub struct Watch {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    samples: Vec<GpuSample>,
    last_uncorrected: HashMap<String, u64>,
    throttled: HashMap<String, bool>,
    /// XIDs seen, per GPU and number (for `gpuaas_gpu_xid_errors_total`).
    xids: BTreeMap<(String, u32), u64>,
    pending: Vec<GpuEvent>,
    /// Ids of the kernel log records already taken (a restart re-reads the log).
    seen: std::collections::HashSet<String>,
    /// Events made by this process (ids stay unique across its events).
    made: u64,
}

/// At most this many events wait for the control plane; older ones are dropped first (the
/// metrics still count them).
const MAX_PENDING: usize = 256;

impl Watch {
    /// Takes in one round of readings: the GPUs' figures and the kernel log records since the
    /// last round. `boot` names this boot (the kernel's boot id), so event ids made from the
    /// log's sequence numbers stay unique across reboots and agent restarts.
    pub fn observe(&self, samples: Vec<GpuSample>, records: &[String], boot: &str, now: i64) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let boot: String = boot
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(32)
            .collect();
        for r in records {
            let Some(x) = parse_xid(r) else { continue };
            if !valid_pci(&x.pci_address) {
                continue;
            }
            let id = match x.seq {
                Some(seq) => format!("xid-{boot}-{seq}"),
                None => g.next_id(now),
            };
            if g.seen.len() >= 4096 {
                g.seen.clear();
            }
            if !g.seen.insert(id.clone()) {
                continue;
            }
            *g.xids.entry((x.pci_address.clone(), x.code)).or_default() += 1;
            let detail = if x.detail.is_empty() {
                format!("XID {}", x.code)
            } else {
                format!("XID {}: {}", x.code, x.detail)
            };
            g.push(GpuEvent {
                id,
                gpu_pci_address: x.pci_address,
                kind: GpuEventKind::Xid,
                xid: Some(x.code),
                detail,
                observed_at: now,
            });
        }
        for s in &samples {
            if let Some(n) = s.ecc_uncorrected {
                let before = g.last_uncorrected.insert(s.pci_address.clone(), n);
                // The first reading is the baseline; a count that went up is an event.
                if let Some(b) = before
                    && n > b
                {
                    let id = g.next_id(now);
                    g.push(GpuEvent {
                        id,
                        gpu_pci_address: s.pci_address.clone(),
                        kind: GpuEventKind::EccUncorrectable,
                        xid: None,
                        detail: format!("uncorrectable ECC errors went from {b} to {n}"),
                        observed_at: now,
                    });
                }
            }
            if let Some(t) = s.thermal_slowdown {
                let before = g.throttled.insert(s.pci_address.clone(), t);
                if t && before != Some(true) {
                    let id = g.next_id(now);
                    let temp = s
                        .temperature_c
                        .map(|c| format!(" at {c:.0} °C"))
                        .unwrap_or_default();
                    g.push(GpuEvent {
                        id,
                        gpu_pci_address: s.pci_address.clone(),
                        kind: GpuEventKind::Thermal,
                        xid: None,
                        detail: format!("hardware thermal slowdown{temp}"),
                        observed_at: now,
                    });
                }
            }
        }
        g.samples = samples;
    }

    /// The events to send with the next heartbeat.
    pub fn pending(&self) -> Vec<GpuEvent> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pending
            .clone()
    }

    /// The control plane recorded these (its answer to the heartbeat that carried them).
    pub fn acknowledged(&self, sent: &[GpuEvent]) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.pending.retain(|e| !sent.iter().any(|s| s.id == e.id));
    }

    pub fn samples(&self) -> Vec<GpuSample> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .samples
            .clone()
    }

    /// XIDs seen since the agent started, per GPU and number.
    pub fn xid_counts(&self) -> Vec<((String, u32), u64)> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.xids.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

impl Inner {
    fn next_id(&mut self, now: i64) -> String {
        self.made += 1;
        let r = crate::random_bytes::<4>();
        format!(
            "ev-{now}-{}-{:02x}{:02x}{:02x}{:02x}",
            self.made, r[0], r[1], r[2], r[3]
        )
    }

    fn push(&mut self, e: GpuEvent) {
        if self.pending.iter().any(|p| p.id == e.id) {
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            self.pending.remove(0);
        }
        self.pending.push(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_smi_health_lines_are_read_with_missing_figures_as_none() {
        let mut w = Vec::new();
        let s = parse_health_csv(
            "00000000:18:00.0, 87, 40512, 61, 412.35, 0, 2, Not Active\n\
             00000000:2A:00.0, [N/A], [N/A], 90, [Not Supported], [N/A], [N/A], Active\n\
             garbage\n",
            &mut w,
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].pci_address, "0000:18:00.0");
        assert_eq!(s[0].utilization_pct, Some(87.0));
        assert_eq!(s[0].power_w, Some(412.35));
        assert_eq!(s[0].ecc_uncorrected, Some(2));
        assert_eq!(s[0].thermal_slowdown, Some(false));
        assert_eq!(s[1].pci_address, "0000:2a:00.0");
        assert_eq!(s[1].utilization_pct, None);
        assert_eq!(s[1].ecc_uncorrected, None);
        assert_eq!(s[1].thermal_slowdown, Some(true));
        assert_eq!(w.len(), 1, "{w:?}");
    }

    /// What a real H200 (driver 580.159.04) answered to [`SMI_HEALTH_QUERY`], idle (the
    /// captured fixture) and three seconds into an 8192² matmul loop. The driver still takes
    /// the older `clocks_throttle_reasons.*` name (renamed `clocks_event_reasons.*` in 535).
    #[test]
    fn a_real_h200_answer_is_read_idle_and_under_load() {
        let idle = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/h200-vm-guest/tools/nvidia-smi-health.csv"
        ))
        .unwrap();
        let loaded = "00000000:00:06.0, 100, 1395, 58, 684.33, 0, 0, Not Active\n";
        let mut w = Vec::new();
        let s = parse_health_csv(&(idle + loaded), &mut w);
        assert!(w.is_empty(), "{w:?}");
        let read = |g: &GpuSample| {
            (
                g.pci_address.clone(),
                g.utilization_pct,
                g.memory_used_mib,
                g.temperature_c,
                g.ecc_uncorrected,
                g.thermal_slowdown,
            )
        };
        assert_eq!(
            read(&s[0]),
            (
                "0000:00:06.0".to_string(),
                Some(0.0),
                Some(0.0),
                Some(36.0),
                Some(0),
                Some(false)
            )
        );
        assert_eq!(s[0].power_w, Some(79.81));
        assert_eq!(
            read(&s[1]),
            (
                "0000:00:06.0".to_string(),
                Some(100.0),
                Some(1395.0),
                Some(58.0),
                Some(0),
                Some(false)
            )
        );
        assert_eq!(s[1].power_w, Some(684.33));
    }

    #[test]
    fn xids_are_read_from_kmsg_records_and_dmesg_lines() {
        let x = parse_xid(
            "4,5512,93381273,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=2291, name=python3, GPU has fallen off the bus.",
        )
        .unwrap();
        assert_eq!(x.seq, Some(5512));
        assert_eq!(x.pci_address, "0000:3b:00.0");
        assert_eq!(x.code, 79);
        assert_eq!(x.detail, "GPU has fallen off the bus.");
        let y =
            parse_xid("[ 812.1] NVRM: Xid (PCI:0000:2A:00): 48, An uncorrectable double bit error")
                .unwrap();
        assert_eq!(
            (y.seq, y.pci_address.as_str(), y.code),
            (None, "0000:2a:00.0", 48)
        );
        assert_eq!(parse_xid("4,1,2,-;usb 1-1: new device"), None);
        assert_eq!(parse_xid("NVRM: Xid (PCI:0000:3b:00): 0, nonsense"), None);
        assert_eq!(
            parse_xid("NVRM: Xid (PCI:0000:3b:00): 99999, nonsense"),
            None
        );
    }

    #[test]
    fn events_come_from_xids_ecc_increases_and_thermal_onsets_and_wait_for_an_ack() {
        let w = Watch::default();
        let gpu = |unc, hot| GpuSample {
            pci_address: "0000:18:00.0".into(),
            ecc_uncorrected: Some(unc),
            thermal_slowdown: Some(hot),
            temperature_c: Some(91.0),
            ..Default::default()
        };
        // The first reading is a baseline: nothing happened yet.
        w.observe(vec![gpu(3, false)], &[], "b00t", 100);
        assert!(w.pending().is_empty());
        w.observe(
            vec![gpu(5, true)],
            &["6,77,1,-;NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.".into()],
            "b00t",
            101,
        );
        let sent = w.pending();
        let kinds: Vec<_> = sent.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                GpuEventKind::Xid,
                GpuEventKind::EccUncorrectable,
                GpuEventKind::Thermal
            ]
        );
        assert_eq!(sent[0].id, "xid-b00t-77");
        assert_eq!(sent[0].xid, Some(79));
        assert!(sent[1].detail.contains("from 3 to 5"), "{}", sent[1].detail);
        // The same record read again (an agent restart re-reads the log) is the same event.
        w.observe(
            vec![gpu(5, true)],
            &["6,77,1,-;NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.".into()],
            "b00t",
            102,
        );
        assert_eq!(
            w.pending().len(),
            3,
            "still throttled, same XID: nothing new"
        );
        w.acknowledged(&sent);
        assert!(w.pending().is_empty());
        assert_eq!(w.xid_counts(), vec![(("0000:18:00.0".to_string(), 79), 1)]);
    }
}
