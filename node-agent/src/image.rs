//! The guest's disk and first-boot seed: the image goes onto the slot's NVMe with the real
//! `qemu-img` (convert to raw, then resize where the target is a file), and cloud-init reads a
//! NoCloud seed (an ISO labelled `cidata`, built with `xorriso`) with the hostname, the
//! tenant's SSH key, the network and the telemetry token.

use std::path::Path;
use std::process::Command;

use agent_protocol::ProvisionPlan;
use serde_json::json;
use sha2::{Digest, Sha256};

/// Runs a fixed command line (never through a shell) and names it in the error.
pub fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("running {program}: {e} (is it installed?)"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            err.trim().lines().last().unwrap_or("no message")
        ))
    }
}

fn path_str(p: &Path) -> Result<&str, String> {
    p.to_str()
        .ok_or_else(|| format!("{} is not a UTF-8 path", p.display()))
}

/// The disk format of an image file, from its extension. Always passed to `qemu-img` (`-f`):
/// guessed from the content, a raw image that looks like qcow2 could name a backing file and
/// read any file on the host.
pub fn image_format(source: &Path) -> Result<&'static str, String> {
    match source.extension().and_then(|e| e.to_str()) {
        Some("qcow2") => Ok("qcow2"),
        Some("raw" | "img") => Ok("raw"),
        _ => Err(format!(
            "{}: an image is a .qcow2, .raw or .img file",
            source.display()
        )),
    }
}

/// Refuses a qcow2 image that reads other files: a backing file or an external data file.
fn self_contained(source: &Path) -> Result<(), String> {
    let out = run(
        "qemu-img",
        &["info", "-f", "qcow2", "--output=json", path_str(source)?],
    )?;
    let v: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| format!("qemu-img info: {e}"))?;
    let external = v.get("backing-filename").is_some()
        || v.get("full-backing-filename").is_some()
        || v.pointer("/format-specific/data/data-file").is_some();
    if external {
        return Err(format!(
            "the image {} refers to another file (a backing or data file); images must be self-contained",
            source.display()
        ));
    }
    Ok(())
}

/// Checks that `source` is the file its listing version was approved with: its SHA-256 must be
/// `expected` (lowercase hex). Read in 1 MiB blocks. The image directory is the operator's, so
/// a file changed between this check and the conversion is the operator's doing, not a
/// tenant's or a publisher's.
pub fn verify_sha256(source: &Path, expected: &str) -> Result<(), String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut file = std::fs::File::open(source).map_err(|e| format!("{}: {e}", source.display()))?;
    let mut hasher = Sha256::new();
    let mut block = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut block)
            .map_err(|e| format!("reading {}: {e}", source.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&block[..n]);
    }
    let got: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if got == expected {
        Ok(())
    } else {
        Err(format!(
            "the image {} has SHA-256 {got}, not {expected} as its listing version says: \
             the file is not the one that was reviewed, so nothing was written",
            source.display()
        ))
    }
}

/// Writes `source` as raw onto `disk`, reading it in the format its extension names (never
/// guessed) and refusing a qcow2 that refers to other files. A block device is written in
/// place (`-n`); a file is created, then grown to `size_bytes` when that is larger.
pub fn write_image(source: &Path, disk: &Path, size_bytes: Option<u64>) -> Result<(), String> {
    if !source.is_file() {
        return Err(format!(
            "the image {} does not exist on this host",
            source.display()
        ));
    }
    let format = image_format(source)?;
    if format == "qcow2" {
        self_contained(source)?;
    }
    let block = std::fs::metadata(disk)
        .map(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_block_device()
        })
        .unwrap_or(false);
    if !block && let Some(dir) = disk.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let (src, dst) = (path_str(source)?, path_str(disk)?);
    let mut args = vec!["convert", "-f", format, "-O", "raw"];
    if block {
        args.push("-n");
    }
    args.extend([src, dst]);
    run("qemu-img", &args)?;
    if let (false, Some(size)) = (block, size_bytes) {
        let current = std::fs::metadata(disk)
            .map_err(|e| format!("{}: {e}", disk.display()))?
            .len();
        if size > current {
            run("qemu-img", &["resize", "-f", "raw", dst, &size.to_string()])?;
        }
    }
    Ok(())
}

