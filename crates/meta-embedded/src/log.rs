//! The embedded store's files: a write-ahead log of committed changes and a snapshot, both in
//! one directory, and their recovery.
//!
//! ```text
//! meta.lock      empty; flock'ed while a process has the store open
//! meta.snapshot  header (32 bytes) | body: revision, boot count, every key with its metadata
//! meta.log       header (16 bytes) | record | record | ...
//! record         magic u32 | payload_size_bytes u32 | payload crc32c u32 | header crc32c u32 | payload
//! ```
//!
//! Everything is little-endian. A commit appends one record (all changes of one revision) and
//! calls `fdatasync` before the change becomes visible, so an acknowledged write survives a
//! crash. When the log grows past a threshold, the whole state is written to
//! `meta.snapshot.tmp`, flushed and renamed over `meta.snapshot`, then an empty log is renamed
//! over `meta.log` (directory flushed after each rename). A crash between the two renames
//! leaves a new snapshot and the old log; replay skips the records the snapshot already holds,
//! because every commit record carries its revision.
//!
//! Only the last append can be torn, because each append is flushed before the next starts.
//! Recovery reads the records in order and, at the first record that is incomplete or fails a
//! checksum, decides:
//!
//! | first bad record at offset X                          | a valid record after X? | action                        |
//! |-------------------------------------------------------|-------------------------|-------------------------------|
//! | fewer than 16 bytes left, or payload runs past EOF    | no                      | torn tail: truncate at X      |
//! | header or payload checksum mismatch                   | no                      | torn tail: truncate at X      |
//! | header or payload checksum mismatch, or past EOF      | yes                     | corruption: refuse to open    |
//! | checksums pass but the payload does not decode        | (not checked)           | corruption: refuse to open    |
//! | commit revision is not the previous revision + 1      | (not checked)           | corruption: refuse to open    |
//!
//! A "valid record" needs the record magic, a matching header checksum and a matching payload
//! checksum, so damage in the middle of the log is reported rather than silently cutting off
//! acknowledged commits that follow it. The snapshot is written whole and checksummed; a bad
//! snapshot is always reported.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use meta::LeaseId;

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::EmbeddedError;

pub const LOG_FILE_NAME: &str = "meta.log";
pub const SNAPSHOT_FILE_NAME: &str = "meta.snapshot";
pub const LOCK_FILE_NAME: &str = "meta.lock";
const LOG_TMP_FILE_NAME: &str = "meta.log.tmp";
const SNAPSHOT_TMP_FILE_NAME: &str = "meta.snapshot.tmp";

const LOG_MAGIC: [u8; 8] = *b"BSLTMLOG";
const SNAPSHOT_MAGIC: [u8; 8] = *b"BSLTMSNP";
const FORMAT_VERSION: u32 = 1;
const LOG_HEADER_SIZE_BYTES: usize = 16;
const SNAPSHOT_HEADER_SIZE_BYTES: usize = 32;
const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"MREC");
const RECORD_HEADER_SIZE_BYTES: usize = 16;

/// The largest record payload: one transaction's changes. Larger transactions are refused.
pub const RECORD_PAYLOAD_SIZE_BYTES_MAX: usize = 64 << 20;

const RECORD_TAG_BOOT: u8 = 1;
const RECORD_TAG_COMMIT: u8 = 2;
const CHANGE_TAG_PUT: u8 = 1;
const CHANGE_TAG_DELETE: u8 = 2;

/// A key's current value and bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredKey {
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub lease: Option<LeaseId>,
}

/// One change of a commit. Applying the changes of a record in order gives the state after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Put { key: String, value: Vec<u8>, create_revision: i64, version: i64, lease: Option<LeaseId> },
    Delete { key: String },
}

