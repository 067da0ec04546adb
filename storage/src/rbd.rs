//! Volumes as Ceph RBD images, through the `rbd` command line.
//!
//! A region's hosts map an image with the cluster's monitors and a client key of their own
//! (the [`Target::Rbd`] a host receives names the pool, image, monitors and user, never a
//! secret); the storage worker creates, grows, snapshots and removes images with its own key.
//! Every argument is built from typed values: the pool and user are checked once when the
//! backend is configured, and image names come from [`VolumeKey`].

use std::process::Command;

use serde_json::Value;

use crate::{Erasure, Gib, Result, SnapshotKey, StorageBackend, StorageError, Target, VolumeKey};

/// Runs one `rbd` command: the edge of the world, faked in tests with a cluster in memory.
pub trait Ceph: Send + Sync {
    /// `args` after `rbd --id … --pool …`; the command's standard output.
    fn rbd(&self, args: &[String]) -> Result<String>;
}

/// The real `rbd` binary.
pub struct RbdCli {
    /// The storage worker's CephX user (`client.<id>`).
    pub id: String,
    pub conf: std::path::PathBuf,
}

impl Ceph for RbdCli {
    fn rbd(&self, args: &[String]) -> Result<String> {
        let out = Command::new("rbd")
            .arg("--id")
            .arg(&self.id)
            .arg("--conf")
            .arg(&self.conf)
            .args(args)
            .output()
            .map_err(|e| StorageError::Backend(format!("rbd: {e}")))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(StorageError::Backend(format!(
                "rbd {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }
}

fn plain(what: &str, s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?}: a Ceph {what} is 1 to 64 letters, digits, '-', '_' and '.'"
        ))
    }
}

pub struct Rbd<C: Ceph> {
    ceph: C,
    pool: String,
    /// What a host's agent maps images as.
    host_user: String,
    monitors: Vec<String>,
}

impl<C: Ceph> Rbd<C> {
    pub fn new(
        ceph: C,
        pool: &str,
        host_user: &str,
        monitors: Vec<std::net::SocketAddr>,
    ) -> Result<Self, String> {
        if monitors.is_empty() {
            return Err("name at least one Ceph monitor".into());
        }
        Ok(Rbd {
            ceph,
            pool: plain("pool", pool)?,
            host_user: plain("user", host_user)?,
            monitors: monitors.iter().map(|m| m.to_string()).collect(),
        })
    }

    fn image(&self, key: &VolumeKey) -> String {
        format!("{}/{}", self.pool, key.as_str())
    }

    fn run(&self, args: &[&str]) -> Result<String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        self.ceph.rbd(&args)
    }

    fn info(&self, key: &VolumeKey) -> Result<Option<u64>> {
        let images = self.run(&["ls", "--format", "json", &self.pool])?;
        let list: Vec<String> = serde_json::from_str(&images)
            .map_err(|e| StorageError::Backend(format!("rbd ls: {e}")))?;
        if !list.iter().any(|i| i == key.as_str()) {
            return Ok(None);
        }
        let info = self.run(&["info", "--format", "json", &self.image(key)])?;
        let v: Value = serde_json::from_str(&info)
            .map_err(|e| StorageError::Backend(format!("rbd info: {e}")))?;
        Ok(v["size"].as_u64())
    }
}

impl<C: Ceph> StorageBackend for Rbd<C> {
    fn describe(&self) -> String {
        format!(
            "Ceph RBD pool {} through monitors {}",
            self.pool,
            self.monitors.join(", ")
        )
    }

    fn create(&self, key: &VolumeKey, size: Gib) -> Result<()> {
        match self.info(key)? {
            Some(b) if b == size.bytes() => Ok(()),
            Some(b) => Err(StorageError::Refused(format!(
                "{key} exists already with {b} bytes"
            ))),
            None => self
                .run(&[
                    "create",
                    "--size",
                    &format!("{}G", size.get()),
                    &self.image(key),
                ])
                .map(drop),
        }
    }

    fn create_from(
        &self,
        key: &VolumeKey,
        source: &VolumeKey,
        snapshot: &SnapshotKey,
        size: Gib,
    ) -> Result<()> {
        if let Some(b) = self.info(key)? {
            return if b == size.bytes() {
                Ok(())
            } else {
                Err(StorageError::Refused(format!(
                    "{key} exists already with {b} bytes"
                )))
            };
        }
        // A full copy (`rbd cp`), not a clone: a clone would keep the snapshot, and with it
        // the source volume, from ever being deleted.
        self.run(&[
            "cp",
            &format!("{}@{}", self.image(source), snapshot.as_str()),
            &self.image(key),
        ])?;
        self.grow(key, size)
    }

