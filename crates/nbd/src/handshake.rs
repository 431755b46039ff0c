//! The handshake as pure functions over bytes: the greeting, the client flags, option parsing
//! and [`Negotiation`], the state machine that answers options. No I/O happens here: the server
//! reads an option, looks up what [`Negotiation::needs`] names, and writes what
//! [`Negotiation::respond`] encodes. The fuzz target drives the same functions.
//!
//! Hostile bytes never panic: a malformed option gets `NBD_REP_ERR_INVALID`, and only what
//! makes the stream impossible to follow (a bad magic, unknown client flags, an oversized
//! option) or what the protocol says must end the connection (an `NBD_OPT_EXPORT_NAME` that
//! cannot be served) closes the connection.

use crate::limits::{
    BLOCK_SIZE_MIN_BYTES, BLOCK_SIZE_PREFERRED_BYTES, EXPORT_BLOCK_SIZE_BYTES, LIST_EXPORTS_MAX,
    META_CONTEXT_QUERIES_MAX, OPTION_DATA_SIZE_MAX_BYTES, PAYLOAD_SIZE_MAX_BYTES, STRING_SIZE_MAX_BYTES,
};
use crate::proto::*;

/// What the server sends first: `NBDMAGIC`, `IHAVEOPT` and the handshake flags.
pub fn greeting() -> [u8; 18] {
    let mut bytes = [0u8; 18];
    bytes[0..8].copy_from_slice(&INIT_MAGIC.to_be_bytes());
    bytes[8..16].copy_from_slice(&OPTION_MAGIC.to_be_bytes());
    bytes[16..18].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    bytes
}

/// A violation after which the stream cannot be followed or must not continue; the connection
/// is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("client flags {flags:#x} set bits this server does not know")]
    ClientFlags { flags: u32 },
    #[error("option header has magic {magic:#018x} instead of IHAVEOPT")]
    OptionMagic { magic: u64 },
    #[error("option {option} carries {length_bytes} bytes of data, more than the {max} accepted")]
    OptionTooLong { option: u32, length_bytes: u32, max: u32 },
    #[error("NBD_OPT_EXPORT_NAME cannot be served: {reason}")]
    ExportName { reason: String },
}

/// The client flags, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFlags {
    pub fixed_newstyle: bool,
    pub no_zeroes: bool,
}

pub fn parse_client_flags(bytes: [u8; 4]) -> Result<ClientFlags, HandshakeError> {
    let flags = u32::from_be_bytes(bytes);
    if flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(HandshakeError::ClientFlags { flags });
    }
    Ok(ClientFlags { fixed_newstyle: flags & FLAG_C_FIXED_NEWSTYLE != 0, no_zeroes: flags & FLAG_C_NO_ZEROES != 0 })
}

/// An option header: which option and how many bytes of data follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub length_bytes: u32,
}

/// Checks the magic and bounds the data length before anything is allocated for it.
pub fn parse_option_header(bytes: &[u8; OPTION_HEADER_SIZE_BYTES]) -> Result<OptionHeader, HandshakeError> {
    let magic = u64::from_be_bytes(bytes[0..8].try_into().expect("8 bytes"));
    if magic != OPTION_MAGIC {
        return Err(HandshakeError::OptionMagic { magic });
    }
    let option = u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
    let length_bytes = u32::from_be_bytes(bytes[12..16].try_into().expect("4 bytes"));
    if length_bytes > OPTION_DATA_SIZE_MAX_BYTES {
        return Err(HandshakeError::OptionTooLong { option, length_bytes, max: OPTION_DATA_SIZE_MAX_BYTES });
    }
    Ok(OptionHeader { option, length_bytes })
}

/// An option, parsed from its code and data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOption {
    /// `NBD_OPT_EXPORT_NAME`; `name` is `Err` with the reason when the name is not a valid string.
    ExportName {
        name: Result<String, String>,
    },
    Abort,
    List,
    StartTls,
    /// `NBD_OPT_INFO` (`go == false`) or `NBD_OPT_GO`.
    Info {
        go: bool,
        name: String,
        requests: Vec<u16>,
    },
    StructuredReply,
    ListMetaContext {
        name: String,
        queries: Vec<String>,
    },
    SetMetaContext {
        name: String,
        queries: Vec<String>,
    },
    /// A known option with malformed data: answered with `NBD_REP_ERR_INVALID`.
    Invalid {
        option: u32,
        reason: String,
    },
    /// An option this server does not implement: answered with `NBD_REP_ERR_UNSUP`.
    Unsupported {
        option: u32,
    },
}

