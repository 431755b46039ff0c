//! `basalt`, the one Basalt binary: parses the command line and runs one subcommand.
//!
//! Each subcommand lives in its own module under `cmd/` and returns `anyhow::Result`; this file
//! turns an error into one line on stderr and a non-zero exit status. The modules beside `cmd/`
//! are the helpers the subcommands share (sizes, device checks, request pipelining, the torture
//! log).

mod api_client;
mod cmd;
mod dev_osds;
mod device;
mod down_reporter;
mod gateway;
mod pipeline;
mod reaper;
mod signals;
mod size;
mod stats;
mod torture;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Basalt: distributed block storage.
#[derive(Debug, Parser)]
#[command(name = "basalt", version, about, propagate_version = true)]
struct Cli {
    /// Print only results: no progress messages on stderr.
    #[arg(long, short, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an OSD on one drive (with --etcd, --data, --listen), or manage OSDs.
    Osd(OsdArgs),
    /// Storage engine tools: benchmarks and load generators.
    #[command(subcommand)]
    Engine(EngineCommand),
    /// Run a monitor: PG tables, leader election and the JSON HTTP API.
    Mon(cmd::mon::Args),
    /// Manage pools through the mon API.
    Pool(cmd::pool::Args),
    /// List placement groups and their states through the mon API.
    Pg(cmd::pg::Args),
    /// Show and change the cluster's settings through the mon API.
    Config(cmd::config::Args),
    /// Compare every object's copies and repair the bad ones (all PGs, a pool, a PG or a volume).
    Scrub(cmd::scrub::Args),
    /// Manage volumes through the mon API.
    Volume(cmd::volume::Args),
    /// Take, list and remove snapshots through the mon API.
    Snapshot(cmd::snapshot::Args),
    /// List, restore and purge volumes removed to the trash.
    Trash(cmd::trash::Args),
    /// Show the cluster's state through the mon API.
    Status(cmd::status::Args),
    /// Measure I/O on a volume through the client library (IOPS, MiB/s, latency).
    Bench(cmd::bench::Args),
    /// Serve every volume as an NBD export named after it.
    Nbd(cmd::nbd::Args),
    /// Run a whole cluster in this process: metadata store, mon, OSDs on files, NBD gateway.
    Dev(cmd::dev::Args),
}

/// `basalt osd` runs the daemon; `basalt osd <command>` manages OSDs.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct OsdArgs {
    #[command(subcommand)]
    command: Option<OsdCommand>,
    #[command(flatten)]
    run: cmd::osd_run::Args,
}

#[derive(Debug, Subcommand)]
enum OsdCommand {
    /// Format a file or block device as a Basalt engine.
    Init(cmd::osd_init::Args),
    /// Open an engine and print its superblock, space, index RAM and open time.
    Info(cmd::osd_info::Args),
    /// List registered OSDs through the mon API.
    Ls(cmd::osd_admin::LsArgs),
    /// Show OSDs by rack and host through the mon API.
    Tree(cmd::osd_admin::TreeArgs),
    /// Stop one of a `basalt dev`'s OSDs (to watch failover), through the mon API.
    Stop(cmd::osd_admin::StopArgs),
    /// Start a stopped OSD of a `basalt dev` again (to watch it catch up), through the mon API.
    Start(cmd::osd_admin::StartArgs),
    /// Mark an OSD out: its PGs move to other OSDs, served by it until they are clean without it.
    Out(cmd::osd_membership::IdArgs),
    /// Mark an OSD in: it takes its share of PGs again.
    In(cmd::osd_membership::IdArgs),
    /// Change an OSD's share of PGs (1 by default, relative to its capacity).
    Reweight(cmd::osd_membership::ReweightArgs),
    /// Remove a drained OSD (refused while it still holds PGs, unless --force).
    Rm(cmd::osd_membership::RmArgs),
}

#[derive(Debug, Subcommand)]
enum EngineCommand {
    /// Format PATH and run the fio-suite workloads against the engine (destroys PATH's data).
    Bench(cmd::engine_bench::Args),
    /// Write N distinct objects into an existing engine, then write its journal back.
    Fill(cmd::engine_fill::Args),
    /// Measure the disk's floor for a write that needs several durable copies on it at once.
    SyncFloor(cmd::engine_sync_floor::Args),
    /// Measure the floor for a QD1 read on this machine: the disk behind one local round trip.
    ReadFloor(cmd::engine_read_floor::Args),
    /// Write random data until killed, logging every acknowledged write (for the kill -9 test).
    #[command(hide = true)]
    Torture(cmd::engine_torture::Args),
    /// Check an engine against a torture log after a crash.
    #[command(hide = true)]
    Verify(cmd::engine_verify::Args),
}

/// What every subcommand may use besides its own arguments.
#[derive(Debug, Clone, Copy)]
pub struct Global {
    pub quiet: bool,
}

impl Global {
    /// Prints a progress message on stderr unless `--quiet` was given.
    pub fn say(&self, message: impl std::fmt::Display) {
        if !self.quiet {
            eprintln!("basalt: {message}");
        }
    }
}

