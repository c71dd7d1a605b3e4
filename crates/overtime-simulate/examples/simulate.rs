//! `overtime simulate` without the overtime binary:
//! `cargo run -p overtime-simulate --example simulate -- --scenario tool_no_timeout --no-nginx`.

use overtime_simulate::SimulateArgs;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = match SimulateArgs::from_flags(std::env::args_os().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match overtime_simulate::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("overtime simulate: {e}");
            ExitCode::from(if e.is_usage() { 2 } else { 1 })
        }
    }
}