/// Parses an option's data. Never fails: malformed data becomes [`ClientOption::Invalid`].
pub fn parse_option(option: u32, data: &[u8]) -> ClientOption {
    let invalid = |reason: String| ClientOption::Invalid { option, reason };
    match option {
        OPT_EXPORT_NAME => ClientOption::ExportName { name: parse_string(data, "export name") },
        OPT_ABORT => ClientOption::Abort, // Data is to be ignored, says the protocol.
        OPT_LIST | OPT_STARTTLS | OPT_STRUCTURED_REPLY if !data.is_empty() => {
            invalid(format!("option {option} takes no data, got {} bytes", data.len()))
        }
        OPT_LIST => ClientOption::List,
        OPT_STARTTLS => ClientOption::StartTls,
        OPT_STRUCTURED_REPLY => ClientOption::StructuredReply,
        OPT_INFO | OPT_GO => match parse_info(data) {
            Ok((name, requests)) => ClientOption::Info { go: option == OPT_GO, name, requests },
            Err(reason) => invalid(reason),
        },
        OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => match parse_meta_context(data) {
            Ok((name, queries)) if option == OPT_LIST_META_CONTEXT => ClientOption::ListMetaContext { name, queries },
            Ok((name, queries)) => ClientOption::SetMetaContext { name, queries },
            Err(reason) => invalid(reason),
        },
        _ => ClientOption::Unsupported { option },
    }
}

/// A cursor over option data that fails with a reason instead of panicking.
struct Cursor<'a> {
    data: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, count: usize, what: &str) -> Result<&'a [u8], String> {
        if self.data.len() < count {
            return Err(format!("option data ends inside the {what}"));
        }
        let (taken, rest) = self.data.split_at(count);
        self.data = rest;
        Ok(taken)
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        Ok(u16::from_be_bytes(self.take(2, what)?.try_into().expect("2 bytes")))
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }

    /// A 32-bit length followed by that many bytes of string.
    fn string(&mut self, what: &str) -> Result<String, String> {
        let length = self.u32(what)?;
        let length = usize::try_from(length).map_err(|_| format!("{what} length {length} is too large"))?;
        parse_string(self.take(length, what)?, what)
    }

    fn finish(self) -> Result<(), String> {
        if self.data.is_empty() {
            Ok(())
        } else {
            Err(format!("{} bytes of option data after the last field", self.data.len()))
        }
    }
}

fn parse_string(bytes: &[u8], what: &str) -> Result<String, String> {
    if bytes.len() > STRING_SIZE_MAX_BYTES {
        return Err(format!("{what} is {} bytes, more than {STRING_SIZE_MAX_BYTES}", bytes.len()));
    }
    let string = std::str::from_utf8(bytes).map_err(|_| format!("{what} is not UTF-8"))?;
    if string.contains('\0') {
        return Err(format!("{what} contains a NUL character"));
    }
    Ok(string.to_string())
}

fn parse_info(data: &[u8]) -> Result<(String, Vec<u16>), String> {
    let mut cursor = Cursor { data };
    let name = cursor.string("export name")?;
    let count = cursor.u16("information request count")?;
    let mut requests = Vec::with_capacity(usize::from(count).min(cursor.data.len() / 2));
    for _ in 0..count {
        requests.push(cursor.u16("information requests")?);
    }
    cursor.finish()?;
    Ok((name, requests))
}

fn parse_meta_context(data: &[u8]) -> Result<(String, Vec<String>), String> {
    let mut cursor = Cursor { data };
    let name = cursor.string("export name")?;
    let count = cursor.u32("query count")?;
    if count > META_CONTEXT_QUERIES_MAX {
        return Err(format!("{count} queries, more than the {META_CONTEXT_QUERIES_MAX} accepted"));
    }
    let mut queries = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(cursor.data.len() / 4));
    for _ in 0..count {
        queries.push(cursor.string("query")?);
    }
    cursor.finish()?;
    Ok((name, queries))
}

/// What the server must look up before [`Negotiation::respond`] can answer an option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    Nothing,
    /// The names of all exports.
    List,
    /// The export of this name.
    Export(String),
}

/// What the server found for a [`Need`]; errors are messages for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Nothing,
    List(Result<Vec<String>, String>),
    Export(Result<Option<ExportInfo>, String>),
}

/// What the handshake needs to know of an export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// The canonical name (`NBD_INFO_NAME`).
    pub name: String,
    pub description: String,
    pub size_bytes: u64,
    /// Advertised with `NBD_FLAG_READ_ONLY`; the server refuses writes with `EPERM`.
    pub read_only: bool,
    /// The earlier snapshots offered as `qemu:dirty-bitmap:NAME` contexts.
    pub bitmaps: Vec<String>,
}

