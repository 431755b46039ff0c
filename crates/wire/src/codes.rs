//! Opcodes and status codes: the numbers that name an operation and a reply's outcome on the wire.
//!
//! Both are closed enums. A number this build does not know is a protocol error (the peer speaks
//! a version we do not), never silently mapped to something else. Numbers are never reused: a
//! retired opcode or status keeps its number reserved.

use std::fmt;

/// What a frame asks for (in a request) or answers (in a reply, which carries its request's opcode).
///
/// Primary ops come from clients to a PG's primary OSD; secondary ops go from a primary to the
/// other OSDs of the PG (the names follow Vitastor's `osd_ops.h`). Admin ops serve peering,
/// tests and health checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum Opcode {
    /// Primary: read a range of a volume.
    Read = 1,
    /// Primary: write a range of a volume.
    Write = 2,
    /// Primary: make a range of a volume read as zeros.
    WriteZeroes = 3,
    /// Primary: discard a range of a volume (it reads as zeros afterwards).
    Trim = 4,
    /// Primary: a barrier; completes once every write sent before it on this connection has completed.
    Flush = 5,
    /// Primary: whether one object exists, and its version (block status of a volume range).
    Stat = 6,
    /// Primary: which pages of one object of a layer differ from an older snapshot of the same
    /// chain (`qemu:dirty-bitmap` of an NBD export, `basalt snapshot diff`).
    Changes = 7,
    /// Primary: copy into a volume's head what the layers below it show, for the objects of one
    /// PG from a cursor (`basalt volume flatten`).
    Flatten = 8,
    /// Secondary: read a range of one object.
    SecRead = 16,
    /// Secondary: write a range of one object at a version chosen by the primary.
    SecWrite = 17,
    /// Secondary: delete one object at a version chosen by the primary.
    SecDelete = 18,
    /// Secondary: list the objects of a PG with their versions (peering).
    SecList = 19,
    /// Secondary: bring one object from the version the member holds to a newer one by writing
    /// only the pages that changed in between (catch-up).
    SecWritePages = 20,
    /// Secondary: replace the member's copy of one object, whatever it holds, with a version of
    /// which only the pages sent hold data (a whole copy that keeps which pages the object holds).
    SecReplace = 21,
    /// Admin: the version and data checksum of one object (replica comparison).
    ObjectInfo = 32,
    /// Admin: liveness check and round-trip measurement.
    Ping = 33,
    /// Admin: the OSD's space usage (for `basalt status`; statistics stay out of the metadata store).
    Space = 34,
    /// Admin: the state of every PG the OSD is the primary of (for `basalt status`, `basalt pg ls`).
    PgStates = 35,
    /// Admin: how many of a volume's objects in the PGs the OSD leads lack a copy (`basalt volume info`).
    VolumeRedundancy = 36,
    /// Admin: completes once the OSD has applied the cluster map of a store revision and every
    /// client write it admitted under an older map has finished (the seal of a snapshot).
    Barrier = 37,
    /// Admin: a volume's new head, whose seal the monitor is about to commit, takes writes from
    /// now on (every OSD confirmed the Barrier of the snapshot that made it).
    Sealed = 38,
    /// Admin: for each layer of a volume, its objects in the PGs the OSD leads and how many of
    /// them the layers reading through it do not need (`basalt volume du`).
    VolumeUsage = 39,
}

impl Opcode {
    /// Every opcode, in numeric order.
    pub const ALL: [Opcode; 22] = [
        Opcode::Read,
        Opcode::Write,
        Opcode::WriteZeroes,
        Opcode::Trim,
        Opcode::Flush,
        Opcode::Stat,
        Opcode::Changes,
        Opcode::Flatten,
        Opcode::SecRead,
        Opcode::SecWrite,
        Opcode::SecDelete,
        Opcode::SecList,
        Opcode::SecWritePages,
        Opcode::SecReplace,
        Opcode::ObjectInfo,
        Opcode::Ping,
        Opcode::Space,
        Opcode::PgStates,
        Opcode::VolumeRedundancy,
        Opcode::Barrier,
        Opcode::Sealed,
        Opcode::VolumeUsage,
    ];

    /// The opcode with this number, or `None` if this build does not know it.
    pub fn from_u16(value: u16) -> Option<Opcode> {
        Opcode::ALL.into_iter().find(|opcode| opcode.as_u16() == value)
    }

