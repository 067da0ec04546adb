//! `gpuctl` against a real server on a loopback port, on a copy of the demo database with one
//! approved node whose agent the test answers for: login keeps the token private, a launch
//! with `--wait` follows the phases to the SSH command, and every refusal exits with the code
//! scripts test.

use control_plane::prelude::*;

use std::net::SocketAddr;
use std::time::Duration;

use control_plane::api_tokens::TokenScope;
use control_plane::demo::{ACME, ACME_RESEARCH};
use gpuctl::{Cli, Done, exit};
use serde_json::Value;
use server::router;
use test_db::fixtures::{answer, provisioned};

use crate::support;

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop";

struct World {
    _db: test_db::TestDb,
    cp: control_plane::ControlPlane,
    agent: control_plane::agent_api::NodeAgent,
    api: String,
    dir: std::path::PathBuf,
}

impl World {
    /// A file in the scratch directory holding `token`, for `--token-file`.
    fn token_file(&self, token: &str) -> String {
        let path = self.dir.join(format!("token-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, format!("{token}\n")).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// `gpuctl ARGS` with this world's API and config file: how it ended, stdout, stderr.
    async fn gpuctl(&self, args: &[&str]) -> (Done, String, String) {
        let config = self.dir.join("config.json");
        let mut argv = vec![
            "gpuctl",
            "--api",
            &self.api,
            "--config",
            config.to_str().unwrap(),
        ];
        argv.extend_from_slice(args);
        let cli = <Cli as clap::Parser>::try_parse_from(&argv).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let done = gpuctl::run(cli, &mut out, &mut err).await;
        (
            done,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }
}

/// A served portal on the demo database with one approved HGX node, and a scratch directory.
async fn world() -> World {
    let (db, state, agent) = support::demo_with_node("gpu-cli-1").await;
    let cp = state.cp.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = std::env::temp_dir().join(format!("gpuctl-test-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    World {
        _db: db,
        cp,
        agent,
        api: format!("http://{addr}/api/v1"),
        dir,
    }
}

async fn token(cp: &control_plane::ControlPlane, scopes: &[TokenScope]) -> String {
    support::api_token(cp, "alice@acme.example", ACME, None, scopes)
        .await
        .0
}

#[tokio::test]
async fn gpuctl_logs_in_launches_and_waits_connects_and_releases() {
    let w = world().await;
    let secret = token(
        &w.cp,
        &[TokenScope::Read, TokenScope::Launch, TokenScope::Keys],
    )
    .await;

    // Login checks the token, then keeps it readable by its owner only.
    let (done, _, err) = w
        .gpuctl(&["--token-file", &w.token_file("gpk_wrong"), "login"])
        .await;
    assert_eq!(done, Done::Exit(exit::AUTH), "{err}");
    assert!(err.contains("(unauthenticated)"), "{err}");
    assert!(!w.dir.join("config.json").exists());
    let (done, _, err) = w
        .gpuctl(&["--token-file", &w.token_file(&secret), "login"])
        .await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    let config = w.dir.join("config.json");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&config).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(saved["token"], secret.as_str());

    // The token takes no argument of its own (every process may read arguments).
    let config = w.dir.join("config.json");
    let argv = ["gpuctl", "--api", &w.api, "--token", &secret, "offers"];
    assert!(<Cli as clap::Parser>::try_parse_from(argv).is_err());
    // The saved token goes only to the address it was saved for.
    let elsewhere = "http://127.0.0.2:9/api/v1";
    let argv = [
        "gpuctl",
        "--api",
        elsewhere,
        "--config",
        config.to_str().unwrap(),
        "offers",
    ];
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let cli = <Cli as clap::Parser>::try_parse_from(argv).unwrap();
    assert_eq!(
        gpuctl::run(cli, &mut out, &mut err).await,
        Done::Exit(exit::AUTH)
    );
    let err = String::from_utf8(err).unwrap();
    assert!(
        err.contains("the saved token is for http://127.0.0.1:"),
        "{err}"
    );

    // From here on the saved token is used.
    let (done, out, _) = w.gpuctl(&["offers", "--region", "eu-west-1"]).await;
    assert_eq!(done, Done::Exit(exit::OK));
    let h100 = out
        .lines()
        .find(|l| l.starts_with("h100.1x "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        h100.contains("eu-west-1") && h100.trim_end().ends_with(" 8"),
        "{h100}"
    );
    let (_, out, _) = w.gpuctl(&["-o", "json", "offers"]).await;
    let offers: Value = serde_json::from_str(&out).unwrap();
    assert!(offers["offers"].as_array().unwrap().len() > 1);

    let key_file = w.dir.join("id_ed25519.pub");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    let (done, _, err) = w
        .gpuctl(&[
            "keys",
            "add",
            "--name",
            "laptop",
            key_file.to_str().unwrap(),
        ])
        .await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    let (_, out, _) = w.gpuctl(&["keys"]).await;
    assert!(out.lines().any(|l| l.contains(" laptop ")), "{out}");

    // Launch and wait: the node's agent answers the provision a moment later.
    let agent = {
        let (cp, agent) = (w.cp.clone(), w.agent.clone());
        tokio::spawn(async move {
            for _ in 0..300 {
                cp.dispatch_outbox(10).await.unwrap();
                let queued: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM agent_tasks WHERE state = 'queued' AND kind = 'slice.vm_provision'",
                )
                .fetch_one(cp.pool())
                .await
                .unwrap();
                if queued > 0 {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    answer(
                        &cp,
                        &agent,
                        &["validate_plan", "write_image", "start_vm"],
                        provisioned,
                    )
                    .await;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("no provision was queued in 30 s");
        })
    };
    let project = ACME_RESEARCH.to_string();
    let (done, out, err) = w
        .gpuctl(&[
            "launch",
            "--project",
            &project,
            "--sku",
            "h100.1x",
            "--image",
            "ubuntu-24.04-cuda",
            "--name",
            "cli-1",
            "--key-id",
            &key_id(&w).await,
            "--tag",
            "team=vision",
            "--wait",
            "--timeout",
            "60",
        ])
        .await;
    agent.await.unwrap();
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    let ssh = out.trim();
    assert!(
        ssh.starts_with("ssh -p 22") && ssh.ends_with("@gpu-cli-1"),
        "{out}"
    );
    for line in [
        "Launched cli-1",
        "slice.vm_provision write_image: succeeded",
        "state: running",
    ] {
        assert!(err.contains(line), "{line:?} not in:\n{err}");
    }

    let (_, out, _) = w.gpuctl(&["ls", "--tag", "team=vision"]).await;
    let row = out
        .lines()
        .find(|l| l.contains(" cli-1 "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains(" running ") && row.contains(ssh), "{row}");
    let id = row.split_whitespace().next().unwrap().to_owned();
    let (_, out, _) = w.gpuctl(&["-o", "json", "show", &id]).await;
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["tags"]["team"], "vision");

    // `ssh` becomes the SSH command built from the endpoint's fields: options end before the
    // destination, and the extra arguments are the command to run there.
    let (done, _, _) = w.gpuctl(&["ssh", &id, "--", "nvidia-smi", "-L"]).await;
    let port = shown["ssh_endpoint"]["port"].as_u64().unwrap().to_string();
    assert_eq!(ssh, format!("ssh -p {port} ubuntu@gpu-cli-1"));
    let expected = [
        "ssh",
        "-p",
        &port,
        "--",
        "ubuntu@gpu-cli-1",
        "nvidia-smi",
        "-L",
    ];
    assert_eq!(done, Done::Exec(expected.map(str::to_owned).to_vec()));

    // The running instances with the tag as a dstack SSH fleet, which dstack's own model
    // reads (where xtask installed dstack: `DSTACK_PYTHON`).
    let (done, fleet, err) = w
        .gpuctl(&["dstack-fleet", "--name", "vision", "--tag", "team=vision"])
        .await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    assert!(
        fleet.contains("type: fleet\nname: \"vision\"\n")
            && fleet.contains(&format!(
                "    - hostname: \"gpu-cli-1\"\n      port: {port}\n      user: \"ubuntu\"\n"
            )),
        "{fleet}"
    );
    dstack_reads(&fleet, "vision", &port);
    let (done, _, err) = w
        .gpuctl(&["dstack-fleet", "--name", "Vision!", "--tag", "team=vision"])
        .await;
    assert_eq!(done, Done::Exit(exit::INVALID), "{err}");
    assert!(err.contains("dstack fleet name"), "{err}");
    let (done, _, err) = w.gpuctl(&["dstack-fleet", "--tag", "team=nobody"]).await;
    assert_eq!(done, Done::Exit(exit::NOT_FOUND), "{err}");

    // Refusals: the problem's sentence on stderr and a code a script can test.
    let (done, _, err) = w
        .gpuctl(&[
            "launch",
            "--project",
            &project,
            "--sku",
            "h100.1x",
            "--image",
            "ubuntu-24.04-cuda",
            "--name",
            "Bad_Name",
            "--ssh-key",
            key_file.to_str().unwrap(),
        ])
        .await;
    assert_eq!(done, Done::Exit(exit::INVALID));
    assert!(
        err.starts_with("error: Invalid name:") && err.contains("[field: name]"),
        "{err}"
    );
    let (done, _, err) = w
        .gpuctl(&[
            "launch",
            "--project",
            &project,
            "--sku",
            "h100.8x",
            "--image",
            "ubuntu-24.04-cuda",
            "--name",
            "too-big",
            "--ssh-key",
            key_file.to_str().unwrap(),
        ])
        .await;
    assert_eq!(done, Done::Exit(exit::REFUSED), "{err}");
    assert!(err.contains("(sku_unavailable)"), "{err}");
    let (done, _, _) = w
        .gpuctl(&["show", "0a0e0000-0000-4000-8fff-000000000009"])
        .await;
    assert_eq!(done, Done::Exit(exit::NOT_FOUND));

    // Images: which take user data, and a launch that brings some (read from a file).
    let (done, out, _) = w.gpuctl(&["images", "--project", &project]).await;
    assert_eq!(done, Done::Exit(exit::OK));
    let ubuntu = out
        .lines()
        .find(|l| l.starts_with("ubuntu-24.04-cuda "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        ubuntu.contains(" os_image ") && ubuntu.contains(" yes "),
        "{ubuntu}"
    );
    let (_, out, _) = w.gpuctl(&["-o", "json", "images"]).await;
    let images: Value = serde_json::from_str(&out).unwrap();
    assert!(images["images"].as_array().unwrap().len() > 1, "{images}");
    let user_data = w.dir.join("cloud-config.yaml");
    std::fs::write(&user_data, "#cloud-config\npackages: [htop]\n").unwrap();
    let launch_with = |image: &'static str, name: &'static str| {
        let (project, key_file, user_data) = (project.clone(), key_file.clone(), user_data.clone());
        let w = &w;
        async move {
            w.gpuctl(&[
                "-o",
                "json",
                "launch",
                "--project",
                &project,
                "--sku",
                "h100.1x",
                "--image",
                image,
                "--name",
                name,
                "--ssh-key",
                key_file.to_str().unwrap(),
                "--user-data",
                user_data.to_str().unwrap(),
            ])
            .await
        }
    };
    let (done, out, err) = launch_with("ubuntu-24.04-cuda", "cli-ud").await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    let launched: Value = serde_json::from_str(&out).unwrap();
    // Kept sealed, in the allocation and in its provision task alike.
    let (plain, sealed, in_task): (Option<String>, Option<String>, String) = sqlx::query_as(
        "SELECT a.user_data, a.user_data_sealed, t.spec::text
         FROM allocations a JOIN agent_tasks t ON t.allocation_id = a.id
         WHERE a.id = $1::uuid",
    )
    .bind(launched["id"].as_str().unwrap())
    .fetch_one(w.cp.pool())
    .await
    .unwrap();
    assert_eq!(plain, None);
    assert!(!sealed.unwrap().contains("htop"));
    assert!(
        in_task.contains("user_data_sealed") && !in_task.contains("htop"),
        "{in_task}"
    );
    let (done, _, err) = launch_with("vllm", "cli-ud-2").await;
    assert_eq!(done, Done::Exit(exit::INVALID), "{err}");
    assert!(
        err.contains("doesn't accept user data") && err.contains("[field: user_data]"),
        "{err}"
    );

    let (done, out, _) = w.gpuctl(&["release", &id]).await;
    assert_eq!(done, Done::Exit(exit::OK));
    assert!(out.contains("cli-1 (releasing)"), "{out}");
    let (done, _, _) = w.gpuctl(&["release", &id]).await;
    assert_eq!(done, Done::Exit(exit::OK), "releasing again is fine");

    // Usage needs the billing scope: refused with this token, answered with one that has it.
    let (done, _, err) = w.gpuctl(&["usage"]).await;
    assert_eq!(done, Done::Exit(exit::AUTH), "{err}");
    let billing = token(&w.cp, &[TokenScope::Billing]).await;
    let (done, out, err) = w
        .gpuctl(&["--token-file", &w.token_file(&billing), "usage"])
        .await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    assert!(
        out.starts_with("month ") && out.contains("PROJECT"),
        "{out}"
    );

    let (done, out, _) = w.gpuctl(&["completions", "bash"]).await;
    assert_eq!(done, Done::Exit(exit::OK));
    assert!(
        out.contains("gpuctl") && out.contains("launch"),
        "{}",
        &out[..200.min(out.len())]
    );
    let _ = std::fs::remove_dir_all(&w.dir);
}

/// The id of alice's saved key `laptop`, as `gpuctl keys -o json` lists it.
async fn key_id(w: &World) -> String {
    let (_, out, _) = w.gpuctl(&["-o", "json", "keys"]).await;
    let keys: Value = serde_json::from_str(&out).unwrap();
    keys["ssh_keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "laptop")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `gpuctl volume` and `gpuctl snapshot`: create, list, attach, refuse a delete while
/// attached or snapshotted (naming why), detach, snapshot and delete, with the exit codes
/// scripts test. The storage worker's steps are answered as
/// the backend answers them (the API test runs the real one).
#[tokio::test]
async fn gpuctl_creates_attaches_detaches_and_deletes_volumes() {
    use control_plane::volumes::jobs::{Outcome, VolumeJobs};
    let w = world().await;
    let secret = token(&w.cp, &[TokenScope::Read, TokenScope::Launch]).await;
    let tf = w.token_file(&secret);
    let project = ACME_RESEARCH.to_string();
    let storage_step = |outcome: Outcome| async {
        let job =
            w.cp.claim_volume_job()
                .await
                .unwrap()
                .expect("a step is due");
        w.cp.finish_volume_job(&job, outcome).await.unwrap();
    };

    let (done, out, err) = w
        .gpuctl(&[
            "--token-file",
            &tf,
            "volume",
            "create",
            "--name",
            "ckpt",
            "--region",
            "eu-west-1",
            "--size-gib",
            "50",
            "--project",
            &project,
        ])
        .await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    assert!(
        out.contains("ckpt")
            && out.contains("50 GiB")
            && out.contains("5.00 USD")
            && out.contains("creating"),
        "{out}"
    );
    let id = out
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    storage_step(Outcome::Done).await;
    let (_, out, _) = w.gpuctl(&["--token-file", &tf, "volume", "ls"]).await;
    assert!(out.contains(&id) && out.contains("available"), "{out}");
    // Bad input exits with its code, naming the field.
    let (done, _, err) = w
        .gpuctl(&[
            "--token-file",
            &tf,
            "volume",
            "create",
            "--name",
            "big",
            "--region",
            "eu-west-1",
            "--size-gib",
            "99999",
            "--project",
            &project,
        ])
        .await;
    assert_eq!(done, Done::Exit(exit::INVALID), "{err}");
    assert!(err.contains("size_gib"), "{err}");

    // Attached to a running instance, it can't be deleted; detached, it can.
    let instance =
        w.cp.launch(
            &test_db::fixtures::in_project::<control_plane::tenancy::ProjectOperators>(
                &w.cp,
                &test_db::fixtures::principal(&w.cp, "alice@acme.example").await,
                ACME_RESEARCH,
            )
            .await,
            &control_plane::allocations::LaunchRequest {
                sku: "h100.1x".into(),
                listing: "ubuntu-24.04-cuda".into(),
                ssh_public_key: KEY.into(),
                name: "vol-user".into(),
                idempotency_key: uuid::Uuid::new_v4().to_string(),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap()
        .id;
    answer(
        &w.cp,
        &w.agent,
        &["validate_plan", "write_image", "start_vm"],
        provisioned,
    )
    .await;
    let (done, out, err) = w
        .gpuctl(&[
            "--token-file",
            &tf,
            "volume",
            "attach",
            &id,
            "--instance",
            &instance.to_string(),
        ])
        .await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    assert!(
        out.contains("attaching") && out.contains("vol-user"),
        "{out}"
    );
    let (done, _, err) = w.gpuctl(&["--token-file", &tf, "volume", "rm", &id]).await;
    assert_eq!(done, Done::Exit(exit::REFUSED), "{err}");
    assert!(err.contains("volume_in_use"), "{err}");
    let (done, out, err) = w
        .gpuctl(&["--token-file", &tf, "volume", "detach", &id])
        .await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    assert!(out.contains("detaching"), "{out}");
    // The host unplugs it (the instance runs), then the backend withdraws it.
    storage_step(Outcome::Exported(agent_protocol::VolumeTarget::Nbd {
        host: "10.0.0.5".into(),
        port: 10809,
        export: "vol-x".into(),
    }))
    .await;
    answer(&w.cp, &w.agent, &["validate_plan", "plug_volumes"], |_| {
        agent_protocol::TaskOutcome::Succeeded {
            output: agent_protocol::TaskOutput::VolumesUpdated { attached: vec![] },
        }
    })
    .await;
    storage_step(Outcome::Done).await;

    // A snapshot of it, listed with its cost; the volume is kept until the snapshot goes.
    let (done, out, err) = w
        .gpuctl(&[
            "--token-file",
            &tf,
            "snapshot",
            "create",
            &id,
            "--name",
            "ckpt-snap",
        ])
        .await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    assert!(
        out.contains("ckpt-snap") && out.contains("creating"),
        "{out}"
    );
    let snap = out
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    storage_step(Outcome::Done).await;
    let (_, out, _) = w.gpuctl(&["--token-file", &tf, "snapshot", "ls"]).await;
    assert!(
        out.contains(&snap) && out.contains("available") && out.contains("5.00 USD"),
        "{out}"
    );
    // A new volume made from it says so.
    let (done, out, err) = w
        .gpuctl(&[
            "--token-file",
            &tf,
            "volume",
            "create",
            "--snapshot",
            &snap,
            "--name",
            "restored",
            "--project",
            &project,
        ])
        .await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    assert!(
        out.contains("restored") && out.contains(&format!("made from snapshot ckpt-snap ({snap})")),
        "{out}"
    );
    storage_step(Outcome::Done).await;
    let (done, _, err) = w.gpuctl(&["--token-file", &tf, "volume", "rm", &id]).await;
    assert_eq!(done, Done::Exit(exit::REFUSED), "{err}");
    assert!(err.contains("delete it first"), "{err}");
    let (done, out, err) = w
        .gpuctl(&["--token-file", &tf, "snapshot", "rm", &snap])
        .await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    assert!(out.contains("deleting"), "{out}");
    storage_step(Outcome::Erased {
        backend: "test".into(),
        erasure: storage::Erasure {
            method: "zeros".into(),
            bytes_overwritten: 0,
        },
    })
    .await;

    let (done, _, err) = w.gpuctl(&["--token-file", &tf, "volume", "rm", &id]).await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    let (_, out, _) = w
        .gpuctl(&["--token-file", &tf, "-o", "json", "volume", "show", &id])
        .await;
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["state"], "deleting");
}

/// dstack's own configuration model reads `fleet` as an SSH fleet named `name` with one host on
/// `port`; a port dstack can't read is refused by the same check. Needs dstack, which `cargo
/// xtask test` installs from PyPI and names in `DSTACK_PYTHON`; without it, SKIPPED.
fn dstack_reads(fleet: &str, name: &str, port: &str) {
    let Ok(python) = std::env::var("DSTACK_PYTHON") else {
        println!(
            "SKIPPED: dstack's check of the fleet file (DSTACK_PYTHON is unset; `cargo xtask test` sets it)"
        );
        return;
    };
    const CHECK: &str = "import sys, json, yaml\n\
from dstack._internal.core.models.fleets import FleetConfiguration\n\
c = FleetConfiguration.parse_obj(yaml.safe_load(sys.stdin.read()))\n\
print(json.dumps({'name': c.name, 'hosts': [[h.hostname, h.port, h.user] for h in c.ssh_config.hosts]}))\n";
    let run = |text: &str| {
        use std::io::Write as _;
        let mut child = std::process::Command::new(&python)
            .args(["-c", CHECK])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runs dstack's python");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let read = run(fleet);
    let said = String::from_utf8_lossy(&read.stdout);
    assert!(
        read.status.success(),
        "dstack refused the fleet file: {}",
        String::from_utf8_lossy(&read.stderr)
    );
    let v: Value = serde_json::from_str(said.trim()).unwrap();
    assert_eq!(v["name"], name);
    assert_eq!(v["hosts"][0][1].to_string(), port, "{v}");
    let broken = fleet.replace(&format!("port: {port}"), "port: \"not-a-port\"");
    assert!(
        !run(&broken).status.success(),
        "dstack's check refuses a bad port"
    );
}