/// The metadata contexts a client selected for its export (`NBD_OPT_SET_META_CONTEXT`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaContexts {
    /// `base:allocation`, id [`BASE_ALLOCATION_ID`].
    pub base_allocation: bool,
    /// `qemu:dirty-bitmap:NAME`, id [`DIRTY_BITMAP_ID`]: the earlier snapshot whose changes
    /// are reported. At most one, as QEMU's own server offers.
    pub dirty_bitmap: Option<String>,
}

impl MetaContexts {
    /// Whether `NBD_CMD_BLOCK_STATUS` has anything to report.
    pub fn any(&self) -> bool {
        self.base_allocation || self.dirty_bitmap.is_some()
    }
}

/// What was agreed for the transmission phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmission {
    /// The name the client used to select the export.
    pub export_name: String,
    /// The export size advertised: the export's size rounded down to the export block size.
    pub size_bytes: u64,
    /// The transmission flags sent to the client.
    pub flags: u16,
    /// Structured replies were negotiated.
    pub structured: bool,
    /// The metadata contexts selected for this export: `NBD_CMD_BLOCK_STATUS` is allowed if any.
    pub contexts: MetaContexts,
}

/// What to do after answering an option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Read the next option.
    Continue,
    /// Close the connection (after sending the reply, if any).
    Close,
    /// Send the reply and enter the transmission phase.
    Transmit(Transmission),
}

/// The state of one connection's option haggling.
#[derive(Debug, Clone)]
pub struct Negotiation {
    no_zeroes: bool,
    structured: bool,
    /// The export name and the contexts the last `NBD_OPT_SET_META_CONTEXT` selected.
    meta_context: Option<(String, MetaContexts)>,
    /// Set when the server shuts down: every further option but `NBD_OPT_ABORT` is refused.
    pub shutting_down: bool,
}

impl Negotiation {
    pub fn new(client: ClientFlags) -> Negotiation {
        Negotiation { no_zeroes: client.no_zeroes, structured: false, meta_context: None, shutting_down: false }
    }

    /// What the server must look up to answer `option`.
    pub fn needs(&self, option: &ClientOption) -> Need {
        if self.shutting_down {
            return Need::Nothing;
        }
        match option {
            ClientOption::List => Need::List,
            ClientOption::ExportName { name: Ok(name) } => Need::Export(name.clone()),
            ClientOption::Info { name, .. } => Need::Export(name.clone()),
            ClientOption::ListMetaContext { name, .. } => Need::Export(name.clone()),
            ClientOption::SetMetaContext { name, .. } if self.structured => Need::Export(name.clone()),
            _ => Need::Nothing,
        }
    }

