//! Frames and the messages they carry: requests, replies, and their body layouts.
//!
//! Encoding appends to a caller's `Vec<u8>` that is reused across frames, so steady-state
//! encoding allocates nothing; data travels as `Bytes`, moved in by the sender and sliced out of
//! the receive buffer by the decoder without a copy. Decoding is structural: it checks sizes,
//! checksums and known codes, and leaves semantics (alignment, ranges, whether an object exists)
//! to the OSD. The body layouts are in `docs/design/wire-protocol.md`; keep the two in step.

use bytes::Bytes;

use crate::codes::{Opcode, Status};
use crate::error::{BodyKind, DecodeError};
use crate::header::{Header, FLAG_REPLY, HEADER_SIZE_BYTES};
use crate::limits::{LAYER_USAGE_SIZE_BYTES, LIST_ENTRY_SIZE_BYTES, PAYLOAD_SIZE_MAX_BYTES, PG_REPORT_SIZE_BYTES};

/// A placement group: `(pool, pg)`. Every op on a PG's data names it, so a responder checks the
/// header's epoch against that PG before anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PgId {
    pub pool: u32,
    pub pg: u32,
}

impl std::fmt::Display for PgId {
    /// `pool.pg`, as the CLI and the logs name a PG.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.pool, self.pg)
    }
}

/// An object: the engine's `ObjectId` (`types`), encoded field by field.
pub use types::ObjectId;

/// The `base_version` of a SecWritePages to a member that holds no copy of the object: no
/// version is 0.
pub const ABSENT_VERSION: u64 = 0;

/// One entry of a VolumeUsage reply: one layer of a volume (its head or a snapshot), as far as
/// the PGs the answering OSD leads hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayerUsage {
    pub inode: u64,
    /// The layer's objects.
    pub objects: u64,
    /// Those no layer reading through this one needs: each such layer holds its own copy of the
    /// object (all of them, for a layer nothing reads through). Deleting the layer frees their
    /// blocks; the others' pages would move to the layers above.
    pub exclusive_objects: u64,
}

/// One entry of a PgStates reply: a PG its primary serves, or is bringing up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PgReport {
    pub pg: PgId,
    pub epoch: u64,
    /// A [`PgStateCode`] as a number: an unknown code is the reader's to show, not an error.
    pub state: u32,
    /// Acting members whose object lists the primary does not have yet.
    pub members_unlisted: u32,
    /// Objects still to copy to members that lack them.
    pub objects_left: u64,
    /// A [`PgTrouble`] as a number (0: none): why the PG's last attempt at what it is doing
    /// (peering, a copy, a listing, its clean record) failed.
    pub trouble: u32,
    /// Attempts in a row that failed; reset by one that succeeds.
    pub failures: u32,
}

impl PgReport {
    /// Failures in a row from which a PG's work counts as stuck: its primary keeps trying, with
    /// pauses up to 10 s, and operators are told (`basalt pg ls`, `basalt status`).
    pub const STUCK_AFTER_FAILURES: u32 = 5;

    pub fn is_stuck(&self) -> bool {
        self.failures >= PgReport::STUCK_AFTER_FAILURES
    }
}

/// Why a PG's last attempt failed (`PgReport::trouble`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum PgTrouble {
    None = 0,
    /// Writes of an earlier epoch were still in flight when peering began.
    EarlierWrites = 1,
    /// The PG's history record could not be read or written.
    History = 2,
    /// A set the history requires has no member that answered (peering's "incomplete").
    Incomplete = 3,
    /// Fewer than `min_size` acting members answered.
    TooFewMembers = 4,
    /// A member could not be listed.
    Listing = 5,
    /// Copying an object to or from a member failed.
    Copy = 6,
    /// The map moved on, or a member went down, while the attempt ran.
    MapMoved = 7,
}

impl PgTrouble {
    pub const ALL: [PgTrouble; 8] = [
        PgTrouble::None,
        PgTrouble::EarlierWrites,
        PgTrouble::History,
        PgTrouble::Incomplete,
        PgTrouble::TooFewMembers,
        PgTrouble::Listing,
        PgTrouble::Copy,
        PgTrouble::MapMoved,
    ];

    pub fn from_u32(value: u32) -> Option<PgTrouble> {
        PgTrouble::ALL.into_iter().find(|trouble| *trouble as u32 == value)
    }

    /// What an operator reads (`basalt pg ls`).
    pub fn describe(self) -> &'static str {
        match self {
            PgTrouble::None => "",
            PgTrouble::EarlierWrites => "writes of an earlier epoch still in flight",
            PgTrouble::History => "its history record cannot be read or written",
            PgTrouble::Incomplete => "incomplete: no member of a set its history requires answered",
            PgTrouble::TooFewMembers => "fewer acting members answered than min_size",
            PgTrouble::Listing => "a member cannot be listed",
            PgTrouble::Copy => "copying an object to or from a member fails",
            PgTrouble::MapMoved => "the map moved on during the attempt",
        }
    }
}

