//! An NBD client on the simulated network, for the clients that reach their volumes through the
//! gateway (`gateway.rs`): the fixed newstyle handshake with `NBD_OPT_EXPORT_NAME`, then one
//! request at a time with simple replies, as the kernel's client speaks it. Real NBD clients
//! (qemu, libnbd, the kernel) cannot reach a simulated address; the real-process tests run them.

use bytes::Bytes;
use nbd::proto::{
    CMD_FLUSH, CMD_READ, CMD_TRIM, CMD_WRITE, CMD_WRITE_ZEROES, FLAG_C_FIXED_NEWSTYLE, FLAG_C_NO_ZEROES,
    FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES, INIT_MAGIC, OPTION_MAGIC, OPT_EXPORT_NAME, REQUEST_MAGIC, SIMPLE_REPLY_MAGIC,
};
use net::sim::SimStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One connection to one export.
pub(crate) struct NbdClient {
    stream: SimStream,
    next_handle: u64,
    pub(crate) size_bytes: u64,
}

impl NbdClient {
    /// Connects to the server at `address` (from the node the caller runs as) and opens `export`.
    pub(crate) async fn connect(address: &str, export: &str) -> Result<NbdClient, String> {
        let stream = match net::Stream::connect(address).await.map_err(|error| format!("connect: {error}"))? {
            net::Stream::Sim(stream) => stream,
            other => return Err(format!("{address} is not a simulated address: {other:?}")),
        };
        let mut client = NbdClient { stream, next_handle: 1, size_bytes: 0 };
        client.handshake(export).await.map_err(|error| format!("handshake for {export}: {error}"))?;
        Ok(client)
    }

    async fn handshake(&mut self, export: &str) -> std::io::Result<()> {
        let stream = &mut self.stream;
        let (init, option, flags) = (stream.read_u64().await?, stream.read_u64().await?, stream.read_u16().await?);
        if init != INIT_MAGIC || option != OPTION_MAGIC || flags & FLAG_FIXED_NEWSTYLE == 0 {
            return Err(invalid(format!("greeting {init:#x} {option:#x} flags {flags:#x}")));
        }
        let no_zeroes = flags & FLAG_NO_ZEROES != 0;
        let client_flags = FLAG_C_FIXED_NEWSTYLE | if no_zeroes { FLAG_C_NO_ZEROES } else { 0 };
        let mut out = Vec::new();
        out.extend_from_slice(&client_flags.to_be_bytes());
        out.extend_from_slice(&OPTION_MAGIC.to_be_bytes());
        out.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
        out.extend_from_slice(&(export.len() as u32).to_be_bytes());
        out.extend_from_slice(export.as_bytes());
        stream.write_all(&out).await?;
        // The export's size and transmission flags (and 124 zero bytes unless both sides agreed
        // to skip them); a server refusing the name closes the connection.
        self.size_bytes = stream.read_u64().await?;
        let _transmission_flags = stream.read_u16().await?;
        if !no_zeroes {
            let mut zeroes = [0u8; 124];
            stream.read_exact(&mut zeroes).await?;
        }
        Ok(())
    }

    pub(crate) async fn read(&mut self, offset_bytes: u64, length_bytes: u32) -> Result<Bytes, String> {
        self.request(CMD_READ, offset_bytes, length_bytes, &[]).await
    }

    pub(crate) async fn write(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), String> {
        self.request(CMD_WRITE, offset_bytes, data.len() as u32, data).await.map(drop)
    }

    pub(crate) async fn trim(&mut self, offset_bytes: u64, length_bytes: u32) -> Result<(), String> {
        self.request(CMD_TRIM, offset_bytes, length_bytes, &[]).await.map(drop)
    }

    pub(crate) async fn write_zeroes(&mut self, offset_bytes: u64, length_bytes: u32) -> Result<(), String> {
        self.request(CMD_WRITE_ZEROES, offset_bytes, length_bytes, &[]).await.map(drop)
    }

    pub(crate) async fn flush(&mut self) -> Result<(), String> {
        self.request(CMD_FLUSH, 0, 0, &[]).await.map(drop)
    }

    /// Sends one request and waits for its reply: the data of a read, nothing otherwise.
    async fn request(
        &mut self,
        command: u16,
        offset_bytes: u64,
        length_bytes: u32,
        data: &[u8],
    ) -> Result<Bytes, String> {
        let handle = self.next_handle;
        self.next_handle += 1;
        let mut out = Vec::with_capacity(28 + data.len());
        out.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out.extend_from_slice(&0u16.to_be_bytes());
        out.extend_from_slice(&command.to_be_bytes());
        out.extend_from_slice(&handle.to_be_bytes());
        out.extend_from_slice(&offset_bytes.to_be_bytes());
        out.extend_from_slice(&length_bytes.to_be_bytes());
        out.extend_from_slice(data);
        let what = |error: std::io::Error| format!("command {command} at {offset_bytes}: {error}");
        self.stream.write_all(&out).await.map_err(what)?;
        let magic = self.stream.read_u32().await.map_err(what)?;
        let errno = self.stream.read_u32().await.map_err(what)?;
        let replied = self.stream.read_u64().await.map_err(what)?;
        if magic != SIMPLE_REPLY_MAGIC || replied != handle {
            return Err(format!("command {command}: reply magic {magic:#x} handle {replied} (sent {handle})"));
        }
        if errno != 0 {
            return Err(format!("command {command} at {offset_bytes} failed with errno {errno}"));
        }
        if command != CMD_READ {
            return Ok(Bytes::new());
        }
        let mut read = vec![0u8; length_bytes as usize];
        self.stream.read_exact(&mut read).await.map_err(what)?;
        Ok(Bytes::from(read))
    }
}

fn invalid(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}