/// A volume as `qemu-img` opens it: a `json:` filename with the raw format over the network
/// protocol, built from the target's checked fields with a JSON serializer (never by pasting
/// text into an option string), cut to `size` bytes when given.
pub fn volume_source(
    target: &agent_protocol::VolumeTarget,
    size: Option<u64>,
) -> Result<String, String> {
    crate::domain::check_target(target)?;
    let file = match target {
        agent_protocol::VolumeTarget::Nbd { host, port, export } => json!({
            "driver": "nbd",
            "server": {"type": "inet", "host": host, "port": port.to_string()},
            "export": export,
        }),
        agent_protocol::VolumeTarget::Rbd {
            pool,
            image,
            monitors,
            user,
        } => {
            let servers = monitors
                .iter()
                .map(|m| {
                    let a: std::net::SocketAddr = m
                        .parse()
                        .map_err(|_| format!("monitor {m:?} is not an address and port"))?;
                    Ok(json!({"host": a.ip().to_string(), "port": a.port().to_string()}))
                })
                .collect::<Result<Vec<_>, String>>()?;
            json!({"driver": "rbd", "pool": pool, "image": image, "user": user, "server": servers})
        }
    };
    let mut raw = json!({"driver": "raw", "file": file});
    if let Some(size) = size {
        raw["size"] = json!(size);
    }
    Ok(format!("json:{raw}"))
}

/// The size in bytes of a raw disk (a block device or a file), as `qemu-img` reads it.
fn raw_size(disk: &str) -> Result<u64, String> {
    let out = run("qemu-img", &["info", "-f", "raw", "--output=json", disk])?;
    let v: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| format!("qemu-img info: {e}"))?;
    v["virtual-size"]
        .as_u64()
        .ok_or_else(|| format!("qemu-img info reports no size for {disk}"))
}

/// Copies a stopped instance's boot disk onto its root volume, which the storage backend made
/// empty and at least as large: zeros are skipped (`--target-is-zero`), so a mostly empty disk
/// costs what it holds.
pub fn save_root(disk: &Path, target: &agent_protocol::VolumeTarget) -> Result<(), String> {
    let dst = volume_source(target, None)?;
    let src = path_str(disk)?;
    run(
        "qemu-img",
        &[
            "convert",
            "-n",
            "--target-is-zero",
            "-f",
            "raw",
            "-O",
            "raw",
            src,
            &dst,
        ],
    )
    .map(drop)
}

/// Copies a saved root volume onto a started instance's boot disk (which exists, at its size):
/// as much of it as the disk holds.
pub fn restore_root(target: &agent_protocol::VolumeTarget, disk: &Path) -> Result<(), String> {
    let dst = path_str(disk)?;
    let volume = raw_size(&volume_source(target, None)?)?;
    let size = raw_size(dst)?.min(volume);
    let src = volume_source(target, Some(size))?;
    run("qemu-img", &["convert", "-n", "-O", "raw", &src, dst]).map(drop)
}

/// The virtual size qemu-img reports for `image`.
pub fn virtual_size(image: &Path) -> Result<u64, String> {
    let out = run(
        "qemu-img",
        &[
            "info",
            "-f",
            image_format(image)?,
            "--output=json",
            path_str(image)?,
        ],
    )?;
    let v: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| format!("qemu-img info: {e}"))?;
    v["virtual-size"]
        .as_u64()
        .ok_or_else(|| "qemu-img info reports no virtual-size".into())
}

/// Creates a small qcow2 image (a stand-in for a real one on simulated hosts and in tests).
pub fn create_qcow2(path: &Path, size: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    run(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", path_str(path)?, size],
    )
    .map(|_| ())
}

/// Where guests send metrics: the host's address on the slot network.
pub const TELEMETRY_HOST: &str = "10.100.0.1";