/// The states a primary reports (`docs/design/peering.md`, "States").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum PgStateCode {
    Peering = 1,
    /// Not serving: a recorded set unreachable, or fewer than min_size members.
    Inactive = 2,
    /// Serving, every acting member complete, but not every target member acting.
    Degraded = 3,
    /// Serving while members catch up.
    Recovering = 4,
    /// Serving; every target member acting and complete.
    Clean = 5,
}

impl PgStateCode {
    pub const ALL: [PgStateCode; 5] = [
        PgStateCode::Peering,
        PgStateCode::Inactive,
        PgStateCode::Degraded,
        PgStateCode::Recovering,
        PgStateCode::Clean,
    ];

    pub fn from_u32(value: u32) -> Option<PgStateCode> {
        PgStateCode::ALL.into_iter().find(|code| *code as u32 == value)
    }

    pub fn name(self) -> &'static str {
        match self {
            PgStateCode::Peering => "peering",
            PgStateCode::Inactive => "inactive",
            PgStateCode::Degraded => "degraded",
            PgStateCode::Recovering => "recovering",
            PgStateCode::Clean => "clean",
        }
    }
}

/// One entry of a SecList reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListEntry {
    pub object: ObjectId,
    pub version: u64,
}

/// A request: what a client asks of a primary, or a primary of a secondary.
///
/// Fields are listed in wire order. Volume offsets are `u64`; offsets within an object and
/// lengths are `u32`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Read {
        pg: PgId,
        inode: u64,
        offset_bytes: u64,
        length_bytes: u32,
    },
    /// The data runs to the end of the body; its length is the payload size minus the fields.
    Write {
        pg: PgId,
        inode: u64,
        offset_bytes: u64,
        data: Bytes,
    },
    WriteZeroes {
        pg: PgId,
        inode: u64,
        offset_bytes: u64,
        length_bytes: u32,
    },
    Trim {
        pg: PgId,
        inode: u64,
        offset_bytes: u64,
        length_bytes: u32,
    },
    /// Addresses no PG: it orders the writes of this connection.
    Flush,
    SecRead {
        pg: PgId,
        object: ObjectId,
        offset_bytes: u32,
        length_bytes: u32,
    },
    /// `version` is chosen by the primary; the data runs to the end of the body.
    SecWrite {
        pg: PgId,
        object: ObjectId,
        version: u64,
        offset_bytes: u32,
        data: Bytes,
    },
    SecDelete {
        pg: PgId,
        object: ObjectId,
        version: u64,
    },
    /// Writes the pages of `object` set in `page_mask` (bit `i`: page `i`), whose contents
    /// `data` holds in page order, and gives the object `version`, if the member holds it at
    /// exactly `base_version` ([`ABSENT_VERSION`]: holds no copy); the pages not in the mask
    /// are the same in both versions (zeros, from no copy).
    SecWritePages {
        pg: PgId,
        object: ObjectId,
        base_version: u64,
        version: u64,
        page_mask: u64,
        data: Bytes,
    },
    /// Replaces the member's copy of `object`, whatever version it holds (or none), with
    /// `version`, of which the pages set in `page_mask` hold `data` (in page order) and the others
    /// hold nothing: they read as zeros and count as never written, so a layer's reads fall
    /// through them to its parent.
    SecReplace {
        pg: PgId,
        object: ObjectId,
        version: u64,
        page_mask: u64,
        data: Bytes,
    },
    /// Lists at most `count_max` objects of the PG from `start` on, in `(inode, stripe)` order.
    /// A reply with fewer than `count_max` entries is the last; otherwise ask again from the
    /// successor of the last entry.
    SecList {
        pg: PgId,
        start: ObjectId,
        count_max: u32,
    },
    ObjectInfo {
        pg: PgId,
        object: ObjectId,
    },
    Ping,
    /// The OSD's space usage.
    Space,
    /// The states of the PGs the OSD is the primary of.
    PgStates,
    /// How many of volume `inode`'s objects lack a copy, in the PGs the OSD is the primary of.
    VolumeRedundancy {
        inode: u64,
    },
    /// Answered once the OSD has applied the cluster map of store revision `revision` and every
    /// client write it admitted under an older map has finished.
    Barrier {
        revision: u64,
    },
    /// The head `inode`, still sealing in the OSD's map, takes writes: the monitor saw every
    /// OSD confirm the Barrier of the snapshot that made it and is committing its seal.
    Sealed {
        inode: u64,
    },
    /// The layers of the volume whose head is `inode`, in the PGs the OSD is the primary of.
    VolumeUsage {
        inode: u64,
    },
    /// Whether `object` exists at the PG's primary (`Ok` with its version, or `NoSuchObject`).
    Stat {
        pg: PgId,
        object: ObjectId,
    },
    /// The pages of `object` (of a snapshot's layer or a volume's head) whose content differs
    /// from the same stripe of `since`, a snapshot's layer below it in its chain.
    Changes {
        pg: PgId,
        object: ObjectId,
        since: u64,
    },
    /// Copies into the head `inode` every page the layers below it show and it does not hold,
    /// for the stripes of the objects of its family in the PG from `start` on, at most
    /// `count_max` of them listed.
    Flatten {
        pg: PgId,
        inode: u64,
        start: ObjectId,
        count_max: u32,
    },
}

