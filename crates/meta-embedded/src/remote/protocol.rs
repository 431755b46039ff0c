//! The frames of the embedded store's network protocol, and reading and writing them.
//!
//! ```text
//! frame = payload_size_bytes u32 (little-endian) | payload (one JSON message)
//! ```
//!
//! The client opens with `Hello`, the server answers `Hello`, then the client sends requests,
//! each with an id of its choosing, and the server answers each with a `Response` carrying the
//! same id, in any order (requests run concurrently). A `Watch` request's response comes before
//! any of that watch's `WatchEvent` frames, which carry the request id as `watch_id`; a
//! `WatchEnd` frame carries the error that ended it. Byte values are hex strings.
//!
//! JSON keeps the protocol debuggable and lets serde reject malformed input without panicking;
//! the metadata store is never on the data path, so its cost does not matter. A frame larger
//! than `FRAME_SIZE_BYTES_MAX`, a frame that does not parse, or a frame out of protocol order
//! closes that connection (the server logs why) and never affects the others.

use std::io;

use meta::{KeyValue, LeaseId, Listing, MetaError, Txn, TxnResponse, WatchEvent};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Bumped on any incompatible change of the messages.
pub const PROTOCOL_VERSION: u32 = 1;

/// The largest frame either side accepts: bounds a listing of the whole store.
pub const FRAME_SIZE_BYTES_MAX: usize = 64 << 20;

#[derive(Debug, Serialize, Deserialize)]
pub enum ClientMessage {
    Hello { protocol_version: u32 },
    Request { id: u64, request: Request },
    CancelWatch { watch_id: u64 },
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    Get {
        key: String,
    },
    Put {
        key: String,
        #[serde(with = "meta::serde_hex")]
        value: Vec<u8>,
        lease: Option<LeaseId>,
    },
    Delete {
        key: String,
    },
    List {
        prefix: String,
    },
    Txn {
        txn: Txn,
    },
    Watch {
        prefix: String,
        start_revision: Option<i64>,
    },
    Compact {
        revision: i64,
    },
    LeaseGrant {
        ttl_s: u64,
    },
    LeaseKeepAlive {
        lease: LeaseId,
    },
    LeaseRevoke {
        lease: LeaseId,
    },
}

#[derive(Debug, Serialize, Deserialize)]
pub enum ServerMessage {
    Hello { protocol_version: u32 },
    Response { id: u64, result: Result<Response, MetaError> },
    WatchEvent { watch_id: u64, event: WatchEvent },
    WatchEnd { watch_id: u64, error: MetaError },
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    Get { kv: Option<KeyValue> },
    Put { revision: i64 },
    Delete { deleted: bool },
    List { listing: Listing },
    Txn { response: TxnResponse },
    Watch,
    Compact,
    LeaseGrant { lease: LeaseId },
    LeaseKeepAlive { ttl_s: u64 },
    LeaseRevoke,
}

impl Request {
    /// The key or prefix the request is about, for error messages.
    pub fn key(&self) -> &str {
        match self {
            Request::Get { key } | Request::Put { key, .. } | Request::Delete { key } => key,
            Request::List { prefix } | Request::Watch { prefix, .. } => prefix,
            Request::Txn { txn } => txn.compares.first().map_or("", |compare| compare.key.as_str()),
            Request::Compact { .. }
            | Request::LeaseGrant { .. }
            | Request::LeaseKeepAlive { .. }
            | Request::LeaseRevoke { .. } => "",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error("frame of {size_bytes} bytes exceeds the limit of {FRAME_SIZE_BYTES_MAX} bytes")]
    TooLarge { size_bytes: usize },
    #[error("malformed frame: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

/// Appends one frame holding `message` to `buffer`.
pub fn encode_frame<T: Serialize>(message: &T, buffer: &mut Vec<u8>) {
    let start = buffer.len();
    buffer.extend_from_slice(&[0; 4]);
    serde_json::to_writer(&mut *buffer, message).expect("protocol messages always serialize");
    let payload_size_bytes = buffer.len() - start - 4;
    // The peer refuses oversized frames; a response that large is reported to the caller by the
    // peer closing the connection, which is rare enough (a listing over 64 MiB) to accept.
    let size = u32::try_from(payload_size_bytes).unwrap_or(u32::MAX);
    buffer[start..start + 4].copy_from_slice(&size.to_le_bytes());
}

/// Reads one frame and parses its message. `buffer` is reused between calls.
pub async fn read_frame<T, R>(reader: &mut R, buffer: &mut Vec<u8>) -> Result<T, FrameError>
where
    T: for<'de> Deserialize<'de>,
    R: AsyncRead + Unpin,
{
    let mut size = [0u8; 4];
    match reader.read_exact(&mut size[..1]).await {
        Ok(_) => {}
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(error) => return Err(error.into()),
    }
    let size_bytes = async {
        reader.read_exact(&mut size[1..]).await?;
        Ok::<_, io::Error>(u32::from_le_bytes(size) as usize)
    }
    .await
    .map_err(eof_is_truncation)?;
    if size_bytes > FRAME_SIZE_BYTES_MAX {
        return Err(FrameError::TooLarge { size_bytes });
    }
    buffer.clear();
    buffer.resize(size_bytes, 0);
    reader.read_exact(buffer).await.map_err(eof_is_truncation)?;
    Ok(serde_json::from_slice(buffer)?)
}

fn eof_is_truncation(error: io::Error) -> FrameError {
    if error.kind() == io::ErrorKind::UnexpectedEof {
        FrameError::Truncated
    } else {
        FrameError::Io(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_reject_garbage() {
        let mut buffer = Vec::new();
        let message = ClientMessage::Request {
            id: 7,
            request: Request::Put { key: "/k".into(), value: vec![0, 255], lease: Some(LeaseId(3)) },
        };
        encode_frame(&message, &mut buffer);
        encode_frame(&ClientMessage::CancelWatch { watch_id: 9 }, &mut buffer);
        let mut reader = buffer.as_slice();
        let mut scratch = Vec::new();
        match read_frame::<ClientMessage, _>(&mut reader, &mut scratch).await.unwrap() {
            ClientMessage::Request { id: 7, request: Request::Put { key, value, lease } } => {
                assert_eq!((key.as_str(), value, lease), ("/k", vec![0, 255], Some(LeaseId(3))));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read_frame::<ClientMessage, _>(&mut reader, &mut scratch).await,
            Ok(ClientMessage::CancelWatch { watch_id: 9 })
        ));
        assert!(matches!(read_frame::<ClientMessage, _>(&mut reader, &mut scratch).await, Err(FrameError::Closed)));

        let mut truncated = &buffer[..10];
        assert!(matches!(
            read_frame::<ClientMessage, _>(&mut truncated, &mut scratch).await,
            Err(FrameError::Truncated)
        ));
        let huge = u32::MAX.to_le_bytes();
        assert!(matches!(
            read_frame::<ClientMessage, _>(&mut &huge[..], &mut scratch).await,
            Err(FrameError::TooLarge { .. })
        ));
        let mut garbage = 5u32.to_le_bytes().to_vec();
        garbage.extend_from_slice(b"{{{{{");
        assert!(matches!(
            read_frame::<ClientMessage, _>(&mut garbage.as_slice(), &mut scratch).await,
            Err(FrameError::Malformed(_))
        ));
    }
}
