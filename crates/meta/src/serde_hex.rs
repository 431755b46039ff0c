//! Serializes byte strings as lowercase hex strings (`#[serde(with = "meta::serde_hex")]`), so
//! values stay compact and readable in JSON, such as the frames of the embedded store's network
//! protocol (serde's default for bytes is an array of numbers).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

const DIGITS: &[u8; 16] = b"0123456789abcdef";

pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    serializer.serialize_str(&text)
}

pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
    let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
    decode(text.as_bytes()).ok_or_else(|| D::Error::custom("expected an even number of lowercase hex digits"))
}

fn decode(text: &[u8]) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    text.chunks_exact(2).map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?)).collect()
}

#[cfg(test)]
mod tests {
    use crate::KeyValue;

    #[test]
    fn round_trip_and_rejects() {
        let kv = KeyValue {
            key: "/k".into(),
            value: (0..=255).collect(),
            create_revision: 1,
            mod_revision: 2,
            version: 1,
            lease: None,
        };
        let text = serde_json::to_string(&kv).unwrap();
        assert!(text.contains("\"value\":\"000102"));
        assert_eq!(serde_json::from_str::<KeyValue>(&text).unwrap(), kv);
        for bad in ["0", "0g", "AB", "é0"] {
            let text = format!(
                r#"{{"key":"k","value":"{bad}","create_revision":1,"mod_revision":1,"version":1,"lease":null}}"#
            );
            assert!(serde_json::from_str::<KeyValue>(&text).is_err(), "{bad}");
        }
    }
}
