//! The node agent. For now it only reports its version and protocol; enrolment, discovery and
//! the libvirt and simulated drivers are the fleet work (issue 4).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--version") | Some("version") => {
            println!(
                "node-agent {} (agent protocol v{})",
                env!("CARGO_PKG_VERSION"),
                agent_protocol::PROTOCOL_VERSION
            );
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!(
                "node-agent: `{other}` is not available in this build; \
                 enrol, discover and run arrive with the fleet work. Try `node-agent --version`."
            );
            ExitCode::from(2)
        }
        None => {
            eprintln!("usage: node-agent --version");
            ExitCode::from(2)
        }
    }
}