    fn grow(&self, key: &VolumeKey, size: Gib) -> Result<()> {
        match self.info(key)? {
            None => Err(StorageError::Backend(format!("{key} does not exist"))),
            Some(b) if b > size.bytes() => Err(StorageError::Refused(format!(
                "{key} holds {b} bytes; volumes only grow"
            ))),
            Some(b) if b == size.bytes() => Ok(()),
            // RBD grows a mapped image in place.
            Some(_) => self
                .run(&[
                    "resize",
                    "--size",
                    &format!("{}G", size.get()),
                    &self.image(key),
                ])
                .map(drop),
        }
    }

    fn size(&self, key: &VolumeKey) -> Result<Option<Gib>> {
        Ok(self
            .info(key)?
            .and_then(|b| Gib::new((b >> 30) as u32).ok()))
    }

    fn export(&self, key: &VolumeKey) -> Result<Target> {
        if self.info(key)?.is_none() {
            return Err(StorageError::Backend(format!("{key} does not exist")));
        }
        Ok(Target::Rbd {
            pool: self.pool.clone(),
            image: key.as_str().to_string(),
            monitors: self.monitors.clone(),
            user: self.host_user.clone(),
        })
    }

    fn withdraw(&self, _key: &VolumeKey) -> Result<()> {
        // A host unmaps the image when its agent detaches it; the cluster serves every image.
        Ok(())
    }

    fn snapshot(&self, key: &VolumeKey, snapshot: &SnapshotKey) -> Result<()> {
        let name = format!("{}@{}", self.image(key), snapshot.as_str());
        let existing = self.run(&["snap", "ls", "--format", "json", &self.image(key)])?;
        let snaps: Vec<Value> = serde_json::from_str(&existing)
            .map_err(|e| StorageError::Backend(format!("rbd snap ls: {e}")))?;
        if snaps.iter().any(|s| s["name"] == snapshot.as_str()) {
            return Ok(());
        }
        self.run(&["snap", "create", &name]).map(drop)
    }

    fn erase_snapshot(&self, key: &VolumeKey, snapshot: &SnapshotKey) -> Result<Erasure> {
        let name = format!("{}@{}", self.image(key), snapshot.as_str());
        if self.info(key)?.is_some() {
            let existing = self.run(&["snap", "ls", "--format", "json", &self.image(key)])?;
            if existing.contains(snapshot.as_str()) {
                self.run(&["snap", "rm", &name])?;
            }
        }
        Ok(Erasure {
            method: "the RBD snapshot removed; its objects are deleted from the cluster".into(),
            bytes_overwritten: 0,
        })
    }

