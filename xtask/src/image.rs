//! The portal's container image, built with podman where no registry can be reached: a
//! Debian root made by `debootstrap` (kept under the target directory) is imported as the
//! base, and `deploy/container/Containerfile` adds the server and the site.
//!
//! `cargo xtask package` builds it from the release server; `cargo xtask test` builds it from
//! the debug server and checks it: what the image says it runs, then the image itself started
//! against a test database, which must answer `/readyz` with 200 and show a signed-in page.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::proc::{checked_output, output, run as sh, show};
use crate::{Result, root, step, target_dir};

/// The imported Debian root the Containerfile starts from.
const BASE: &str = "localhost/gpuaas-base:bookworm";
const IMAGE: &str = "localhost/gpuaas-portal";
/// The user the image runs as (no name in the root; it needs none).
const USER: &str = "10001:10001";

/// Runs podman the way this kind of machine allows: `runc` (crun fails where cgroups are
/// hybrid), and limits a process without `CAP_SYS_RESOURCE` may set.
fn podman() -> Command {
    let mut c = Command::new("podman");
    c.args(["--runtime", "runc"]);
    c
}

fn podman_run_flags(c: &mut Command) -> &mut Command {
    c.args([
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=4096:4096",
    ])
}

/// Builds the image from `server` and the site in `target/site`, tagged `tag`; its reference.
pub fn build(server: &Path, tag: &str) -> Result<String> {
    crate::tools::ensure_debian_packages(&["podman", "runc", "debootstrap"])?;
    base_image()?;
    let context = target_dir().join("image-context");
    let _ = std::fs::remove_dir_all(&context);
    std::fs::create_dir_all(&context).map_err(|e| e.to_string())?;
    std::fs::copy(server, context.join("server"))
        .map_err(|e| format!("{}: {e}", server.display()))?;
    sh(Command::new("cp")
        .arg("-a")
        .arg(target_dir().join("site"))
        .arg(context.join("site")))?;
    let reference = format!("{IMAGE}:{tag}");
    step(&format!(
        "the portal's image {reference} (podman build, deploy/container/Containerfile)"
    ));
    sh(podman()
        .args(["build", "--quiet", "--format", "docker", "--build-arg"])
        .arg(format!("BASE={BASE}"))
        .arg("--file")
        .arg(root().join("deploy/container/Containerfile"))
        .args(["--tag", &reference])
        .arg(&context))?;
    let _ = std::fs::remove_dir_all(&context);
    Ok(reference)
}

/// The base image, imported once from a `debootstrap` root kept under the target directory.
fn base_image() -> Result {
    let exists = podman()
        .args(["image", "exists", BASE])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if exists {
        return Ok(());
    }
    let fresh = !target_dir()
        .join("image-root")
        .join(crate::package::MADE)
        .exists();
    let rootfs = crate::package::made_by_debootstrap(
        "image-root",
        &["ca-certificates"],
        &target_dir().join("image-debootstrap.log"),
        "the portal's image",
    )?;
    if fresh {
        // Nothing of the build machine's apt state belongs in an image.
        for dir in ["var/cache/apt/archives", "var/lib/apt/lists"] {
            let _ = clear_dir(&rootfs.join(dir));
        }
    }
    step(&format!("importing the Debian root as {BASE}"));
    let tar = Command::new("tar")
        .arg("-C")
        .arg(&rootfs)
        .arg(format!("--exclude=./{}", crate::package::MADE))
        .args(["-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting tar: {e}"))?;
    let imported = podman()
        .args(["import", "--quiet", "-", BASE])
        .stdin(tar.stdout.ok_or("tar has no output")?)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("starting podman import: {e}"))?;
    if imported.success() {
        Ok(())
    } else {
        Err(format!("podman import failed ({imported})"))
    }
}

fn clear_dir(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(path)?;
        } else {
            std::fs::remove_file(path)?;
        }
    }
    Ok(())
}

/// The check in `cargo xtask test`: the image from the debug server, what it says it runs,
/// and (where containers can run) the image started against `database_url`'s database.
pub fn check(database_url: &str) -> Result {
    let reference = build(&target_dir().join("debug/server"), "test")?;
    step("the image: its user, entry point, port and health check");
    inspect(&reference)?;
    match can_run_containers() {
        Ok(()) => run_and_sign_in(&reference, database_url),
        Err(why) => {
            eprintln!("    SKIPPED: starting the image ({why}); it was built and inspected");
            Ok(())
        }
    }
}

