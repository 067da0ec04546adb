//! The node agent as a Debian package and the portal's container image (`cargo xtask package`;
//! the image is `xtask/src/image.rs`), and the package's check in `cargo xtask test`: the package is assembled with `dpkg-deb` from the binary and `deploy/debian/node-agent/`
//! (the systemd unit, the commented settings file, the maintainer scripts), its unit is checked
//! with `systemd-analyze verify`, and it is installed, upgraded, removed and purged with `dpkg`
//! in a Debian root made by `debootstrap`, where the installed agent runs `discover` against a
//! fixture host.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::proc::{output, run as sh};
use crate::{Result, root, step, target_dir};

/// The package's name, as `apt` and `dpkg` know it.
const PACKAGE: &str = "gpuaas-node-agent";

/// Files of the package and their modes, from `deploy/debian/node-agent/`, by where they go.
const FILES: &[(&str, &str, u32)] = &[
    (
        "gpuaas-node-agent.service",
        "lib/systemd/system/gpuaas-node-agent.service",
        0o644,
    ),
    ("node-agent.toml", "etc/gpuaas/node-agent.toml", 0o644),
];
const SCRIPTS: &[&str] = &["postinst", "prerm", "postrm"];

/// `cargo xtask package`: the release agent and its package, and the portal's image from the
/// release server (also saved as an OCI archive), in `target/package/`;
/// `cargo xtask package check`: the check `cargo xtask test` runs, on the debug agent.
pub fn run(args: &[String]) -> Result {
    match args {
        [] => {}
        [c] if c == "check" => {
            // The debug agent as the tests build it (their flags, so nothing is rebuilt).
            sh(&mut crate::test::cargo(&[
                "build",
                "--package",
                "node-agent",
            ]))?;
            return check();
        }
        [c] if c == "check-image" => {
            // The debug server and the site as `cargo xtask test` builds them.
            sh(Command::new("cargo")
                .args(["leptos", "build", "--server-only"])
                .current_dir(root()))?;
            if !target_dir().join("site/pkg").exists() {
                sh(Command::new("cargo")
                    .args(["leptos", "build", "--release", "--frontend-only"])
                    .current_dir(root()))?;
            }
            let pg = crate::test::throwaway_cluster("image")?;
            pg.ensure_database("image").map_err(|e| e.to_string())?;
            return crate::image::check(&pg.url("image"));
        }
        _ => {
            return Err(format!(
                "usage: cargo xtask package [check | check-image], not {args:?}"
            ));
        }
    }
    crate::tools::ensure_debian_packages(&["dpkg-dev"])?;
    step(
        "the node agent, release build (cargo build --release --package node-agent; minutes when cold)",
    );
    sh(Command::new("cargo").args(["build", "--release", "--package", "node-agent"]))?;
    let deb = build(
        &target_dir().join("release/node-agent"),
        &agent_version()?,
        &target_dir().join("package"),
        Compression::Xz,
    )?;
    eprintln!("    {}", deb.display());

    step(
        "the portal, release build (cargo leptos build --release; the server with whole-program LTO, ~20 minutes cold on 2 cores)",
    );
    sh(Command::new("cargo")
        .args(["leptos", "build", "--release"])
        .current_dir(root()))?;
    let version = crate_version("server")?;
    let reference = crate::image::build(&target_dir().join("server-release/server"), &version)?;
    let archive = crate::image::archive_path(&version);
    crate::image::save(&reference, &archive)?;
    eprintln!("    {reference}, saved as {}", archive.display());
    Ok(())
}

/// The agent's version, from its Cargo.toml.
fn agent_version() -> Result<String> {
    crate_version("node-agent")
}

/// A workspace crate's version, from its Cargo.toml.
fn crate_version(krate: &str) -> Result<String> {
    let manifest = std::fs::read_to_string(root().join(krate).join("Cargo.toml"))
        .map_err(|e| format!("{krate}/Cargo.toml: {e}"))?;
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .map(str::to_string)
        .ok_or_else(|| format!("{krate}/Cargo.toml has no version"))
}

/// How the package's data is compressed: xz as Debian ships, or gzip at its fastest for a
/// test's throwaway packages (xz takes ~20 s on the debug agent, gzip under one).
#[derive(Clone, Copy)]
enum Compression {
    Xz,
    Fast,
}

