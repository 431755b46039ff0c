//! The torture log and the data model shared by `engine torture` and `engine verify`.
//!
//! `engine torture` writes one line before it submits each write or delete (`S`), and one line,
//! fsynced, after the engine acknowledges it (`A`). After a crash, `engine verify` replays the
//! log into a model of what every object must hold, compares the engine with it, and appends an
//! `R` line saying whether each operation that was in flight at the crash landed, so the next
//! cycle starts from a known state. Torture keeps at most one operation in flight per object,
//! so an object's state after a crash is its acknowledged state, or that plus its one in-flight
//! operation (applied whole: a write is one journal entry, so it lands entirely or not at all).
//!
//! Lines (fields separated by one space):
//!
//! | line                                              | meaning                                |
//! |---------------------------------------------------|----------------------------------------|
//! | `S <op> W <stripe> <offset_bytes> <length_bytes> <pattern>` | write submitted              |
//! | `S <op> D <stripe>`                                | delete submitted                       |
//! | `A <op> <version>`                                 | acknowledged, with the engine version  |
//! | `R <op> landed` / `R <op> lost`                    | in flight at a crash; what verify saw  |
//!
//! A last line without its newline was cut short by the kill and is ignored: the operation it
//! announces was never submitted, or the acknowledgment it records never counted.

use std::collections::{BTreeMap, HashMap};

use anyhow::{bail, Context};

/// The inode of every object torture writes.
pub const TORTURE_INODE: u64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Write { stripe: u64, offset_bytes: u32, length_bytes: u32, pattern: u64 },
    Delete { stripe: u64 },
}

impl Op {
    pub fn stripe(&self) -> u64 {
        match *self {
            Op::Write { stripe, .. } | Op::Delete { stripe } => stripe,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    Submit { op_id: u64, op: Op },
    Ack { op_id: u64, version: u64 },
    Resolve { op_id: u64, landed: bool },
}

impl Line {
    /// The line's text, with its newline.
    pub fn encode(&self) -> String {
        match *self {
            Line::Submit { op_id, op: Op::Write { stripe, offset_bytes, length_bytes, pattern } } => {
                format!("S {op_id} W {stripe} {offset_bytes} {length_bytes} {pattern}\n")
            }
            Line::Submit { op_id, op: Op::Delete { stripe } } => format!("S {op_id} D {stripe}\n"),
            Line::Ack { op_id, version } => format!("A {op_id} {version}\n"),
            Line::Resolve { op_id, landed } => format!("R {op_id} {}\n", if landed { "landed" } else { "lost" }),
        }
    }

    pub fn parse(text: &str) -> Option<Line> {
        let fields: Vec<&str> = text.split(' ').collect();
        let number = |index: usize| fields.get(index)?.parse::<u64>().ok();
        let number_u32 = |index: usize| fields.get(index)?.parse::<u32>().ok();
        let line = match (fields.first()?, fields.len()) {
            (&"S", 7) if fields[2] == "W" => Line::Submit {
                op_id: number(1)?,
                op: Op::Write {
                    stripe: number(3)?,
                    offset_bytes: number_u32(4)?,
                    length_bytes: number_u32(5)?,
                    pattern: number(6)?,
                },
            },
            (&"S", 4) if fields[2] == "D" => Line::Submit { op_id: number(1)?, op: Op::Delete { stripe: number(3)? } },
            (&"A", 3) => Line::Ack { op_id: number(1)?, version: number(2)? },
            (&"R", 3) => Line::Resolve {
                op_id: number(1)?,
                landed: match fields[2] {
                    "landed" => true,
                    "lost" => false,
                    _ => return None,
                },
            },
            _ => return None,
        };
        Some(line)
    }
}

/// What one object must hold: the pattern of each page (`None` reads as zeros).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectState {
    pub pages: Vec<Option<u64>>,
    pub exists: bool,
    /// The version of the last acknowledged operation (0 if none).
    pub version: u64,
}

impl ObjectState {
    pub fn new(pages_per_object: usize) -> ObjectState {
        ObjectState { pages: vec![None; pages_per_object], exists: false, version: 0 }
    }

    /// The state after `op`. `op` must belong to this object and fit in it.
    pub fn apply(&self, op: &Op) -> ObjectState {
        let mut next = self.clone();
        match *op {
            Op::Write { offset_bytes, length_bytes, pattern, .. } => {
                let first = (offset_bytes / PAGE) as usize;
                let count = (length_bytes / PAGE) as usize;
                for page in &mut next.pages[first..first + count] {
                    *page = Some(pattern);
                }
                next.exists = true;
            }
            Op::Delete { .. } => {
                next.pages.iter_mut().for_each(|page| *page = None);
                next.exists = false;
            }
        }
        next
    }

    /// The bytes the object reads as.
    pub fn bytes(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.pages.len() * PAGE as usize];
        for (index, page) in self.pages.iter().enumerate() {
            if let Some(pattern) = page {
                fill_page(*pattern, index as u64, &mut bytes[index * PAGE as usize..(index + 1) * PAGE as usize]);
            }
        }
        bytes
    }
}

const PAGE: u32 = engine::PAGE_SIZE_BYTES;

