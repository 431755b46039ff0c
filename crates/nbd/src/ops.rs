//! Runs one checked request against an [`Export`]: turns 512-byte-aligned requests into 4 KiB
//! export calls, with a read-modify-write of partial pages under the export's range locks
//! (`ranges.rs`), and produces the outcome the reply is encoded from.
//!
//! Decision table (`start`/`end`: the request rounded out to the export block size):
//!
//! | request              | aligned                          | not aligned                                         |
//! |----------------------|----------------------------------|-----------------------------------------------------|
//! | read                 | read                             | read `[start, end)`, slice                          |
//! | write                | shared lock, write               | exclusive lock, read edge pages, write `[start, end)` |
//! | write zeroes         | shared lock, zero or write zeroes | exclusive lock, zero edge pages by RMW, zero inside |
//! | trim                 | shared lock, trim                | trim the aligned inside only (trim is a hint)       |
//! | block status         | block status                     | block status of `[start, end)`, cut                 |
//!
//! "Zero" is [`Export::write_zeroes`] (may deallocate); with `NBD_CMD_FLAG_NO_HOLE` real zeroes
//! are written instead.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::export::{Export, ExportError};
use crate::handshake::MetaContexts;
use crate::limits::{EXPORT_BLOCK_SIZE_BYTES, ZERO_CHUNK_BYTES};
use crate::proto::{BASE_ALLOCATION_ID, DIRTY_BITMAP_ID, STATE_DIRTY};
use crate::ranges::{Mode, RangeLocks};
use crate::request::{block_status_descriptors, Command};

static ZEROES: [u8; ZERO_CHUNK_BYTES] = [0; ZERO_CHUNK_BYTES];

/// What a request produced.
#[derive(Debug)]
pub(crate) enum Outcome {
    Done,
    Data {
        offset_bytes: u64,
        data: Bytes,
    },
    /// Block status: the descriptors of each selected context, by context id.
    Extents(Vec<(u32, Vec<(u32, u32)>)>),
    Failed(ExportError),
}

impl From<Result<(), ExportError>> for Outcome {
    fn from(result: Result<(), ExportError>) -> Outcome {
        match result {
            Ok(()) => Outcome::Done,
            Err(error) => Outcome::Failed(error),
        }
    }
}

fn align_down(offset_bytes: u64) -> u64 {
    offset_bytes - offset_bytes % EXPORT_BLOCK_SIZE_BYTES
}

fn align_up(offset_bytes: u64) -> u64 {
    align_down(offset_bytes + EXPORT_BLOCK_SIZE_BYTES - 1)
}

fn is_aligned(offset_bytes: u64) -> bool {
    offset_bytes % EXPORT_BLOCK_SIZE_BYTES == 0
}

/// Runs `command` (checked by `request::classify`, so in range and 512-byte aligned).
/// `payload` is the data of a write; `contexts` what block status reports.
pub(crate) async fn execute<E: Export>(
    export: &E,
    locks: &Arc<RangeLocks>,
    contexts: &MetaContexts,
    command: Command,
    payload: Bytes,
) -> Outcome {
    if export.read_only()
        && matches!(command, Command::Write { .. } | Command::WriteZeroes { .. } | Command::Trim { .. })
    {
        return Outcome::Failed(ExportError::ReadOnly(format!("{} takes no writes", export.name())));
    }
    match command {
        Command::Read { offset_bytes, length_bytes } => match read(export, offset_bytes, length_bytes).await {
            Ok(data) => Outcome::Data { offset_bytes, data },
            Err(error) => Outcome::Failed(error),
        },
        Command::Write { offset_bytes, length_bytes } => {
            assert_eq!(payload.len(), usize::try_from(length_bytes).expect("u32 fits usize"));
            write(export, locks, offset_bytes, payload).await.into()
        }
        Command::WriteZeroes { offset_bytes, length_bytes, no_hole } => {
            write_zeroes(export, locks, offset_bytes, u64::from(length_bytes), no_hole).await.into()
        }
        Command::Trim { offset_bytes, length_bytes } => {
            trim(export, locks, offset_bytes, u64::from(length_bytes)).await.into()
        }
        Command::Flush => export.flush().await.into(),
        Command::Cache | Command::Disconnect => Outcome::Done,
        Command::BlockStatus { offset_bytes, length_bytes, one_extent } => {
            match block_status(export, contexts, offset_bytes, length_bytes, one_extent).await {
                Ok(replies) => Outcome::Extents(replies),
                Err(error) => Outcome::Failed(error),
            }
        }
    }
}

