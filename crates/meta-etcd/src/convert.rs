//! Conversions between the metadata store's types and etcd's protobuf messages.

use meta::{
    Compare, CompareOp, CompareTarget, KeyValue, LeaseId, MetaError, TxnOp, TxnOpResult, WatchEvent, WatchEventKind,
};

use crate::etcdserverpb::{self as pb, compare, event, request_op, response_op};

/// The end of the key range holding every key that starts with `prefix`, as etcd expects it
/// (`\0` for "every key" when the prefix is empty or all `0xff`).
pub(crate) fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

pub(crate) fn key_value(kv: pb::KeyValue) -> Result<KeyValue, MetaError> {
    let key = String::from_utf8(kv.key).map_err(|error| {
        MetaError::other(String::from_utf8_lossy(error.as_bytes()), "etcd returned a key that is not UTF-8")
    })?;
    Ok(KeyValue {
        key,
        value: kv.value,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        lease: (kv.lease != 0).then_some(LeaseId(kv.lease)),
    })
}

pub(crate) fn compare(compare: &Compare) -> pb::Compare {
    let result = match compare.op {
        CompareOp::Equal => compare::CompareResult::Equal,
        CompareOp::NotEqual => compare::CompareResult::NotEqual,
        CompareOp::Greater => compare::CompareResult::Greater,
        CompareOp::Less => compare::CompareResult::Less,
    };
    let (target, value) = match &compare.target {
        CompareTarget::Value(value) => (compare::CompareTarget::Value, compare::TargetUnion::Value(value.clone())),
        CompareTarget::Version(version) => (compare::CompareTarget::Version, compare::TargetUnion::Version(*version)),
        CompareTarget::CreateRevision(revision) => {
            (compare::CompareTarget::Create, compare::TargetUnion::CreateRevision(*revision))
        }
        CompareTarget::ModRevision(revision) => {
            (compare::CompareTarget::Mod, compare::TargetUnion::ModRevision(*revision))
        }
    };
    pb::Compare {
        result: result.into(),
        target: target.into(),
        key: compare.key.as_bytes().to_vec(),
        target_union: Some(value),
    }
}

pub(crate) fn request_op(op: &TxnOp) -> pb::RequestOp {
    let request = match op {
        TxnOp::Put { key, value, lease } => request_op::Request::RequestPut(pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.clone(),
            lease: lease.map_or(0, |lease| lease.0),
        }),
        TxnOp::Delete { key } => request_op::Request::RequestDeleteRange(pb::DeleteRangeRequest {
            key: key.as_bytes().to_vec(),
            range_end: Vec::new(),
        }),
        TxnOp::Get { key } => {
            request_op::Request::RequestRange(pb::RangeRequest { key: key.as_bytes().to_vec(), ..Default::default() })
        }
    };
    pb::RequestOp { request: Some(request) }
}

/// One op's result in a transaction's response; `key` names the transaction in errors.
pub(crate) fn op_result(op: pb::ResponseOp, key: &str) -> Result<TxnOpResult, MetaError> {
    Ok(match op.response {
        Some(response_op::Response::ResponsePut(_)) => TxnOpResult::Put,
        Some(response_op::Response::ResponseDeleteRange(delete)) => TxnOpResult::Delete { deleted: delete.deleted > 0 },
        Some(response_op::Response::ResponseRange(range)) => {
            TxnOpResult::Get(range.kvs.into_iter().next().map(key_value).transpose()?)
        }
        None => return Err(MetaError::other(key, "etcd answered a transaction op with a response of no known kind")),
    })
}

pub(crate) fn watch_event(event: pb::Event) -> Result<WatchEvent, MetaError> {
    let kind = event::EventType::try_from(event.r#type)
        .map_err(|_| MetaError::other("", format!("etcd sent a watch event of unknown type {}", event.r#type)))?;
    let kv = event.kv.ok_or_else(|| MetaError::other("", "etcd sent a watch event without a key"))?;
    let kv = key_value(kv)?;
    let revision = kv.mod_revision;
    Ok(match kind {
        event::EventType::Put => WatchEvent { kind: WatchEventKind::Put, kv, revision },
        event::EventType::Delete => WatchEvent::delete(kv.key, revision),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_range_ends() {
        assert_eq!(prefix_range_end(b"/a/"), b"/a0");
        assert_eq!(prefix_range_end(b"a\xff"), b"b");
        assert_eq!(prefix_range_end(b"\xff\xff"), [0]);
        assert_eq!(prefix_range_end(b""), [0]);
    }

    #[test]
    fn a_key_that_is_not_utf8_is_refused() {
        let kv = pb::KeyValue { key: vec![0xff, 0xfe], ..Default::default() };
        assert!(key_value(kv).is_err());
    }

    #[test]
    fn an_event_of_unknown_type_or_without_a_key_is_refused() {
        let kv = pb::KeyValue { key: b"/k".to_vec(), mod_revision: 7, ..Default::default() };
        assert!(watch_event(pb::Event { r#type: 9, kv: Some(kv.clone()) }).is_err());
        assert!(watch_event(pb::Event { r#type: 0, kv: None }).is_err());
        let event = watch_event(pb::Event { r#type: 1, kv: Some(kv) }).expect("a delete");
        assert_eq!((event.kind, event.revision), (WatchEventKind::Delete, 7));
    }

    #[test]
    fn an_op_response_of_no_known_kind_is_refused() {
        assert!(op_result(pb::ResponseOp { response: None }, "/k").is_err());
    }
}
