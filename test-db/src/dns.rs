//! A real DNS server for tests: `dnsmasq` on a loopback port, answering the TXT records a test
//! gives it and NXDOMAIN for every other name (it forwards nothing).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const DNSMASQ: &str = "/usr/sbin/dnsmasq";

/// A running `dnsmasq`, stopped when dropped.
#[derive(Debug)]
pub struct LocalDns {
    child: Child,
    addr: SocketAddr,
}

impl LocalDns {
    /// Starts one serving `txt` (name, value) records. `None`, after printing SKIPPED with the
    /// reason, where `dnsmasq` isn't installed (`cargo xtask test` installs it).
    pub fn start(txt: &[(&str, &str)]) -> Option<LocalDns> {
        if !std::path::Path::new(DNSMASQ).exists() {
            println!("SKIPPED: {DNSMASQ} is not installed (apt-get install dnsmasq-base)");
            return None;
        }
        let port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|s| s.local_addr())
            .expect("a free loopback UDP port")
            .port();
        let mut cmd = Command::new(DNSMASQ);
        cmd.args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--listen-address=127.0.0.1",
            "--bind-interfaces",
            "--no-resolv",
            "--no-hosts",
            "--pid-file=",
            // Every name is local: what isn't listed is NXDOMAIN, nothing is forwarded.
            "--local=/#/",
        ])
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        for (name, value) in txt {
            cmd.arg(format!("--txt-record={name},\"{value}\""));
        }
        let child = cmd.spawn().expect("dnsmasq starts");
        let dns = LocalDns {
            child,
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        };
        dns.wait_ready();
        Some(dns)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits until it answers a query (an NXDOMAIN for a name nobody has is an answer).
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        // A query for "ready." of type A, class IN.
        let query: &[u8] =
            b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05ready\x00\x00\x01\x00\x01";
        let mut buf = [0u8; 512];
        while Instant::now() < deadline {
            let _ = socket.send_to(query, self.addr);
            if socket.recv_from(&mut buf).is_ok() {
                return;
            }
        }
        panic!("dnsmasq on {} did not answer within 10 s", self.addr);
    }
}

impl Drop for LocalDns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
