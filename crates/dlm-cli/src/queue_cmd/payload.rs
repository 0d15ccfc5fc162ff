//! Task payloads: read and size-checked for `queue push` before anything is
//! sent, and shown in JSON lines as text, or as base64 when not UTF-8.

use std::io::Read;

use dlm::queue::DEFAULT_MAX_PAYLOAD;
use serde::Serialize;

use super::PushArgs;
use crate::error::CliError;

/// Standard base64 with padding (RFC 4648), for payloads that are not UTF-8.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextets = [(n >> 18) & 63, (n >> 12) & 63, (n >> 6) & 63, n & 63];
        for (i, s) in sextets.iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[*s as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A payload for JSON: the text when it is UTF-8, else base64 with a flag.
#[derive(Debug, Serialize)]
pub struct JsonPayload {
    /// The payload (text or base64), or null.
    pub payload: Option<String>,
    /// Present (true) only when `payload` is base64.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub payload_base64: bool,
}

impl JsonPayload {
    /// Encode `payload`.
    pub fn new(payload: Option<Vec<u8>>) -> Self {
        match payload {
            None => JsonPayload {
                payload: None,
                payload_base64: false,
            },
            Some(bytes) => match String::from_utf8(bytes) {
                Ok(text) => JsonPayload {
                    payload: Some(text),
                    payload_base64: false,
                },
                Err(e) => JsonPayload {
                    payload: Some(base64(e.as_bytes())),
                    payload_base64: true,
                },
            },
        }
    }
}

fn too_large(len: u64) -> CliError {
    CliError::Usage(format!(
        "the payload is {len} bytes, larger than the limit of {DEFAULT_MAX_PAYLOAD} bytes ({} KiB)",
        DEFAULT_MAX_PAYLOAD / 1024
    ))
}

/// The payload of `push`, read and size-checked before anything is sent.
pub(super) fn read_payload(args: &PushArgs) -> Result<Option<Vec<u8>>, CliError> {
    let limit = DEFAULT_MAX_PAYLOAD as u64;
    let bytes = if let Some(text) = &args.payload {
        text.as_bytes().to_vec()
    } else if let Some(path) = &args.payload_file {
        let mut buf = Vec::new();
        let read = if path.as_os_str() == "-" {
            std::io::stdin()
                .lock()
                .take(limit + 1)
                .read_to_end(&mut buf)
        } else {
            std::fs::File::open(path).and_then(|f| f.take(limit + 1).read_to_end(&mut buf))
        };
        read.map_err(|e| {
            CliError::Usage(format!(
                "cannot read the payload file {}: {e}",
                path.display()
            ))
        })?;
        if buf.len() as u64 > limit {
            let len = std::fs::metadata(path)
                .ok()
                .filter(|m| m.is_file())
                .map_or(buf.len() as u64, |m| m.len());
            return Err(too_large(len));
        }
        buf
    } else {
        return Ok(None);
    };
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn payloads_are_text_or_flagged_base64() -> Result<(), serde_json::Error> {
        let text = serde_json::to_value(JsonPayload::new(Some(b"hi".to_vec())))?;
        assert_eq!(text, serde_json::json!({"payload": "hi"}));
        let bin = serde_json::to_value(JsonPayload::new(Some(vec![0xff])))?;
        assert_eq!(
            bin,
            serde_json::json!({"payload": "/w==", "payload_base64": true})
        );
        let none = serde_json::to_value(JsonPayload::new(None))?;
        assert_eq!(none, serde_json::json!({"payload": null}));
        Ok(())
    }
}
