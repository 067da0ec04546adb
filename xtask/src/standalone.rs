//! The repository stands alone: no tracked file may refer to a path outside it.
//!
//! Users clone this repository by itself, so anything that reads a sibling folder (a shared
//! reference directory, a checkout beside it) works on the author's machine and fails for them.
//! This is the first, cheapest step of `cargo xtask test`.

use std::path::Path;
use std::process::Command;

use crate::{Result, root};

/// Two rules. Anywhere: no folder that sits beside a checkout on the machines this project is
/// built on is named. In docs and manifests (whose relative paths resolve from the file's own
/// folder): no `../` run climbs above the repository's root. (In code and scripts a relative
/// path may be resolved from elsewhere, a symlink's target for one, so only the first rule
/// applies there.)
pub fn check() -> Result {
    let root = root();
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output();
    let files = match listed {
        Ok(o) if o.status.success() => o.stdout,
        _ => {
            eprintln!("    SKIPPED: not a git checkout, so there is no list of tracked files");
            return Ok(());
        }
    };
    let mut problems = Vec::new();
    for name in files.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        let Ok(bytes) = std::fs::read(root.join(&name)) else {
            continue; // deleted in the work tree but still in the index
        };
        if bytes.contains(&0) {
            continue; // binary
        }
        let text = String::from_utf8_lossy(&bytes);
        for (line_no, line) in text.lines().enumerate() {
            if let Some(why) = escapes(Path::new(&name), line) {
                problems.push(format!("{name}:{}: {why}: {}", line_no + 1, line.trim()));
            }
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} tracked line(s) refer to paths outside the repository; copy what is needed into \
         the repository (with its licence) and refer to that instead:\n  {}",
        problems.len(),
        problems.join("\n  ")
    ))
}

/// Folders that sit beside a checkout on the machines this project is built on. Spelled in
/// pieces so this file does not flag itself.
fn sibling_names() -> [String; 2] {
    [["..", "/shared"].concat(), ["..", "/.library"].concat()]
}

/// Why `line` (in the tracked file `file`) points outside the repository, if it does.
fn escapes(file: &Path, line: &str) -> Option<String> {
    for sibling in sibling_names() {
        if line.contains(&sibling) {
            return Some(format!("names `{sibling}`, a folder beside the checkout"));
        }
    }
    let resolved_from_here = matches!(
        file.extension().and_then(|e| e.to_str()),
        Some("md" | "toml" | "json")
    ) || file.file_name().is_some_and(|n| n == "Dockerfile");
    if !resolved_from_here {
        return None;
    }
    let depth = file.components().count().saturating_sub(1);
    let bytes = line.as_bytes();
    let mut i = 0;
    while i + 3 <= bytes.len() {
        // A run of `../` that starts a path (not the tail of `.../` or `x../`).
        let starts_path =
            i == 0 || matches!(bytes[i - 1], b' ' | b'"' | b'\'' | b'(' | b'`' | b'=');
        if starts_path && &bytes[i..i + 3] == b"../" {
            let mut ups = 0;
            let mut j = i;
            while j + 3 <= bytes.len() && &bytes[j..j + 3] == b"../" {
                ups += 1;
                j += 3;
            }
            // `../` followed by a name: a path. More ups than the file is deep leaves the root.
            let named = bytes
                .get(j)
                .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
            if named && ups > depth {
                return Some(format!(
                    "goes up {ups} folder(s) from a file {depth} folder(s) deep"
                ));
            }
            i = j;
        } else {
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::escapes;
    use std::path::Path;

    #[test]
    fn paths_inside_the_repository_pass() {
        assert_eq!(
            escapes(Path::new("README.md"), "see `docs/DESIGN.md`"),
            None
        );
        assert_eq!(
            escapes(Path::new("server/tests/a.rs"), r#"include_str!("../../x")"#),
            None
        );
        assert_eq!(
            escapes(Path::new("app/src/lib.rs"), "a/../b and .../ and x../y"),
            None
        );
    }

    #[test]
    fn paths_outside_it_are_named() {
        let shared = ["..", "/shared/DESIGN.md"].concat();
        assert!(escapes(Path::new("docs/x.md"), &format!("read {shared}")).is_some());
        let why = escapes(Path::new("Cargo.toml"), r#"path = "../other-crate""#).unwrap();
        assert!(
            why.contains("goes up 1 folder(s) from a file 0 folder(s) deep"),
            "{why}"
        );
        assert!(escapes(Path::new("docs/a.md"), "[x](../../etc/passwd)").is_some());
        assert!(escapes(Path::new("docs/a.md"), "[x](../README.md)").is_none());
        // A script's relative symlink target is resolved from the link, not the script.
        assert_eq!(
            escapes(Path::new("a/gen.sh"), r#"ln -sfn "../../../../bus" x"#),
            None
        );
    }
}