fn inspect(reference: &str) -> Result {
    let got = output(podman().args([
        "image",
        "inspect",
        "--format",
        "{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .Config.Cmd}}|{{json .Config.ExposedPorts}}|{{.Config.Healthcheck}}|{{.Size}}",
        reference,
    ]))
    .ok_or_else(|| format!("podman image inspect {reference} failed"))?;
    let f: Vec<&str> = got.trim().split('|').collect();
    let want = [
        (0, USER),
        (1, r#"["/app/server"]"#),
        (2, r#"["serve"]"#),
        (3, r#"{"3000/tcp":{}}"#),
    ];
    for (i, w) in want {
        if f.get(i) != Some(&w) {
            return Err(format!(
                "the image's config field {i} is {:?}, not {w:?} (all: {got})",
                f.get(i)
            ));
        }
    }
    if !f.get(4).is_some_and(|h| h.contains("/healthz")) {
        return Err(format!("the image has no health check on /healthz ({got})"));
    }
    let mib = f.get(5).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0) / (1 << 20);
    eprintln!("    {reference}: user {USER}, /app/server serve, port 3000, {mib} MiB");
    Ok(())
}

/// Whether this machine can start a container at all: the base image's `true`.
fn can_run_containers() -> std::result::Result<(), String> {
    let mut c = podman();
    c.args(["run", "--rm", "--network", "none"]);
    podman_run_flags(&mut c);
    let out = c
        .args([BASE, "/bin/true"])
        .output()
        .map_err(|e| format!("podman: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "podman cannot start a container here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The image migrates the database, sets the admin's password and serves; `/readyz` must
/// answer 200, and the admin must sign in with the break-glass form and see `/admin`.
fn run_and_sign_in(reference: &str, database_url: &str) -> Result {
    step("the image started against a test database: /readyz, then a signed-in page");
    let port = pgcluster::free_port().map_err(|e| e.to_string())?;
    let public = format!("http://127.0.0.1:{port}");
    let password = crate::portal::random_password()?;
    let keys = crate::portal::random_keyring("image")?;
    let name = format!("gpuaas-image-check-{}", std::process::id());
    let container = |args: &[&str], detached: bool| {
        let mut c = podman();
        // Podman runs health checks from systemd timers; where there is no systemd it only
        // complains. The image's check is inspected above instead.
        c.args(["run", "--no-healthcheck"]);
        if detached {
            c.args(["--detach", "--name", &name]);
        } else {
            c.args(["--rm", "--interactive"]);
        }
        // The test database is on the host's loopback.
        c.args(["--network", "host"]);
        podman_run_flags(&mut c);
        for (k, v) in [
            ("DATABASE_URL", database_url),
            ("LEPTOS_SITE_ADDR", &format!("127.0.0.1:{port}")),
            ("PORTAL_PUBLIC_URL", &public),
            ("PORTAL_COOKIE_SECURE", "false"),
            ("PORTAL_SECRET_KEYS", &keys),
            ("PORTAL_METRICS_ADDR", "off"),
            ("PORTAL_LOG_FORMAT", "json"),
        ] {
            c.arg("--env").arg(format!("{k}={v}"));
        }
        c.arg(reference).args(args);
        c
    };
    sh(&mut container(&["migrate"], false))?;
    let mut set = container(
        &[
            "set-admin-password",
            "--email",
            crate::portal::ADMIN_EMAIL,
            "--name",
            "Platform admin",
        ],
        false,
    );
    let shown = show(&set);
    let mut child = set
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting `{shown}`: {e}"))?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        writeln!(stdin, "{password}").map_err(|e| e.to_string())?;
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("`{shown}` failed ({status})"));
    }
    sh(container(&["serve"], true).stdout(Stdio::null()))?;
    let result = signed_in(port, &public, &password);
    let logs = output(podman().args(["logs", "--tail", "20", &name])).unwrap_or_default();
    let _ = podman().args(["rm", "--force", &name]).output();
    result.map_err(|e| format!("{e}\nthe container's last lines:\n{logs}"))
}

fn signed_in(port: u16, public: &str, password: &str) -> Result {
    let start = std::time::Instant::now();
    while crate::proc::http_status(port, "/readyz") != Some(200) {
        if start.elapsed() > Duration::from_secs(60) {
            return Err("the image's server did not answer /readyz 200 within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!(
        "    /readyz 200 after {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let jar = target_dir().join("image-check-cookies");
    let _ = std::fs::remove_file(&jar);
    let curl = |args: &[&str]| -> Result<String> {
        checked_output(
            Command::new("curl")
                .args(["--silent", "--show-error", "--cookie-jar"])
                .arg(&jar)
                .arg("--cookie")
                .arg(&jar)
                .args(args),
        )
    };
    let login = curl(&[&format!("{public}/login")])?;
    let action = form_action(&login, "break-glass-form")
        .ok_or("the login page has no break-glass form with an action")?;
    let answered = curl(&[
        "--output",
        "/dev/null",
        "--write-out",
        "%{http_code}",
        "--header",
        &format!("Origin: {public}"),
        "--data-urlencode",
        &format!("email={}", crate::portal::ADMIN_EMAIL),
        "--data-urlencode",
        &format!("password={password}"),
        &format!("{public}{action}"),
    ])?;
    // 200 to a script, a redirect to a browser's form post: either way the cookie is set.
    if !matches!(answered.trim(), "200" | "302" | "303") {
        return Err(format!("the break-glass sign-in answered {answered}"));
    }
    let admin = curl(&["--fail", &format!("{public}/admin")])?;
    if !admin.contains("Platform admin") {
        return Err("/admin after signing in does not show the admin's name".into());
    }
    eprintln!("    signed in through the break-glass form; /admin shows the platform admin");
    let _ = std::fs::remove_file(&jar);
    Ok(())
}

/// The `action` of the `<form>` whose id is `id`.
fn form_action(html: &str, id: &str) -> Option<String> {
    let at = html.find(&format!("id=\"{id}\""))?;
    let open = html[..at].rfind("<form")?;
    let close = open + html[open..].find('>')?;
    let tag = &html[open..close];
    let start = tag.find("action=\"")? + "action=\"".len();
    let end = start + tag[start..].find('"')?;
    Some(tag[start..end].replace("&amp;", "&"))
}

/// Where `cargo xtask package` leaves the image's archive.
pub fn archive_path(tag: &str) -> PathBuf {
    target_dir().join(format!("package/gpuaas-portal_{tag}.oci.tar"))
}

/// Saves `reference` as an OCI archive at `path` (`podman load -i` on another machine).
pub fn save(reference: &str, path: &Path) -> Result {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    let _ = std::fs::remove_file(path);
    sh(podman()
        .args(["save", "--quiet", "--format", "oci-archive", "--output"])
        .arg(path)
        .arg(reference))
}