    fn erase(&self, key: &VolumeKey) -> Result<Erasure> {
        if self.info(key)?.is_none() {
            return Ok(Erasure {
                method: "nothing to erase: the image was gone".into(),
                bytes_overwritten: 0,
            });
        }
        // Removing an image deletes its RADOS objects; a later image's unwritten extents
        // read as zeros, never as another image's freed space.
        self.run(&["snap", "purge", &self.image(key)])?;
        self.run(&["rm", "--no-progress", &self.image(key)])?;
        Ok(Erasure {
            method: "the RBD image's snapshots purged and the image removed: its RADOS objects \
                     are deleted"
                .into(),
            bytes_overwritten: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;

    /// A Ceph cluster in memory: the vendor edge, answering the `rbd` commands the backend
    /// builds as the real tool would, and keeping every command line to check.
    #[derive(Default)]
    struct FakeCeph {
        images: Mutex<BTreeMap<String, (u64, Vec<String>)>>,
        log: Mutex<Vec<String>>,
    }

    impl Ceph for FakeCeph {
        fn rbd(&self, args: &[String]) -> Result<String> {
            self.log.lock().unwrap().push(args.join(" "));
            let mut images = self.images.lock().unwrap();
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let gib = |s: &str| s.trim_end_matches('G').parse::<u64>().unwrap() << 30;
            match a.as_slice() {
                ["ls", "--format", "json", pool] => {
                    let names: Vec<&str> = images
                        .keys()
                        .filter_map(|i| i.strip_prefix(&format!("{pool}/")))
                        .collect();
                    Ok(serde_json::to_string(&names).unwrap())
                }
                ["info", "--format", "json", image] => {
                    let (size, _) = images
                        .get(*image)
                        .ok_or_else(|| StorageError::Backend("no such image".into()))?;
                    Ok(serde_json::json!({ "size": size }).to_string())
                }
                ["create", "--size", size, image] => {
                    images.insert(image.to_string(), (gib(size), Vec::new()));
                    Ok(String::new())
                }
                ["resize", "--size", size, image] => {
                    images.get_mut(*image).unwrap().0 = gib(size);
                    Ok(String::new())
                }
                ["snap", "ls", "--format", "json", image] => {
                    let snaps: Vec<_> = images[*image]
                        .1
                        .iter()
                        .map(|n| serde_json::json!({ "name": n }))
                        .collect();
                    Ok(serde_json::to_string(&snaps).unwrap())
                }
                ["snap", "create", at] | ["snap", "rm", at] => {
                    let (image, snap) = at.split_once('@').unwrap();
                    let snaps = &mut images.get_mut(image).unwrap().1;
                    if a[1] == "create" {
                        snaps.push(snap.to_string());
                    } else {
                        snaps.retain(|s| s != snap);
                    }
                    Ok(String::new())
                }
                ["cp", at, image] => {
                    let (from, snap) = at.split_once('@').unwrap();
                    let (size, snaps) = &images[from];
                    if !snaps.iter().any(|s| s == snap) {
                        return Err(StorageError::Backend("no such snapshot".into()));
                    }
                    let size = *size;
                    images.insert(image.to_string(), (size, Vec::new()));
                    Ok(String::new())
                }
                ["snap", "purge", image] => {
                    images.get_mut(*image).unwrap().1.clear();
                    Ok(String::new())
                }
                ["rm", "--no-progress", image] => {
                    images.remove(*image);
                    Ok(String::new())
                }
                other => Err(StorageError::Backend(format!("unexpected {other:?}"))),
            }
        }
    }

    #[test]
    fn rbd_images_are_made_grown_snapshotted_and_removed_by_typed_commands() {
        let rbd = Rbd::new(
            FakeCeph::default(),
            "volumes",
            "gpu-host",
            vec!["10.0.0.11:6789".parse().unwrap()],
        )
        .unwrap();
        let key = VolumeKey::of(uuid::Uuid::new_v4());
        let image = format!("volumes/{key}");
        rbd.create(&key, Gib::new(10).unwrap()).unwrap();
        rbd.create(&key, Gib::new(10).unwrap()).unwrap();
        assert_eq!(rbd.size(&key).unwrap(), Some(Gib::new(10).unwrap()));
        rbd.grow(&key, Gib::new(20).unwrap()).unwrap();
        assert!(matches!(
            rbd.grow(&key, Gib::new(5).unwrap()),
            Err(StorageError::Refused(_))
        ));
        let target = rbd.export(&key).unwrap();
        assert_eq!(target.uri(), format!("rbd:{image}"));
        let snap = key.snapshot(uuid::Uuid::new_v4());
        rbd.snapshot(&key, &snap).unwrap();
        rbd.snapshot(&key, &snap).unwrap();
        // A new volume from the snapshot: a full copy, then grown to its size.
        let copy = VolumeKey::of(uuid::Uuid::new_v4());
        rbd.create_from(&copy, &key, &snap, Gib::new(30).unwrap())
            .unwrap();
        rbd.create_from(&copy, &key, &snap, Gib::new(30).unwrap())
            .unwrap();
        assert_eq!(rbd.size(&copy).unwrap(), Some(Gib::new(30).unwrap()));
        rbd.erase(&key).unwrap();
        assert_eq!(rbd.size(&key).unwrap(), None);
        assert_eq!(
            rbd.erase(&key).unwrap().method,
            "nothing to erase: the image was gone"
        );
        let log = rbd.ceph.log.lock().unwrap().clone();
        let writes: Vec<&String> = log
            .iter()
            .filter(|c| !c.starts_with("ls") && !c.starts_with("info") && !c.contains(" ls "))
            .collect();
        assert_eq!(
            writes,
            [
                &format!("create --size 10G {image}"),
                &format!("resize --size 20G {image}"),
                &format!("snap create {image}@{}", snap.as_str()),
                &format!("cp {image}@{} volumes/{copy}", snap.as_str()),
                &format!("resize --size 30G volumes/{copy}"),
                &format!("snap purge {image}"),
                &format!("rm --no-progress {image}"),
            ],
            "each change once, however often asked"
        );
        // What the worker is configured with is checked once, before any command.
        assert!(Rbd::new(FakeCeph::default(), "vol umes", "h", vec![]).is_err());
        assert!(
            Rbd::new(
                FakeCeph::default(),
                "volumes; rm -rf",
                "h",
                vec!["10.0.0.1:6789".parse().unwrap()]
            )
            .is_err()
        );
    }
}