/// Assembles `gpuaas-node-agent_{version}_{arch}.deb` in `out` from `binary`; returns its path.
fn build(binary: &Path, version: &str, out: &Path, compression: Compression) -> Result<PathBuf> {
    let arch = output(Command::new("dpkg").arg("--print-architecture"))
        .ok_or("dpkg --print-architecture failed")?
        .trim()
        .to_string();
    let tree = out.join(format!("{PACKAGE}_{version}"));
    let _ = std::fs::remove_dir_all(&tree);
    let src = root().join("deploy/debian/node-agent");
    let put = |from: &Path, to: &str, mode: u32| -> Result {
        let dest = tree.join(to);
        std::fs::create_dir_all(dest.parent().expect("has a parent"))
            .map_err(|e| format!("{}: {e}", dest.display()))?;
        std::fs::copy(from, &dest).map_err(|e| format!("{}: {e}", from.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("{}: {e}", dest.display()))
    };
    put(binary, "usr/bin/node-agent", 0o755)?;
    for (from, to, mode) in FILES {
        put(&src.join(from), to, *mode)?;
    }
    for script in SCRIPTS {
        put(&src.join(script), &format!("DEBIAN/{script}"), 0o755)?;
    }
    put(
        &src.join("README.md"),
        "usr/share/doc/gpuaas-node-agent/README.md",
        0o644,
    )?;
    let write = |to: &str, text: String| -> Result {
        std::fs::write(tree.join(to), text).map_err(|e| format!("{to}: {e}"))
    };
    write("DEBIAN/conffiles", "/etc/gpuaas/node-agent.toml\n".into())?;
    let size_kib = std::fs::metadata(binary)
        .map_err(|e| format!("{}: {e}", binary.display()))?
        .len()
        / 1024;
    write(
        "DEBIAN/control",
        format!(
            "Package: {PACKAGE}\n\
             Version: {version}\n\
             Architecture: {arch}\n\
             Maintainer: GPUaaS portal developers <ops@gpuaas.invalid>\n\
             Installed-Size: {size_kib}\n\
             Depends: libc6 (>= 2.36)\n\
             Recommends: libvirt-daemon-system, qemu-system-x86, dnsmasq-base, nftables, iproute2, xorriso, nvme-cli\n\
             Section: admin\n\
             Priority: optional\n\
             Description: GPUaaS node agent\n \
             The agent of a GPU host: enrolled once with a bootstrap token, it heartbeats to\n \
             the control plane, claims its tasks and makes each allocation real on the host\n \
             (VFIO GPUs, NVMe namespaces, the slot network, fabric partitions, libvirt).\n"
        ),
    )?;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let deb = out.join(format!("{PACKAGE}_{version}_{arch}.deb"));
    let compress: &[&str] = match compression {
        Compression::Xz => &["-Zxz"],
        Compression::Fast => &["-Zgzip", "-z1"],
    };
    sh(Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group"])
        .args(compress)
        .arg(&tree)
        .arg(&deb))?;
    Ok(deb)
}

/// The check in `cargo xtask test`, on the debug agent the tests built: the package's
/// contents, its unit, and install, upgrade, remove and purge in a Debian root.
pub fn check() -> Result {
    crate::tools::ensure_debian_packages(&["dpkg-dev", "debootstrap"])?;
    let out = target_dir().join("package-test");
    let binary = target_dir().join("debug/node-agent");
    let version = agent_version()?;
    // An older build of the same agent, to upgrade from.
    let older = build(
        &binary,
        &format!("{version}~older"),
        &out,
        Compression::Fast,
    )?;
    let deb = build(&binary, &version, &out, Compression::Fast)?;
    contents(&deb)?;
    verify_unit(&deb, &out)?;
    match debian_root(&out) {
        Ok(chroot) => in_debian_root(&chroot, &older, &deb),
        Err(why) => {
            eprintln!(
                "    SKIPPED: installing the package into a Debian root ({why}); the package was built and its contents and unit checked"
            );
            Ok(())
        }
    }
}

/// What the package holds, each file with its mode.
fn contents(deb: &Path) -> Result {
    let listing = output(Command::new("dpkg-deb").arg("--contents").arg(deb))
        .ok_or("dpkg-deb --contents failed")?;
    for (path, mode) in [
        ("./usr/bin/node-agent", "-rwxr-xr-x root/root"),
        (
            "./lib/systemd/system/gpuaas-node-agent.service",
            "-rw-r--r-- root/root",
        ),
        ("./etc/gpuaas/node-agent.toml", "-rw-r--r-- root/root"),
    ] {
        let line = listing
            .lines()
            .find(|l| l.ends_with(path))
            .ok_or_else(|| format!("the package has no {path}:\n{listing}"))?;
        if !line.starts_with(mode) {
            return Err(format!("{path} is {line:?}, not {mode}"));
        }
    }
    Ok(())
}

/// `systemd-analyze verify` on the packaged unit, with its `ExecStart` pointing at the
/// packaged binary (verify checks that it exists). Verify reports unknown or malformed
/// settings as warnings and still exits 0, so anything it says is a failure.
fn verify_unit(deb: &Path, out: &Path) -> Result {
    let tree = out.join("verify");
    let _ = std::fs::remove_dir_all(&tree);
    sh(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&tree))?;
    let unit = std::fs::read_to_string(tree.join("lib/systemd/system/gpuaas-node-agent.service"))
        .map_err(|e| format!("the unit: {e}"))?;
    let binary = tree.join("usr/bin/node-agent");
    let local = tree.join("gpuaas-node-agent.service");
    std::fs::write(
        &local,
        unit.replace("/usr/bin/node-agent", &binary.display().to_string()),
    )
    .map_err(|e| e.to_string())?;
    let said = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&local)
        .output()
        .map_err(|e| format!("systemd-analyze: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&said.stdout),
        String::from_utf8_lossy(&said.stderr)
    );
    if !said.status.success() || !text.trim().is_empty() {
        return Err(format!("systemd-analyze verify on the unit:\n{text}"));
    }
    Ok(())
}

