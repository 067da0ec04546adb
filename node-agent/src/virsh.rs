//! libvirt through one long-lived `virsh` session (commands on its stdin). One session, not
//! one process per command, because a connection is what holds state for libvirt's own
//! `test:///default` hypervisor (the tests' target); on `qemu:///system` it also saves a
//! connection per call. Every command is built here from fixed words and validated names:
//! the agent never passes anything through a shell.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

/// A domain's state as `virsh domstate` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DomainState {
    Running,
    ShutOff,
    /// Paused, shutting down, crashed, …: not running, not cleanly off.
    Other,
}

struct Session {
    child: Child,
    stdin: ChildStdin,
    out: std::io::PipeReader,
    /// What virsh printed after the last marker (its next prompt).
    pending: String,
    n: u64,
}

pub struct Virsh {
    uri: String,
    session: Mutex<Option<Session>>,
}

impl Virsh {
    pub fn new(uri: &str) -> Self {
        Self {
            uri: uri.to_string(),
            session: Mutex::new(None),
        }
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    fn open(&self) -> Result<Session, String> {
        let (reader, writer) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
        let err = writer.try_clone().map_err(|e| format!("pipe: {e}"))?;
        let mut child = Command::new("virsh")
            .args(["-q", "-c", &self.uri])
            .stdin(Stdio::piped())
            .stdout(writer)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting virsh: {e} (install libvirt-clients)"))?;
        let stdin = child.stdin.take().expect("stdin is piped");
        Ok(Session {
            child,
            stdin,
            out: reader,
            pending: String::new(),
            n: 0,
        })
    }

    /// Runs one command; returns its output lines, or its `error:` lines as the error.
    pub fn exec(&self, words: &[&str]) -> Result<Vec<String>, String> {
        for w in words {
            if w.is_empty()
                || !w
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=".contains(c))
            {
                return Err(format!("{w:?} can't be passed to virsh"));
            }
        }
        let mut guard = self.session.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = Some(self.open()?);
        }
        let session = guard.as_mut().expect("opened above");
        session.n += 1;
        let marker = format!("gpuaas-end-{}", session.n);
        let sent = writeln!(session.stdin, "{}\necho {marker}", words.join(" "))
            .and_then(|()| session.stdin.flush());
        if let Err(e) = sent {
            *guard = None;
            return Err(format!("virsh ({}) went away: {e}", self.uri));
        }
        // virsh echoes each command after its prompt and prints `echo`'s output with no
        // newline before the next prompt, so the command's output ends where a line starts
        // with the marker.
        let end = format!("\n{marker}");
        let mut buf = std::mem::take(&mut session.pending);
        let at = loop {
            if let Some(at) = buf.find(&end) {
                break at;
            }
            let mut chunk = [0u8; 4096];
            match std::io::Read::read(&mut session.out, &mut chunk) {
                Ok(0) | Err(_) => {
                    let _ = session.child.kill();
                    *guard = None;
                    return Err(format!("virsh ({}) exited unexpectedly", self.uri));
                }
                Ok(n) => buf.push_str(&String::from_utf8_lossy(&chunk[..n])),
            }
        };
        session.pending = buf[at + end.len()..].to_string();
        let command = words.join(" ");
        let mut lines = Vec::new();
        let mut errors = Vec::new();
        for line in buf[..at].lines() {
            let text = line.replace("virsh # ", "");
            let text = text.trim();
            if text.is_empty() || text == command || text == format!("echo {marker}") {
                continue;
            }
            match text.strip_prefix("error: ") {
                Some(e) => errors.push(e.to_string()),
                None => lines.push(text.to_string()),
            }
        }
        if errors.is_empty() {
            Ok(lines)
        } else {
            Err(format!("virsh {}: {}", words[0], errors.join("; ")))
        }
    }

    pub fn define(&self, xml: &std::path::Path) -> Result<(), String> {
        let path = xml.to_str().ok_or("the domain XML path is not UTF-8")?;
        self.exec(&["define", path]).map(|_| ())
    }

    pub fn state(&self, name: &str) -> Result<Option<DomainState>, String> {
        if !self.list()?.iter().any(|d| d == name) {
            return Ok(None);
        }
        let out = self.exec(&["domstate", name])?;
        Ok(Some(match out.first().map(String::as_str) {
            Some("running") => DomainState::Running,
            Some("shut off") => DomainState::ShutOff,
            _ => DomainState::Other,
        }))
    }

    /// Every domain, running or defined.
    pub fn list(&self) -> Result<Vec<String>, String> {
        self.exec(&["list", "--all", "--name"])
    }

    pub fn start(&self, name: &str) -> Result<(), String> {
        self.exec(&["start", name]).map(|_| ())
    }

    pub fn shutdown(&self, name: &str) -> Result<(), String> {
        self.exec(&["shutdown", name]).map(|_| ())
    }

    pub fn destroy(&self, name: &str) -> Result<(), String> {
        self.exec(&["destroy", name]).map(|_| ())
    }

    pub fn undefine(&self, name: &str) -> Result<(), String> {
        self.exec(&["undefine", name]).map(|_| ())
    }

    /// Plugs a device into the running domain and keeps it in the definition.
    pub fn attach_device(&self, name: &str, xml: &std::path::Path) -> Result<(), String> {
        let path = xml.to_str().ok_or("the device XML path is not UTF-8")?;
        match self.exec(&["attach-device", name, path, "--live", "--config"]) {
            Ok(_) => Ok(()),
            // Plugged in by an earlier try of the same task.
            Err(e) if e.contains("already exists") || e.contains("already in use") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Unplugs a device from the running domain and its definition.
    pub fn detach_device(&self, name: &str, xml: &std::path::Path) -> Result<(), String> {
        let path = xml.to_str().ok_or("the device XML path is not UTF-8")?;
        match self.exec(&["detach-device", name, path, "--live", "--config"]) {
            Ok(_) => Ok(()),
            Err(e) if e.contains("not found") => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Virsh {
    fn drop(&mut self) {
        if let Some(mut s) = self.session.lock().ok().and_then(|mut g| g.take()) {
            let _ = writeln!(s.stdin, "quit");
            let _ = s.child.wait();
        }
    }
}
