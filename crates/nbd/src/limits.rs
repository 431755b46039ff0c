//! The bounds of every size, queue and in-flight table in this crate, and the block sizes the
//! server advertises.

/// The block size of every call into an [`crate::Export`]: offsets and lengths the server passes
/// are multiples of it, and an export's size is used rounded down to it.
pub const EXPORT_BLOCK_SIZE_BYTES: u64 = types::PAGE_SIZE_BYTES as u64;

/// The smallest alignment clients may use (`NBD_INFO_BLOCK_SIZE` minimum). Requests aligned to it
/// but not to [`EXPORT_BLOCK_SIZE_BYTES`] are served with a read-modify-write of the partial pages.
pub const BLOCK_SIZE_MIN_BYTES: u32 = 512;

/// The alignment that avoids read-modify-write (`NBD_INFO_BLOCK_SIZE` preferred).
pub const BLOCK_SIZE_PREFERRED_BYTES: u32 = types::PAGE_SIZE_BYTES;

/// The largest read or write (`NBD_INFO_BLOCK_SIZE` maximum), the payload bound enforced before
/// any buffer is allocated. A larger read fails with `EINVAL`; a larger write closes the
/// connection, since its payload would have to be read to stay in step.
pub const PAYLOAD_SIZE_MAX_BYTES: u32 = 32 << 20;

/// Bytes of option data accepted in the handshake; a longer option closes the connection.
/// Names and queries are at most [`STRING_SIZE_MAX_BYTES`] each, so this fits several queries.
pub const OPTION_DATA_SIZE_MAX_BYTES: u32 = 64 << 10;

/// The protocol's limit on a name, a query or a message.
pub const STRING_SIZE_MAX_BYTES: usize = 4096;

/// Queries accepted in one `NBD_OPT_LIST_META_CONTEXT` or `NBD_OPT_SET_META_CONTEXT`.
pub const META_CONTEXT_QUERIES_MAX: u32 = 128;

/// Exports named in one reply to `NBD_OPT_LIST`; the rest are left out.
pub const LIST_EXPORTS_MAX: usize = 10_000;

/// Requests one connection runs at once; it reads no further request until one has replied.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 128;

/// Payload bytes (of writes received and reads requested) one connection has in flight; it reads
/// no further request until enough have replied. One request of [`PAYLOAD_SIZE_MAX_BYTES`] is
/// always admitted, so the bound is this plus one request.
pub const IN_FLIGHT_BYTES_MAX: u64 = 64 << 20;

/// Reply bytes one connection queues for its socket before it stops reading requests (a client
/// that does not read its replies stops being served instead of growing the queue).
pub const SEND_QUEUE_BYTES_MAX: u64 = 64 << 20;

/// Bytes read from the socket per read call when no payload is pending.
pub const READ_CHUNK_BYTES: usize = 256 << 10;

/// Reply segments handed to one vectored write.
pub const WRITE_SEGMENTS_MAX: usize = 64;

/// Descriptors in one `base:allocation` reply; a client asks again from where the reply ends.
pub const BLOCK_STATUS_EXTENTS_MAX: usize = 1024;

/// Bytes of real zeroes written per call for `NBD_CMD_WRITE_ZEROES` with `NBD_CMD_FLAG_NO_HOLE`.
pub const ZERO_CHUNK_BYTES: usize = 1 << 20;

/// Connections served at once by one [`crate::Server`]; further clients wait in the listen backlog.
pub const CONNECTIONS_MAX: usize = 4096;

/// Seconds a client has to finish the handshake before the connection is closed.
pub const HANDSHAKE_TIMEOUT_SECONDS: u64 = 30;

const _: () = assert!(BLOCK_SIZE_MIN_BYTES.is_power_of_two());
const _: () = assert!(BLOCK_SIZE_PREFERRED_BYTES.is_power_of_two());
const _: () = assert!(BLOCK_SIZE_PREFERRED_BYTES as u64 == EXPORT_BLOCK_SIZE_BYTES);
const _: () = assert!(EXPORT_BLOCK_SIZE_BYTES % BLOCK_SIZE_MIN_BYTES as u64 == 0);
const _: () = assert!(PAYLOAD_SIZE_MAX_BYTES as u64 % EXPORT_BLOCK_SIZE_BYTES == 0);
const _: () = assert!(IN_FLIGHT_BYTES_MAX >= PAYLOAD_SIZE_MAX_BYTES as u64);
const _: () = assert!(ZERO_CHUNK_BYTES as u64 % EXPORT_BLOCK_SIZE_BYTES == 0);
const _: () = assert!(OPTION_DATA_SIZE_MAX_BYTES as usize >= 2 * STRING_SIZE_MAX_BYTES + 16);
