//! A session's outcome as the caller reads it: notebook-like content (output, the last value,
//! figures, the traceback) and the structured record behind it.

use std::time::Duration;

use serde_json::{Value, json};
use toolgate_sandbox::{ExecOutcome, Interruption, RequestKind, RunOutcome};

use super::keep::{Kept, Shown};
use crate::capability::{ContentItem, Output};

/// JSON Schema of the `python` and `bash` slots of `structuredContent`.
pub(super) fn output_schema() -> Value {
    let text = json!({"type": "string"});
    let flag = json!({"type": "boolean"});
    let int = json!({"type": "integer"});
    let kept_file = json!({"type": "object", "properties": {
        "path": text, "uri": text, "bytes": int,
    }});
    json!({
        "type": "object",
        "properties": {
            "stdout": text, "stderr": text,
            "stdout_truncated": flag, "stderr_truncated": flag,
            "stdout_bytes": int, "stderr_bytes": int,
            "result": {"type": ["object", "null"], "properties": {"text": text, "html": text}},
            "images": int, "images_truncated": flag,
            "stdout_file": kept_file, "stderr_file": kept_file, "value_file": kept_file,
            "figure_links": {"type": "array", "items": text},
            "error": {"type": ["object", "null"], "properties": {"type": text, "message": text, "traceback": text}},
            "exit_status": {"type": ["integer", "null"]},
            "signal": {"type": ["string", "null"]},
            "timed_out": flag,
            "interrupted": {"type": ["string", "null"], "enum": ["timeout", "cancelled", null]},
            "duration_ms": {"type": "number"},
            "network": {"type": "array", "items": {"type": "object", "properties": {
                "host": text, "port": int, "kind": text, "bytes_sent": int,
                "bytes_received": int, "duration_ms": int, "refused": text,
            }}},
            "session": {"type": "object", "properties": {
                "id": {"type": ["string", "null"]}, "fresh": flag, "expired": flag,
                "restored": flag,
                "not_restored": {"type": "array", "items": {"type": "object", "properties": {
                    "name": text, "type": text, "reason": text,
                }}},
                "checkpoint_age_s": {"type": "number"},
                "node_lost": flag,
                "execution_count": int,
            }},
        },
        "required": ["stdout", "stderr", "stdout_truncated", "stderr_truncated", "result", "error",
                     "exit_status", "duration_ms", "session"],
    })
}

/// The content and structured record of one run; its long parts as `kept` shows them.
pub(super) fn render(
    call: &RunOutcome,
    session_id: Option<&str>,
    limit: Duration,
    kept: Kept,
) -> Output {
    let outcome = &call.outcome;
    let mut content = Vec::new();
    if let Some(note) = session_note(call, session_id) {
        content.push(ContentItem::Text(note));
    }
    push_stream(
        &mut content,
        "",
        &outcome.stdout,
        outcome.stdout_truncated,
        outcome.stdout_bytes,
        kept.stdout.as_ref(),
    );
    push_stream(
        &mut content,
        "stderr:\n",
        &outcome.stderr,
        outcome.stderr_truncated,
        outcome.stderr_bytes,
        kept.stderr.as_ref(),
    );
    if let Some(result) = &outcome.result {
        match &kept.value {
            Some(shown) => push_shown(&mut content, "", shown),
            None => content.push(ContentItem::Text(result.text_plain.clone())),
        }
        if let Some(png) = &result.image_png {
            content.push(png_item(png));
        }
    }
    content.extend(outcome.images.iter().map(|png| png_item(png)));
    // after the images, so that a client that shows images shows them first
    content.extend(kept.figures.iter().cloned().map(ContentItem::ResourceLink));
    if outcome.images_truncated {
        content.push(ContentItem::Text(
            "Note: some figures were left out (size limit).".to_owned(),
        ));
    }
    if let Some(note) = interruption_note(outcome, limit) {
        content.push(ContentItem::Text(note));
    }
    if let Some(note) = refused_note(&call.egress) {
        content.push(ContentItem::Text(note));
    }
    let failed = push_failure(&mut content, outcome);
    if content.is_empty() {
        content.push(ContentItem::Text("(no output)".to_owned()));
    }
    Output {
        content,
        structured: structured(call, session_id, &kept),
        is_error: failed,
        ..Output::default()
    }
}