/// A reply. `Failed` answers any opcode with a status other than `Ok`; every other variant is
/// the `Ok` reply of the opcode of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Read {
        data: Bytes,
    },
    Write,
    WriteZeroes,
    Trim,
    Flush,
    /// `present`: the pages read that the object holds (bit `i`: page `i` of the object); the
    /// others read as zeros because no write gave them data.
    SecRead {
        version: u64,
        present: u64,
        data: Bytes,
    },
    SecWrite,
    SecDelete,
    SecList {
        entries: Vec<ListEntry>,
    },
    SecWritePages,
    SecReplace,
    /// `data_crc32c` covers the object's whole `object_size` bytes, unwritten ranges as zeros;
    /// `present` names the pages that hold data, which the checksum cannot tell from zeros.
    ObjectInfo {
        version: u64,
        data_crc32c: u32,
        present: u64,
    },
    Ping,
    Barrier,
    Sealed,
    Stat {
        version: u64,
    },
    /// `pages`: bit `i` set when page `i` of the object may differ from the older snapshot's
    /// (never clear for a page that does).
    Changes {
        pages: u64,
    },
    /// `listed`: the family's objects of the PG listed from `start` (fewer than `count_max`:
    /// none is left); `copied`: the head objects that took pages; `next`: where to go on.
    Flatten {
        listed: u32,
        copied: u32,
        next: ObjectId,
    },
    /// Data blocks in use (objects and blocks promised to journaled writes) and the data
    /// capacity, in bytes, and the objects held.
    Space {
        used_bytes: u64,
        total_bytes: u64,
        object_count: u64,
    },
    /// `history_writes`: metadata-store writes of PG histories since the OSD started;
    /// `copied_bytes`: object data it sent to members catching up or backfilling since then.
    PgStates {
        history_writes: u64,
        copied_bytes: u64,
        pgs: Vec<PgReport>,
    },
    /// `objects`: the volume's objects in the PGs the OSD leads; `degraded_objects`: those some
    /// member of their PG's target set does not hold yet.
    VolumeRedundancy {
        objects: u64,
        degraded_objects: u64,
    },
    /// One entry per layer of the volume (its head first, then its snapshots), as the OSD's map
    /// knows them.
    VolumeUsage {
        layers: Vec<LayerUsage>,
    },
    /// The `NewerVersion` reply: the responder holds or remembers version `current` of the
    /// object, newer than the one sent.
    NewerVersionHeld {
        opcode: Opcode,
        current: u64,
    },
    /// `status` is never `Status::Ok` nor `Status::NewerVersion`. The body is empty; for
    /// `WrongEpoch` the frame's epoch is the responder's.
    Failed {
        opcode: Opcode,
        status: Status,
    },
}

/// What a frame carries. A connection may carry requests and replies in both directions, so one
/// decoder yields both; the header's reply flag tells them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Request(Request),
    Response(Response),
}

/// One decoded frame, or one to encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Matches a reply to its request; replies may arrive in any order.
    pub request_id: u64,
    /// The sender's epoch of the addressed PG (a reply carries the responder's); zero when no PG is addressed.
    pub epoch: u64,
    pub body: Body,
}

impl Request {
    pub fn opcode(&self) -> Opcode {
        match self {
            Request::Read { .. } => Opcode::Read,
            Request::Write { .. } => Opcode::Write,
            Request::WriteZeroes { .. } => Opcode::WriteZeroes,
            Request::Trim { .. } => Opcode::Trim,
            Request::Flush => Opcode::Flush,
            Request::SecRead { .. } => Opcode::SecRead,
            Request::SecWrite { .. } => Opcode::SecWrite,
            Request::SecDelete { .. } => Opcode::SecDelete,
            Request::SecList { .. } => Opcode::SecList,
            Request::SecWritePages { .. } => Opcode::SecWritePages,
            Request::SecReplace { .. } => Opcode::SecReplace,
            Request::ObjectInfo { .. } => Opcode::ObjectInfo,
            Request::Ping => Opcode::Ping,
            Request::Space => Opcode::Space,
            Request::PgStates => Opcode::PgStates,
            Request::VolumeRedundancy { .. } => Opcode::VolumeRedundancy,
            Request::Barrier { .. } => Opcode::Barrier,
            Request::Sealed { .. } => Opcode::Sealed,
            Request::VolumeUsage { .. } => Opcode::VolumeUsage,
            Request::Stat { .. } => Opcode::Stat,
            Request::Changes { .. } => Opcode::Changes,
            Request::Flatten { .. } => Opcode::Flatten,
        }
    }

