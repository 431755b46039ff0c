//! The daemons' log in the trace: a `tracing` subscriber that adds each event at or above a
//! level to the trace of the run on its thread, stamped with the simulated time, so that a
//! failing seed's trace shows what the OSDs and the mon said between the client ops. Installed
//! once per process (`BASALT_SIM_LOG=info|debug|...` in the tests); runs on threads without
//! a run log nothing.

use std::cell::RefCell;
use std::rc::Rc;

use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

use crate::cluster::Run;

thread_local! {
    static RUN: RefCell<Option<Rc<Run>>> = const { RefCell::new(None) };
}

struct TraceLog {
    level: Level,
}

/// Sends the events of every thread's runs at `level` and above to their traces; false if a
/// subscriber was already installed.
pub fn install(level: Level) -> bool {
    tracing::subscriber::set_global_default(TraceLog { level }).is_ok()
}

/// Makes `run` the one this thread's events go to (`None`: no run).
pub(crate) fn attach(run: Option<Rc<Run>>) {
    RUN.with(|current| *current.borrow_mut() = run);
}

impl Subscriber for TraceLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.level
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        RUN.with(|run| {
            if let Some(run) = run.borrow().as_ref() {
                let node = net::sim::SimNet::current_node();
                let text = format!("{} {}", node.as_deref().unwrap_or("-"), mon::stderr_log::format_event(event));
                run.note(&text);
            }
        });
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}