    pub fn as_u16(self) -> u16 {
        self as u16
    }

    /// True for OSD-to-OSD ops, which only a PG's primary may send.
    pub fn is_secondary(self) -> bool {
        matches!(
            self,
            Opcode::SecRead
                | Opcode::SecWrite
                | Opcode::SecDelete
                | Opcode::SecList
                | Opcode::SecWritePages
                | Opcode::SecReplace
        )
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The outcome of a request, carried in every reply's header.
///
/// A reply with `Ok` carries the opcode's reply body; any other status carries an empty body.
/// Each error type at a boundary of the OSD maps itself to one of these (`fn status(&self)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum Status {
    Ok = 0,
    /// The responder is not the primary of the PG; refresh the PG table and retry.
    NotPrimary = 1,
    /// The request's PG epoch differs from the responder's; the reply header carries the responder's epoch.
    /// The side with the older epoch refreshes its PG table; a client then retries.
    WrongEpoch = 2,
    /// The object does not exist (Stat, SecRead, SecDelete, ObjectInfo).
    NoSuchObject = 3,
    /// A field is structurally valid but semantically wrong (misaligned offset, zero length, bad pool).
    InvalidArgument = 4,
    /// The range lies outside the volume or the object.
    OutOfRange = 5,
    /// The responder's drive is full.
    NoSpace = 6,
    /// Stored data failed its checksum; the responder returns no data rather than bad data.
    Corrupt = 7,
    /// The responder's drive failed the I/O.
    IoError = 8,
    /// The responder cannot serve the request now (PG peering or recovering, queues full); retry later.
    Busy = 9,
    /// The responder decoded the request but does not serve this opcode (for example a secondary op sent to a gateway).
    Unsupported = 10,
    /// The request broke a protocol rule; the responder closes the connection after this reply.
    ProtocolError = 11,
    /// The responder does not hold a readable copy of the object at the version a
    /// SecWritePages builds on; the sender copies the whole object instead.
    BaseNotHeld = 12,
    /// The responder holds, or remembers (a copy it deleted one version above the one it held),
    /// a newer version of the object than a SecWrite, SecDelete or SecWritePages sends. The
    /// one error reply with a body: the version held (`Response::NewerVersionHeld`), so the
    /// sender writes again above it.
    NewerVersion = 13,
    /// The layer written to is frozen: a snapshot holds it, or the volume moved to another head.
    /// A client writes again to the volume's head in a newer cluster map.
    ReadOnly = 14,
}

impl Status {
    /// Every status, in numeric order.
    pub const ALL: [Status; 15] = [
        Status::Ok,
        Status::NotPrimary,
        Status::WrongEpoch,
        Status::NoSuchObject,
        Status::InvalidArgument,
        Status::OutOfRange,
        Status::NoSpace,
        Status::Corrupt,
        Status::IoError,
        Status::Busy,
        Status::Unsupported,
        Status::ProtocolError,
        Status::BaseNotHeld,
        Status::NewerVersion,
        Status::ReadOnly,
    ];

    /// The status with this number, or `None` if this build does not know it.
    pub fn from_u32(value: u32) -> Option<Status> {
        Status::ALL.into_iter().find(|status| status.as_u32() == value)
    }

    pub fn as_u32(self) -> u32 {
        self as u32
    }

    pub fn is_ok(self) -> bool {
        self == Status::Ok
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_and_are_unique() {
        for (index, opcode) in Opcode::ALL.into_iter().enumerate() {
            assert_eq!(Opcode::from_u16(opcode.as_u16()), Some(opcode));
            assert!(Opcode::ALL[..index].iter().all(|earlier| earlier.as_u16() < opcode.as_u16()));
        }
        for (index, status) in Status::ALL.into_iter().enumerate() {
            assert_eq!(Status::from_u32(status.as_u32()), Some(status));
            assert!(Status::ALL[..index].iter().all(|earlier| earlier.as_u32() < status.as_u32()));
        }
        assert_eq!(Opcode::from_u16(0), None);
        assert_eq!(Opcode::from_u16(u16::MAX), None);
        assert_eq!(Status::from_u32(15), None);
        assert_eq!(Status::from_u32(u32::MAX), None);
    }
}