    /// The PG the request addresses, if any.
    pub fn pg(&self) -> Option<PgId> {
        match *self {
            Request::Read { pg, .. }
            | Request::Write { pg, .. }
            | Request::WriteZeroes { pg, .. }
            | Request::Trim { pg, .. }
            | Request::SecRead { pg, .. }
            | Request::SecWrite { pg, .. }
            | Request::SecDelete { pg, .. }
            | Request::SecList { pg, .. }
            | Request::SecWritePages { pg, .. }
            | Request::SecReplace { pg, .. }
            | Request::ObjectInfo { pg, .. }
            | Request::Stat { pg, .. }
            | Request::Changes { pg, .. }
            | Request::Flatten { pg, .. } => Some(pg),
            Request::Flush
            | Request::Ping
            | Request::Space
            | Request::PgStates
            | Request::VolumeRedundancy { .. }
            | Request::Barrier { .. }
            | Request::Sealed { .. }
            | Request::VolumeUsage { .. } => None,
        }
    }
}

impl Response {
    pub fn opcode(&self) -> Opcode {
        match self {
            Response::Read { .. } => Opcode::Read,
            Response::Write => Opcode::Write,
            Response::WriteZeroes => Opcode::WriteZeroes,
            Response::Trim => Opcode::Trim,
            Response::Flush => Opcode::Flush,
            Response::SecRead { .. } => Opcode::SecRead,
            Response::SecWrite => Opcode::SecWrite,
            Response::SecDelete => Opcode::SecDelete,
            Response::SecList { .. } => Opcode::SecList,
            Response::SecWritePages => Opcode::SecWritePages,
            Response::SecReplace => Opcode::SecReplace,
            Response::ObjectInfo { .. } => Opcode::ObjectInfo,
            Response::Ping => Opcode::Ping,
            Response::Space { .. } => Opcode::Space,
            Response::PgStates { .. } => Opcode::PgStates,
            Response::VolumeRedundancy { .. } => Opcode::VolumeRedundancy,
            Response::Barrier => Opcode::Barrier,
            Response::Sealed => Opcode::Sealed,
            Response::VolumeUsage { .. } => Opcode::VolumeUsage,
            Response::Stat { .. } => Opcode::Stat,
            Response::Changes { .. } => Opcode::Changes,
            Response::Flatten { .. } => Opcode::Flatten,
            Response::NewerVersionHeld { opcode, .. } | Response::Failed { opcode, .. } => *opcode,
        }
    }

    pub fn status(&self) -> Status {
        match self {
            Response::Failed { status, .. } => *status,
            Response::NewerVersionHeld { .. } => Status::NewerVersion,
            _ => Status::Ok,
        }
    }
}

impl Frame {
    pub fn request(request_id: u64, epoch: u64, request: Request) -> Frame {
        Frame { request_id, epoch, body: Body::Request(request) }
    }

    pub fn response(request_id: u64, epoch: u64, response: Response) -> Frame {
        Frame { request_id, epoch, body: Body::Response(response) }
    }

    pub fn opcode(&self) -> Opcode {
        match &self.body {
            Body::Request(request) => request.opcode(),
            Body::Response(response) => response.opcode(),
        }
    }

    pub fn is_reply(&self) -> bool {
        matches!(self.body, Body::Response(_))
    }

    /// The payload's size in bytes (the frame's size minus the header).
    pub fn payload_size_bytes(&self) -> usize {
        match &self.body {
            Body::Request(request) => request_fields_size_bytes(request.opcode()) + request_data(request).len(),
            Body::Response(Response::SecList { entries }) => 4 + entries.len() * LIST_ENTRY_SIZE_BYTES as usize,
            Body::Response(Response::PgStates { pgs, .. }) => 20 + pgs.len() * PG_REPORT_SIZE_BYTES as usize,
            Body::Response(Response::VolumeUsage { layers }) => 4 + layers.len() * LAYER_USAGE_SIZE_BYTES as usize,
            Body::Response(response) => reply_fields_size_bytes(response) + response_data(response).len(),
        }
    }

    /// The frame's size in bytes: what `encode` appends.
    pub fn encoded_size_bytes(&self) -> usize {
        HEADER_SIZE_BYTES + self.payload_size_bytes()
    }