impl Change {
    pub fn key(&self) -> &str {
        match self {
            Change::Put { key, .. } | Change::Delete { key } => key,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// The store was opened for the `boot_count`th time. Lease ids embed the boot count, so an
    /// id granted before a restart never names a lease granted after it.
    Boot { boot_count: u64 },
    /// The changes of one revision.
    Commit { revision: i64, changes: Vec<Change> },
}

/// The state recovered from the snapshot and the log.
#[derive(Debug, Default)]
pub struct Recovered {
    pub revision: i64,
    pub boot_count: u64,
    pub kvs: BTreeMap<String, StoredKey>,
    /// Bytes of a torn last record discarded from the end of the log.
    pub truncated_bytes: u64,
}

/// The open log, positioned for appends.
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    file: File,
    size_bytes: u64,
}

fn io_error<'a>(path: &'a Path, operation: &'static str) -> impl FnOnce(io::Error) -> EmbeddedError + 'a {
    move |source| EmbeddedError::Io { path: path.to_path_buf(), operation, source }
}

fn corrupt(path: &Path, offset_bytes: usize, reason: impl Into<String>) -> EmbeddedError {
    EmbeddedError::Corrupt { path: path.to_path_buf(), offset_bytes: offset_bytes as u64, reason: reason.into() }
}

fn flush_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Opens (or creates) the log in `dir` and recovers the state, truncating a torn last record.
pub fn open(dir: &Path) -> Result<(Log, Recovered), EmbeddedError> {
    for leftover in [LOG_TMP_FILE_NAME, SNAPSHOT_TMP_FILE_NAME] {
        let path = dir.join(leftover);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(io_error(&path, "remove leftover")(error)),
        }
    }
    let mut recovered = read_snapshot(&dir.join(SNAPSHOT_FILE_NAME))?;
    let log_path = dir.join(LOG_FILE_NAME);
    if !log_path.exists() {
        create_empty_log(dir).map_err(io_error(&log_path, "create log"))?;
    }
    let bytes = fs::read(&log_path).map_err(io_error(&log_path, "read log"))?;
    let valid_size_bytes = replay(&log_path, &bytes, &mut recovered)?;
    if valid_size_bytes < bytes.len() {
        recovered.truncated_bytes = (bytes.len() - valid_size_bytes) as u64;
        tracing::warn!(
            path = %log_path.display(),
            offset_bytes = valid_size_bytes,
            discarded_bytes = recovered.truncated_bytes,
            "discarding a torn last record of the metadata log"
        );
        let file = OpenOptions::new().write(true).open(&log_path).map_err(io_error(&log_path, "open log"))?;
        file.set_len(valid_size_bytes as u64).map_err(io_error(&log_path, "truncate log"))?;
        file.sync_all().map_err(io_error(&log_path, "flush log"))?;
    }
    let file = OpenOptions::new().append(true).open(&log_path).map_err(io_error(&log_path, "open log"))?;
    Ok((Log { dir: dir.to_path_buf(), file, size_bytes: valid_size_bytes as u64 }, recovered))
}

/// Writes `meta.log.tmp` with only a header and renames it over `meta.log`. Returns the new
/// file, open for appends.
fn create_empty_log(dir: &Path) -> io::Result<File> {
    let tmp_path = dir.join(LOG_TMP_FILE_NAME);
    let mut file = OpenOptions::new().create(true).truncate(true).write(true).open(&tmp_path)?;
    let mut header = Vec::with_capacity(LOG_HEADER_SIZE_BYTES);
    header.extend_from_slice(&LOG_MAGIC);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.extend_from_slice(&0u32.to_le_bytes());
    assert_eq!(header.len(), LOG_HEADER_SIZE_BYTES);
    file.write_all(&header)?;
    file.sync_all()?;
    fs::rename(&tmp_path, dir.join(LOG_FILE_NAME))?;
    flush_dir(dir)?;
    drop(file);
    OpenOptions::new().append(true).open(dir.join(LOG_FILE_NAME))
}