    /// Answers `option` given what was found for [`Negotiation::needs`]: appends the reply bytes
    /// to `out` and says what comes next. An error means the connection must close without a
    /// reply.
    pub fn respond(&mut self, option: ClientOption, found: Found, out: &mut Vec<u8>) -> Result<Next, HandshakeError> {
        if self.shutting_down {
            return match option {
                ClientOption::Abort => {
                    put_reply(out, OPT_ABORT, REP_ACK, &[]);
                    Ok(Next::Close)
                }
                ClientOption::ExportName { .. } => {
                    Err(HandshakeError::ExportName { reason: "the server is shutting down".to_string() })
                }
                option => {
                    put_error(out, option_code(&option), REP_ERR_SHUTDOWN, "the server is shutting down");
                    Ok(Next::Continue)
                }
            };
        }
        match option {
            ClientOption::ExportName { name } => self.export_name(name, found, out),
            ClientOption::Abort => {
                put_reply(out, OPT_ABORT, REP_ACK, &[]);
                Ok(Next::Close)
            }
            ClientOption::List => {
                match found {
                    Found::List(Ok(names)) => {
                        for name in
                            names.iter().filter(|name| name.len() <= STRING_SIZE_MAX_BYTES).take(LIST_EXPORTS_MAX)
                        {
                            let mut data = Vec::with_capacity(4 + name.len());
                            put_string(&mut data, name);
                            put_reply(out, OPT_LIST, REP_SERVER, &data);
                        }
                        put_reply(out, OPT_LIST, REP_ACK, &[]);
                    }
                    Found::List(Err(message)) => put_error(out, OPT_LIST, REP_ERR_POLICY, &message),
                    _ => put_error(out, OPT_LIST, REP_ERR_POLICY, "the export list is not available"),
                }
                Ok(Next::Continue)
            }
            ClientOption::StartTls => {
                put_error(out, OPT_STARTTLS, REP_ERR_POLICY, "this server does not offer TLS");
                Ok(Next::Continue)
            }
            ClientOption::StructuredReply => {
                self.structured = true;
                put_reply(out, OPT_STRUCTURED_REPLY, REP_ACK, &[]);
                Ok(Next::Continue)
            }
            ClientOption::Info { go, name, requests } => Ok(self.info(go, name, &requests, found, out)),
            ClientOption::ListMetaContext { name, queries } => {
                let info = match found_export(OPT_LIST_META_CONTEXT, &name, found) {
                    Ok(info) => info,
                    Err((reply_type, message)) => {
                        put_error(out, OPT_LIST_META_CONTEXT, reply_type, &message);
                        return Ok(Next::Continue);
                    }
                };
                for context in offered_contexts(&info).filter(|context| listed(context, &queries)) {
                    put_meta_context(out, OPT_LIST_META_CONTEXT, 0, &context);
                }
                put_reply(out, OPT_LIST_META_CONTEXT, REP_ACK, &[]);
                Ok(Next::Continue)
            }
            ClientOption::SetMetaContext { name, queries } => {
                // The selection is replaced even when the option fails.
                self.meta_context = None;
                if !self.structured {
                    put_error(
                        out,
                        OPT_SET_META_CONTEXT,
                        REP_ERR_INVALID,
                        "NBD_OPT_SET_META_CONTEXT needs structured replies first",
                    );
                    return Ok(Next::Continue);
                }
                let info = match found_export(OPT_SET_META_CONTEXT, &name, found) {
                    Ok(info) => info,
                    Err((reply_type, message)) => {
                        put_error(out, OPT_SET_META_CONTEXT, reply_type, &message);
                        return Ok(Next::Continue);
                    }
                };
                let mut selected = MetaContexts::default();
                if queries.iter().any(|query| query == BASE_ALLOCATION) {
                    selected.base_allocation = true;
                    put_meta_context(out, OPT_SET_META_CONTEXT, BASE_ALLOCATION_ID, BASE_ALLOCATION);
                }
                // Contexts not offered are left out, as the protocol asks; so is any dirty bitmap
                // after the first.
                let bitmap = queries.iter().find_map(|query| {
                    let bitmap = query.strip_prefix(DIRTY_BITMAP_PREFIX)?;
                    offered_bitmaps(&info).any(|offered| offered == bitmap).then_some(bitmap)
                });
                if let Some(bitmap) = bitmap {
                    put_meta_context(
                        out,
                        OPT_SET_META_CONTEXT,
                        DIRTY_BITMAP_ID,
                        &format!("{DIRTY_BITMAP_PREFIX}{bitmap}"),
                    );
                    selected.dirty_bitmap = Some(bitmap.to_string());
                }
                self.meta_context = Some((name, selected));
                put_reply(out, OPT_SET_META_CONTEXT, REP_ACK, &[]);
                Ok(Next::Continue)
            }
            ClientOption::Invalid { option, reason } => {
                put_error(out, option, REP_ERR_INVALID, &reason);
                Ok(Next::Continue)
            }
            ClientOption::Unsupported { option } => {
                put_error(out, option, REP_ERR_UNSUP, &format!("option {option} is not supported"));
                Ok(Next::Continue)
            }
        }
    }

    fn export_name(
        &mut self,
        name: Result<String, String>,
        found: Found,
        out: &mut Vec<u8>,
    ) -> Result<Next, HandshakeError> {
        let name = name.map_err(|reason| HandshakeError::ExportName { reason })?;
        let info = match found {
            Found::Export(Ok(Some(info))) => info,
            Found::Export(Ok(None)) => {
                return Err(HandshakeError::ExportName { reason: format!("no export named {name:?}") });
            }
            Found::Export(Err(message)) => {
                return Err(HandshakeError::ExportName {
                    reason: format!("export {name:?} cannot be opened: {message}"),
                });
            }
            Found::Nothing | Found::List(_) => {
                return Err(HandshakeError::ExportName { reason: format!("export {name:?} was not looked up") });
            }
        };
        let transmission = self.transmission(name, &info);
        out.extend_from_slice(&transmission.size_bytes.to_be_bytes());
        out.extend_from_slice(&transmission.flags.to_be_bytes());
        if !self.no_zeroes {
            out.extend_from_slice(&[0u8; EXPORT_NAME_PADDING_BYTES]);
        }
        Ok(Next::Transmit(transmission))
    }