    /// Appends the frame to `out`. Allocates only if `out` must grow.
    ///
    /// # Panics
    ///
    /// If the payload exceeds `limits::PAYLOAD_SIZE_MAX_BYTES` (callers split data to
    /// `limits::DATA_SIZE_MAX_BYTES` and cap SecList replies to `limits::LIST_ENTRIES_MAX_COUNT`),
    /// or if a `Response::Failed` carries `Status::Ok` or `Status::NewerVersion`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let payload_size_bytes = self.payload_size_bytes();
        assert!(payload_size_bytes <= PAYLOAD_SIZE_MAX_BYTES as usize);
        let start = out.len();
        out.reserve(HEADER_SIZE_BYTES + payload_size_bytes);
        out.resize(start + HEADER_SIZE_BYTES, 0);
        let (flags, status) = match &self.body {
            Body::Request(request) => {
                encode_request(request, out);
                (0, Status::Ok)
            }
            Body::Response(response) => {
                encode_response(response, out);
                (FLAG_REPLY, response.status())
            }
        };
        let payload = &out[start + HEADER_SIZE_BYTES..];
        assert_eq!(payload.len(), payload_size_bytes);
        let header = Header {
            opcode: self.opcode(),
            flags,
            // Cannot truncate: asserted against the limit above.
            payload_size_bytes: payload_size_bytes as u32,
            request_id: self.request_id,
            epoch: self.epoch,
            status,
            payload_crc32c: crc32c::crc32c(payload),
        };
        out[start..start + HEADER_SIZE_BYTES].copy_from_slice(&header.encode());
    }

    /// Verifies `payload` against a verified `header` and decodes the frame's body. `payload` is
    /// exactly the `header.payload_size_bytes` bytes after the header; data in the body are
    /// slices of it, not copies.
    ///
    /// # Panics
    ///
    /// If `payload` is not `header.payload_size_bytes` long: the transport read the wrong amount.
    pub fn decode_payload(header: &Header, payload: Bytes) -> Result<Frame, DecodeError> {
        assert_eq!(payload.len(), header.payload_size_bytes as usize);
        let actual = crc32c::crc32c(&payload);
        if actual != header.payload_crc32c {
            return Err(DecodeError::PayloadChecksum {
                request_id: header.request_id,
                expected: header.payload_crc32c,
                actual,
            });
        }
        let body = if !header.is_reply() {
            let mut reader = Reader::new(header, BodyKind::Request, payload);
            reader.require(request_fields_size_bytes(header.opcode) as u64)?;
            let request = decode_request(header.opcode, &mut reader)?;
            reader.finish()?;
            Body::Request(request)
        } else if header.status.is_ok() {
            let mut reader = Reader::new(header, BodyKind::Reply, payload);
            let response = decode_reply(header.opcode, &mut reader)?;
            reader.finish()?;
            Body::Response(response)
        } else if header.status == Status::NewerVersion {
            let mut reader = Reader::new(header, BodyKind::ErrorReply, payload);
            reader.require(8)?;
            let current = reader.u64()?;
            reader.finish()?;
            Body::Response(Response::NewerVersionHeld { opcode: header.opcode, current })
        } else {
            let reader = Reader::new(header, BodyKind::ErrorReply, payload);
            reader.finish()?;
            Body::Response(Response::Failed { opcode: header.opcode, status: header.status })
        };
        Ok(Frame { request_id: header.request_id, epoch: header.epoch, body })
    }
}

/// Bytes of a request body before its data (or all of it, for an opcode without data).
pub(crate) fn request_fields_size_bytes(opcode: Opcode) -> usize {
    const PG: usize = 8;
    const OBJECT: usize = 16;
    match opcode {
        Opcode::Read | Opcode::WriteZeroes | Opcode::Trim => PG + 8 + 8 + 4,
        Opcode::Write => PG + 8 + 8,
        Opcode::Flush | Opcode::Ping | Opcode::Space | Opcode::PgStates => 0,
        Opcode::VolumeRedundancy | Opcode::Barrier | Opcode::Sealed | Opcode::VolumeUsage => 8,
        Opcode::SecRead => PG + OBJECT + 4 + 4,
        Opcode::SecWrite => PG + OBJECT + 8 + 4,
        Opcode::SecDelete => PG + OBJECT + 8,
        Opcode::SecList => PG + OBJECT + 4,
        Opcode::SecWritePages => PG + OBJECT + 8 + 8 + 8,
        Opcode::SecReplace => PG + OBJECT + 8 + 8,
        Opcode::ObjectInfo | Opcode::Stat => PG + OBJECT,
        Opcode::Changes => PG + OBJECT + 8,
        Opcode::Flatten => PG + 8 + OBJECT + 4,
    }
}

/// Bytes of an `Ok` reply body before its data (or its entries, for SecList).
fn reply_fields_size_bytes(response: &Response) -> usize {
    match response {
        Response::SecRead { .. } => 8 + 8,
        Response::ObjectInfo { .. } => 8 + 4 + 8,
        Response::Stat { .. } | Response::Changes { .. } => 8,
        Response::Flatten { .. } => 4 + 4 + 16,
        Response::Space { .. } => 24,
        Response::SecList { .. } => 4,
        Response::PgStates { .. } => 8 + 8 + 4,
        Response::VolumeRedundancy { .. } => 16,
        Response::VolumeUsage { .. } => 4,
        Response::NewerVersionHeld { .. } => 8,
        _ => 0,
    }
}

fn request_data(request: &Request) -> &[u8] {
    match request {
        Request::Write { data, .. }
        | Request::SecWrite { data, .. }
        | Request::SecWritePages { data, .. }
        | Request::SecReplace { data, .. } => data,
        _ => &[],
    }
}

