//! A minimal `tracing` subscriber that prints events as one line each on stderr.
//!
//! The daemons log through `tracing`; something must print the events. This prints
//! `basalt: LEVEL target: message key=value ...` for events at or above a level and ignores
//! spans (nothing in Basalt opens spans yet).

use std::fmt::Write as _;
use std::io::Write as _;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
pub use tracing::Level;
use tracing::{Event, Metadata, Subscriber};

/// Prints events at `level` and more severe to stderr.
pub struct StderrLog {
    level: Level,
}

/// Installs a [`StderrLog`] as the process's subscriber; returns false if one was installed.
pub fn install(level: Level) -> bool {
    tracing::subscriber::set_global_default(StderrLog { level }).is_ok()
}

impl Subscriber for StderrLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        // `Level` orders more verbose as greater.
        *metadata.level() <= self.level
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let _ = writeln!(std::io::stderr().lock(), "basalt: {}", format_event(event));
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

/// `LEVEL target: message key=value ...`: one event on one line.
pub fn format_event(event: &Event<'_>) -> String {
    let metadata = event.metadata();
    let mut line = Line::default();
    event.record(&mut line);
    let mut text = format!("{} {}: {}", metadata.level(), metadata.target(), line.message);
    text.push_str(&line.fields);
    text
}

#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}