    fn info(&mut self, go: bool, name: String, requests: &[u16], found: Found, out: &mut Vec<u8>) -> Next {
        let option = if go { OPT_GO } else { OPT_INFO };
        let info = match found_export(option, &name, found) {
            Ok(info) => info,
            Err((reply_type, message)) => {
                put_error(out, option, reply_type, &message);
                return Next::Continue;
            }
        };
        let transmission = self.transmission(name, &info);

        let mut export = Vec::with_capacity(12);
        export.extend_from_slice(&INFO_EXPORT.to_be_bytes());
        export.extend_from_slice(&transmission.size_bytes.to_be_bytes());
        export.extend_from_slice(&transmission.flags.to_be_bytes());
        put_reply(out, option, REP_INFO, &export);

        if requests.contains(&INFO_NAME) && info.name.len() <= STRING_SIZE_MAX_BYTES {
            let mut data = Vec::with_capacity(2 + info.name.len());
            data.extend_from_slice(&INFO_NAME.to_be_bytes());
            data.extend_from_slice(info.name.as_bytes());
            put_reply(out, option, REP_INFO, &data);
        }
        if requests.contains(&INFO_DESCRIPTION)
            && !info.description.is_empty()
            && info.description.len() <= STRING_SIZE_MAX_BYTES
        {
            let mut data = Vec::with_capacity(2 + info.description.len());
            data.extend_from_slice(&INFO_DESCRIPTION.to_be_bytes());
            data.extend_from_slice(info.description.as_bytes());
            put_reply(out, option, REP_INFO, &data);
        }
        // Sent whether or not it was asked for: clients that did not ask may ignore it, and the
        // server serves requests aligned to the minimum either way.
        let mut block_size = Vec::with_capacity(14);
        block_size.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        block_size.extend_from_slice(&BLOCK_SIZE_MIN_BYTES.to_be_bytes());
        block_size.extend_from_slice(&BLOCK_SIZE_PREFERRED_BYTES.to_be_bytes());
        block_size.extend_from_slice(&PAYLOAD_SIZE_MAX_BYTES.to_be_bytes());
        put_reply(out, option, REP_INFO, &block_size);

        put_reply(out, option, REP_ACK, &[]);
        if go {
            Next::Transmit(transmission)
        } else {
            Next::Continue
        }
    }

    fn transmission(&self, export_name: String, info: &ExportInfo) -> Transmission {
        let mut flags = FLAG_HAS_FLAGS
            | FLAG_SEND_FLUSH
            | FLAG_SEND_FUA
            | FLAG_SEND_TRIM
            | FLAG_SEND_WRITE_ZEROES
            | FLAG_CAN_MULTI_CONN;
        if self.structured {
            flags |= FLAG_SEND_DF;
        }
        if info.read_only {
            flags |= FLAG_READ_ONLY;
        }
        let contexts = match &self.meta_context {
            Some((name, contexts)) if self.structured && *name == export_name => contexts.clone(),
            _ => MetaContexts::default(),
        };
        Transmission {
            export_name,
            size_bytes: info.size_bytes - info.size_bytes % EXPORT_BLOCK_SIZE_BYTES,
            flags,
            structured: self.structured,
            contexts,
        }
    }
}

/// The dirty bitmaps the export offers: those whose context name fits the protocol's strings.
fn offered_bitmaps(info: &ExportInfo) -> impl Iterator<Item = &str> {
    info.bitmaps
        .iter()
        .map(String::as_str)
        .filter(|bitmap| DIRTY_BITMAP_PREFIX.len() + bitmap.len() <= STRING_SIZE_MAX_BYTES)
}

/// Every metadata context the export offers.
fn offered_contexts(info: &ExportInfo) -> impl Iterator<Item = String> + '_ {
    std::iter::once(BASE_ALLOCATION.to_string())
        .chain(offered_bitmaps(info).map(|bitmap| format!("{DIRTY_BITMAP_PREFIX}{bitmap}")))
}

/// Whether `NBD_OPT_LIST_META_CONTEXT` with `queries` lists `context`: every context for no
/// query; a query ending in `:` (a namespace, or QEMU's `qemu:dirty-bitmap:`) lists the
/// contexts it starts; any other query lists the context of that exact name.
fn listed(context: &str, queries: &[String]) -> bool {
    queries.is_empty()
        || queries.iter().any(
            |query| {
                if query.ends_with(':') {
                    context.starts_with(query.as_str())
                } else {
                    context == query
                }
            },
        )
}

