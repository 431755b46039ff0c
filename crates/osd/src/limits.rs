//! The bounds of the OSD's queues and in-flight tables.

/// Client and peer connections served at once; further ones are closed at accept.
pub const CONNECTIONS_MAX: usize = 1024;

/// Engine requests in flight at once. Each served request has at most one engine request in
/// flight, and a connection serves at most `net::limits::REQUESTS_IN_FLIGHT_MAX` requests at
/// once; the factor two leaves room for requests abandoned by closed connections.
pub const ENGINE_OPS_IN_FLIGHT_MAX: usize = 2 * CONNECTIONS_MAX * net::limits::REQUESTS_IN_FLIGHT_MAX;

/// The largest object an engine can hold: zero-filled writes are sliced from a static buffer
/// of this size.
pub const OBJECT_SIZE_MAX_BYTES: usize = engine::OBJECT_SIZE_MAX_BYTES as usize;

const _: () = assert!(ENGINE_OPS_IN_FLIGHT_MAX < u32::MAX as usize);
const _: () = assert!(OBJECT_SIZE_MAX_BYTES <= wire::limits::DATA_SIZE_MAX_BYTES as usize);
