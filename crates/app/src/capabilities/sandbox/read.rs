//! `file` on the read tool: one file of a session's workspace, read back.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use serde_json::{Value, json};

use super::{Sandbox, account_key, failure};
use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, JsonObject, Output, ToolKind,
};
use crate::schema::FieldKind;
use toolgate_sandbox::MAX_WORKSPACE_PATH_BYTES;

/// Largest file read back, in bytes (its base64 must fit a response comfortably).
const MAX_READ_BYTES: u64 = 8 * 1024 * 1024;

/// Reads a workspace file: text as text, images as image content, anything else as base64.
pub struct ReadFile {
    sandbox: Arc<Sandbox>,
}

impl ReadFile {
    pub(super) fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

#[async_trait]
impl Capability for ReadFile {
    fn key(&self) -> &'static str {
        "file"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Read
    }

    fn summary(&self) -> &'static str {
        "`path` with `session_id`: reads one file of that session's workspace (up to 8 MiB): \
         UTF-8 text as text, PNG/JPEG/GIF/WebP as an image, anything else as base64 in \
         structuredContent. Never outside the workspace; symbolic links are not followed."
    }

    fn fields(&self) -> Vec<Field> {
        vec![
            Field {
                name: "path",
                kind: FieldKind::String {
                    max_len: MAX_WORKSPACE_PATH_BYTES,
                },
                description: "a file's path relative to the session's workspace",
            },
            self.sandbox.session_id.clone(),
        ]
    }

    fn output_schema(&self) -> Value {
        let text = json!({"type": "string"});
        json!({"type": "object", "properties": {
            "path": text, "size": {"type": "integer"},
            "encoding": {"type": "string", "enum": ["text", "base64"]},
            "mime_type": text,
            "content": {"type": "string", "description": "base64 of a file that is neither text nor an image (those are the content item)"},
        }, "required": ["path", "size", "encoding", "mime_type"]})
    }

    /// Session work does not read metering state, so it starts while the charge commits.
    fn overlaps_commit(&self) -> bool {
        true
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key("path")
    }

    fn turn_kind(&self, _args: &JsonObject) -> Option<crate::turns::TurnKind> {
        Some(crate::turns::TurnKind::WorkspaceRead)
    }

    fn validate(&self, args: &JsonObject) -> Result<(), String> {
        if args.contains_key("session_id") {
            Ok(())
        } else {
            Err(
                "`path` needs the `session_id` of the session whose workspace holds the file"
                    .to_owned(),
            )
        }
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let text = |key: &str| args.get(key).and_then(Value::as_str).unwrap_or_default();
        let (path, session_id) = (text("path"), text("session_id"));
        let account = account_key(ctx);
        let read = self
            .sandbox
            .sessions
            .read_file(&account, session_id, path, MAX_READ_BYTES)
            .await
            .map_err(failure)?;
        // code may write a value into a file as easily as print it: a text file is redacted
        // (by the call) of what the session was given; other bytes come back as they are
        self.sandbox.register_given(ctx, session_id).await;
        Ok(describe(path, read.bytes, read.size))
    }
}

/// The content and record of a file's bytes. The bytes are in the answer once: text and
/// images as the content item (the record says what they are), anything else as base64 in the
/// record. A file is the largest thing a call returns, and every copy of it the server holds
/// while the answer is encoded counts: the raw bytes are dropped before it is.
fn describe(path: &str, bytes: Vec<u8>, size: u64) -> Output {
    if let Some(mime_type) = image_type(&bytes) {
        let data = base64_of(bytes);
        return Output {
            content: vec![ContentItem::Image {
                data,
                mime_type: mime_type.to_owned(),
            }],
            structured: record(path, size, "base64", mime_type, None),
            is_error: false,
            ..Output::default()
        };
    }
    match String::from_utf8(bytes) {
        Ok(text) if !text.contains('\0') => Output {
            content: vec![ContentItem::Text(text)],
            structured: record(path, size, "text", "text/plain; charset=utf-8", None),
            is_error: false,
            ..Output::default()
        },
        Ok(text) => binary(path, size, text.into_bytes()),
        Err(e) => binary(path, size, e.into_bytes()),
    }
}

