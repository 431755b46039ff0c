//! [`Stream`]: a connected TCP or Unix-domain socket, whichever the peer's address names.
//!
//! Addresses are `host:port` for TCP and `unix:PATH` for a Unix socket (ADR 0013): an OSD also
//! listens on a Unix socket when told to, and processes on the same machine reach it there,
//! skipping the TCP/IP stack. With the `sim` feature (simulations only), `sim:NAME` names a
//! stream on a simulated network (ADR 0020, `crate::sim`). Everything above this module treats
//! them alike.

use std::io;
use std::net::Shutdown;
use std::path::Path;

use std::io::Read;

use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::local::{read_draining, LocalStream};

#[cfg(feature = "sim")]
use crate::sim::{self, SimListener, SimStream, SIM_PREFIX};

/// The prefix of an address that names a Unix socket.
pub const UNIX_PREFIX: &str = "unix:";

/// A connected socket of either family, or a simulated stream.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(LocalStream),
    #[cfg(feature = "sim")]
    Sim(SimStream),
}

#[cfg(feature = "sim")]
impl From<SimStream> for Stream {
    fn from(stream: SimStream) -> Stream {
        Stream::Sim(stream)
    }
}

impl From<TcpStream> for Stream {
    fn from(stream: TcpStream) -> Stream {
        Stream::Tcp(stream)
    }
}

impl From<LocalStream> for Stream {
    fn from(stream: LocalStream) -> Stream {
        Stream::Unix(stream)
    }
}

impl Stream {
    /// Connects to `address` (`host:port`, `unix:PATH` or `sim:NAME`). TCP streams get
    /// `TCP_NODELAY`.
    pub async fn connect(address: &str) -> io::Result<Stream> {
        #[cfg(feature = "sim")]
        if address.starts_with(SIM_PREFIX) {
            return Ok(Stream::Sim(sim::connect(address).await?));
        }
        match address.strip_prefix(UNIX_PREFIX) {
            Some(path) => Ok(Stream::Unix(LocalStream::new(UnixStream::connect(path).await?)?)),
            None => {
                let stream = TcpStream::connect(address).await?;
                stream.set_nodelay(true)?;
                Ok(Stream::Tcp(stream))
            }
        }
    }

    /// How the peer is named in logs and errors.
    pub fn peer_name(&self) -> String {
        let name = match self {
            Stream::Tcp(stream) => stream.peer_addr().map(|address| address.to_string()),
            Stream::Unix(stream) => stream.get_ref().local_addr().map(|address| match address.as_pathname() {
                Some(path) => format!("a local peer on {UNIX_PREFIX}{}", path.display()),
                None => "a local peer".to_string(),
            }),
            #[cfg(feature = "sim")]
            Stream::Sim(stream) => Ok(stream.peer_name()),
        };
        name.unwrap_or_else(|_| "an unknown peer".to_string())
    }

    pub(crate) fn set_nodelay(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.set_nodelay(true),
            Stream::Unix(_) => Ok(()),
            #[cfg(feature = "sim")]
            Stream::Sim(_) => Ok(()),
        }
    }

    /// Reads what the socket holds into `buffer`, waiting until it holds something; `Ok(0)` at
    /// the end of the stream. A read that leaves the socket empty says so to the runtime
    /// (`local::read_draining`), sparing the `recv` that would only learn it.
    pub(crate) async fn read(&self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => loop {
                stream.readable().await?;
                let mut drained = None;
                let capacity = buffer.len();
                let socket = socket2::SockRef::from(stream);
                match stream
                    .try_io(Interest::READABLE, || read_draining(|| (&*socket).read(buffer), capacity, &mut drained))
                {
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                        if let Some(size_bytes) = drained {
                            return Ok(size_bytes);
                        }
                    }
                    result => return result,
                }
            },
            Stream::Unix(stream) => stream.read(buffer).await,
            #[cfg(feature = "sim")]
            Stream::Sim(stream) => loop {
                stream.readable().await?;
                match stream.try_read(buffer) {
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                    result => return result,
                }
            },
        }
    }

    pub(crate) async fn writable(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.writable().await,
            Stream::Unix(stream) => stream.writable().await,
            #[cfg(feature = "sim")]
            Stream::Sim(stream) => stream.writable().await,
        }
    }

    pub(crate) fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.try_write(bytes),
            Stream::Unix(stream) => stream.try_write(bytes),
            #[cfg(feature = "sim")]
            Stream::Sim(stream) => stream.try_write(bytes),
        }
    }

    pub(crate) fn shutdown(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => socket2::SockRef::from(stream).shutdown(Shutdown::Both),
            Stream::Unix(stream) => stream.get_ref().shutdown(Shutdown::Both),
            #[cfg(feature = "sim")]
            Stream::Sim(stream) => stream.shutdown(),
        }
    }
}

/// A listening socket of either family, or a listening address on a simulated network: what
/// a server accepts its [`Stream`]s from.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
    #[cfg(feature = "sim")]
    Sim(SimListener),
}

impl Listener {
    /// The next connection (`serve_connection` sets `TCP_NODELAY` on TCP streams).
    pub async fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(listener) => Ok(Stream::Tcp(listener.accept().await?.0)),
            Listener::Unix(listener) => Ok(Stream::Unix(LocalStream::new(listener.accept().await?.0)?)),
            #[cfg(feature = "sim")]
            Listener::Sim(listener) => Ok(Stream::Sim(listener.accept().await?)),
        }
    }
}

/// Binds a listening Unix socket at `path`. A socket file that nothing accepts on (left by a
/// process that was killed) is replaced; a socket something still accepts on
/// (`AddrInUse`), or a path that holds anything but a socket (`AlreadyExists`), is refused and
/// left alone. Must be called inside a tokio runtime.
pub fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "the socket is in use: something accepts connections on it",
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => return Err(io::Error::new(io::ErrorKind::AlreadyExists, "the path exists and is not a socket")),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    UnixListener::bind(path)
}