/// A minimal Debian bookworm root made by `debootstrap` from Debian's registry, kept under
/// the target directory between runs (a few minutes to make once).
fn debian_root(out: &Path) -> Result<PathBuf> {
    made_by_debootstrap(
        "debian-root",
        &[],
        &out.join("debootstrap.log"),
        "the package",
    )
}

/// `target/{name}`: a Debian bookworm root (`debootstrap --variant=minbase`, with `include`d
/// packages) made once and kept; what it is `for` is said while it is made, `log` keeps
/// debootstrap's output.
pub fn made_by_debootstrap(
    name: &str,
    include: &[&str],
    log: &Path,
    purpose: &str,
) -> Result<PathBuf> {
    let chroot = target_dir().join(name);
    let done = chroot.join(MADE);
    if done.exists() {
        return Ok(chroot);
    }
    let mut args = vec!["--variant=minbase".to_string()];
    if !include.is_empty() {
        args.push(format!("--include={}", include.join(",")));
    }
    step(&format!(
        "a Debian root for {purpose} (debootstrap {} bookworm; a minute or two, once)",
        args.join(" ")
    ));
    let _ = std::fs::remove_dir_all(&chroot);
    let made = Command::new("debootstrap")
        .args(&args)
        .arg("bookworm")
        .arg(&chroot)
        .arg("http://deb.debian.org/debian")
        .stdout(std::fs::File::create(log).map_err(|e| e.to_string())?)
        .stderr(std::process::Stdio::inherit())
        .status()
        .map_err(|e| format!("debootstrap: {e}"))?;
    if !made.success() {
        return Err(format!(
            "debootstrap failed ({made}); its log is {}",
            log.display()
        ));
    }
    std::fs::write(&done, "").map_err(|e| e.to_string())?;
    Ok(chroot)
}

/// The file that says a root was made whole (a root without it is made again).
pub const MADE: &str = ".made-by-xtask";

