//! [`LocalStream`]: a Unix-domain stream registered for reading only.
//!
//! A Unix socket signals its writer every time the reader takes data out of it: the reader's
//! `recv` calls the writer's write-space callback, which wakes whoever waits on the writer's
//! socket for `EPOLLOUT`. tokio registers every `UnixStream` for both directions, so at queue
//! depth 1 each reply a client reads woke the OSD thread that sent it (and each request an OSD
//! read woke the client), only for that thread to find nothing to do and sleep again: two
//! context switches on the reader's critical path per frame. TCP does not do this (it signals
//! write space only to a writer that ran out of it).
//!
//! This stream's socket is registered for `EPOLLIN` alone, so those signals wake no one.
//! Writes go straight to the non-blocking socket; the rare writer that finds it full waits on
//! a second registration made for that wait alone (a duplicate of the descriptor registered
//! for `EPOLLOUT`, which epoll reports at once if there is room already).

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

#[derive(Debug)]
pub struct LocalStream {
    fd: AsyncFd<UnixStream>,
}

impl LocalStream {
    /// Wraps a connected socket. Must be called inside a tokio runtime.
    pub fn new(stream: tokio::net::UnixStream) -> io::Result<LocalStream> {
        let stream = stream.into_std()?;
        stream.set_nonblocking(true)?;
        Ok(LocalStream { fd: register(stream, Interest::READABLE)? })
    }

    pub fn get_ref(&self) -> &UnixStream {
        self.fd.get_ref()
    }

    /// Reads what the socket holds, waiting until it holds something (see [`read_draining`]).
    pub async fn read(&self, buffer: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            let mut drained = None;
            let capacity = buffer.len();
            match guard.try_io(|fd| read_draining(|| fd.get_ref().read(buffer), capacity, &mut drained)) {
                Ok(result) => return result,
                Err(_would_block) => {
                    if let Some(size_bytes) = drained {
                        return Ok(size_bytes);
                    }
                }
            }
        }
    }

    pub fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        self.fd.get_ref().write(bytes)
    }

    /// Waits until the socket has room to write, or reports an error or hang-up.
    pub async fn writable(&self) -> io::Result<()> {
        let duplicate = self.fd.get_ref().try_clone()?;
        let waiter = register(duplicate, Interest::WRITABLE)?;
        waiter.writable().await?.retain_ready();
        Ok(())
    }
}

fn register(stream: UnixStream, interest: Interest) -> io::Result<AsyncFd<UnixStream>> {
    // SAFETY: the `UnixStream` owns its descriptor, keeps it open until it is dropped with the
    // `AsyncFd`, and always returns that same descriptor.
    unsafe { AsyncFd::register_with_interest(stream, interest) }.map_err(|error| error.into_parts().1)
}

/// Runs `read` (a non-blocking read into a buffer of `capacity` bytes) for a readiness
/// `try_io`. A read that fills less than the buffer emptied the socket: it is reported as
/// `WouldBlock` so that the readiness is cleared now, and its size is left in `drained`.
/// Without this the next read would be a `recv` made only to learn `EAGAIN`, one syscall per
/// frame at queue depth 1. Clearing cannot lose a wake-up: readiness clears only if no event
/// came since it was observed, and data arriving after the read raises a new one.
pub(crate) fn read_draining(
    read: impl FnOnce() -> io::Result<usize>,
    capacity: usize,
    drained: &mut Option<usize>,
) -> io::Result<usize> {
    let size_bytes = read()?;
    if size_bytes > 0 && size_bytes < capacity {
        *drained = Some(size_bytes);
        return Err(io::ErrorKind::WouldBlock.into());
    }
    Ok(size_bytes)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::LocalStream;

    /// Voluntary context switches of the calling thread so far.
    fn voluntary_switches() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").expect("read /proc/thread-self/status");
        let line = status.lines().find(|line| line.starts_with("voluntary_ctxt_switches:")).expect("a switches line");
        line.split_whitespace().nth(1).and_then(|count| count.parse().ok()).expect("a count")
    }

    /// A thread that wrote frames and waits for a reply sleeps while its peer reads them: the
    /// peer's reads do not wake it (with both directions registered, each one would).
    #[test]
    fn a_writer_sleeps_through_its_peers_reads() {
        const FRAMES: usize = 16;
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let (asleep_sender, asleep) = mpsc::channel();
        let writer = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                ours.set_nonblocking(true).unwrap();
                let stream = LocalStream::new(tokio::net::UnixStream::from_std(ours).unwrap()).unwrap();
                for _ in 0..FRAMES {
                    assert_eq!(stream.try_write(&[7u8; 1024]).unwrap(), 1024);
                }
                let before = voluntary_switches();
                asleep_sender.send(()).unwrap();
                let mut reply = [0u8; 16];
                assert_eq!(stream.read(&mut reply).await.unwrap(), 1, "the peer's one-byte reply");
                voluntary_switches() - before
            })
        });
        asleep.recv().unwrap();
        let mut frame = [0u8; 1024];
        for _ in 0..FRAMES {
            std::thread::sleep(Duration::from_millis(2));
            theirs.read_exact(&mut frame).unwrap();
        }
        std::thread::sleep(Duration::from_millis(2));
        theirs.write_all(&[1]).unwrap();
        let switches = writer.join().unwrap();
        // One wake-up for the reply; a few more for anything else the runtime does.
        assert!(switches <= 4, "the writer woke {switches} times while its peer read {FRAMES} frames");
    }
}