/// The export an option named, or the error reply if it was not found.
fn found_export(option: u32, name: &str, found: Found) -> Result<ExportInfo, (u32, String)> {
    match found {
        Found::Export(Ok(Some(info))) => Ok(info),
        Found::Export(Ok(None)) => Err((REP_ERR_UNKNOWN, format!("no export named {name:?}"))),
        Found::Export(Err(message)) => Err((REP_ERR_UNKNOWN, format!("export {name:?} cannot be opened: {message}"))),
        Found::Nothing | Found::List(_) => {
            Err((REP_ERR_UNKNOWN, format!("export {name:?} was not looked up for option {option}")))
        }
    }
}

fn option_code(option: &ClientOption) -> u32 {
    match option {
        ClientOption::ExportName { .. } => OPT_EXPORT_NAME,
        ClientOption::Abort => OPT_ABORT,
        ClientOption::List => OPT_LIST,
        ClientOption::StartTls => OPT_STARTTLS,
        ClientOption::Info { go: true, .. } => OPT_GO,
        ClientOption::Info { go: false, .. } => OPT_INFO,
        ClientOption::StructuredReply => OPT_STRUCTURED_REPLY,
        ClientOption::ListMetaContext { .. } => OPT_LIST_META_CONTEXT,
        ClientOption::SetMetaContext { .. } => OPT_SET_META_CONTEXT,
        ClientOption::Invalid { option, .. } | ClientOption::Unsupported { option } => *option,
    }
}

/// Appends one option reply.
pub fn put_reply(out: &mut Vec<u8>, option: u32, reply_type: u32, data: &[u8]) {
    let length = u32::try_from(data.len()).expect("option replies are small");
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(data);
}

/// Appends an error reply with a message, cut to the protocol's string limit.
fn put_error(out: &mut Vec<u8>, option: u32, reply_type: u32, message: &str) {
    assert!(reply_type & REP_FLAG_ERROR != 0);
    put_reply(out, option, reply_type, truncate(message).as_bytes());
}

fn put_meta_context(out: &mut Vec<u8>, option: u32, id: u32, context: &str) {
    let mut data = Vec::with_capacity(4 + context.len());
    data.extend_from_slice(&id.to_be_bytes());
    assert!(context.len() <= STRING_SIZE_MAX_BYTES, "offered contexts fit the protocol's strings");
    data.extend_from_slice(context.as_bytes());
    put_reply(out, option, REP_META_CONTEXT, &data);
}

fn put_string(out: &mut Vec<u8>, string: &str) {
    let length = u32::try_from(string.len()).expect("strings are at most 4096 bytes");
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(string.as_bytes());
}

