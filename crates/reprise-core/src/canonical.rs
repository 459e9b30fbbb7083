//! Canonical bytes: RFC 8785 (JCS) with reprise's number rule.
//!
//! Records hold no floats and no integer beyond +-(2^53-1), so every number
//! has one spelling in every JSON implementation. The rule is enforced here,
//! at encode time: a record that breaks it is refused, never rounded.

use serde::Serialize;
use serde_json::Value;

/// Largest integer magnitude a record may hold: 2^53 - 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why a value has no canonical encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("record holds a float at {path}; store money as integer micro-dollars")]
    Float { path: String },
    #[error("record holds the integer {value} at {path}, beyond +-(2^53-1)")]
    UnsafeInteger { path: String, value: String },
    #[error("record cannot be encoded: {0}")]
    Serialize(String),
}

/// Encodes `value` as canonical JCS bytes, refusing floats and unsafe integers.
pub fn to_canonical_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let tree =
        serde_json::to_value(value).map_err(|err| EncodeError::Serialize(err.to_string()))?;
    value_to_canonical_vec(&tree, "$")
}

/// Encodes a JSON value as canonical JCS bytes without copying it first;
/// `path` names the value in an error.
pub fn value_to_canonical_vec(value: &Value, path: &str) -> Result<Vec<u8>, EncodeError> {
    check_numbers(value, &mut String::from(path))?;
    serde_json_canonicalizer::to_vec(value).map_err(|err| EncodeError::Serialize(err.to_string()))
}

/// Writes an object whose members are already encoded, in the order given.
/// The caller passes plain ASCII keys in JCS order (for ASCII, byte order);
/// records are assembled this way so their bodies are encoded only once.
pub fn assemble_object(members: &[(&str, &[u8])]) -> Vec<u8> {
    debug_assert!(
        members
            .windows(2)
            .all(|pair| pair[0].0.is_ascii() && pair[0].0 < pair[1].0),
        "members must come in JCS order"
    );
    let len = members
        .iter()
        .map(|(key, value)| key.len() + value.len() + 4)
        .sum::<usize>()
        + 2;
    let mut out = Vec::with_capacity(len);
    out.push(b'{');
    for (index, (key, value)) in members.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        out.extend_from_slice(value);
    }
    out.push(b'}');
    out
}

/// Walks `value` and refuses the first number outside the record rule.
pub fn check_numbers(value: &Value, path: &mut String) -> Result<(), EncodeError> {
    match value {
        Value::Number(number) => {
            let safe = match (number.as_u64(), number.as_i64()) {
                (Some(unsigned), _) => unsigned <= MAX_SAFE_INTEGER,
                (None, Some(signed)) => signed.unsigned_abs() <= MAX_SAFE_INTEGER,
                (None, None) => {
                    return Err(EncodeError::Float { path: path.clone() });
                }
            };
            if safe {
                Ok(())
            } else {
                Err(EncodeError::UnsafeInteger {
                    path: path.clone(),
                    value: number.to_string(),
                })
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                check_numbers(item, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Object(members) => {
            for (key, item) in members {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                check_numbers(item, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn sorts_keys_and_drops_whitespace() {
        let bytes = to_canonical_vec(&json!({"b": 1, "a": [true, null, "x"]})).unwrap();
        assert_eq!(bytes, br#"{"a":[true,null,"x"],"b":1}"#);
    }

    #[test]
    fn sorts_keys_by_utf16_code_units() {
        // U+1F600 is a surrogate pair (0xD83D ...) and sorts before U+E000 in
        // UTF-16 order, though it is the larger code point.
        let bytes = to_canonical_vec(&json!({"\u{e000}": 1, "\u{1f600}": 2})).unwrap();
        assert_eq!(bytes, "{\"\u{1f600}\":2,\"\u{e000}\":1}".as_bytes());
    }

    #[test]
    fn escapes_only_what_jcs_escapes() {
        let bytes = to_canonical_vec(&json!("a\"\\\u{8}\t\n\u{c}\r\u{1}\u{7f}/é")).unwrap();
        assert_eq!(
            bytes,
            "\"a\\\"\\\\\\b\\t\\n\\f\\r\\u0001\u{7f}/é\"".as_bytes()
        );
    }

    #[test]
    fn refuses_floats_and_unsafe_integers() {
        assert_eq!(
            to_canonical_vec(&json!({"cost": 1.5})),
            Err(EncodeError::Float {
                path: "$.cost".into()
            })
        );
        assert!(matches!(
            to_canonical_vec(&json!([1u64 << 53])),
            Err(EncodeError::UnsafeInteger { .. })
        ));
        assert!(matches!(
            to_canonical_vec(&json!({"x": [-(1i64 << 53)]})),
            Err(EncodeError::UnsafeInteger { .. })
        ));
        assert!(to_canonical_vec(&json!([MAX_SAFE_INTEGER, -(MAX_SAFE_INTEGER as i64)])).is_ok());
    }
}