fn binary(path: &str, size: u64, bytes: Vec<u8>) -> Output {
    let data = base64_of(bytes);
    Output {
        content: vec![ContentItem::Text(format!(
            "{path} is a binary file of {size} bytes; its base64 is in structuredContent.file.content"
        ))],
        structured: record(path, size, "base64", "application/octet-stream", Some(data)),
        // the base64 of bytes: redacting a value's form in it would break the file
        verbatim: true,
        ..Output::default()
    }
}

/// `bytes` in base64, made in place when the buffer has room for it (the session manager reads
/// files with that room), so the file is never held twice.
fn base64_of(mut bytes: Vec<u8>) -> String {
    let engine = base64::engine::general_purpose::STANDARD;
    let raw = bytes.len();
    let encoded = raw.div_ceil(3) * 4;
    if bytes.capacity() < encoded {
        return engine.encode(&bytes);
    }
    // the raw bytes move to the end; each block is copied out before its output (4 bytes for
    // every 3) is written over what was already read, and writing never overtakes reading
    bytes.resize(encoded, 0);
    bytes.copy_within(0..raw, encoded - raw);
    const BLOCK: usize = 3 * 1024;
    let mut block = [0u8; BLOCK];
    let (mut read, mut written) = (encoded - raw, 0);
    while read < encoded {
        let len = BLOCK.min(encoded - read);
        block[..len].copy_from_slice(&bytes[read..read + len]);
        read += len;
        // the room left is always enough (4 for every 3 read), so this cannot fail
        written += engine
            .encode_slice(&block[..len], &mut bytes[written..])
            .unwrap_or(0);
    }
    bytes.truncate(written);
    // base64 is ASCII
    String::from_utf8(bytes).unwrap_or_default()
}

/// The file's record; `content` only where the content item does not carry the bytes.
fn record(
    path: &str,
    size: u64,
    encoding: &str,
    mime_type: &str,
    content: Option<String>,
) -> Value {
    let mut record =
        json!({"path": path, "size": size, "encoding": encoding, "mime_type": mime_type});
    if let (Some(content), Some(fields)) = (content, record.as_object_mut()) {
        fields.insert("content".to_owned(), Value::String(content));
    }
    record
}

/// The MIME type of an image format MCP clients display, by its magic bytes.
fn image_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_come_back_as_text_image_or_base64() {
        let text = describe("a.txt", b"hello\n".to_vec(), 6);
        assert_eq!(text.structured["encoding"], "text");
        assert_eq!(text.content, vec![ContentItem::Text("hello\n".into())]);
        assert!(
            text.structured.get("content").is_none(),
            "the text is in the answer once"
        );
        let png = describe("p.png", b"\x89PNG\r\n\x1a\nrest".to_vec(), 12);
        assert!(
            matches!(&png.content[0], ContentItem::Image { mime_type, .. } if mime_type == "image/png")
        );
        let blob = describe("b.bin", vec![0, 159, 146, 150], 4);
        assert_eq!(blob.structured["encoding"], "base64");
        assert_eq!(blob.structured["content"], "AJ+Slg==");
        let nul = describe("n.txt", b"a\0b".to_vec(), 3);
        assert_eq!(nul.structured["encoding"], "base64");
    }

    #[test]
    fn base64_made_in_place_equals_the_usual_encoding() {
        let engine = base64::engine::general_purpose::STANDARD;
        for len in [
            0_usize, 1, 2, 3, 4, 3071, 3072, 3073, 9216, 100_000, 1_000_001,
        ] {
            let raw: Vec<u8> = (0..len).map(|n| (n * 7 + n / 5) as u8).collect();
            let mut roomy = Vec::with_capacity(len.div_ceil(3) * 4);
            roomy.extend_from_slice(&raw);
            let start = roomy.as_ptr();
            let encoded = base64_of(roomy);
            assert_eq!(encoded, engine.encode(&raw), "{len} bytes");
            if len > 0 {
                assert_eq!(encoded.as_ptr(), start, "{len} bytes: made in place");
            }
            assert_eq!(base64_of(raw.clone()), engine.encode(&raw), "without room");
        }
    }
}