/// Lets the process end quietly when whatever reads its output goes away (`basalt pg ls | head`),
/// as other command-line tools do, instead of failing on the closed pipe. Only for commands
/// that print and exit: a daemon keeps SIGPIPE ignored, so a peer that hangs up is an error on
/// that one socket.
fn end_quietly_on_closed_output() {
    // SAFETY: restores the default disposition of one signal, before any other thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let global = Global { quiet: cli.quiet };
    let prints_and_exits = match &cli.command {
        Command::Osd(OsdArgs { command, .. }) => {
            matches!(
                command,
                Some(
                    OsdCommand::Ls(_)
                        | OsdCommand::Tree(_)
                        | OsdCommand::Stop(_)
                        | OsdCommand::Start(_)
                        | OsdCommand::Out(_)
                        | OsdCommand::In(_)
                        | OsdCommand::Reweight(_)
                        | OsdCommand::Rm(_)
                )
            )
        }
        Command::Pool(_)
        | Command::Pg(_)
        | Command::Volume(_)
        | Command::Snapshot(_)
        | Command::Trash(_)
        | Command::Status(_)
        | Command::Config(_)
        | Command::Scrub(_) => true,
        _ => false,
    };
    if prints_and_exits {
        end_quietly_on_closed_output();
    }
    let result = match cli.command {
        Command::Osd(OsdArgs { command: Some(OsdCommand::Init(args)), .. }) => cmd::osd_init::run(global, args),
        Command::Osd(OsdArgs { command: Some(OsdCommand::Info(args)), .. }) => cmd::osd_info::run(global, args),
        Command::Osd(OsdArgs { command: Some(OsdCommand::Ls(args)), .. }) => cmd::osd_admin::run_ls(global, args),
        Command::Osd(OsdArgs { command: Some(OsdCommand::Tree(args)), .. }) => cmd::osd_admin::run_tree(global, args),
        Command::Osd(OsdArgs { command: Some(OsdCommand::Stop(args)), .. }) => cmd::osd_admin::run_stop(global, args),
        Command::Osd(OsdArgs { command: Some(OsdCommand::Start(args)), .. }) => cmd::osd_admin::run_start(global, args),
        Command::Osd(OsdArgs { command: Some(OsdCommand::Out(args)), .. }) => {
            cmd::osd_membership::run_out(global, args)
        }
        Command::Osd(OsdArgs { command: Some(OsdCommand::In(args)), .. }) => cmd::osd_membership::run_in(global, args),
        Command::Osd(OsdArgs { command: Some(OsdCommand::Reweight(args)), .. }) => {
            cmd::osd_membership::run_reweight(global, args)
        }
        Command::Osd(OsdArgs { command: Some(OsdCommand::Rm(args)), .. }) => cmd::osd_membership::run_rm(global, args),
        Command::Osd(OsdArgs { command: None, run }) => cmd::osd_run::run(global, run),
        Command::Mon(args) => cmd::mon::run(global, args),
        Command::Pool(args) => cmd::pool::run(global, args),
        Command::Pg(args) => cmd::pg::run(global, args),
        Command::Config(args) => cmd::config::run(global, args),
        Command::Scrub(args) => cmd::scrub::run(global, args),
        Command::Volume(args) => cmd::volume::run(global, args),
        Command::Snapshot(args) => cmd::snapshot::run(global, args),
        Command::Trash(args) => cmd::trash::run(global, args),
        Command::Status(args) => cmd::status::run(global, args),
        Command::Bench(args) => cmd::bench::run(global, args),
        Command::Nbd(args) => cmd::nbd::run(global, args),
        Command::Dev(args) => cmd::dev::run(global, args),
        Command::Engine(EngineCommand::Bench(args)) => cmd::engine_bench::run(global, args),
        Command::Engine(EngineCommand::Fill(args)) => cmd::engine_fill::run(global, args),
        Command::Engine(EngineCommand::SyncFloor(args)) => cmd::engine_sync_floor::run(global, args),
        Command::Engine(EngineCommand::ReadFloor(args)) => cmd::engine_read_floor::run(global, args),
        Command::Engine(EngineCommand::Torture(args)) => cmd::engine_torture::run(global, args),
        Command::Engine(EngineCommand::Verify(args)) => cmd::engine_verify::run(global, args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("basalt: error: {}", one_line(&error));
            ExitCode::FAILURE
        }
    }
}

/// Joins an error and its causes into one line, "cannot open /x: disk /x not found", leaving
/// out a cause whose text its parent already shows (errors that print their source with "{0}").
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    let mut previous = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !previous.is_empty() && previous.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
        previous = text;
    }
    line
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn error_line_skips_causes_already_shown() {
        let inner = std::io::Error::other("disk full");
        let error = anyhow::Error::new(inner).context("write failed: disk full").context("cannot format /x");
        assert_eq!(super::one_line(&error), "cannot format /x: write failed: disk full");
    }
}
