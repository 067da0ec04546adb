//! The agent's state directory: `credential` (the node credential, mode 0600) and `node.json`
//! (node id and control-plane URL).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeFile {
    pub node_id: String,
    pub server: String,
}

pub struct State {
    pub dir: PathBuf,
}

impl State {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn credential_path(&self) -> PathBuf {
        self.dir.join("credential")
    }

    /// Writes the credential (0600, created so; never world-readable even briefly) and the
    /// node file. Refuses to overwrite an existing credential: re-enrolling a node is an
    /// operator's decision, made by deleting the state directory.
    pub fn save(&self, node: &NodeFile, credential: &str) -> Result<(), String> {
        fs::create_dir_all(&self.dir)
            .map_err(|e| format!("creating {}: {e}", self.dir.display()))?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("securing {}: {e}", self.dir.display()))?;
        let path = self.credential_path();
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => format!(
                    "{} already exists: this node is enrolled. Remove the state directory to enrol it again.",
                    path.display()
                ),
                _ => format!("writing {}: {e}", path.display()),
            })?;
        f.write_all(credential.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        let json = serde_json::to_vec_pretty(node).expect("plain struct serializes");
        fs::write(self.dir.join("node.json"), json).map_err(|e| format!("writing node.json: {e}"))
    }

    pub fn load(&self) -> Result<(NodeFile, String), String> {
        let node: NodeFile = read_json(&self.dir.join("node.json"))?;
        let path = self.credential_path();
        let mode = fs::metadata(&path)
            .map_err(|e| format!("{}: {e} (enrol first: node-agent enroll)", path.display()))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(format!(
                "{} is readable by others (mode {:o}); it must be 0600",
                path.display(),
                mode & 0o777
            ));
        }
        let credential =
            fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        Ok((node, credential.trim().to_string()))
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, String> {
    let bytes = fs::read(path).map_err(|e| format!("{}: {e} (enrol first)", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}
