//! The bounds of every queue and in-flight table in this crate.

/// Calls one [`crate::Connection`] keeps in flight; a further call waits for one to finish.
pub const CALLS_IN_FLIGHT_MAX: usize = 1024;

/// Requests [`crate::serve_connection`] runs at once per connection; it reads no further
/// request from the peer until one of them has replied.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 256;

/// Encoded bytes a connection queues for the socket before senders wait for room.
///
/// A single frame may take the queue past the bound (a frame is never split), so the queue
/// holds at most this plus one frame per sender.
pub const SEND_QUEUE_BYTES_MAX: usize = 8 << 20;

/// Send buffer capacity a connection keeps once its queue has drained; a larger buffer (grown
/// by a burst of big frames) is released. Covers a frame of one 256 KiB object.
pub const SEND_BUFFER_RETAINED_BYTES: usize = 512 << 10;

/// Bytes read from the socket per read call.
pub const READ_CHUNK_BYTES: usize = 128 << 10;

const _: () = assert!(SEND_QUEUE_BYTES_MAX >= wire::limits::FRAME_SIZE_MAX_BYTES);
const _: () = assert!(CALLS_IN_FLIGHT_MAX <= u32::MAX as usize);
