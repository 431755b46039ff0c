//! The subcommands, one module each, named `<noun>_<verb>` after the command line.

pub mod bench;
pub mod config;
pub mod dev;
pub mod engine_bench;
pub mod engine_fill;
pub mod engine_read_floor;
pub mod engine_sync_floor;
pub mod engine_torture;
pub mod engine_verify;
mod floor_file;
pub mod mon;
pub mod nbd;
pub mod osd_admin;
pub mod osd_info;
pub mod osd_init;
pub mod osd_membership;
pub mod osd_run;
pub mod pg;
pub mod pool;
pub mod scrub;
pub mod snapshot;
mod snapshot_diff;
pub mod status;
pub mod trash;
pub mod volume;
