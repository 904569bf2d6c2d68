//! `tailor`: Tailor's offline CLI (recommend, convert, crds).

#[path = "../cli/mod.rs"]
mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