/// Fills one 4 KiB page with the bytes of `pattern` at `page_index` of its object, so a page is
/// recognisable wherever it lands and a misplaced page never matches.
pub fn fill_page(pattern: u64, page_index: u64, page: &mut [u8]) {
    let mut state = pattern ^ page_index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for word in page.chunks_exact_mut(8) {
        // splitmix64.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        word.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
}

/// The model a log describes.
#[derive(Debug, Default)]
pub struct Replay {
    /// Every object the log touched, in its acknowledged (and resolved) state.
    pub objects: BTreeMap<u64, ObjectState>,
    /// Per object, the operation submitted but neither acknowledged nor resolved.
    pub in_flight: BTreeMap<u64, (u64, Op)>,
    pub acked_count: u64,
    pub largest_op_id: u64,
}

impl Replay {
    /// Replays `text` for objects of `pages_per_object` pages. Fails on a log that breaks the
    /// rules torture follows (which would make the model meaningless).
    pub fn from_log(text: &str, pages_per_object: usize) -> anyhow::Result<Replay> {
        let mut replay = Replay::default();
        let mut ops: HashMap<u64, Op> = HashMap::new();
        let complete = match text.rfind('\n') {
            Some(end) => &text[..end],
            None => "",
        };
        for (index, text_line) in complete.lines().enumerate() {
            let line_number = index + 1;
            let line = Line::parse(text_line)
                .with_context(|| format!("torture log line {line_number} is malformed: {text_line:?}"))?;
            match line {
                Line::Submit { op_id, op } => {
                    if ops.insert(op_id, op).is_some() {
                        bail!("torture log line {line_number}: operation {op_id} submitted twice");
                    }
                    let object_size_bytes = pages_per_object as u64 * u64::from(PAGE);
                    if let Op::Write { offset_bytes, length_bytes, .. } = op {
                        if u64::from(offset_bytes) + u64::from(length_bytes) > object_size_bytes || length_bytes == 0 {
                            bail!("torture log line {line_number}: write beyond the {object_size_bytes}-byte object");
                        }
                    }
                    if let Some((other, _)) = replay.in_flight.insert(op.stripe(), (op_id, op)) {
                        bail!(
                            "torture log line {line_number}: operation {op_id} on stripe {} while operation {other} is unresolved",
                            op.stripe()
                        );
                    }
                    replay.largest_op_id = replay.largest_op_id.max(op_id);
                }
                Line::Ack { op_id, version } => {
                    let op = replay.finish(&ops, op_id, line_number)?;
                    let state = replay.objects.entry(op.stripe()).or_insert_with(|| ObjectState::new(pages_per_object));
                    if version <= state.version {
                        bail!(
                            "torture log line {line_number}: operation {op_id} acknowledged with version {version}, \
                             not above the object's previous version {}",
                            state.version
                        );
                    }
                    let mut next = state.apply(&op);
                    next.version = version;
                    *state = next;
                    replay.acked_count += 1;
                }
                Line::Resolve { op_id, landed } => {
                    let op = replay.finish(&ops, op_id, line_number)?;
                    let state = replay.objects.entry(op.stripe()).or_insert_with(|| ObjectState::new(pages_per_object));
                    if landed {
                        // The version it landed with is unknown; the next acknowledgment is above it.
                        let version = state.version;
                        *state = state.apply(&op);
                        state.version = version;
                    }
                }
            }
        }
        Ok(replay)
    }

    fn finish(&mut self, ops: &HashMap<u64, Op>, op_id: u64, line_number: usize) -> anyhow::Result<Op> {
        let Some(&op) = ops.get(&op_id) else {
            bail!("torture log line {line_number}: operation {op_id} was never submitted");
        };
        match self.in_flight.get(&op.stripe()) {
            Some(&(in_flight, _)) if in_flight == op_id => {
                self.in_flight.remove(&op.stripe());
                Ok(op)
            }
            _ => bail!("torture log line {line_number}: operation {op_id} is not in flight"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Line, Op, Replay};

    #[test]
    fn lines_round_trip() {
        for line in [
            Line::Submit {
                op_id: 7,
                op: Op::Write { stripe: 3, offset_bytes: 8192, length_bytes: 4096, pattern: u64::MAX },
            },
            Line::Submit { op_id: 8, op: Op::Delete { stripe: 199 } },
            Line::Ack { op_id: 7, version: 12 },
            Line::Resolve { op_id: 8, landed: false },
            Line::Resolve { op_id: 9, landed: true },
        ] {
            let text = line.encode();
            assert_eq!(Line::parse(text.trim_end()), Some(line));
        }
        assert_eq!(Line::parse("S 1 W 2 3"), None);
        assert_eq!(Line::parse("A x 1"), None);
    }

    #[test]
    fn replay_applies_acknowledged_ops_and_keeps_one_in_flight() {
        let log =
            "S 1 W 0 4096 8192 11\nA 1 5\nS 2 W 0 0 4096 12\nA 2 9\nS 3 D 0\nS 4 W 1 0 4096 13\nA 4 10\nS 5 W 1 0 4";
        let replay = Replay::from_log(log, 4).unwrap();
        assert_eq!(replay.objects[&0].pages, vec![Some(12), Some(11), Some(11), None]);
        assert_eq!(replay.objects[&0].version, 9);
        assert_eq!(replay.in_flight.get(&0).map(|(op_id, _)| *op_id), Some(3));
        // The cut-short last line announces nothing.
        assert!(!replay.in_flight.contains_key(&1));
        assert_eq!(replay.acked_count, 3);
        let resolved = format!("{log}\nR 3 landed\n");
        let replay = Replay::from_log(&resolved.replace("S 5 W 1 0 4\n", ""), 4).unwrap();
        assert!(replay.in_flight.is_empty());
        assert!(!replay.objects[&0].exists);
    }

    #[test]
    fn replay_rejects_broken_logs() {
        assert!(Replay::from_log("A 1 5\n", 4).is_err());
        assert!(Replay::from_log("S 1 D 0\nS 2 D 0\n", 4).is_err());
        assert!(Replay::from_log("S 1 W 0 0 8192 3\nA 1 5\nS 2 W 0 0 4096 3\nA 2 5\n", 4).is_err());
        assert!(Replay::from_log("S 1 W 0 12288 8192 3\n", 4).is_err());
    }
}
