//! The tools GPU users already drive, proven against their real packages from PyPI: SkyPilot
//! with this cloud's provider (`integrations/skypilot/`) and dstack with its backend
//! (`integrations/dstack/`), each installed as a contributor's branch would lay it out.

use std::path::PathBuf;
use std::process::Command;

use crate::proc::run as sh;
use crate::{Result, root, step, target_dir};

/// The SkyPilot release `integrations/skypilot/registry.patch` is made against.
pub const SKYPILOT: &str = "skypilot==0.14.1";

/// The dstack release `integrations/dstack/registry.patch` is made against; its configuration
/// model also reads `gpuctl dstack-fleet`'s files.
pub const DSTACK: &str = "dstack==0.19.40";

/// A virtualenv under the target directory with one pinned requirement from PyPI, made once
/// (`about` says how long that takes); its directory.
pub fn pinned_venv(name: &str, requirement: &str, about: &str) -> Result<PathBuf> {
    let venv = target_dir().join(name);
    let marker = venv.join(requirement);
    if !marker.exists() {
        step(&format!(
            "installing {requirement} into {} (once, {about})",
            venv.display()
        ));
        let _ = std::fs::remove_dir_all(&venv);
        sh(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
        sh(Command::new(venv.join("bin/pip")).args(["install", "-q", requirement]))?;
        std::fs::write(&marker, "").map_err(|e| format!("{}: {e}", marker.display()))?;
    }
    Ok(venv)
}

/// The python of a virtualenv with [`DSTACK`].
pub fn dstack_python() -> Result<PathBuf> {
    Ok(pinned_venv("dstack-venv", DSTACK, "about 15 s")?.join("bin/python"))
}

/// The python of a virtualenv with [`SKYPILOT`].
fn skypilot_python() -> Result<PathBuf> {
    Ok(pinned_venv("skypilot-venv", SKYPILOT, "about 40 s")?.join("bin/python"))
}

/// Installs the provider into the pinned SkyPilot and runs its tests against the portal at
/// `api` with the demo fleet running: `sky check`, `sky gpus list`, `sky launch --dryrun`, a
/// capacity refusal failing over to the next region, and the provider's functions launching,
/// reporting and terminating a head and a worker. SkyPilot's state (and its local API server's)
/// lives in a fresh home directory under the target directory.
pub fn skypilot(api: &str, token: &str, project: &str) -> Result {
    let python = skypilot_python()?;
    step("SkyPilot: the GPUaaS provider installed into it, against this portal");
    sh(Command::new(&python)
        .arg(root().join("integrations/install.py"))
        .arg("skypilot"))?;
    let home = target_dir().join("skypilot-home");
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "unittest", "discover", "-v", "-p", "test_*.py", "-s"])
        .arg(root().join("integrations/skypilot/tests"))
        .env("HOME", &home)
        .env("GPUAAS_TEST_HOME", &home)
        .env("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")
        .env("GPUAAS_API", api)
        .env("GPUAAS_TOKEN", token)
        .env("GPUAAS_PROJECT", project)
        .current_dir(&home);
    eprintln!(
        "    $ HOME={} python -m unittest discover -s integrations/skypilot/tests (GPUAAS_API={api})",
        home.display()
    );
    let status = cmd.status().map_err(|e| format!("starting python: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "the SkyPilot provider's tests failed ({status}); SkyPilot's logs in {}/sky_logs",
            home.display()
        ))
    }
}

/// Installs the backend into the pinned dstack and runs its tests against the portal at `api`
/// with the demo fleet running: dstack's own model reads the server configuration, its registry
/// lists the backend, offers follow the portal's with availability, an instance is created with
/// dstack's cloud-init, reached and terminated, and a capacity refusal is dstack's
/// `NoCapacityError`.
pub fn dstack(api: &str, token: &str, project: &str) -> Result {
    let python = dstack_python()?;
    step("dstack: the GPUaaS backend installed into it, against this portal");
    sh(Command::new(&python)
        .arg(root().join("integrations/install.py"))
        .arg("dstack"))?;
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "unittest", "discover", "-v", "-p", "test_*.py", "-s"])
        .arg(root().join("integrations/dstack/tests"))
        .env("GPUAAS_API", api)
        .env("GPUAAS_TOKEN", token)
        .env("GPUAAS_PROJECT", project);
    eprintln!("    $ python -m unittest discover -s integrations/dstack/tests (GPUAAS_API={api})");
    let status = cmd.status().map_err(|e| format!("starting python: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the dstack backend's tests failed ({status})"))
    }
}
