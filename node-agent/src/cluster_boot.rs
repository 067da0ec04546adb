//! What a cluster member boots with, so that a multi-node job runs without the tenant wiring
//! anything: every member's name at its private address in `/etc/hosts`, a hostfile, the
//! cluster's own SSH key pair (each member trusts its public half, and holds the private one
//! in the image's user's `~/.ssh`), an SSH client setting for the members, and the
//! environment NCCL, Gloo and torchrun read.
//!
//! Everything written is built from checked fields: names become hostnames with the same rule
//! as the member's own ([`crate::image::hostname`]), addresses must be the private network's,
//! and the keys must be what the control plane makes (one Ed25519 line, one OpenSSH file).

use agent_protocol::{ClusterBoot, MAX_CLUSTER_MEMBERS, identity};
use serde_json::{Value, json};

use crate::image::hostname;

/// Where the members' list lives in the guest: one `name slots=N` line each (MPI, DeepSpeed).
pub const HOSTFILE: &str = "/etc/gpuaas/hostfile";
/// The environment every login shell reads.
pub const PROFILE: &str = "/etc/profile.d/gpuaas-cluster.sh";

/// Refuses a cluster view that could write anything but what it says, or a user whose name
/// can't be a home directory's.
pub fn check(boot: &ClusterBoot, ssh_user: &str) -> Result<(), String> {
    let user_ok = (1..=32).contains(&ssh_user.len())
        && ssh_user.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && ssh_user
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-".contains(c));
    if !user_ok {
        return Err(format!("{ssh_user:?} can't hold the cluster's key"));
    }
    let n = boot.members.len();
    if n == 0 || n > MAX_CLUSTER_MEMBERS {
        return Err(format!("a cluster of {n} members"));
    }
    if boot.index == 0 || boot.index as usize > n {
        return Err(format!("member {} of a cluster of {n}", boot.index));
    }
    for (i, m) in boot.members.iter().enumerate() {
        if m.index as usize != i + 1 {
            return Err(format!("the cluster's members are not numbered 1 to {n}"));
        }
        if let Some(a) = &m.address
            && identity::private_host(a).is_none()
        {
            return Err(format!("{a:?} is not an address of the private network"));
        }
    }
    // A cluster launched before clusters had keys (or released since) hands over none.
    if boot.ssh_public_key.is_empty() && boot.ssh_private_key.is_empty() {
        return Ok(());
    }
    let public_ok = boot.ssh_public_key.len() <= 200
        && boot.ssh_public_key.split(' ').count() == 3
        && boot.ssh_public_key.starts_with("ssh-ed25519 ")
        && boot
            .ssh_public_key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " +/=@._-".contains(c));
    if !public_ok {
        return Err("the cluster's public key is not one Ed25519 key line".into());
    }
    let body = boot
        .ssh_private_key
        .strip_prefix("-----BEGIN OPENSSH PRIVATE KEY-----\n")
        .and_then(|b| b.strip_suffix("-----END OPENSSH PRIVATE KEY-----\n"));
    let private_ok = boot.ssh_private_key.len() <= 1024
        && body.is_some_and(|b| {
            b.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+/=\n".contains(c))
        });
    if !private_ok {
        return Err("the cluster's private key is not one OpenSSH key file".into());
    }
    Ok(())
}

