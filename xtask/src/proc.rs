//! Running commands and waiting for HTTP endpoints, with errors that say what failed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::Result;

/// Runs `cmd` to completion, inheriting stdio; an error names the command.
pub fn run(cmd: &mut Command) -> Result {
    let shown = show(cmd);
    eprintln!("    $ {shown}");
    let status = cmd
        .status()
        .map_err(|e| format!("could not start `{shown}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{shown}` failed ({status})"))
    }
}

/// Runs `cmd` and returns its stdout, or None if it can't run or fails.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `cmd` to completion and returns its stdout; an error names the command and carries
/// what it printed.
pub fn checked_output(cmd: &mut Command) -> Result<String> {
    let shown = show(cmd);
    let out = cmd
        .output()
        .map_err(|e| format!("could not start `{shown}`: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{shown}` failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr).trim_end()
        ))
    }
}

pub fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// GET `http://127.0.0.1:{port}{path}` and return the status code.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    http(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"),
    )
}

/// POST a JSON `body` to `http://127.0.0.1:{port}{path}` and return the status code.
pub fn http_post(port: u16, path: &str, body: &str) -> Option<u16> {
    http(
        port,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// Sends one request on a fresh loopback connection; the answer's status code.
fn http(port: u16, request: &str) -> Option<u16> {
    let mut stream =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500))
            .ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf).ok()?;
    let head = std::str::from_utf8(&buf[..n]).ok()?;
    head.split_whitespace().nth(1)?.parse().ok()
}

/// Waits until `/readyz` answers 200, or the child exits, or `timeout` passes.
pub fn wait_ready(child: &mut Child, port: u16, timeout: Duration) -> Result {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("the server exited before it was ready ({status})"));
        }
        if http_status(port, "/readyz") == Some(200) {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "the server was not ready on port {port} after {}s",
                timeout.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Asks a child to stop (SIGTERM), then waits up to `grace` before killing it.
pub fn terminate(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let start = Instant::now();
    while start.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}
