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
    // The portal's vocabulary (its fleet read models carry the agent contract's slot specs).
    ("portal-types", 1),
    // Trace context and the OTLP exporter, shared by the control plane and the host agent.
    ("otel", 1),
    // The storage backends volumes live on (their targets are the node protocol's), driven
    // by the server's storage worker.
    ("storage", 1),
    // What every area of the domain stands on; the host agent (which never links the domain).
    ("cp-base", 2),
    ("node-agent", 2),
    // The command line: a client of the public API and its shared types, nothing more.
    ("gpuctl", 2),
    // The domain's areas, each above the ones it uses.
    ("cp-identity", 3),
    ("cp-inventory", 4),
    ("cp-marketplace", 5),
    ("cp-billing", 6),
    ("cp-allocations", 7),
    // The domain's facade (and the demo data, which touches every area).
    ("control-plane", 8),
    // Pages and server functions; the shared test databases and fixtures.
    ("app", 9),
    ("test-db", 9),
    // Binaries.
    ("server", 10),
    ("frontend", 10),
    ("xtask", 11),
];

/// The area crates: only the facade and each other may depend on them, so what they share
/// without a proof (their `internal` traits) never reaches a page or the API.
pub const AREAS: &[&str] = &[
    "cp-identity",
    "cp-inventory",
    "cp-marketplace",
    "cp-billing",
    "cp-allocations",
];
const FACADE: &str = "control-plane";

pub fn check() -> Result {
    let graph = workspace_graph()?;
    let layers: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let mut problems = Vec::new();
    for (member, deps) in &graph {
        let Some(&layer) = layers.get(member.as_str()) else {
            problems.push(format!(
                "{member} has no layer: give it one in xtask/src/layers.rs (and say why in ARCHITECTURE.md)"
            ));
            continue;
        };
        for dep in deps {
            let Some(&dep_layer) = layers.get(dep.as_str()) else {
                continue;
            };
            if AREAS.contains(&dep.as_str())
                && !AREAS.contains(&member.as_str())
                && member != FACADE
            {
                problems.push(format!(
                    "{member} depends on {dep}: above the domain, depend on {FACADE} (the \
                     facade) instead; the area crates share `internal` traits with each other only"
                ));
            }
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

/// Crates whose top-level modules must not form a cycle, besides the [`AREAS`] (a cycle of
/// modules is knotted code, and would stop the crate from splitting further).
const ACYCLIC_MODULES: &[&str] = &["control-plane", "cp-base"];

/// The area crates' modules import each trait by name: a glob import of the crate's own
/// prelude would call another module's methods without a `crate::…` path, an edge the graph
/// can't see. (The facade's demo data uses the prelude; it is above everything.)
const NO_PRELUDE: &[&str] = AREAS;

/// Each crate of [`ACYCLIC_MODULES`]: its top-level modules, and which others each names as
/// `crate::…` in code (comments don't count), must form no cycle.
pub fn check_modules() -> Result {
    let mut problems = Vec::new();
    for krate in ACYCLIC_MODULES.iter().chain(AREAS) {
        let src = crate::root().join(krate).join("src");
        let graph = module_graph(&src)?;
        if NO_PRELUDE.contains(krate) {
            for file in rust_files(&src)? {
                let name = file.file_name().unwrap_or_default();
                if name != "lib.rs" && crate_paths(&read(&file)?).iter().any(|p| p == "prelude") {
                    problems.push(format!(
                        "{}: import the traits it uses by name, not `crate::prelude::*` (the \
                         module graph can't see an edge through a glob)",
                        file.strip_prefix(crate::root()).unwrap_or(&file).display()
                    ));
                }
            }
        }
        if let Some(cycle) = find_cycle(&graph) {
            problems.push(format!("{krate}: {}", cycle.join(" → ")));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "modules must point one way (move the code to where its direction is natural):\n  {}",
            problems.join("\n  ")
        ))
    }
}

type Graph = BTreeMap<String, std::collections::BTreeSet<String>>;

fn module_graph(src: &Path) -> Result<Graph> {
    let files = rust_files(src)?;
    let mut graph = Graph::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a file");
        let top = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if top == "lib" || top == "main" {
            continue;
        }
        let refs = crate_paths(&read(&file)?);
        graph
            .entry(top.clone())
            .or_default()
            .extend(refs.into_iter().filter(|r| *r != top));
    }
    let names: Vec<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| names.contains(d));
    }
    Ok(graph)
}

