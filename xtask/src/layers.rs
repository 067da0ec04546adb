//! The crate graph points one way. Each workspace crate sits in a layer; its dependencies on
//! other workspace crates (normal and build, not dev: tests may use anything) must be in lower
//! layers. A new crate must be given its layer here, which is where the design is decided.

use std::collections::BTreeMap;
use std::path::Path;

use crate::Result;

/// Lower numbers are further from the user. Keep in step with ARCHITECTURE.md's rules.
const LAYERS: &[(&str, u8)] = &[
    // Contracts and tools that know nothing of the portal.
    ("agent-protocol", 0),
    ("pgcluster", 0),
    ("stripe-test-server", 0),
    // The domain, and the host agent (which never links the domain).
    ("control-plane", 1),
    ("node-agent", 1),
    // Pages and server functions; the shared test databases and fixtures.
    ("app", 2),
    ("test-db", 2),
    // Binaries.
    ("server", 3),
    ("frontend", 3),
    ("xtask", 4),
];

pub fn check() -> Result {
    let root = crate::root();
    let manifest = read(&root.join("Cargo.toml"))?;
    let members = workspace_members(&manifest);
    let layers: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let mut problems = Vec::new();
    for member in &members {
        let Some(&layer) = layers.get(member.as_str()) else {
            problems.push(format!(
                "{member} has no layer: give it one in xtask/src/layers.rs (and say why in ARCHITECTURE.md)"
            ));
            continue;
        };
        let text = read(&root.join(member).join("Cargo.toml"))?;
        for dep in internal_dependencies(&text, &members) {
            let Some(&dep_layer) = layers.get(dep.as_str()) else {
                continue;
            };
            if dep_layer >= layer {
                problems.push(format!(
                    "{member} (layer {layer}) depends on {dep} (layer {dep_layer}): a crate may \
                     only depend on crates in lower layers"
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the crate graph must point one way:\n  {}",
            problems.join("\n  ")
        ))
    }
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

/// The `members = [...]` of the root manifest.
fn workspace_members(manifest: &str) -> Vec<String> {
    let Some(start) = manifest.find("members") else {
        return Vec::new();
    };
    let rest = &manifest[start..];
    let (Some(open), Some(close)) = (rest.find('['), rest.find(']')) else {
        return Vec::new();
    };
    rest[open + 1..close]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Workspace crates named in the `[dependencies]` and `[build-dependencies]` sections (also
/// target-specific ones), not in `[dev-dependencies]`.
fn internal_dependencies(manifest: &str, members: &[String]) -> Vec<String> {
    let mut in_deps = false;
    let mut found = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            let section = line.trim_matches(|c| c == '[' || c == ']');
            in_deps = section.ends_with("dependencies") && !section.ends_with("dev-dependencies");
            continue;
        }
        if !in_deps || line.starts_with('#') {
            continue;
        }
        let name = line
            .split(|c: char| c == '=' || c == '.' || c.is_whitespace())
            .next()
            .unwrap_or("");
        if members.iter().any(|m| m == name) && !found.iter().any(|f| f == name) {
            found.push(name.to_owned());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_internal_dependencies_are_read_from_manifests() {
        let root = "[workspace]\nresolver = \"3\"\nmembers = [\n    \"app\",\n    \"server\",\n]\n";
        let members = workspace_members(root);
        assert_eq!(members, ["app", "server"]);
        let manifest = "[package]\nname = \"server\"\n\n[dependencies]\napp = { workspace = true }\n\
                        serde.workspace = true\n# server = \"x\"\n\n[dev-dependencies]\nserver = { path = \".\" }\n\
                        \n[target.'cfg(unix)'.dependencies]\napp.workspace = true\n";
        assert_eq!(internal_dependencies(manifest, &members), ["app"]);
    }

    #[test]
    fn this_workspace_points_one_way() {
        check().unwrap();
    }
}
