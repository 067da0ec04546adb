//! The guest telemetry sink over real HTTP: only a running allocation's token is accepted,
//! nothing can be read back, and what the agent forwards is the per-allocation mean.

use std::path::Path;
use std::sync::Arc;

use agent_protocol::{ImageRef, PlannedSlot, ProvisionPlan, identity};
use node_agent::agent::Agent;
use node_agent::driver::SimulatedDriver;
use node_agent::telemetry::{Aggregator, router};

const NODE: &str = "6f1c2d3e-0000-4000-8000-00000000beef";

fn slot(index: u32, gpu: &str, nvme: &str, ns: &str, vf: &str, cpus: &str) -> PlannedSlot {
    PlannedSlot {
        slot_id: format!("00000000-0000-4000-8000-{index:012}"),
        slot_index: index,
        gpu_pci_address: gpu.into(),
        nvme_pci_address: nvme.into(),
        nvme_serial: format!("SN{index}"),
        nvme_namespace: ns.into(),
        ib_vf_pci_address: vf.into(),
        cpu_set: cpus.into(),
        numa_node: 0,
        memory_mib: 1024,
        nvme_size_bytes: 1 << 30,
        wipe_policy: "overwrite-verify".into(),
        mac_address: identity::mac_address(NODE, index),
        ip_address: identity::ip_address(index),
    }
}

#[tokio::test]
async fn only_a_running_allocations_token_reports_and_nothing_reads_back() {
    let dir = std::env::temp_dir().join(format!("agent-telemetry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pcie-l40s-4x");
    let mut driver = SimulatedDriver::new(fixture, &dir);
    driver.phase_time = std::time::Duration::ZERO;
    driver.disk_bytes = 1 << 20;
    let agent = Arc::new(Agent::new(
        NODE.into(),
        "gpn_test".into(),
        Arc::new(driver),
        dir.clone(),
    ));
    let s = slot(
        0,
        "0000:4a:00.0",
        "0000:01:00.0",
        "nvme0n1",
        "0000:17:00.2",
        "2-5",
    );
    let alloc = "dddddddd-0000-4000-8000-000000000001";
    let plan = ProvisionPlan {
        allocation_id: alloc.into(),
        name: "tele".into(),
        image: ImageRef {
            name: "ubuntu".into(),
            source: "/var/lib/gpuaas/images/ubuntu.qcow2".into(),
            sha256: None,
            ssh_user: "ubuntu".into(),
            cloud_init: String::new(),
        },
        ssh_public_key: "ssh-ed25519 AAAA test".into(),
        user_data: None,
        slots: vec![s.clone()],
        network: Default::default(),
        fabric: Default::default(),
        cluster: None,
        restore_from: None,
    };
    let a = agent.clone();
    let approved = vec![s.clone()];
    tokio::task::spawn_blocking(move || a.provision("t1", &plan, false, &approved, &mut |_| {}))
        .await
        .unwrap()
        .unwrap();
    let token = agent
        .leases
        .get(&s.slot_id)
        .unwrap()
        .unwrap()
        .telemetry_token;
    // The token reached the guest's seed, and only there.
    let seed =
        std::fs::read_to_string(dir.join(format!("allocations/{alloc}/seed/user-data"))).unwrap();
    assert!(seed.contains(&token));

    let totals = Arc::new(Aggregator::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/gpu", listener.local_addr().unwrap());
    let app = router(agent.clone(), totals.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let http = reqwest::Client::new();
    let post = |token: &str, body: &str| {
        http.post(&url)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };

    assert_eq!(
        post(&token, r#"{"gpu_util_pct":[90]}"#)
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        post(&token, r#"{"gpu_util_pct":[40]}"#)
            .await
            .unwrap()
            .status(),
        204
    );
    // Another token, no token, a bad figure, an unknown field: refused and not counted.
    assert_eq!(
        post("f".repeat(48).as_str(), r#"{"gpu_util_pct":[1]}"#)
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        post("", r#"{"gpu_util_pct":[1]}"#).await.unwrap().status(),
        401
    );
    let bad = post(&token, r#"{"gpu_util_pct":[101]}"#).await.unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(
        bad.text().await.unwrap(),
        "gpu_util_pct needs one figure per GPU, each 0–100\n"
    );
    assert_eq!(
        post(&token, r#"{"gpu_util_pct":[1],"host":"x"}"#)
            .await
            .unwrap()
            .status(),
        400
    );
    // Nothing to read: no GET, no other path.
    assert_eq!(http.get(&url).send().await.unwrap().status(), 405);
    let metrics = url.replace("/v1/gpu", "/metrics");
    assert_eq!(http.get(&metrics).send().await.unwrap().status(), 404);

    let forwarded = totals.drain();
    assert_eq!(forwarded.len(), 1);
    assert_eq!(forwarded[0].allocation_id, alloc);
    assert_eq!((forwarded[0].gpu_util_pct, forwarded[0].samples), (65, 2));
    assert!(totals.drain().is_empty(), "drained once");
    let _ = std::fs::remove_dir_all(dir);
}