/// The descriptors of every selected context for one block status request, by context id.
async fn block_status<E: Export>(
    export: &E,
    contexts: &MetaContexts,
    offset_bytes: u64,
    length_bytes: u32,
    one_extent: bool,
) -> Result<Vec<(u32, Vec<(u32, u32)>)>, ExportError> {
    let start = align_down(offset_bytes);
    let end = align_up(offset_bytes + u64::from(length_bytes));
    let descriptors = |runs: &[(u64, u32)], fallback_state| {
        block_status_descriptors(runs, fallback_state, start, offset_bytes, length_bytes, one_extent)
    };
    let mut replies = Vec::with_capacity(2);
    if contexts.base_allocation {
        let extents = export.block_status(start, end - start).await?;
        let runs: Vec<(u64, u32)> = extents.iter().map(|extent| (extent.length_bytes, extent.state())).collect();
        replies.push((BASE_ALLOCATION_ID, descriptors(&runs, 0)));
    }
    if let Some(bitmap) = &contexts.dirty_bitmap {
        let changes = export.changes(bitmap, start, end - start).await?;
        let runs: Vec<(u64, u32)> = changes.iter().map(|change| (change.length_bytes, change.state())).collect();
        replies.push((DIRTY_BITMAP_ID, descriptors(&runs, STATE_DIRTY)));
    }
    assert!(!replies.is_empty(), "block status is refused unless a context is selected");
    Ok(replies)
}

async fn read<E: Export>(export: &E, offset_bytes: u64, length_bytes: u32) -> Result<Bytes, ExportError> {
    if length_bytes == 0 {
        return Ok(Bytes::new());
    }
    let end_bytes = offset_bytes + u64::from(length_bytes);
    let start = align_down(offset_bytes);
    let end = align_up(end_bytes);
    let data = read_exact(export, start, end - start).await?;
    let skip = usize::try_from(offset_bytes - start).expect("under one block");
    Ok(data.slice(skip..skip + usize::try_from(length_bytes).expect("u32 fits usize")))
}

/// Reads and checks that the export returned exactly what was asked for.
async fn read_exact<E: Export>(export: &E, offset_bytes: u64, length_bytes: u64) -> Result<Bytes, ExportError> {
    let length = u32::try_from(length_bytes).expect("reads are bounded by the payload limit plus two blocks");
    let data = export.read(offset_bytes, length).await?;
    if data.len() as u64 != length_bytes {
        return Err(ExportError::Io(format!(
            "export {} returned {} bytes for a read of {length_bytes} bytes at offset_bytes={offset_bytes}",
            export.name(),
            data.len()
        )));
    }
    Ok(data)
}

async fn write<E: Export>(
    export: &E,
    locks: &Arc<RangeLocks>,
    offset_bytes: u64,
    data: Bytes,
) -> Result<(), ExportError> {
    if data.is_empty() {
        return Ok(());
    }
    let end_bytes = offset_bytes + data.len() as u64;
    if is_aligned(offset_bytes) && is_aligned(end_bytes) {
        let _guard = locks.lock(offset_bytes, end_bytes, Mode::Shared).await;
        return export.write(offset_bytes, data).await;
    }
    let start = align_down(offset_bytes);
    let end = align_up(end_bytes);
    let _guard = locks.lock(start, end, Mode::Exclusive).await;
    let head_page = start;
    let tail_page = end - EXPORT_BLOCK_SIZE_BYTES;
    let (head, tail) = if !is_aligned(offset_bytes) && !is_aligned(end_bytes) && head_page != tail_page {
        let (head, tail) = futures_util::future::join(
            read_exact(export, head_page, EXPORT_BLOCK_SIZE_BYTES),
            read_exact(export, tail_page, EXPORT_BLOCK_SIZE_BYTES),
        )
        .await;
        (Some(head?), Some(tail?))
    } else if !is_aligned(offset_bytes) {
        let head = read_exact(export, head_page, EXPORT_BLOCK_SIZE_BYTES).await?;
        let tail = (!is_aligned(end_bytes)).then(|| head.clone());
        (Some(head), tail)
    } else {
        (None, Some(read_exact(export, tail_page, EXPORT_BLOCK_SIZE_BYTES).await?))
    };
    let mut buffer = BytesMut::with_capacity(usize::try_from(end - start).expect("bounded by the payload limit"));
    if let Some(head) = head {
        buffer.extend_from_slice(&head[..usize::try_from(offset_bytes - start).expect("under one block")]);
    }
    buffer.extend_from_slice(&data);
    if let Some(tail) = tail {
        buffer.extend_from_slice(&tail[usize::try_from(end_bytes - tail_page).expect("under one block")..]);
    }
    assert_eq!(buffer.len() as u64, end - start);
    export.write(start, buffer.freeze()).await
}