/// Every `.rs` file under `src`.
fn rust_files(src: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    Ok(files)
}

/// The first segment after each `crate::` in code, not in comments.
fn crate_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
            rest = after;
        }
    }
    out
}

/// One cycle of `graph`, as the modules along it (the first repeated at the end).
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit<'g>(
        graph: &'g Graph,
        node: &'g str,
        done: &mut std::collections::BTreeSet<&'g str>,
        path: &mut Vec<&'g str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| *p == node) {
            let mut cycle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(graph, next, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node);
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|k| visit(graph, k, &mut done, &mut Vec::new()))
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

/// Each workspace crate and the workspace crates it depends on (normal and build, also
/// target-specific; not dev: tests may use anything), as `cargo metadata` reads the manifests.
fn workspace_graph() -> Result<BTreeMap<String, Vec<String>>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(crate::root())
        .output()
        .map_err(|e| format!("running cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("reading cargo metadata's answer: {e}"))?;
    Ok(internal_dependencies(&metadata))
}

/// [`workspace_graph`] from `cargo metadata --no-deps`: there every package is a workspace
/// member, so a dependency is internal when it names one.
fn internal_dependencies(metadata: &serde_json::Value) -> BTreeMap<String, Vec<String>> {
    let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
    let members: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .filter_map(|p| {
            let deps = p["dependencies"]
                .as_array()?
                .iter()
                .filter(|d| d["kind"].as_str() != Some("dev"))
                .filter_map(|d| d["name"].as_str())
                .filter(|d| members.contains(d))
                .fold(Vec::new(), |mut found: Vec<String>, d| {
                    if !found.iter().any(|f| f == d) {
                        found.push(d.to_owned());
                    }
                    found
                });
            Some((p["name"].as_str()?.to_owned(), deps))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_dependencies_are_read_from_cargo_metadata() {
        let metadata = serde_json::json!({"packages": [
            {"name": "app", "dependencies": [{"name": "serde", "kind": null}]},
            {"name": "server", "dependencies": [
                {"name": "app", "kind": null},
                {"name": "app", "kind": null, "target": "cfg(unix)"},
                {"name": "serde", "kind": null},
                {"name": "server", "kind": "dev"},
                {"name": "app", "kind": "build"},
            ]},
        ]});
        let graph = internal_dependencies(&metadata);
        assert_eq!(graph["server"], ["app"]);
        assert!(graph["app"].is_empty());
    }

    #[test]
    fn this_workspace_points_one_way() {
        let graph = workspace_graph().unwrap();
        assert!(graph["server"].iter().any(|d| d == "app"), "{graph:?}");
        assert!(!graph["gpuctl"].iter().any(|d| d == "control-plane"));
        check().unwrap();
        check_modules().unwrap();
    }

    #[test]
    fn a_cycle_of_modules_is_found_and_comments_do_not_count() {
        assert_eq!(
            crate_paths("use crate::a::B; // crate::c\nlet x = crate::d::f(crate::e);"),
            ["a", "d", "e"]
        );
        let graph = |edges: &[(&str, &str)]| {
            let mut g = Graph::new();
            for (a, b) in edges {
                g.entry(a.to_string()).or_default().insert(b.to_string());
                g.entry(b.to_string()).or_default();
            }
            g
        };
        assert_eq!(
            find_cycle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])),
            None
        );
        assert_eq!(
            find_cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
            Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
    }
}