fn response_data(response: &Response) -> &[u8] {
    match response {
        Response::Read { data } | Response::SecRead { data, .. } => data,
        _ => &[],
    }
}

fn encode_request(request: &Request, out: &mut Vec<u8>) {
    match request {
        Request::Read { pg, inode, offset_bytes, length_bytes }
        | Request::WriteZeroes { pg, inode, offset_bytes, length_bytes }
        | Request::Trim { pg, inode, offset_bytes, length_bytes } => {
            put_pg(out, *pg);
            put_u64(out, *inode);
            put_u64(out, *offset_bytes);
            put_u32(out, *length_bytes);
        }
        Request::Write { pg, inode, offset_bytes, data } => {
            put_pg(out, *pg);
            put_u64(out, *inode);
            put_u64(out, *offset_bytes);
            out.extend_from_slice(data);
        }
        Request::Flush | Request::Ping | Request::Space | Request::PgStates => {}
        Request::VolumeRedundancy { inode } => put_u64(out, *inode),
        Request::Barrier { revision } => put_u64(out, *revision),
        Request::Sealed { inode } | Request::VolumeUsage { inode } => put_u64(out, *inode),
        Request::SecRead { pg, object, offset_bytes, length_bytes } => {
            put_pg(out, *pg);
            put_object(out, *object);
            put_u32(out, *offset_bytes);
            put_u32(out, *length_bytes);
        }
        Request::SecWrite { pg, object, version, offset_bytes, data } => {
            put_pg(out, *pg);
            put_object(out, *object);
            put_u64(out, *version);
            put_u32(out, *offset_bytes);
            out.extend_from_slice(data);
        }
        Request::SecDelete { pg, object, version } => {
            put_pg(out, *pg);
            put_object(out, *object);
            put_u64(out, *version);
        }
        Request::SecList { pg, start, count_max } => {
            put_pg(out, *pg);
            put_object(out, *start);
            put_u32(out, *count_max);
        }
        Request::SecWritePages { pg, object, base_version, version, page_mask, data } => {
            put_pg(out, *pg);
            put_object(out, *object);
            put_u64(out, *base_version);
            put_u64(out, *version);
            put_u64(out, *page_mask);
            out.extend_from_slice(data);
        }
        Request::SecReplace { pg, object, version, page_mask, data } => {
            put_pg(out, *pg);
            put_object(out, *object);
            put_u64(out, *version);
            put_u64(out, *page_mask);
            out.extend_from_slice(data);
        }
        Request::ObjectInfo { pg, object } | Request::Stat { pg, object } => {
            put_pg(out, *pg);
            put_object(out, *object);
        }
        Request::Changes { pg, object, since } => {
            put_pg(out, *pg);
            put_object(out, *object);
            put_u64(out, *since);
        }
        Request::Flatten { pg, inode, start, count_max } => {
            put_pg(out, *pg);
            put_u64(out, *inode);
            put_object(out, *start);
            put_u32(out, *count_max);
        }
    }
}

fn encode_response(response: &Response, out: &mut Vec<u8>) {
    match response {
        Response::Read { data } => out.extend_from_slice(data),
        Response::Write
        | Response::WriteZeroes
        | Response::Trim
        | Response::Flush
        | Response::SecWrite
        | Response::SecDelete
        | Response::SecWritePages
        | Response::SecReplace
        | Response::Ping
        | Response::Barrier
        | Response::Sealed => {}
        Response::SecRead { version, present, data } => {
            put_u64(out, *version);
            put_u64(out, *present);
            out.extend_from_slice(data);
        }
        Response::SecList { entries } => {
            // Cannot truncate: the caller asserted the payload against the limit.
            put_u32(out, entries.len() as u32);
            for entry in entries {
                put_object(out, entry.object);
                put_u64(out, entry.version);
            }
        }
        Response::ObjectInfo { version, data_crc32c, present } => {
            put_u64(out, *version);
            put_u32(out, *data_crc32c);
            put_u64(out, *present);
        }
        Response::Stat { version } => put_u64(out, *version),
        Response::Changes { pages } => put_u64(out, *pages),
        Response::Flatten { listed, copied, next } => {
            put_u32(out, *listed);
            put_u32(out, *copied);
            put_object(out, *next);
        }
        Response::Space { used_bytes, total_bytes, object_count } => {
            put_u64(out, *used_bytes);
            put_u64(out, *total_bytes);
            put_u64(out, *object_count);
        }
        Response::PgStates { history_writes, copied_bytes, pgs } => {
            put_u64(out, *history_writes);
            put_u64(out, *copied_bytes);
            put_u32(out, pgs.len() as u32);
            for report in pgs {
                put_pg(out, report.pg);
                put_u64(out, report.epoch);
                put_u32(out, report.state);
                put_u32(out, report.members_unlisted);
                put_u64(out, report.objects_left);
                put_u32(out, report.trouble);
                put_u32(out, report.failures);
            }
        }
        Response::VolumeRedundancy { objects, degraded_objects } => {
            put_u64(out, *objects);
            put_u64(out, *degraded_objects);
        }
        Response::VolumeUsage { layers } => {
            put_u32(out, layers.len() as u32);
            for layer in layers {
                put_u64(out, layer.inode);
                put_u64(out, layer.objects);
                put_u64(out, layer.exclusive_objects);
            }
        }
        Response::NewerVersionHeld { current, .. } => put_u64(out, *current),
        Response::Failed { status, .. } => {
            assert!(!matches!(status, Status::Ok | Status::NewerVersion), "a Failed reply with {status}")
        }
    }
}

