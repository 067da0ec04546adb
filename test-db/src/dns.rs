//! A real DNS server for tests: `dnsmasq` on a loopback port, answering the TXT records a test
//! gives it and NXDOMAIN for every other name (it forwards nothing).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
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
        // dnsmasq binds the port for UDP and TCP both; a port free for one may be another
        // process's for the other (an ephemeral client port of a database connection, say),
        // and dnsmasq then exits at once. So: a port free for both, and another try if it
        // still lost a race.
        for _ in 0..5 {
            let port = free_port();
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
            let mut dns = LocalDns {
                child,
                addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            };
            if dns.wait_ready() {
                return Some(dns);
            }
        }
        panic!("dnsmasq did not answer on 5 loopback ports in a row");
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits until it answers a query (an NXDOMAIN for a name nobody has is an answer): true,
    /// or false once it has exited (its port was taken) or 10 s have passed.
    fn wait_ready(&mut self) -> bool {
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
                return true;
            }
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
        }
        false
    }
}

/// A loopback port nobody holds for UDP or TCP right now.
fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free loopback TCP port");
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
}

impl Drop for LocalDns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