/// Cuts a message to the protocol's string limit on a character boundary.
pub(crate) fn truncate(message: &str) -> &str {
    if message.len() <= STRING_SIZE_MAX_BYTES {
        return message;
    }
    let mut end = STRING_SIZE_MAX_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info_data(name: &str, requests: &[u16]) -> Vec<u8> {
        let mut data = Vec::new();
        put_string(&mut data, name);
        data.extend_from_slice(&u16::try_from(requests.len()).unwrap().to_be_bytes());
        for request in requests {
            data.extend_from_slice(&request.to_be_bytes());
        }
        data
    }

    fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
        let mut data = Vec::new();
        put_string(&mut data, name);
        data.extend_from_slice(&u32::try_from(queries.len()).unwrap().to_be_bytes());
        for query in queries {
            put_string(&mut data, query);
        }
        data
    }

    /// Parses `data` as option `option` and checks the result.
    fn check(option: u32, data: &[u8], expect: ClientOption) {
        assert_eq!(parse_option(option, data), expect);
    }

    #[test]
    fn options_parse() {
        check(OPT_EXPORT_NAME, b"vol", ClientOption::ExportName { name: Ok("vol".to_string()) });
        check(OPT_ABORT, b"ignored", ClientOption::Abort);
        check(OPT_LIST, b"", ClientOption::List);
        check(OPT_STRUCTURED_REPLY, b"", ClientOption::StructuredReply);
        check(
            OPT_GO,
            &info_data("vol", &[INFO_BLOCK_SIZE, INFO_NAME]),
            ClientOption::Info { go: true, name: "vol".to_string(), requests: vec![INFO_BLOCK_SIZE, INFO_NAME] },
        );
        check(
            OPT_SET_META_CONTEXT,
            &meta_data("vol", &["base:allocation"]),
            ClientOption::SetMetaContext { name: "vol".to_string(), queries: vec!["base:allocation".to_string()] },
        );
        check(OPT_EXTENDED_HEADERS, b"", ClientOption::Unsupported { option: OPT_EXTENDED_HEADERS });
        check(77, b"xyz", ClientOption::Unsupported { option: 77 });
    }

    #[test]
    fn malformed_options_are_invalid() {
        let invalid = |option, data: &[u8]| matches!(parse_option(option, data), ClientOption::Invalid { .. });
        assert!(invalid(OPT_LIST, b"x"));
        assert!(invalid(OPT_STRUCTURED_REPLY, b"x"));
        let mut long = info_data("vol", &[1]);
        long.push(0);
        assert!(invalid(OPT_GO, &long));
        let short = info_data("vol", &[1, 2]);
        assert!(invalid(OPT_GO, &short[..short.len() - 1]));
        assert!(invalid(OPT_INFO, &[0xff, 0xff, 0xff, 0xff]));
        assert!(invalid(OPT_GO, &info_data("v\0l", &[])));
        assert!(invalid(OPT_GO, &[0, 0, 0, 2, 0xc3, 0x28, 0, 0]));
        let mut many = Vec::new();
        put_string(&mut many, "vol");
        many.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(invalid(OPT_LIST_META_CONTEXT, &many));
        assert!(matches!(parse_option(OPT_EXPORT_NAME, &[0xff]), ClientOption::ExportName { name: Err(_) }));
    }

    #[test]
    fn headers_and_flags() {
        let mut header = [0u8; 16];
        header[0..8].copy_from_slice(&OPTION_MAGIC.to_be_bytes());
        header[8..12].copy_from_slice(&OPT_GO.to_be_bytes());
        header[12..16].copy_from_slice(&10u32.to_be_bytes());
        assert_eq!(parse_option_header(&header), Ok(OptionHeader { option: OPT_GO, length_bytes: 10 }));
        header[12..16].copy_from_slice(&(OPTION_DATA_SIZE_MAX_BYTES + 1).to_be_bytes());
        assert!(matches!(parse_option_header(&header), Err(HandshakeError::OptionTooLong { .. })));
        header[0] = 0;
        assert!(matches!(parse_option_header(&header), Err(HandshakeError::OptionMagic { .. })));
        assert_eq!(parse_client_flags([0, 0, 0, 3]), Ok(ClientFlags { fixed_newstyle: true, no_zeroes: true }));
        assert!(parse_client_flags([0, 0, 0, 4]).is_err());
    }

    fn found(size_bytes: u64) -> Found {
        Found::Export(Ok(Some(ExportInfo {
            name: "vol".to_string(),
            description: String::new(),
            size_bytes,
            read_only: false,
            bitmaps: vec!["monday".to_string(), "tuesday".to_string()],
        })))
    }

    /// The context names and ids of the `REP_META_CONTEXT` replies in `out`, and whether the
    /// last reply is an ACK.
    fn meta_replies(mut out: &[u8]) -> (Vec<(u32, String)>, bool) {
        let mut contexts = Vec::new();
        let mut acked = false;
        while !out.is_empty() {
            let reply_type = u32::from_be_bytes(out[12..16].try_into().unwrap());
            let length = u32::from_be_bytes(out[16..20].try_into().unwrap()) as usize;
            let data = &out[20..20 + length];
            acked = reply_type == REP_ACK;
            if reply_type == REP_META_CONTEXT {
                let id = u32::from_be_bytes(data[..4].try_into().unwrap());
                contexts.push((id, String::from_utf8(data[4..].to_vec()).unwrap()));
            }
            out = &out[20 + length..];
        }
        (contexts, acked)
    }

    #[test]
    fn dirty_bitmaps_are_listed_and_one_is_selected() {
        let mut negotiation = Negotiation::new(ClientFlags { fixed_newstyle: true, no_zeroes: true });
        let mut out = Vec::new();
        let list = |queries: &[&str]| ClientOption::ListMetaContext {
            name: "vol".to_string(),
            queries: queries.iter().map(|query| query.to_string()).collect(),
        };
        let mut listed = |negotiation: &mut Negotiation, queries: &[&str]| {
            out.clear();
            negotiation.respond(list(queries), found(1 << 20), &mut out).unwrap();
            let (contexts, acked) = meta_replies(&out);
            assert!(acked);
            contexts.into_iter().map(|(_, name)| name).collect::<Vec<_>>()
        };
        let all = ["base:allocation", "qemu:dirty-bitmap:monday", "qemu:dirty-bitmap:tuesday"];
        assert_eq!(listed(&mut negotiation, &[]), all);
        assert_eq!(listed(&mut negotiation, &["qemu:"]), all[1..]);
        assert_eq!(listed(&mut negotiation, &["qemu:dirty-bitmap:"]), all[1..]);
        assert_eq!(listed(&mut negotiation, &["base:"]), all[..1]);
        assert_eq!(listed(&mut negotiation, &["qemu:dirty-bitmap:tuesday"]), all[2..]);
        assert!(listed(&mut negotiation, &["qemu:dirty-bitmap:sunday", "qemu:dirty-bitmap"]).is_empty());

        let mut out = Vec::new();
        negotiation.respond(ClientOption::StructuredReply, Found::Nothing, &mut out).unwrap();
        out.clear();
        let queries = ["qemu:dirty-bitmap:sunday", "qemu:dirty-bitmap:tuesday", "qemu:dirty-bitmap:monday"];
        let set = ClientOption::SetMetaContext {
            name: "vol".to_string(),
            queries: queries.iter().map(|query| query.to_string()).collect(),
        };
        negotiation.respond(set, found(1 << 20), &mut out).unwrap();
        let (contexts, acked) = meta_replies(&out);
        assert!(acked);
        assert_eq!(contexts, vec![(DIRTY_BITMAP_ID, "qemu:dirty-bitmap:tuesday".to_string())]);
        let go = ClientOption::Info { go: true, name: "vol".to_string(), requests: vec![] };
        let Next::Transmit(transmission) = negotiation.respond(go, found(1 << 20), &mut out).unwrap() else {
            panic!("GO did not enter transmission");
        };
        let expected = MetaContexts { base_allocation: false, dirty_bitmap: Some("tuesday".to_string()) };
        assert_eq!(transmission.contexts, expected);
    }

    #[test]
    fn go_advertises_block_sizes_and_flags() {
        let mut negotiation = Negotiation::new(ClientFlags { fixed_newstyle: true, no_zeroes: true });
        let mut out = Vec::new();
        negotiation.respond(ClientOption::StructuredReply, Found::Nothing, &mut out).unwrap();
        let set = ClientOption::SetMetaContext { name: "vol".to_string(), queries: vec![BASE_ALLOCATION.to_string()] };
        assert_eq!(negotiation.needs(&set), Need::Export("vol".to_string()));
        negotiation.respond(set, found(1 << 20), &mut out).unwrap();
        let go = ClientOption::Info { go: true, name: "vol".to_string(), requests: vec![] };
        let next = negotiation.respond(go, found((1 << 20) + 100), &mut out).unwrap();
        let Next::Transmit(transmission) = next else { panic!("GO did not enter transmission: {next:?}") };
        assert_eq!(transmission.size_bytes, 1 << 20);
        assert!(transmission.structured);
        assert_eq!(transmission.contexts, MetaContexts { base_allocation: true, dirty_bitmap: None });
        assert_ne!(transmission.flags & FLAG_SEND_DF, 0);
        assert_ne!(transmission.flags & FLAG_CAN_MULTI_CONN, 0);
    }

    #[test]
    fn meta_context_for_another_export_does_not_apply() {
        let mut negotiation = Negotiation::new(ClientFlags { fixed_newstyle: true, no_zeroes: false });
        let mut out = Vec::new();
        negotiation.respond(ClientOption::StructuredReply, Found::Nothing, &mut out).unwrap();
        let set =
            ClientOption::SetMetaContext { name: "other".to_string(), queries: vec![BASE_ALLOCATION.to_string()] };
        negotiation.respond(set, found(4096), &mut out).unwrap();
        let name = ClientOption::ExportName { name: Ok("vol".to_string()) };
        out.clear();
        let Next::Transmit(transmission) = negotiation.respond(name, found(4096), &mut out).unwrap() else {
            panic!("EXPORT_NAME did not enter transmission");
        };
        assert!(!transmission.contexts.any());
        assert_eq!(out.len(), 8 + 2 + EXPORT_NAME_PADDING_BYTES);
    }

    #[test]
    fn export_name_of_unknown_export_closes() {
        let mut negotiation = Negotiation::new(ClientFlags { fixed_newstyle: true, no_zeroes: false });
        let name = ClientOption::ExportName { name: Ok("none".to_string()) };
        assert!(negotiation.respond(name, Found::Export(Ok(None)), &mut Vec::new()).is_err());
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let message = "é".repeat(STRING_SIZE_MAX_BYTES);
        let cut = truncate(&message);
        assert!(cut.len() <= STRING_SIZE_MAX_BYTES);
        assert!(cut.len() >= STRING_SIZE_MAX_BYTES - 1);
    }
}