fn decode_request(opcode: Opcode, reader: &mut Reader) -> Result<Request, DecodeError> {
    Ok(match opcode {
        Opcode::Read => Request::Read {
            pg: reader.pg()?,
            inode: reader.u64()?,
            offset_bytes: reader.u64()?,
            length_bytes: reader.u32()?,
        },
        Opcode::Write => {
            Request::Write { pg: reader.pg()?, inode: reader.u64()?, offset_bytes: reader.u64()?, data: reader.rest() }
        }
        Opcode::WriteZeroes => Request::WriteZeroes {
            pg: reader.pg()?,
            inode: reader.u64()?,
            offset_bytes: reader.u64()?,
            length_bytes: reader.u32()?,
        },
        Opcode::Trim => Request::Trim {
            pg: reader.pg()?,
            inode: reader.u64()?,
            offset_bytes: reader.u64()?,
            length_bytes: reader.u32()?,
        },
        Opcode::Flush => Request::Flush,
        Opcode::SecRead => Request::SecRead {
            pg: reader.pg()?,
            object: reader.object()?,
            offset_bytes: reader.u32()?,
            length_bytes: reader.u32()?,
        },
        Opcode::SecWrite => Request::SecWrite {
            pg: reader.pg()?,
            object: reader.object()?,
            version: reader.u64()?,
            offset_bytes: reader.u32()?,
            data: reader.rest(),
        },
        Opcode::SecDelete => Request::SecDelete { pg: reader.pg()?, object: reader.object()?, version: reader.u64()? },
        Opcode::SecList => Request::SecList { pg: reader.pg()?, start: reader.object()?, count_max: reader.u32()? },
        Opcode::SecWritePages => Request::SecWritePages {
            pg: reader.pg()?,
            object: reader.object()?,
            base_version: reader.u64()?,
            version: reader.u64()?,
            page_mask: reader.u64()?,
            data: reader.rest(),
        },
        Opcode::SecReplace => Request::SecReplace {
            pg: reader.pg()?,
            object: reader.object()?,
            version: reader.u64()?,
            page_mask: reader.u64()?,
            data: reader.rest(),
        },
        Opcode::ObjectInfo => Request::ObjectInfo { pg: reader.pg()?, object: reader.object()? },
        Opcode::Ping => Request::Ping,
        Opcode::Space => Request::Space,
        Opcode::PgStates => Request::PgStates,
        Opcode::VolumeRedundancy => Request::VolumeRedundancy { inode: reader.u64()? },
        Opcode::Barrier => Request::Barrier { revision: reader.u64()? },
        Opcode::Sealed => Request::Sealed { inode: reader.u64()? },
        Opcode::VolumeUsage => Request::VolumeUsage { inode: reader.u64()? },
        Opcode::Stat => Request::Stat { pg: reader.pg()?, object: reader.object()? },
        Opcode::Changes => Request::Changes { pg: reader.pg()?, object: reader.object()?, since: reader.u64()? },
        Opcode::Flatten => Request::Flatten {
            pg: reader.pg()?,
            inode: reader.u64()?,
            start: reader.object()?,
            count_max: reader.u32()?,
        },
    })
}

