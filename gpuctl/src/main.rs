//! `gpuctl`: parses the arguments, runs the command, exits with its code (see `gpuctl::exit`);
//! `gpuctl ssh` becomes the `ssh` it prints.

use clap::Parser;
use gpuctl::{Cli, Done, exit, run};

fn main() {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(exit::FAILED);
        }
    };
    let done = runtime.block_on(run(cli, &mut std::io::stdout(), &mut std::io::stderr()));
    match done {
        Done::Exit(code) => std::process::exit(code),
        Done::Exec(argv) => {
            use std::os::unix::process::CommandExt;
            let Some((program, args)) = argv.split_first() else {
                std::process::exit(exit::FAILED);
            };
            let e = std::process::Command::new(program).args(args).exec();
            eprintln!("error: running {program}: {e}");
            std::process::exit(exit::FAILED);
        }
    }
}
