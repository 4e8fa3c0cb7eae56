//! Keeping a session's Python state: the `checkpoint` and `restore` requests of
//! `runtime/PROTOCOL.md` and their answers, decoded within caps like every frame a session sends
//! (its code can write on its socket). The server never reads the state itself: the session
//! writes it to a file of its workspace and reads it back from there.

use serde::Deserialize;
use toolgate_sandbox::NotRestored;
use toolgate_sandbox::protocol::SessionRequest;

use crate::bounded::{
    Capped, FrameId, GlobalName, NotRestoredReason, SessionErrorFrame, SessionFrameHead, TypeName,
};
use crate::session_error::SessionError;

/// The file of the workspace the Python state is written to, as the session sees it.
pub(crate) const STATE_FILE: &str = ".toolgate-checkpoint";

/// The largest frame a session may send while it checkpoints or restores.
pub(crate) const KEEP_FRAME_BYTES: u32 = 1 << 20;

/// The most globals an answer names as not restored; the rest are counted in one more entry.
pub(crate) const MAX_NOT_RESTORED: usize = 1000;

/// What a session is asked to do with its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Keep {
    /// write it to [`STATE_FILE`]
    Checkpoint,
    /// read it back from [`STATE_FILE`] (and delete the file)
    Restore,
}

impl Keep {
    pub(crate) fn frame(&self, id: u64) -> SessionRequest<'static> {
        match self {
            Self::Checkpoint => SessionRequest::Checkpoint {
                id,
                path: STATE_FILE,
            },
            Self::Restore => SessionRequest::Restore {
                id,
                path: STATE_FILE,
            },
        }
    }
}

/// A session's answer to a [`Keep`] request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeepAnswer {
    /// the state is in [`STATE_FILE`], `bytes` long
    Checkpointed { bytes: u64 },
    /// the state is back; what could not be
    Restored {
        not_restored: Vec<NotRestored>,
        execution_count: u64,
    },
}

/// What one frame read during a [`Keep`] request means for it.
pub(crate) enum KeepStep {
    /// not for it (skipped; its bytes were counted)
    Continue,
    Answer(KeepAnswer),
    Rejected(SessionError),
    Broken(String),
}

#[derive(Debug, Deserialize)]
struct CheckpointedFrame {
    bytes: u64,
}

#[derive(Debug, Deserialize)]
struct NotRestoredEntry {
    name: Capped<GlobalName>,
    #[serde(rename = "type")]
    type_name: Capped<TypeName>,
    reason: Capped<NotRestoredReason>,
}

#[derive(Debug, Deserialize)]
struct RestoredFrame {
    not_restored: Vec<NotRestoredEntry>,
    execution_count: u64,
}

/// Reads one frame of `request` `id`.
pub(crate) fn keep_frame(id: u64, request: &Keep, body: &[u8]) -> KeepStep {
    let head: SessionFrameHead = match serde_json::from_slice(body) {
        Ok(head) => head,
        Err(e) => return KeepStep::Broken(format!("not a frame: {e}")),
    };
    let ours = head.id == FrameId::Number(id);
    match (head.op.text.as_str(), request) {
        ("checkpointed", Keep::Checkpoint) if ours => {
            match serde_json::from_slice::<CheckpointedFrame>(body) {
                Ok(frame) => KeepStep::Answer(KeepAnswer::Checkpointed { bytes: frame.bytes }),
                Err(e) => KeepStep::Broken(format!("bad checkpointed frame: {e}")),
            }
        }
        ("restored", Keep::Restore) if ours => {
            match serde_json::from_slice::<RestoredFrame>(body) {
                Ok(frame) => KeepStep::Answer(KeepAnswer::Restored {
                    not_restored: named(frame.not_restored),
                    execution_count: frame.execution_count,
                }),
                Err(e) => KeepStep::Broken(format!("bad restored frame: {e}")),
            }
        }
        ("error", _) if ours || head.id == FrameId::Null => {
            match serde_json::from_slice::<SessionErrorFrame>(body) {
                Ok(e) => KeepStep::Rejected(SessionError::Rejected {
                    code: e.code.into_string(),
                    message: e.message.into_string(),
                }),
                Err(e) => KeepStep::Broken(format!("bad error frame: {e}")),
            }
        }
        _ => KeepStep::Continue,
    }
}

