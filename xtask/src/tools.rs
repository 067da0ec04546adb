//! Installs what is missing: the wasm target, cargo-leptos, the wasm-bindgen CLI, npm
//! packages, and (via apt, as root) PostgreSQL, Node.js, Chromium and the node agent's host
//! tools. Nothing here downloads a prebuilt binary from outside the crates.io, npm and Debian
//! registries.

use std::path::PathBuf;
use std::process::Command;

use crate::proc::{output, run};
use crate::{Result, root, step};

/// cargo-leptos 0.3.11 needs rustc 1.96; 0.3.10 is the newest that installs on 1.95.
pub const CARGO_LEPTOS_VERSION: &str = "0.3.10";

#[derive(Clone, Copy, Debug, Default)]
pub struct Needs {
    pub postgres: bool,
    pub chromium: bool,
    /// npm packages: playwright-core, binaryen's wasm-opt.
    pub npm: bool,
    /// What the node agent runs on a host: qemu-img, xorriso, virsh and libvirt's schema
    /// validator, nvme-cli, dnsmasq (also the local DNS server the domain-proof tests query),
    /// `ip` and `nft` for the slot network, busybox (the guests' DHCP client, ping and
    /// arping in the network tests), Prometheus with promtool (the metrics tests),
    /// cloud-init (the seed's user-data is merged by cloud-init's own code in a test), and
    /// rsync (SkyPilot will not launch without it).
    pub host_tools: bool,
}

impl Needs {
    pub fn everything() -> Self {
        Needs {
            postgres: true,
            chromium: true,
            npm: true,
            host_tools: true,
        }
    }
}

/// The node agent's host tools, by the Debian package that ships each.
const HOST_TOOLS: [(&str, &str); 14] = [
    ("/usr/bin/qemu-img", "qemu-utils"),
    ("/usr/bin/xorriso", "xorriso"),
    ("/usr/bin/virsh", "libvirt-clients"),
    ("/usr/bin/virt-xml-validate", "libvirt-clients"),
    ("/usr/bin/xmllint", "libxml2-utils"),
    ("/usr/sbin/nvme", "nvme-cli"),
    ("/usr/sbin/dnsmasq", "dnsmasq-base"),
    ("/usr/sbin/ip", "iproute2"),
    ("/usr/sbin/nft", "nftables"),
    ("/usr/bin/busybox", "busybox"),
    // The metrics tests scrape a running server and agent with a real Prometheus, and check
    // deploy/'s rules and both /metrics endpoints with promtool.
    ("/usr/bin/prometheus", "prometheus"),
    ("/usr/bin/promtool", "prometheus"),
    // What a guest does with the seed: a test merges its user-data with cloud-init's code.
    ("/usr/bin/cloud-init", "cloud-init"),
    // SkyPilot will not launch without rsync (the SkyPilot provider's test).
    ("/usr/bin/rsync", "rsync"),
];

pub fn ensure_all(needs: Needs) -> Result {
    step("checking tools");
    prepend_path();
    let mut apt = Vec::new();
    if needs.postgres && pgcluster::find_bin_dir().is_err() {
        apt.push("postgresql");
    }
    if needs.npm && output(Command::new("npm").arg("--version")).is_none() {
        apt.extend(["nodejs", "npm"]);
    }
    if needs.chromium && !std::path::Path::new("/usr/bin/chromium").exists() {
        apt.push("chromium");
    }
    if needs.host_tools {
        for (binary, package) in HOST_TOOLS {
            if !std::path::Path::new(binary).exists() && !apt.contains(&package) {
                apt.push(package);
            }
        }
    }
    if !apt.is_empty() {
        apt_install(&apt)?;
    }
    ensure_wasm_target()?;
    ensure_wasm_bindgen()?;
    ensure_cargo_leptos()?;
    if needs.npm {
        ensure_npm()?;
    }
    Ok(())
}

/// `~/.cargo/bin` (for tools we `cargo install`) and `node_modules/.bin` (npm's `wasm-opt`)
/// go first on PATH, for us and for every child, cargo-leptos included.
pub fn prepend_path() {
    let mut dirs: Vec<PathBuf> = vec![root().join("node_modules/.bin")];
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    } else if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    let current = std::env::var_os("PATH").unwrap_or_default();
    let existing: Vec<PathBuf> = std::env::split_paths(&current).collect();
    dirs.retain(|d| !existing.contains(d));
    dirs.extend(existing);
    let joined = std::env::join_paths(dirs).expect("PATH entries contain no separator");
    // SAFETY: xtask is single-threaded at this point; no other thread reads the environment.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("PATH", joined)
    };
}

fn apt_install(packages: &[&str]) -> Result {
    if !pgcluster::running_as_root() {
        return Err(format!(
            "missing system packages; install them with: sudo apt-get install -y {}",
            packages.join(" ")
        ));
    }
    step(&format!(
        "apt-get install {} (a few minutes, once; Chromium is the largest)",
        packages.join(" ")
    ));
    let next = |e: String| {
        format!(
            "{e}\n    the Debian packages could not be installed; check that the Debian mirror \
             is reachable (`apt-get update`), then run `cargo xtask setup` again"
        )
    };
    run(Command::new("apt-get").args(["update", "-qq"])).map_err(next)?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))
    .map_err(next)
}