/// Adds the cluster's files and key to the platform's cloud-config `user_data` (whose first
/// user is the image's SSH user). `gpus` is this member's (and every member's) GPU count.
pub fn add(user_data: &mut Value, boot: &ClusterBoot, ssh_user: &str, gpus: usize) {
    let names: Vec<String> = boot.members.iter().map(|m| hostname(&m.name)).collect();
    let hosts: String = boot
        .members
        .iter()
        .zip(&names)
        .filter_map(|(m, name)| Some(format!("{}\t{name}\n", m.address.as_ref()?)))
        .collect();
    let hostfile: String = names
        .iter()
        .map(|n| format!("{n} slots={gpus}\n"))
        .collect();
    let first = boot.members.first().and_then(|m| m.address.clone());
    let master = first.unwrap_or_else(|| names[0].clone());
    let mut profile = format!(
        "# Written at boot for cluster {cluster}: member {index} of {size}.\n\
         export GPUAAS_CLUSTER={cluster}\n\
         export GPUAAS_CLUSTER_SIZE={size}\n\
         export GPUAAS_CLUSTER_INDEX={index}\n\
         export GPUAAS_HOSTFILE={HOSTFILE}\n\
         # torchrun --nnodes=$GPUAAS_CLUSTER_SIZE --node_rank=$((GPUAAS_CLUSTER_INDEX - 1)) ...\n\
         export MASTER_ADDR={master}\n\
         export NCCL_IB_HCA=mlx5\n",
        cluster = hostname(&boot.name),
        size = boot.members.len(),
        index = boot.index,
    );
    if hosts.is_empty() {
        profile.push_str("# No private network (the project does not allow east-west traffic).\n");
    } else {
        // The second NIC is the private network; the first is the slot network's NAT.
        profile.push_str("export NCCL_SOCKET_IFNAME=eth1\nexport GLOO_SOCKET_IFNAME=eth1\n");
    }
    let ssh_config = format!(
        "# Written at boot: the cluster's members trust each other's host keys on first use.\n\
         Host {}\n    StrictHostKeyChecking accept-new\n    IdentityFile ~/.ssh/id_cluster\n",
        names.join(" ")
    );
    let home = format!("/home/{ssh_user}/.ssh");
    let owner = format!("{ssh_user}:{ssh_user}");
    let mut files = vec![
        json!({ "path": "/etc/hosts", "append": true, "content": hosts }),
        json!({ "path": HOSTFILE, "permissions": "0644", "content": hostfile }),
        json!({ "path": PROFILE, "permissions": "0644", "content": profile }),
        json!({ "path": "/etc/ssh/ssh_config.d/90-gpuaas-cluster.conf", "permissions": "0644",
                "content": ssh_config }),
    ];
    let keyed = !boot.ssh_private_key.is_empty();
    if keyed {
        files.extend([
            // `defer`: written after the user exists, so that the owner can be.
            json!({ "path": format!("{home}/id_cluster"), "permissions": "0600", "owner": owner,
                    "defer": true, "content": boot.ssh_private_key }),
            json!({ "path": format!("{home}/id_cluster.pub"), "permissions": "0644",
                    "owner": owner, "defer": true,
                    "content": format!("{}\n", boot.ssh_public_key) }),
        ]);
    }
    if let Some(list) = user_data["write_files"].as_array_mut() {
        list.extend(files);
    }
    if let (true, Some(keys)) = (
        keyed,
        user_data["users"][0]["ssh_authorized_keys"].as_array_mut(),
    ) {
        keys.push(boot.ssh_public_key.clone().into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_protocol::ClusterPeer;

    fn boot() -> ClusterBoot {
        ClusterBoot {
            cluster_id: "c".into(),
            name: "Ring".into(),
            index: 2,
            members: (1..=3)
                .map(|i| ClusterPeer {
                    index: i,
                    name: format!("ring-{i}"),
                    address: Some(identity::private_address(9 + i as u16)),
                })
                .collect(),
            ssh_public_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ring@cluster".into(),
            ssh_private_key: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n".into(),
        }
    }

    #[test]
    fn a_member_boots_knowing_the_others_and_holding_the_key() {
        let b = boot();
        check(&b, "ubuntu").unwrap();
        assert!(check(&b, "../root").is_err());
        let mut ud = json!({ "users": [{ "ssh_authorized_keys": ["mine"] }], "write_files": [] });
        add(&mut ud, &b, "ubuntu", 8);
        let file = |path: &str| {
            ud["write_files"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["path"] == path)
                .unwrap_or_else(|| panic!("{path}"))
                .clone()
        };
        assert_eq!(
            file("/etc/hosts")["content"],
            "10.128.0.10\tring-1\n10.128.0.11\tring-2\n10.128.0.12\tring-3\n"
        );
        assert_eq!(file("/etc/hosts")["append"], true);
        assert_eq!(
            file(HOSTFILE)["content"],
            "ring-1 slots=8\nring-2 slots=8\nring-3 slots=8\n"
        );
        let profile = file(PROFILE)["content"].as_str().unwrap().to_string();
        for line in [
            "GPUAAS_CLUSTER_INDEX=2",
            "GPUAAS_CLUSTER_SIZE=3",
            "MASTER_ADDR=10.128.0.10",
            "NCCL_SOCKET_IFNAME=eth1",
        ] {
            assert!(profile.contains(line), "{line}: {profile}");
        }
        let key = file("/home/ubuntu/.ssh/id_cluster");
        assert_eq!(
            (key["permissions"].as_str(), key["owner"].as_str()),
            (Some("0600"), Some("ubuntu:ubuntu"))
        );
        assert_eq!(
            ud["users"][0]["ssh_authorized_keys"][1].as_str(),
            Some(b.ssh_public_key.as_str()),
            "members trust the cluster's key beside the tenant's"
        );
    }

    #[test]
    fn a_view_that_could_write_something_else_is_refused() {
        let mut b = boot();
        b.members[1].address = Some("10.100.0.10".into());
        assert!(check(&b, "ubuntu").unwrap_err().contains("not an address"));
        let mut b = boot();
        b.ssh_public_key.push_str("\nssh-rsa AAAA evil");
        assert!(check(&b, "ubuntu").is_err());
        let mut b = boot();
        b.ssh_private_key =
            "-----BEGIN OPENSSH PRIVATE KEY-----\n'; rm -rf /\n-----END OPENSSH PRIVATE KEY-----\n"
                .into();
        assert!(check(&b, "ubuntu").is_err());
        let mut b = boot();
        b.index = 4;
        assert!(check(&b, "ubuntu").is_err());
        let mut b = boot();
        b.ssh_private_key.clear();
        assert!(check(&b, "ubuntu").is_err(), "half a key pair");
    }

    #[test]
    fn a_cluster_without_a_key_pair_boots_without_key_files() {
        let mut b = boot();
        b.ssh_public_key.clear();
        b.ssh_private_key.clear();
        check(&b, "ubuntu").unwrap();
        let mut ud = json!({ "users": [{ "ssh_authorized_keys": ["mine"] }], "write_files": [] });
        add(&mut ud, &b, "ubuntu", 8);
        let paths: Vec<&str> = ud["write_files"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["path"].as_str())
            .collect();
        assert!(paths.contains(&HOSTFILE) && !paths.iter().any(|p| p.contains("id_cluster")));
        assert_eq!(ud["users"][0]["ssh_authorized_keys"], json!(["mine"]));
    }
}