fn decode_reply(opcode: Opcode, reader: &mut Reader) -> Result<Response, DecodeError> {
    Ok(match opcode {
        Opcode::Read => Response::Read { data: reader.rest() },
        Opcode::Write => Response::Write,
        Opcode::WriteZeroes => Response::WriteZeroes,
        Opcode::Trim => Response::Trim,
        Opcode::Flush => Response::Flush,
        Opcode::SecRead => {
            reader.require(16)?;
            Response::SecRead { version: reader.u64()?, present: reader.u64()?, data: reader.rest() }
        }
        Opcode::SecWrite => Response::SecWrite,
        Opcode::SecDelete => Response::SecDelete,
        Opcode::SecWritePages => Response::SecWritePages,
        Opcode::SecReplace => Response::SecReplace,
        Opcode::SecList => {
            reader.require(4)?;
            let count = reader.u32()?;
            // Checked against the bytes present before allocating, so a hostile count allocates nothing.
            reader.require(4 + u64::from(count) * u64::from(LIST_ENTRY_SIZE_BYTES))?;
            let mut entries = Vec::with_capacity(count as usize);
            for _ in 0..count {
                entries.push(ListEntry { object: reader.object()?, version: reader.u64()? });
            }
            Response::SecList { entries }
        }
        Opcode::ObjectInfo => {
            reader.require(20)?;
            Response::ObjectInfo { version: reader.u64()?, data_crc32c: reader.u32()?, present: reader.u64()? }
        }
        Opcode::Ping => Response::Ping,
        Opcode::Barrier => Response::Barrier,
        Opcode::Sealed => Response::Sealed,
        Opcode::Space => {
            reader.require(24)?;
            Response::Space { used_bytes: reader.u64()?, total_bytes: reader.u64()?, object_count: reader.u64()? }
        }
        Opcode::Stat => {
            reader.require(8)?;
            Response::Stat { version: reader.u64()? }
        }
        Opcode::Changes => {
            reader.require(8)?;
            Response::Changes { pages: reader.u64()? }
        }
        Opcode::Flatten => {
            reader.require(24)?;
            Response::Flatten { listed: reader.u32()?, copied: reader.u32()?, next: reader.object()? }
        }
        Opcode::PgStates => {
            reader.require(20)?;
            let history_writes = reader.u64()?;
            let copied_bytes = reader.u64()?;
            let count = reader.u32()?;
            // Checked against the bytes present before allocating, as for SecList.
            reader.require(20 + u64::from(count) * u64::from(PG_REPORT_SIZE_BYTES))?;
            let mut pgs = Vec::with_capacity(count as usize);
            for _ in 0..count {
                pgs.push(PgReport {
                    pg: reader.pg()?,
                    epoch: reader.u64()?,
                    state: reader.u32()?,
                    members_unlisted: reader.u32()?,
                    objects_left: reader.u64()?,
                    trouble: reader.u32()?,
                    failures: reader.u32()?,
                });
            }
            Response::PgStates { history_writes, copied_bytes, pgs }
        }
        Opcode::VolumeRedundancy => {
            reader.require(16)?;
            Response::VolumeRedundancy { objects: reader.u64()?, degraded_objects: reader.u64()? }
        }
        Opcode::VolumeUsage => {
            reader.require(4)?;
            let count = reader.u32()?;
            // Checked against the bytes present before allocating, as for SecList.
            reader.require(4 + u64::from(count) * u64::from(LAYER_USAGE_SIZE_BYTES))?;
            let mut layers = Vec::with_capacity(count as usize);
            for _ in 0..count {
                layers.push(LayerUsage {
                    inode: reader.u64()?,
                    objects: reader.u64()?,
                    exclusive_objects: reader.u64()?,
                });
            }
            Response::VolumeUsage { layers }
        }
    })
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_pg(out: &mut Vec<u8>, pg: PgId) {
    put_u32(out, pg.pool);
    put_u32(out, pg.pg);
}

fn put_object(out: &mut Vec<u8>, object: ObjectId) {
    put_u64(out, object.inode);
    put_u64(out, object.stripe);
}

/// Reads little-endian fields from a payload, front to back. Every read is bounds-checked and
/// reports `BodyTooShort`; `require` reports it up front with the body's full minimum size.
struct Reader {
    payload: Bytes,
    position: usize,
    request_id: u64,
    opcode: Opcode,
    kind: BodyKind,
}

impl Reader {
    fn new(header: &Header, kind: BodyKind, payload: Bytes) -> Reader {
        Reader { payload, position: 0, request_id: header.request_id, opcode: header.opcode, kind }
    }

    /// Fails unless the body holds at least `size_min_bytes` bytes in total.
    fn require(&self, size_min_bytes: u64) -> Result<(), DecodeError> {
        let size_bytes = self.payload.len() as u64;
        if size_bytes < size_min_bytes {
            return Err(DecodeError::BodyTooShort {
                request_id: self.request_id,
                opcode: self.opcode,
                kind: self.kind,
                size_bytes,
                size_min_bytes,
            });
        }
        Ok(())
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let end = self.position + N;
        self.require(end as u64)?;
        let mut value = [0u8; N];
        value.copy_from_slice(&self.payload[self.position..end]);
        self.position = end;
        Ok(value)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.take().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.take().map(u64::from_le_bytes)
    }

    fn pg(&mut self) -> Result<PgId, DecodeError> {
        Ok(PgId { pool: self.u32()?, pg: self.u32()? })
    }

    fn object(&mut self) -> Result<ObjectId, DecodeError> {
        Ok(ObjectId { inode: self.u64()?, stripe: self.u64()? })
    }

    /// The rest of the body, without a copy.
    fn rest(&mut self) -> Bytes {
        let rest = self.payload.slice(self.position..);
        self.position = self.payload.len();
        rest
    }

    /// Fails if any byte of the body was not read.
    fn finish(self) -> Result<(), DecodeError> {
        let trailing_bytes = (self.payload.len() - self.position) as u64;
        if trailing_bytes != 0 {
            return Err(DecodeError::TrailingBytes {
                request_id: self.request_id,
                opcode: self.opcode,
                kind: self.kind,
                trailing_bytes,
            });
        }
        Ok(())
    }
}