/// The entries as the seam carries them, at most [`MAX_NOT_RESTORED`] and a count of the rest.
fn named(entries: Vec<NotRestoredEntry>) -> Vec<NotRestored> {
    let more = entries.len().saturating_sub(MAX_NOT_RESTORED);
    let mut named: Vec<NotRestored> = entries
        .into_iter()
        .take(MAX_NOT_RESTORED)
        .map(|e| NotRestored {
            name: e.name.into_string(),
            type_name: e.type_name.into_string(),
            reason: e.reason.into_string(),
        })
        .collect();
    if more > 0 {
        named.push(NotRestored {
            name: "…".to_owned(),
            type_name: String::new(),
            reason: format!("{more} more not restored"),
        });
    }
    named
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn answers_decode_and_others_are_skipped() {
        let body = br#"{"op":"restored","id":3,"restored":["x"],"not_restored":[{"name":"g","type":"generator","reason":"TypeError: cannot pickle 'generator' object"}],"execution_count":7,"duration_ms":1.0}"#;
        let KeepStep::Answer(KeepAnswer::Restored {
            not_restored,
            execution_count,
        }) = keep_frame(3, &Keep::Restore, body)
        else {
            panic!("not decoded")
        };
        assert_eq!(execution_count, 7);
        assert_eq!(not_restored[0].name, "g");
        assert_eq!(not_restored[0].type_name, "generator");
        // another request's answer, or the other kind, is not this one's
        assert!(matches!(
            keep_frame(4, &Keep::Restore, body),
            KeepStep::Continue
        ));
        assert!(matches!(
            keep_frame(3, &Keep::Checkpoint, body),
            KeepStep::Continue
        ));
        let done = br#"{"op":"checkpointed","id":2,"bytes":12,"kept":[],"not_kept":[]}"#;
        assert!(matches!(
            keep_frame(2, &Keep::Checkpoint, done),
            KeepStep::Answer(KeepAnswer::Checkpointed { bytes: 12 })
        ));
        let error = br#"{"op":"error","id":2,"code":"checkpoint_failed","message":"No space left on device"}"#;
        assert!(matches!(
            keep_frame(2, &Keep::Checkpoint, error),
            KeepStep::Rejected(SessionError::Rejected { .. })
        ));
    }

    #[test]
    fn hostile_answers_break_the_protocol_or_are_capped() {
        let long = "x".repeat(257);
        let body = format!(
            r#"{{"op":"restored","id":1,"not_restored":[{{"name":"{long}","type":"","reason":""}}],"execution_count":1}}"#
        );
        assert!(matches!(
            keep_frame(1, &Keep::Restore, body.as_bytes()),
            KeepStep::Broken(_)
        ));
        assert!(matches!(
            keep_frame(1, &Keep::Restore, br#"{"op":"restored","id":1}"#),
            KeepStep::Broken(_)
        ));
        let many: Vec<String> = (0..1500)
            .map(|n| format!(r#"{{"name":"v{n}","type":"t","reason":"r"}}"#))
            .collect();
        let body = format!(
            r#"{{"op":"restored","id":1,"not_restored":[{}],"execution_count":1}}"#,
            many.join(",")
        );
        let KeepStep::Answer(KeepAnswer::Restored { not_restored, .. }) =
            keep_frame(1, &Keep::Restore, body.as_bytes())
        else {
            panic!("not decoded")
        };
        assert_eq!(not_restored.len(), MAX_NOT_RESTORED + 1);
        assert_eq!(
            not_restored[MAX_NOT_RESTORED].reason,
            "500 more not restored"
        );
        assert!(matches!(
            keep_frame(1, &Keep::Restore, b"\xff"),
            KeepStep::Broken(_)
        ));
    }
}