/// Applies the log's records to `recovered`; returns the size of the valid prefix.
fn replay(path: &Path, bytes: &[u8], recovered: &mut Recovered) -> Result<usize, EmbeddedError> {
    if bytes.len() < LOG_HEADER_SIZE_BYTES || bytes[..8] != LOG_MAGIC {
        return Err(corrupt(path, 0, "not a basalt metadata log (bad header)"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(corrupt(path, 8, format!("unsupported format version {version}, expected {FORMAT_VERSION}")));
    }
    let mut offset_bytes = LOG_HEADER_SIZE_BYTES;
    while offset_bytes < bytes.len() {
        let payload = match check_record(bytes, offset_bytes) {
            Ok(payload) => payload,
            Err(reason) => {
                if let Some(valid_offset) = find_valid_record(bytes, offset_bytes + 1) {
                    return Err(corrupt(
                        path,
                        offset_bytes,
                        format!("{reason}, but a valid record follows at offset_bytes={valid_offset}"),
                    ));
                }
                return Ok(offset_bytes); // A torn last record.
            }
        };
        let payload_offset = offset_bytes + RECORD_HEADER_SIZE_BYTES;
        let record = decode_record(payload).map_err(|error| {
            corrupt(path, payload_offset + error.offset_bytes, format!("undecodable record: {}", error.reason))
        })?;
        match record {
            Record::Boot { boot_count } => recovered.boot_count = recovered.boot_count.max(boot_count),
            Record::Commit { revision, .. } if revision <= recovered.revision => {} // In the snapshot already.
            Record::Commit { revision, changes } => {
                if revision != recovered.revision + 1 {
                    return Err(corrupt(
                        path,
                        offset_bytes,
                        format!("commit of revision {revision} follows revision {}", recovered.revision),
                    ));
                }
                apply_changes(&mut recovered.kvs, revision, changes);
                recovered.revision = revision;
            }
        }
        offset_bytes = payload_offset + payload.len();
    }
    Ok(offset_bytes)
}

/// Applies one commit's changes to a key map (recovery; the live store does the same with its
/// lease bookkeeping added).
pub fn apply_changes(kvs: &mut BTreeMap<String, StoredKey>, revision: i64, changes: Vec<Change>) {
    for change in changes {
        match change {
            Change::Put { key, value, create_revision, version, lease } => {
                kvs.insert(key, StoredKey { value, create_revision, mod_revision: revision, version, lease });
            }
            Change::Delete { key } => {
                kvs.remove(&key);
            }
        }
    }
}

/// Checks the record at `offset_bytes` and returns its payload, or why it is not valid.
fn check_record(bytes: &[u8], offset_bytes: usize) -> Result<&[u8], &'static str> {
    let Some(header) = bytes.get(offset_bytes..offset_bytes + RECORD_HEADER_SIZE_BYTES) else {
        return Err("incomplete record header");
    };
    let field = |index: usize| u32::from_le_bytes(header[index * 4..index * 4 + 4].try_into().expect("4 bytes"));
    if field(0) != RECORD_MAGIC {
        return Err("bad record magic");
    }
    if field(3) != crc32c::crc32c(&header[..12]) {
        return Err("bad record header checksum");
    }
    let payload_size_bytes = field(1) as usize;
    if payload_size_bytes > RECORD_PAYLOAD_SIZE_BYTES_MAX {
        return Err("record larger than the limit");
    }
    let payload_offset = offset_bytes + RECORD_HEADER_SIZE_BYTES;
    let Some(payload) = bytes.get(payload_offset..payload_offset + payload_size_bytes) else {
        return Err("record payload runs past the end of the log");
    };
    if field(2) != crc32c::crc32c(payload) {
        return Err("bad record payload checksum");
    }
    Ok(payload)
}

fn find_valid_record(bytes: &[u8], from_offset_bytes: usize) -> Option<usize> {
    let magic = RECORD_MAGIC.to_le_bytes();
    (from_offset_bytes..bytes.len().saturating_sub(RECORD_HEADER_SIZE_BYTES - 1))
        .filter(|&offset| bytes[offset..offset + 4] == magic)
        .find(|&offset| check_record(bytes, offset).is_ok())
}

pub fn encode_record(record: &Record) -> Vec<u8> {
    let mut payload = Encoder::default();
    match record {
        Record::Boot { boot_count } => {
            payload.u8(RECORD_TAG_BOOT);
            payload.u64(*boot_count);
        }
        Record::Commit { revision, changes } => {
            payload.u8(RECORD_TAG_COMMIT);
            payload.i64(*revision);
            payload.u32(u32::try_from(changes.len()).expect("change count fits the record limit"));
            for change in changes {
                match change {
                    Change::Put { key, value, create_revision, version, lease } => {
                        payload.u8(CHANGE_TAG_PUT);
                        payload.bytes(key.as_bytes());
                        payload.bytes(value);
                        payload.i64(*create_revision);
                        payload.i64(*version);
                        payload.i64(lease.map_or(0, |lease| lease.0));
                    }
                    Change::Delete { key } => {
                        payload.u8(CHANGE_TAG_DELETE);
                        payload.bytes(key.as_bytes());
                    }
                }
            }
        }
    }
    let payload = payload.bytes;
    assert!(payload.len() <= RECORD_PAYLOAD_SIZE_BYTES_MAX);
    let mut record = Vec::with_capacity(RECORD_HEADER_SIZE_BYTES + payload.len());
    record.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    record.extend_from_slice(&u32::try_from(payload.len()).expect("checked above").to_le_bytes());
    record.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    let header_crc = crc32c::crc32c(&record);
    record.extend_from_slice(&header_crc.to_le_bytes());
    record.extend_from_slice(&payload);
    record
}

fn decode_lease(decoder: &mut Decoder) -> Result<Option<LeaseId>, DecodeError> {
    let lease = decoder.i64()?;
    Ok((lease != 0).then_some(LeaseId(lease)))
}

fn decode_record(payload: &[u8]) -> Result<Record, DecodeError> {
    let mut decoder = Decoder::new(payload);
    let record = match decoder.u8()? {
        RECORD_TAG_BOOT => Record::Boot { boot_count: decoder.u64()? },
        RECORD_TAG_COMMIT => {
            let revision = decoder.i64()?;
            let count = decoder.u32()?;
            let mut changes = Vec::new();
            for _ in 0..count {
                changes.push(match decoder.u8()? {
                    CHANGE_TAG_PUT => Change::Put {
                        key: decoder.string()?,
                        value: decoder.bytes()?,
                        create_revision: decoder.i64()?,
                        version: decoder.i64()?,
                        lease: decode_lease(&mut decoder)?,
                    },
                    CHANGE_TAG_DELETE => Change::Delete { key: decoder.string()? },
                    _ => return Err(decoder.error("unknown change tag")),
                });
            }
            Record::Commit { revision, changes }
        }
        _ => return Err(decoder.error("unknown record tag")),
    };
    if !decoder.is_empty() {
        return Err(decoder.error("trailing bytes after the record"));
    }
    Ok(record)
}

/// Encodes the snapshot file's contents for `kvs` at `revision`.
pub fn encode_snapshot(revision: i64, boot_count: u64, kvs: &BTreeMap<String, StoredKey>) -> Vec<u8> {
    let mut body = Encoder::default();
    body.i64(revision);
    body.u64(boot_count);
    body.u64(kvs.len() as u64);
    for (key, stored) in kvs {
        body.bytes(key.as_bytes());
        body.bytes(&stored.value);
        body.i64(stored.create_revision);
        body.i64(stored.mod_revision);
        body.i64(stored.version);
        body.i64(stored.lease.map_or(0, |lease| lease.0));
    }
    let body = body.bytes;
    let mut file = Vec::with_capacity(SNAPSHOT_HEADER_SIZE_BYTES + body.len());
    file.extend_from_slice(&SNAPSHOT_MAGIC);
    file.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    file.extend_from_slice(&0u32.to_le_bytes());
    file.extend_from_slice(&(body.len() as u64).to_le_bytes());
    file.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    file.extend_from_slice(&0u32.to_le_bytes());
    assert_eq!(file.len(), SNAPSHOT_HEADER_SIZE_BYTES);
    file.extend_from_slice(&body);
    file
}

fn read_snapshot(path: &Path) -> Result<Recovered, EmbeddedError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Recovered::default()),
        Err(error) => return Err(io_error(path, "read snapshot")(error)),
    };
    if bytes.len() < SNAPSHOT_HEADER_SIZE_BYTES || bytes[..8] != SNAPSHOT_MAGIC {
        return Err(corrupt(path, 0, "not a basalt metadata snapshot (bad header)"));
    }
    let u32_at = |offset: usize| u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"));
    let version = u32_at(8);
    if version != FORMAT_VERSION {
        return Err(corrupt(path, 8, format!("unsupported format version {version}, expected {FORMAT_VERSION}")));
    }
    let body_size_bytes = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let body = &bytes[SNAPSHOT_HEADER_SIZE_BYTES..];
    if body.len() as u64 != body_size_bytes {
        return Err(corrupt(path, 16, format!("body is {} bytes, header says {body_size_bytes}", body.len())));
    }
    if u32_at(24) != crc32c::crc32c(body) {
        return Err(corrupt(path, SNAPSHOT_HEADER_SIZE_BYTES, "bad snapshot checksum"));
    }
    decode_snapshot_body(body).map_err(|error| {
        corrupt(
            path,
            SNAPSHOT_HEADER_SIZE_BYTES + error.offset_bytes,
            format!("undecodable snapshot: {}", error.reason),
        )
    })
}