async fn write_zeroes<E: Export>(
    export: &E,
    locks: &Arc<RangeLocks>,
    offset_bytes: u64,
    length_bytes: u64,
    no_hole: bool,
) -> Result<(), ExportError> {
    if length_bytes == 0 {
        return Ok(());
    }
    let end_bytes = offset_bytes + length_bytes;
    if is_aligned(offset_bytes) && is_aligned(end_bytes) {
        let _guard = locks.lock(offset_bytes, end_bytes, Mode::Shared).await;
        return zero_aligned(export, offset_bytes, length_bytes, no_hole).await;
    }
    let start = align_down(offset_bytes);
    let end = align_up(end_bytes);
    let _guard = locks.lock(start, end, Mode::Exclusive).await;
    // The partial pages at either edge, zeroed in place.
    let head_page = start;
    let tail_page = end - EXPORT_BLOCK_SIZE_BYTES;
    if !is_aligned(offset_bytes) {
        zero_in_page(export, head_page, offset_bytes, end_bytes).await?;
    }
    if !is_aligned(end_bytes) && (tail_page != head_page || is_aligned(offset_bytes)) {
        zero_in_page(export, tail_page, offset_bytes, end_bytes).await?;
    }
    let inside_start = align_up(offset_bytes);
    let inside_end = align_down(end_bytes);
    if inside_start < inside_end {
        zero_aligned(export, inside_start, inside_end - inside_start, no_hole).await?;
    }
    Ok(())
}

/// Zeroes the part of `[offset_bytes, end_bytes)` that lies in the page at `page_bytes`.
async fn zero_in_page<E: Export>(
    export: &E,
    page_bytes: u64,
    offset_bytes: u64,
    end_bytes: u64,
) -> Result<(), ExportError> {
    let page = read_exact(export, page_bytes, EXPORT_BLOCK_SIZE_BYTES).await?;
    let mut page = BytesMut::from(&page[..]);
    let from = usize::try_from(offset_bytes.max(page_bytes) - page_bytes).expect("under one block");
    let to = usize::try_from(end_bytes.min(page_bytes + EXPORT_BLOCK_SIZE_BYTES) - page_bytes).expect("one block");
    page[from..to].fill(0);
    export.write(page_bytes, page.freeze()).await
}

async fn zero_aligned<E: Export>(
    export: &E,
    offset_bytes: u64,
    length_bytes: u64,
    no_hole: bool,
) -> Result<(), ExportError> {
    if !no_hole {
        return export.write_zeroes(offset_bytes, length_bytes).await;
    }
    let mut position = offset_bytes;
    let end = offset_bytes + length_bytes;
    while position < end {
        let chunk = (end - position).min(ZERO_CHUNK_BYTES as u64);
        let zeroes = Bytes::from_static(&ZEROES[..usize::try_from(chunk).expect("at most one zero chunk")]);
        export.write(position, zeroes).await?;
        position += chunk;
    }
    Ok(())
}

async fn trim<E: Export>(
    export: &E,
    locks: &Arc<RangeLocks>,
    offset_bytes: u64,
    length_bytes: u64,
) -> Result<(), ExportError> {
    // Only whole pages are trimmed: a trim is a hint, and the partial edges keep their data.
    let start = align_up(offset_bytes);
    let end = align_down(offset_bytes + length_bytes);
    if start >= end {
        return Ok(());
    }
    let _guard = locks.lock(start, end, Mode::Shared).await;
    export.trim(start, end - start).await
}