fn ensure_wasm_target() -> Result {
    let installed =
        output(Command::new("rustup").args(["target", "list", "--installed"])).unwrap_or_default();
    if installed
        .lines()
        .any(|l| l.trim() == "wasm32-unknown-unknown")
    {
        return Ok(());
    }
    step("rustup target add wasm32-unknown-unknown");
    run(Command::new("rustup").args(["target", "add", "wasm32-unknown-unknown"]))
}

/// The wasm-bindgen crate version pinned in Cargo.lock; the CLI must match it exactly.
fn locked_wasm_bindgen_version() -> Result<String> {
    let lock = std::fs::read_to_string(root().join("Cargo.lock"))
        .map_err(|e| format!("reading Cargo.lock: {e}"))?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == "name = \"wasm-bindgen\""
            && let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = \""))
        {
            return Ok(v.trim_end_matches('"').to_string());
        }
    }
    Err("Cargo.lock has no wasm-bindgen package".into())
}

fn ensure_wasm_bindgen() -> Result {
    let want = locked_wasm_bindgen_version()?;
    let have = output(Command::new("wasm-bindgen").arg("--version")).unwrap_or_default();
    if have.split_whitespace().nth(1) == Some(want.as_str()) {
        return Ok(());
    }
    step(&format!(
        "cargo install wasm-bindgen-cli@{want} (about 3 minutes on 2 cores, once)"
    ));
    // Not --locked: its lockfile pins a webpki-roots release that is no longer on crates.io.
    run(Command::new("cargo").args(["install", &format!("wasm-bindgen-cli@{want}")]))
        .map_err(|e| cargo_install_failed(e, "wasm-bindgen-cli"))
}

fn ensure_cargo_leptos() -> Result {
    let have = output(Command::new("cargo-leptos").arg("--version")).unwrap_or_default();
    if have.split_whitespace().nth(1) == Some(CARGO_LEPTOS_VERSION) {
        return Ok(());
    }
    step(&format!(
        "cargo install cargo-leptos@{CARGO_LEPTOS_VERSION} --locked (10 to 15 minutes on 2 \
         cores, once; cargo prints each crate as it compiles)"
    ));
    run(Command::new("cargo").args([
        "install",
        &format!("cargo-leptos@{CARGO_LEPTOS_VERSION}"),
        "--locked",
    ]))
    .map_err(|e| cargo_install_failed(e, "cargo-leptos"))
}

fn cargo_install_failed(e: String, what: &str) -> String {
    format!(
        "{e}\n    installing {what} failed; check that crates.io is reachable and that there is \
         disk space, then run `cargo xtask setup` again (what already compiled is reused)"
    )
}

fn ensure_npm() -> Result {
    let root = root();
    let stamp = root.join("node_modules/.package-lock.json");
    let lock = root.join("package-lock.json");
    let fresh = match (stamp.metadata(), lock.metadata()) {
        (Ok(s), Ok(l)) => s.modified().ok() >= l.modified().ok(),
        _ => false,
    };
    if !fresh {
        step(
            "npm ci (playwright-core, axe-core, binaryen, oidc-provider, echarts, rapidoc; about a minute)",
        );
        run(Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&root))
        .map_err(|e| {
            format!(
                "{e}\n    npm could not install package-lock.json; check that the npm registry \
                 is reachable, then run `cargo xtask setup` again"
            )
        })?;
    }
    vendor_scripts(&root)
}

/// What the pages load from `public/vendor/` (never a CDN), copied from the npm packages
/// pinned in package-lock.json: the finance charts' ECharts and the API reference's RapiDoc.
const VENDORED: [(&str, &str); 2] = [
    ("node_modules/echarts/dist/echarts.min.js", "echarts.min.js"),
    ("node_modules/rapidoc/dist/rapidoc-min.js", "rapidoc-min.js"),
];

fn vendor_scripts(root: &std::path::Path) -> Result {
    for (from, name) in VENDORED {
        let from = root.join(from);
        let to = root.join("public/vendor").join(name);
        let same = matches!((from.metadata(), to.metadata()), (Ok(a), Ok(b)) if a.len() == b.len());
        if same {
            continue;
        }
        std::fs::create_dir_all(to.parent().expect("has a parent")).map_err(|e| e.to_string())?;
        std::fs::copy(&from, &to).map_err(|e| format!("copying {}: {e}", from.display()))?;
    }
    Ok(())
}

/// Installs those of `packages` (Debian package names) that dpkg does not list as installed.
pub fn ensure_debian_packages(packages: &[&str]) -> Result {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| {
            output(Command::new("dpkg-query").args(["-W", "-f=${Status}", p]))
                .is_none_or(|s| s != "install ok installed")
        })
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        apt_install(&missing)
    }
}