/// Runs `args` in the root; its output.
fn chrooted(chroot: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("chroot")
        .arg(chroot)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .map_err(|e| format!("chroot: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "in the Debian root, {args:?} failed ({}):\n{text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(text)
}

/// Install the older package, find the agent working and idle, upgrade over it with a lease
/// and an edited setting in place (both kept), remove (state and settings kept), purge (state
/// with a lease kept).
fn in_debian_root(chroot: &Path, older: &Path, deb: &Path) -> Result {
    step("the package in a Debian root: install, discover, upgrade, remove, purge");
    // A clean start: nothing of an earlier run.
    let _ = chrooted(chroot, &["dpkg", "--purge", PACKAGE]);
    let _ = std::fs::remove_dir_all(chroot.join("var/lib/gpuaas"));
    let _ = std::fs::remove_dir_all(chroot.join("etc/gpuaas"));
    let copy_in = |from: &Path, name: &str| -> Result<String> {
        std::fs::copy(from, chroot.join("tmp").join(name)).map_err(|e| e.to_string())?;
        Ok(format!("/tmp/{name}"))
    };
    let older = copy_in(older, "older.deb")?;
    let newer = copy_in(deb, "newer.deb")?;

    chrooted(chroot, &["dpkg", "-i", &older])?;
    let state = chroot.join("var/lib/gpuaas/node-agent");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&state)
        .map_err(|e| format!("the post-install made no state directory: {e}"))?
        .permissions()
        .mode();
    expect(
        mode & 0o777 == 0o700,
        format!("the state directory is {mode:o}, not 0700"),
    )?;
    expect(
        !state.join("credential").exists(),
        "a fresh install wrote a credential".into(),
    )?;
    // The installed agent reads a host: the fixture's, copied in.
    let fixture = chroot.join("tmp/fixture");
    let _ = std::fs::remove_dir_all(&fixture);
    sh(Command::new("cp")
        .arg("-a")
        .arg(root().join("node-agent/fixtures/pcie-l40s-4x"))
        .arg(&fixture))?;
    let found = chrooted(
        chroot,
        &[
            "node-agent",
            "--config",
            "/etc/gpuaas/node-agent.toml",
            "discover",
            "--driver",
            "simulated",
            "--fixture",
            "/tmp/fixture",
        ],
    )?;
    expect(
        found.contains("\"hostname\": \"gpu-pcie-01\"") && found.contains("\"proposed_slots\""),
        format!("discover in the Debian root printed:\n{found}"),
    )?;

    // A tenant's lease and an operator's setting, then the upgrade.
    std::fs::create_dir_all(state.join("leases")).map_err(|e| e.to_string())?;
    std::fs::write(state.join("leases/lease-test.json"), "{\"kept\": true}")
        .map_err(|e| e.to_string())?;
    let settings = chroot.join("etc/gpuaas/node-agent.toml");
    let edited = std::fs::read_to_string(&settings).map_err(|e| e.to_string())?
        + "\n# the operator's own line\n";
    std::fs::write(&settings, &edited).map_err(|e| e.to_string())?;
    chrooted(chroot, &["dpkg", "-i", &newer])?;
    let installed = chrooted(chroot, &["dpkg-query", "-W", "-f=${Version}", PACKAGE])?;
    expect(
        installed == agent_version()?,
        format!("after the upgrade dpkg says {installed}"),
    )?;
    expect(
        state.join("leases/lease-test.json").exists(),
        "the upgrade lost a lease".into(),
    )?;
    expect(
        std::fs::read_to_string(&settings).map_err(|e| e.to_string())? == edited,
        "the upgrade replaced the operator's settings".into(),
    )?;

    // Removed: the program goes, the state and the settings stay.
    chrooted(chroot, &["dpkg", "-r", PACKAGE])?;
    expect(
        !chroot.join("usr/bin/node-agent").exists(),
        "removal left the program".into(),
    )?;
    expect(
        state.join("leases/lease-test.json").exists() && settings.exists(),
        "removal took the state or the settings".into(),
    )?;
    // Purged with a lease left: the state stays (a guest still holds that slot).
    chrooted(chroot, &["dpkg", "--purge", PACKAGE])?;
    expect(
        state.join("leases/lease-test.json").exists(),
        "a purge took a state directory that holds a lease".into(),
    )?;
    expect(!settings.exists(), "a purge left the settings".into())?;
    // Without a lease, a purge takes the state too.
    std::fs::remove_file(state.join("leases/lease-test.json")).map_err(|e| e.to_string())?;
    chrooted(chroot, &["dpkg", "-i", &newer])?;
    chrooted(chroot, &["dpkg", "--purge", PACKAGE])?;
    expect(
        !state.exists(),
        "a purge without leases left the state".into(),
    )
}

/// `Err(failure)` unless `ok`.
fn expect(ok: bool, failure: String) -> Result {
    if ok { Ok(()) } else { Err(failure) }
}