/// The three NoCloud files for `plan`. JSON is YAML, so every value is quoted by serde.
pub fn seed_files(
    plan: &ProvisionPlan,
    telemetry_token: &str,
    telemetry_port: u16,
) -> [(&'static str, String); 3] {
    let hostname = hostname(&plan.name);
    let user_data = json!({
        "hostname": hostname,
        "users": [{
            "name": plan.image.ssh_user,
            // One key per line (a launch may carry several).
            "ssh_authorized_keys": plan
                .ssh_public_key
                .lines()
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .collect::<Vec<_>>(),
            "sudo": "ALL=(ALL) NOPASSWD:ALL",
            "shell": "/bin/bash",
        }],
        "ssh_pwauth": false,
        "write_files": [{
            "path": "/etc/gpuaas/telemetry.json",
            "permissions": "0600",
            "content": json!({
                "url": format!("http://{TELEMETRY_HOST}:{telemetry_port}/v1/gpu"),
                "token": telemetry_token,
                "allocation_id": plan.allocation_id,
            }).to_string(),
        }],
    });
    let mut user_data = user_data;
    if let Some(c) = &plan.cluster {
        crate::cluster_boot::add(&mut user_data, c, &plan.image.ssh_user, plan.slots.len());
    }
    let user_data = merge_fragment(user_data, &plan.image.cloud_init);
    let meta_data = json!({
        "instance-id": plan.allocation_id,
        "local-hostname": hostname,
    });
    let mut ethernets: serde_json::Map<String, serde_json::Value> = plan
        .slots
        .iter()
        .take(1)
        .map(|s| {
            (
                "slot0".to_string(),
                json!({
                    "match": { "macaddress": s.mac_address },
                    "set-name": "eth0",
                    "addresses": [format!("{}/24", s.ip_address)],
                    "routes": [{ "to": "default", "via": TELEMETRY_HOST }],
                    "nameservers": { "addresses": [TELEMETRY_HOST] },
                }),
            )
        })
        .collect();
    // The project's segment: an address of its own, no gateway (nothing is routed there).
    if let Some(nic) = &plan.network.private {
        let prefix = agent_protocol::identity::PRIVATE_NETWORK
            .split_once('/')
            .map_or("16", |(_, p)| p);
        ethernets.insert(
            "private0".to_string(),
            json!({
                "match": { "macaddress": nic.mac },
                "set-name": "eth1",
                "addresses": [format!("{}/{prefix}", nic.address)],
                "mtu": crate::overlay::PRIVATE_MTU,
            }),
        );
    }
    let network = json!({ "version": 2, "ethernets": ethernets });
    let platform = format!("#cloud-config\n{user_data:#}\n");
    let user_data = match plan.user_data.as_deref().filter(|u| !u.trim().is_empty()) {
        Some(theirs) => multipart(&platform, theirs),
        None => platform,
    };
    [
        ("user-data", user_data),
        ("meta-data", format!("{meta_data:#}\n")),
        ("network-config", format!("{network:#}\n")),
    ]
}

/// The platform's cloud-config and the tenant's own user data as one MIME multipart
/// user-data, the platform's part first. A tenant's cloud-config is merged into the platform's
/// with `X-Merge-Type` `list(append)+dict(no_replace,recurse_list)+str()`: its lists are added
/// to ours and its keys never replace ours, so the user, SSH keys, network and telemetry the
/// platform set stay. A `#!` script runs as cloud-init runs scripts, once, at first boot. The
/// boundary is derived from both parts and is in neither.
pub fn multipart(platform: &str, theirs: &str) -> String {
    let mut n = 0u32;
    let boundary = loop {
        let mut h = Sha256::new();
        h.update(platform.as_bytes());
        h.update(theirs.as_bytes());
        h.update(n.to_be_bytes());
        let b = format!("==gpuaas-{}==", hex(&h.finalize()[..12]));
        if !platform.contains(&b) && !theirs.contains(&b) {
            break b;
        }
        n += 1;
    };
    let (kind, merge) = if theirs.starts_with("#cloud-config") {
        (
            "text/cloud-config",
            "X-Merge-Type: list(append)+dict(no_replace,recurse_list)+str()\n",
        )
    } else {
        ("text/x-shellscript", "")
    };
    // The line break before a boundary belongs to the boundary (RFC 2046), so each body is
    // followed by one more: what the guest reads is the body exactly as given.
    let part = |kind: &str, merge: &str, name: &str, body: &str| {
        format!(
            "--{boundary}\nContent-Type: {kind}; charset=\"utf-8\"\nMIME-Version: 1.0\n\
             Content-Transfer-Encoding: 8bit\n{merge}\
             Content-Disposition: attachment; filename=\"{name}\"\n\n{body}\n"
        )
    };
    format!(
        "Content-Type: multipart/mixed; boundary=\"{boundary}\"\nMIME-Version: 1.0\n\n{}{}--{boundary}--\n",
        part("text/cloud-config", "", "platform.cfg", platform),
        part(kind, merge, "tenant", theirs),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Adds the listing version's cloud-config fragment after the platform's keys: lists (such
/// as `runcmd`, `write_files`, `packages`) are appended to the platform's, other keys are
/// added only where the platform set none, so a fragment can never replace the user, SSH key
/// or network the platform wrote. A fragment that is not a JSON object is ignored (the
/// control plane refuses those before they are published).
fn merge_fragment(mut base: serde_json::Value, fragment: &str) -> serde_json::Value {
    let Ok(serde_json::Value::Object(extra)) = serde_json::from_str(fragment) else {
        return base;
    };
    let Some(map) = base.as_object_mut() else {
        return base;
    };
    for (k, v) in extra {
        match (map.get_mut(&k), v) {
            (Some(serde_json::Value::Array(ours)), serde_json::Value::Array(theirs)) => {
                ours.extend(theirs)
            }
            (Some(_), _) => {}
            (None, v) => {
                map.insert(k, v);
            }
        }
    }
    base
}

/// Writes the seed files into `dir` and builds `iso` from them.
pub fn build_seed(
    plan: &ProvisionPlan,
    telemetry_token: &str,
    telemetry_port: u16,
    dir: &Path,
    iso: &Path,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for (name, body) in seed_files(plan, telemetry_token, telemetry_port) {
        let path = dir.join(name);
        write_private(&path, body.as_bytes())?;
        files.push(path_str(&path)?.to_string());
    }
    let _ = std::fs::remove_file(iso);
    let iso = path_str(iso)?;
    let mut args = vec![
        "-as",
        "genisoimage",
        "-quiet",
        "-output",
        iso,
        "-volid",
        "cidata",
        "-joliet",
        "-rock",
    ];
    args.extend(files.iter().map(String::as_str));
    run("xorriso", &args)?;
    // The image carries the tenant's user data and telemetry token too, and xorriso writes it
    // with the process's umask.
    private(Path::new(iso))
}

/// Makes `path` readable and writable by the agent alone.
fn private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Files with the tenant's token are readable by the agent only.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    // `mode` applies only to a file it creates: one left by an earlier try keeps its own.
    private(path)?;
    f.write_all(bytes)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// An RFC 1123 label from the allocation's name.
pub fn hostname(name: &str) -> String {
    let mut h: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    h = h.trim_matches('-').chars().take(63).collect();
    if h.is_empty() { "gpu-vm".into() } else { h }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The multipart as cloud-init reads it: Python's `email` parser, which cloud-init uses.
    fn parsed_by_python(mime: &str) -> Option<serde_json::Value> {
        let script = r#"
import email, json, sys
m = email.message_from_string(sys.stdin.read())
parts = [{"type": p.get_content_type(), "merge": p.get("X-Merge-Type"),
          "body": p.get_payload(decode=True).decode("utf-8")}
         for p in m.walk() if not p.is_multipart()]
print(json.dumps({"type": m.get_content_type(), "parts": parts}))
"#;
        let mut child = match Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!(
                    "SKIPPED: the multipart is not parsed by Python's email module: python3: {e}"
                );
                return None;
            }
        };
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(mime.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(serde_json::from_slice(&out.stdout).unwrap())
    }

    #[test]
    fn tenant_user_data_is_a_second_part_after_the_platforms() {
        let platform = "#cloud-config\n{\"users\": [{\"name\": \"ubuntu\"}]}\n";
        // A tenant who writes what looks like a boundary doesn't split the message.
        let script = "#!/bin/sh\necho '--==gpuaas-' > /tmp/x\necho done";
        let mime = multipart(platform, script);
        assert!(mime.starts_with("Content-Type: multipart/mixed; boundary=\"==gpuaas-"));
        if let Some(m) = parsed_by_python(&mime) {
            assert_eq!(m["type"], "multipart/mixed");
            assert_eq!(m["parts"][0]["type"], "text/cloud-config");
            assert_eq!(m["parts"][0]["body"], platform);
            assert_eq!(m["parts"][1]["type"], "text/x-shellscript");
            assert_eq!(m["parts"][1]["body"], script);
            assert_eq!(m["parts"].as_array().unwrap().len(), 2);
        }
        let config = "#cloud-config\npackages: [htop]\n";
        if let Some(m) = parsed_by_python(&multipart(platform, config)) {
            assert_eq!(m["parts"][1]["type"], "text/cloud-config");
            assert_eq!(m["parts"][1]["body"], config);
            // Its keys never replace the platform's; its lists are added.
            assert_eq!(
                m["parts"][1]["merge"],
                "list(append)+dict(no_replace,recurse_list)+str()"
            );
        }
    }

    #[test]
    fn a_fragment_adds_and_appends_but_never_replaces_the_platforms_keys() {
        let base = json!({
            "hostname": "train",
            "users": [{ "name": "ubuntu" }],
            "write_files": [{ "path": "/etc/gpuaas/telemetry.json" }],
        });
        let merged = merge_fragment(
            base.clone(),
            r#"{"hostname": "evil", "runcmd": [["nvidia-smi"]],
                "write_files": [{"path": "/etc/profile.d/torch.sh"}]}"#,
        );
        assert_eq!(merged["hostname"], "train");
        assert_eq!(merged["users"], base["users"]);
        assert_eq!(merged["runcmd"], json!([["nvidia-smi"]]));
        let paths: Vec<&str> = merged["write_files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            ["/etc/gpuaas/telemetry.json", "/etc/profile.d/torch.sh"]
        );
        assert_eq!(merge_fragment(base.clone(), ""), base);
        assert_eq!(merge_fragment(base.clone(), "[1, 2]"), base);
    }
}