fn decode_snapshot_body(body: &[u8]) -> Result<Recovered, DecodeError> {
    let mut decoder = Decoder::new(body);
    let revision = decoder.i64()?;
    let boot_count = decoder.u64()?;
    let count = decoder.u64()?;
    let mut kvs = BTreeMap::new();
    for _ in 0..count {
        let key = decoder.string()?;
        let stored = StoredKey {
            value: decoder.bytes()?,
            create_revision: decoder.i64()?,
            mod_revision: decoder.i64()?,
            version: decoder.i64()?,
            lease: decode_lease(&mut decoder)?,
        };
        if stored.mod_revision > revision || stored.create_revision > stored.mod_revision {
            return Err(decoder.error("key revisions are inconsistent with the snapshot revision"));
        }
        kvs.insert(key, stored);
    }
    if !decoder.is_empty() {
        return Err(decoder.error("trailing bytes after the snapshot"));
    }
    Ok(Recovered { revision, boot_count, kvs, truncated_bytes: 0 })
}

impl Log {
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(LOG_FILE_NAME)
    }

    /// Appends one record and flushes it. After an error the log's tail is unknown, and the
    /// caller must stop appending (the store poisons itself).
    pub fn append(&mut self, record: &Record) -> io::Result<()> {
        let bytes = encode_record(record);
        self.file.write_all(&bytes)?;
        self.file.sync_data()?;
        self.size_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Replaces the snapshot with `snapshot` (from [`encode_snapshot`]) and starts an empty log.
    pub fn install_snapshot(&mut self, snapshot: &[u8]) -> io::Result<()> {
        let tmp_path = self.dir.join(SNAPSHOT_TMP_FILE_NAME);
        let mut file = OpenOptions::new().create(true).truncate(true).write(true).open(&tmp_path)?;
        file.write_all(snapshot)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp_path, self.dir.join(SNAPSHOT_FILE_NAME))?;
        flush_dir(&self.dir)?;
        self.file = create_empty_log(&self.dir)?;
        self.size_bytes = LOG_HEADER_SIZE_BYTES as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_detect_damage() {
        let record = Record::Commit {
            revision: 9,
            changes: vec![
                Change::Put {
                    key: "/a".into(),
                    value: vec![0, 1, 2],
                    create_revision: 3,
                    version: 2,
                    lease: Some(LeaseId(77)),
                },
                Change::Delete { key: "/b".into() },
            ],
        };
        let bytes = encode_record(&record);
        let payload = check_record(&bytes, 0).unwrap();
        assert_eq!(decode_record(payload).unwrap(), record);
        for index in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[index] ^= 0x10;
            assert!(check_record(&damaged, 0).is_err(), "flip at {index} went unnoticed");
        }
        for cut in 0..bytes.len() {
            assert!(check_record(&bytes[..cut], 0).is_err());
        }
        let boot = Record::Boot { boot_count: 4 };
        assert_eq!(decode_record(check_record(&encode_record(&boot), 0).unwrap()).unwrap(), boot);
    }

    #[test]
    fn snapshot_round_trip() {
        let mut kvs = BTreeMap::new();
        kvs.insert(
            "/k".to_string(),
            StoredKey { value: b"v".to_vec(), create_revision: 2, mod_revision: 5, version: 3, lease: None },
        );
        let bytes = encode_snapshot(5, 2, &kvs);
        let recovered = decode_snapshot_body(&bytes[SNAPSHOT_HEADER_SIZE_BYTES..]).unwrap();
        assert_eq!((recovered.revision, recovered.boot_count, recovered.kvs), (5, 2, kvs));
    }
}
