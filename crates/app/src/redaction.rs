//! Redaction, written once: where a call finishes, every secret value its capabilities opened
//! (registered in [`CallSecrets`]) is replaced in what it shows — each capability's content,
//! structured content, typed result and failure — and in its progress messages as they pass.
//! Capabilities do not redact their own output; the two that stream (a run's output, a model's
//! answer) hold back a tail per stream with the call's redactor, as a value may be split between
//! two pieces, and the sql capability redacts its values before it escapes them into Markdown.

use serde_json::Value;
use toolgate_vault::Redactor;

use crate::capability::{CallSecrets, ContentItem, Output, ProgressSink, TypedOutput};
use crate::registry::Ran;
use toolgate_ports::fetch::PageContent;

/// Redacts what one capability of a call did: its output (but bytes it shows verbatim) or its
/// failure's message.
pub(crate) fn redact_ran(ran: &mut Ran, redactor: &Redactor) {
    match &mut ran.result {
        Ok(output) => redact_output(output, redactor),
        Err(failure) => {
            redactor.redact_in_place(&mut failure.message);
        }
    }
}

/// Replaces every secret value in the output's text, structured strings and typed result.
fn redact_output(output: &mut Output, redactor: &Redactor) {
    if output.verbatim {
        return;
    }
    for item in &mut output.content {
        if let ContentItem::Text(text) = item {
            redactor.redact_in_place(text);
        }
    }
    redact_value(&mut output.structured, redactor);
    if let Some(typed) = &mut output.typed {
        redact_typed(typed, redactor);
    }
}

/// Every string of `value`, found without recursion: the output holds values parsed from what a
/// session sent, nested as deep as serde_json allows and a few levels more.
pub(crate) fn redact_value(value: &mut Value, redactor: &Redactor) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::String(text) => {
                redactor.redact_in_place(text);
            }
            Value::Array(items) => pending.extend(items.iter_mut()),
            Value::Object(fields) => pending.extend(fields.values_mut()),
            _ => {}
        }
    }
}

/// Every string of a typed result: an upcall's answer is redacted as the tool's is.
fn redact_typed(typed: &mut TypedOutput, redactor: &Redactor) {
    if let TypedOutput::Table(_, table) = typed {
        // the cells are JSON values (a JSON column nests): every string in them
        for cell in table.rows.iter_mut().flatten() {
            redact_value(cell, redactor);
        }
        return;
    }
    let texts: Vec<&mut String> = match typed {
        TypedOutput::Billing(status) => vec![
            &mut status.tier,
            &mut status.wallet_balance_usd,
            &mut status.paid_call_cost_usd,
            &mut status.min_topup_usd,
            &mut status.max_topup_usd,
        ],
        TypedOutput::Llm(answer) => vec![
            &mut answer.text,
            &mut answer.model,
            &mut answer.provider,
            &mut answer.finish_reason,
        ],
        TypedOutput::Search(results) => results
            .iter_mut()
            .flat_map(|r| {
                [&mut r.title, &mut r.url, &mut r.snippet]
                    .into_iter()
                    .chain(r.date.as_mut())
            })
            .collect(),
        TypedOutput::Page(page) => {
            let body = match &mut page.content {
                PageContent::Text { text, .. } => Some(text),
                PageContent::Binary { summary } => Some(summary),
                // base64 of an image, shown as it is (as the tool's image content)
                PageContent::Image { .. } => None,
            };
            [&mut page.final_url, &mut page.content_type]
                .into_iter()
                .chain(body)
                .chain(page.headers.iter_mut().map(|(_, value)| value))
                .collect()
        }
        TypedOutput::SecretNames(names) => names.iter_mut().collect(),
        TypedOutput::Table(..) => Vec::new(),
    };
    for text in texts {
        redactor.redact_in_place(text);
    }
}

/// The caller's progress sink, each message redacted of the values the call has opened so far.
pub(crate) struct RedactedProgress<'a> {
    sink: &'a dyn ProgressSink,
    secrets: &'a CallSecrets,
}

impl<'a> RedactedProgress<'a> {
    /// Passes on to `sink`, redacting with `secrets`.
    pub(crate) fn new(sink: &'a dyn ProgressSink, secrets: &'a CallSecrets) -> Self {
        Self { sink, secrets }
    }
}

impl ProgressSink for RedactedProgress<'_> {
    fn report(&self, progress: f64, message: &str) {
        match self.secrets.redactor() {
            Some(redactor) => self.sink.report(progress, &redactor.redact(message)),
            None => self.sink.report(progress, message),
        }
    }
}

#[cfg(test)]
#[path = "redaction_tests.rs"]
mod tests;
