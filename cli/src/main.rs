//! The `tailor` offline CLI: one module per subcommand. Compiled into the `tailor` binary (not the library),
//! so `anyhow` stays out of the library.

#[cfg(feature = "full")]
pub mod backtest;
#[cfg(feature = "full")]
pub mod cluster_snapshot;
pub mod convert;
pub mod crds;
pub mod error;
#[cfg(feature = "full")]
pub mod fleet;
#[cfg(feature = "full")]
pub mod frontier;
pub mod input;
pub mod output;
#[cfg(feature = "full")]
pub mod patch;
#[cfg(feature = "full")]
pub mod plan;
#[cfg(feature = "full")]
pub mod plot;
#[cfg(feature = "full")]
pub mod prices;
#[cfg(feature = "full")]
pub mod prometheus;
pub mod recommend;
#[cfg(feature = "full")]
pub mod report;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use error::InputError;

/// Tailor: a Vertical Pod Autoscaler for Kubernetes. Offline tools.
#[derive(Debug, Parser)]
#[command(name = "tailor", version)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Recommend requests from a usage trace (JSON) or CSV, with upstream VPA's algorithm and flags.
    Recommend(Box<recommend::RecommendArgs>),
    /// Replay history with several strategies and score cost, risk and churn of their recommendations.
    #[cfg(feature = "full")]
    Backtest(Box<backtest::BacktestArgs>),
    /// Rewrite upstream VPA manifests (autoscaling.k8s.io) into Tailor manifests.
    Convert(convert::ConvertArgs),
    /// Print Tailor's CustomResourceDefinitions.
    Crds(crds::CrdsArgs),
    /// Preview what the admission webhook does to a pod: the JSON patch and the patched pod.
    #[cfg(feature = "full")]
    Patch(Box<patch::PatchArgs>),
    /// Preview one updater iteration on a cluster snapshot: evict, resize (with the patch) or skip, per pod.
    #[cfg(feature = "full")]
    Plan(Box<plan::PlanArgs>),
    /// Preview fleet onboarding on a cluster snapshot: the Tailor VPAs namespace policies would create,
    /// change and delete, and the workloads they leave out.
    #[cfg(feature = "full")]
    Fleet(Box<fleet::FleetArgs>),
    /// Render the dashboard's fleet pages offline from a usage trace, Prometheus history or a cluster
    /// snapshot's VPAs: one self-contained HTML file (--html), or the fleet as JSON.
    #[cfg(feature = "full")]
    Report(Box<report::ReportArgs>),
}

/// Parses arguments, runs the subcommand and maps errors to exit codes (2 bad input, 1 other failures).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Recommend(a) => recommend::run(&a),
        #[cfg(feature = "full")]
        Command::Backtest(a) => backtest::run(&a),
        Command::Convert(a) => convert::run(&a),
        Command::Crds(a) => crds::run(&a),
        #[cfg(feature = "full")]
        Command::Patch(a) => patch::run(&a),
        #[cfg(feature = "full")]
        Command::Plan(a) => plan::run(&a),
        #[cfg(feature = "full")]
        Command::Fleet(a) => fleet::run(&a),
        #[cfg(feature = "full")]
        Command::Report(a) => report::run(&a),
    };
    match result {
        Ok(code) => code,
        // The reader went away (`tailor … | head`): nothing more to say to anyone.
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.chain().any(|c| c.is::<InputError>()) {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// Whether the error is a write to a closed pipe.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