fn push_stream(
    content: &mut Vec<ContentItem>,
    label: &str,
    text: &str,
    cut: bool,
    bytes: u64,
    kept: Option<&Shown>,
) {
    if let Some(shown) = kept {
        push_shown(content, label, shown);
        return;
    }
    if text.is_empty() && !cut {
        return;
    }
    let mut shown = format!("{label}{text}");
    if cut {
        shown.push_str(&format!(
            "\n[output truncated: {bytes} bytes were written; only the first {} are shown]",
            text.len()
        ));
    }
    content.push(ContentItem::Text(shown));
}

/// A long text's preview, and the link to its whole when it was kept.
fn push_shown(content: &mut Vec<ContentItem>, label: &str, shown: &Shown) {
    content.push(ContentItem::Text(format!("{label}{}", shown.preview)));
    if let Some(link) = &shown.file {
        content.push(ContentItem::ResourceLink(link.clone()));
    }
}

fn png_item(data: &str) -> ContentItem {
    ContentItem::Image {
        data: data.to_owned(),
        mime_type: "image/png".to_owned(),
    }
}

/// Most refusals a note names; the structured record has them all.
const REFUSALS_SHOWN: usize = 5;

/// What the proxy refused the run's code, one line each, so the reader sees why a request
/// failed without reading the structured record.
fn refused_note(reached: &[toolgate_sandbox::Destination]) -> Option<String> {
    let refused: Vec<String> = reached
        .iter()
        .filter_map(|d| {
            d.refused
                .as_ref()
                .map(|why| format!("- {}:{}: {why}", d.host, d.port))
        })
        .collect();
    if refused.is_empty() {
        return None;
    }
    let mut note = format!("Network: the proxy refused {}:\n", refused.len());
    note.push_str(&refused[..refused.len().min(REFUSALS_SHOWN)].join("\n"));
    if refused.len() > REFUSALS_SHOWN {
        note.push_str(&format!("\n… and {} more", refused.len() - REFUSALS_SHOWN));
    }
    Some(note)
}

fn interruption_note(outcome: &ExecOutcome, limit: Duration) -> Option<String> {
    match outcome.interrupted? {
        Interruption::Timeout => Some(format!(
            "The code ran past its time limit of {} s and was interrupted; the session and its \
             variables survive.",
            limit.as_secs()
        )),
        Interruption::Cancelled => Some(
            "The call was cancelled and the code was interrupted; the session and its variables \
             survive."
                .to_owned(),
        ),
    }
}

/// Adds the traceback or the exit status; whether the run failed.
fn push_failure(content: &mut Vec<ContentItem>, outcome: &ExecOutcome) -> bool {
    let mut failed = false;
    if let Some(error) = &outcome.error {
        failed = true;
        let headline = format!("{}: {}", error.error_type, error.message);
        let text = if error.traceback.contains(&error.error_type) {
            error.traceback.clone()
        } else if error.traceback.is_empty() {
            headline
        } else {
            format!("{}\n{headline}", error.traceback.trim_end())
        };
        content.push(ContentItem::Text(text));
    }
    if outcome.kind == RequestKind::Bash {
        let status = outcome.exit_status.unwrap_or(0);
        if status != 0 || outcome.signal.is_some() {
            failed = true;
            let mut text = format!("exit status {status}");
            if let Some(signal) = &outcome.signal {
                text.push_str(&format!(" (killed by {signal})"));
            }
            content.push(ContentItem::Text(text));
        }
    }
    failed
}

