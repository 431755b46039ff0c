//! The subcommands, one module each, named `<noun>_<verb>` after the command line.

pub mod engine_bench;
pub mod engine_fill;
pub mod engine_torture;
pub mod engine_verify;
pub mod osd_info;
pub mod osd_init;
