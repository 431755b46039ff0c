//! `UringReady`: a [`UringDisk`](crate::UringDisk)'s completions as a tokio readiness, so one
//! thread's runtime waits for the disk and its sockets at once.

use std::task::{Context, Poll};

use platform::DiskReady;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::CompletionNotifier;

/// The readiness of an io_uring disk: its completion eventfd, registered with the runtime.
pub struct UringReady {
    notifier: AsyncFd<CompletionNotifier>,
}

impl UringReady {
    /// Registers the disk's completion notifier (taken before the engine was opened). Must be
    /// called inside the runtime that will drive the engine.
    pub fn new(notifier: CompletionNotifier) -> std::io::Result<UringReady> {
        // SAFETY: the notifier owns its descriptor for as long as it lives, which is inside the
        // `AsyncFd`, and `as_raw_fd` always returns that same descriptor.
        let notifier = unsafe { AsyncFd::register_with_interest(notifier, Interest::READABLE) }
            .map_err(|error| error.into_parts().1)?;
        Ok(UringReady { notifier })
    }
}

impl DiskReady for UringReady {
    fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        match self.notifier.poll_read_ready(cx) {
            Poll::Ready(Ok(mut guard)) => {
                // Cleared before the poll: a completion posted after it signals again.
                guard.get_inner().clear();
                guard.clear_ready();
                Poll::Ready(())
            }
            Poll::Ready(Err(error)) => panic!("waiting on the disk completion eventfd failed: {error}"),
            Poll::Pending => Poll::Pending,
        }
    }
}