fn structured(call: &RunOutcome, session_id: Option<&str>, kept: &Kept) -> Value {
    let o = &call.outcome;
    let result = o.result.as_ref().map(|r| {
        let text = kept
            .value
            .as_ref()
            .map_or(&r.text_plain, |shown| &shown.preview);
        let mut value = json!({"text": text});
        if let Some(html) = &r.text_html {
            value["html"] = json!(html);
        }
        value
    });
    let error = o
        .error
        .as_ref()
        .map(|e| json!({"type": e.error_type, "message": e.message, "traceback": e.traceback}));
    let interrupted = o.interrupted.map(|i| match i {
        Interruption::Timeout => "timeout",
        Interruption::Cancelled => "cancelled",
    });
    let images = o.images.len() + o.result.iter().filter(|r| r.image_png.is_some()).count();
    let shown = |text: &str, kept: Option<&Shown>| {
        kept.map_or_else(|| text.to_owned(), |shown| shown.preview.clone())
    };
    let mut record = json!({
        "stdout": shown(&o.stdout, kept.stdout.as_ref()),
        "stderr": shown(&o.stderr, kept.stderr.as_ref()),
        // a preview is the stream cut, whatever the session kept
        "stdout_truncated": o.stdout_truncated || kept.stdout.is_some(),
        "stderr_truncated": o.stderr_truncated || kept.stderr.is_some(),
        "stdout_bytes": o.stdout_bytes, "stderr_bytes": o.stderr_bytes,
        "result": result, "images": images, "images_truncated": o.images_truncated,
        "error": error, "exit_status": o.exit_status, "signal": o.signal,
        "timed_out": o.timed_out, "interrupted": interrupted,
        "duration_ms": o.duration_ms,
        "session": session_record(call, session_id, Some(o.execution_count)),
    });
    for (key, kept) in [
        ("stdout_file", &kept.stdout),
        ("stderr_file", &kept.stderr),
        ("value_file", &kept.value),
    ] {
        if let Some((link, path)) = kept
            .as_ref()
            .and_then(|shown| shown.file.as_ref().zip(shown.path.as_ref()))
        {
            record[key] = json!({"path": path, "uri": link.uri, "bytes": link.size});
        }
    }
    if !call.egress.is_empty() {
        record["network"] = json!(call.egress);
    }
    if !kept.figures.is_empty() {
        record["figure_links"] = kept.figures.iter().map(|link| json!(link.uri)).collect();
    }
    record
}

/// What a result says of its session: its id, whether it is new, expired or restored (and
/// what a restore could not bring back), its count of runs.
pub(super) fn session_record(
    call: &RunOutcome,
    session_id: Option<&str>,
    execution_count: Option<u64>,
) -> Value {
    let mut record = json!({
        "id": session_id, "fresh": call.fresh, "expired": call.expired,
        "restored": call.restored.is_some(),
    });
    if let Some(restored) = &call.restored {
        record["not_restored"] = json!(restored.not_restored);
        record["checkpoint_age_s"] = json!(checkpoint_age(restored).as_secs_f64().round());
        if restored.fell_back {
            record["fell_back"] = json!(true);
        }
    }
    if call.node_lost {
        record["node_lost"] = json!(true);
    }
    if let Some(count) = execution_count {
        record["execution_count"] = json!(count);
    }
    record
}

fn checkpoint_age(restored: &toolgate_sandbox::Restored) -> Duration {
    std::time::SystemTime::now()
        .duration_since(restored.saved_at)
        .unwrap_or_default()
}

/// The line a result starts with when its session was not simply there: expired, restored
/// from its checkpoint (naming what could not be), or its checkpoint lost.
pub(super) fn session_note(call: &RunOutcome, session_id: Option<&str>) -> Option<String> {
    let note = restore_note(call, session_id);
    if !call.node_lost {
        return note;
    }
    let id = session_id.unwrap_or_default();
    let lost = format!("Note: the execution node session `{id}` lived on was lost.");
    Some(match note {
        Some(note) => format!("{lost} {}", note.trim_start_matches("Note: ")),
        None => format!(
            "{lost} It had no checkpoint yet, so this call started a fresh one: earlier variables \
             and files are gone."
        ),
    })
}

fn restore_note(call: &RunOutcome, session_id: Option<&str>) -> Option<String> {
    let id = session_id.unwrap_or_default();
    if let Some(why) = &call.lost_checkpoint {
        return Some(format!(
            "Note: session `{id}` could not be restored: {why}. Earlier variables and files are \
             gone."
        ));
    }
    if let Some(restored) = &call.restored {
        let from = if restored.fell_back {
            "the checkpoint before its newest (the newest could not be read)"
        } else {
            "its checkpoint"
        };
        let mut note = format!(
            "Note: session `{id}` was restored from {from} of {} s ago.",
            checkpoint_age(restored).as_secs()
        );
        if !restored.not_restored.is_empty() {
            let names: Vec<String> = restored
                .not_restored
                .iter()
                .map(|n| match n.type_name.as_str() {
                    "" => format!("{} ({})", n.name, n.reason),
                    kind => format!("{} ({kind}: {})", n.name, n.reason),
                })
                .collect();
            note.push_str(&format!(" Not restored: {}.", names.join("; ")));
        }
        return Some(note);
    }
    call.expired.then(|| {
        format!(
            "Note: session `{id}` had expired after being idle too long; this call started a \
             fresh one, so earlier variables and files are gone."
        )
    })
}
