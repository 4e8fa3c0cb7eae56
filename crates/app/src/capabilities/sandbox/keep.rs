//! Output too long to show inline: a stream (or a value's text) past the inline limit comes back
//! as a preview (its head and tail, saying how much is left out), and its whole is kept as a file
//! of the session's workspace with a signed download link; each figure is kept as a file with a
//! link too. Only a run in the caller's own session keeps files (a session without an id ends
//! with the call), and only where links are made (the vault signs them).
//!
//! The kept files hold what the caller would have seen: redacted of the call's secrets, as the
//! inline answer is. A stream the session wrote whole into its workspace (it passed the session's
//! 1 MiB) is read back and written again redacted when the call has secrets to redact.

use std::sync::Arc;

use base64::Engine;
use toolgate_sandbox::{
    ExecOutcome, RunRequest, SpilledStream, Work, WorkspaceFile, WorkspaceRead,
};
use toolgate_vault::Redactor;

use super::Sandbox;
use crate::capability::{CallContext, ResourceLink};
use crate::links::Links;

/// Where the files kept for a call go, relative to the workspace (where the session puts the
/// streams it keeps whole, too).
const KEPT_DIR: &str = ".toolgate/output";

/// The default of `inline_result_chars`.
pub const DEFAULT_INLINE_CHARS: usize = 20_000;

/// The most a client may raise the inline limit to (`anthropic/maxResultSizeChars`): a session
/// keeps 1 MiB of a stream inline.
const MAX_INLINE_CHARS: usize = 1 << 20;

/// How a run's long output is shown, and what of it was kept as files.
#[derive(Debug, Default)]
pub(super) struct Kept {
    /// stdout, when it was too long to show whole
    pub stdout: Option<Shown>,
    /// stderr, likewise
    pub stderr: Option<Shown>,
    /// the last value's text, likewise
    pub value: Option<Shown>,
    /// a link per figure kept (the value's image first, then the figures), in order
    pub figures: Vec<ResourceLink>,
}

/// A long text as shown: its preview, and its whole as a file if it was kept.
#[derive(Debug)]
pub(super) struct Shown {
    /// head, a note of what is left out, tail
    pub preview: String,
    /// the file holding the whole, with its link
    pub file: Option<ResourceLink>,
    /// the file's path in the workspace
    pub path: Option<String>,
}

/// One text to shape: what the session sent of it, and the file it kept, if any.
struct Long<'a> {
    /// `stdout`, `stderr`, `value`: its name in file names and notes
    name: &'static str,
    text: &'a str,
    /// more was written than `text` holds
    cut: bool,
    /// bytes written
    bytes: u64,
    spilled: Option<&'a SpilledStream>,
}

impl Sandbox {
    /// The inline limit of one call: the operator's, raised by what the client takes.
    fn inline_chars_for(&self, ctx: &CallContext<'_>) -> usize {
        ctx.result_chars
            .unwrap_or(0)
            .max(self.inline_chars)
            .min(MAX_INLINE_CHARS)
    }

    /// Whether runs in `session` keep long output as files: a caller's session, and links.
    pub(super) fn keeps_files(&self, session: Option<&str>) -> bool {
        session.is_some() && self.links.is_some()
    }

    /// Shapes the long parts of `outcome` (of a run in `session`, the caller's, if any).
    pub(super) async fn keep(
        &self,
        ctx: &CallContext<'_>,
        session: Option<&str>,
        outcome: &ExecOutcome,
    ) -> Kept {
        let limit = self.inline_chars_for(ctx);
        let redactor = ctx.secrets.redactor();
        let mut keeper = session
            .zip(self.links.as_ref())
            .map(|(session, links)| Keeper {
                sandbox: self,
                links,
                account: super::account_key(ctx),
                session,
                tag: random_tag(),
                writes: Vec::new(),
            });
        let longs = [
            Long {
                name: "stdout",
                text: &outcome.stdout,
                cut: outcome.stdout_truncated,
                bytes: outcome.stdout_bytes,
                spilled: outcome.stdout_file.as_ref(),
            },
            Long {
                name: "stderr",
                text: &outcome.stderr,
                cut: outcome.stderr_truncated,
                bytes: outcome.stderr_bytes,
                spilled: outcome.stderr_file.as_ref(),
            },
            Long {
                name: "value",
                text: outcome
                    .result
                    .as_ref()
                    .map_or("", |value| value.text_plain.as_str()),
                cut: false,
                bytes: 0,
                spilled: None,
            },
        ];
        let mut shown = Vec::new();
        for long in longs {
            if !long.cut && !longer_than(long.text, limit) {
                shown.push(None);
                continue;
            }
            let redacted = redact(redactor.as_deref(), long.text);
            let tail = long.spilled.map(|s| redact(redactor.as_deref(), &s.tail));
            let kept = match keeper.as_mut() {
                Some(keeper) => keeper.whole(&long, &redacted, redactor.as_deref()).await,
                None => None,
            };
            shown.push(Some((long, redacted, tail, kept)));
        }
        let mut figures = Vec::new();
        if let Some(keeper) = keeper.as_mut() {
            let pngs = outcome
                .result
                .iter()
                .filter_map(|value| value.image_png.as_deref())
                .chain(outcome.images.iter().map(String::as_str));
            for (index, png) in pngs.enumerate() {
                if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(png) {
                    let path = format!("{KEPT_DIR}/{}.figure-{}.png", keeper.tag, index + 1);
                    figures.push((path.clone(), bytes.len() as u64));
                    keeper.writes.push(WorkspaceFile {
                        path,
                        content: bytes,
                    });
                }
            }
        }
        let written = match keeper.as_mut() {
            Some(keeper) => keeper.write().await,
            None => true,
        };
        let link = |path: &str, size: u64, mime: &str, what: String| {
            let keeper = keeper.as_ref()?;
            let uri = keeper
                .links
                .download_url(&keeper.account, keeper.session, path)
                .ok()?;
            Some(ResourceLink {
                uri,
                name: path.rsplit('/').next().unwrap_or(path).to_owned(),
                mime_type: mime.to_owned(),
                size,
                description: what,
            })
        };
        let mut kept = Kept::default();
        for (slot, entry) in shown.into_iter().enumerate() {
            let Some((long, redacted, tail, whole)) = entry else {
                continue;
            };
            // a file the call meant to write but could not is not linked
            let whole = whole.filter(|file| file.spilled_as_is || written);
            let file = whole.as_ref().and_then(|whole| {
                link(
                    &whole.path,
                    whole.size,
                    "text/plain; charset=utf-8",
                    format!(
                        "the whole {} ({} bytes), in the session's workspace at {}",
                        long.name, whole.size, whole.path
                    ),
                )
            });
            let whereabouts = match (&whole, &file) {
                (Some(whole), Some(_)) => Whereabouts::Kept(whole),
                _ if keeper.is_some() => Whereabouts::NotKept,
                _ => Whereabouts::NoSession,
            };
            let preview = preview(&long, &redacted, tail.as_deref(), limit, &whereabouts);
            let shown = Shown {
                preview,
                path: file.as_ref().and(whole).map(|w| w.path),
                file,
            };
            match slot {
                0 => kept.stdout = Some(shown),
                1 => kept.stderr = Some(shown),
                _ => kept.value = Some(shown),
            }
        }
        if written {
            kept.figures = figures
                .into_iter()
                .filter_map(|(path, size)| {
                    link(
                        &path,
                        size,
                        "image/png",
                        format!("this figure, in the session's workspace at {path}"),
                    )
                })
                .collect();
        }
        kept
    }
}

/// A text's whole as a workspace file.
#[derive(Debug)]
struct Whole {
    path: String,
    size: u64,
    /// the session's own file, left as it was (nothing to redact): there whether or not the
    /// call's writes succeed
    spilled_as_is: bool,
}

/// Keeps the wholes of one run in its session: the files to write, written at once.
struct Keeper<'a> {
    sandbox: &'a Sandbox,
    links: &'a Arc<Links>,
    account: String,
    session: &'a str,
    /// what this call's file names start with
    tag: String,
    writes: Vec<WorkspaceFile>,
}

impl Keeper<'_> {
    /// The file holding `long`'s whole as the caller may see it.
    async fn whole(
        &mut self,
        long: &Long<'_>,
        redacted: &str,
        redactor: Option<&Redactor>,
    ) -> Option<Whole> {
        let Some(spilled) = long.spilled else {
            if long.cut {
                return None; // the session could not keep it whole
            }
            let path = format!("{KEPT_DIR}/{}.{}.txt", self.tag, long.name);
            self.writes.push(WorkspaceFile {
                path: path.clone(),
                content: redacted.as_bytes().to_vec(),
            });
            return Some(Whole {
                path,
                size: redacted.len() as u64,
                spilled_as_is: false,
            });
        };
        let Some(redactor) = redactor else {
            return Some(Whole {
                path: spilled.path.clone(),
                size: long.bytes,
                spilled_as_is: true,
            });
        };
        // the session's file holds what it wrote: rewritten as the caller may see it
        let read: WorkspaceRead = self
            .sandbox
            .sessions
            .read_file(
                &self.account,
                self.session,
                &spilled.path,
                self.sandbox.limits.workspace_bytes,
            )
            .await
            .ok()?;
        let whole = redactor.redact(&String::from_utf8_lossy(&read.bytes));
        let size = whole.len() as u64;
        self.writes.push(WorkspaceFile {
            path: spilled.path.clone(),
            content: whole.into_bytes(),
        });
        Some(Whole {
            path: spilled.path.clone(),
            size,
            spilled_as_is: false,
        })
    }

    /// Writes the files into the session; whether they were written.
    async fn write(&mut self) -> bool {
        if self.writes.is_empty() {
            return true;
        }
        let Ok(limits) = self.sandbox.limits.for_call(None) else {
            return false;
        };
        let request = RunRequest {
            files: std::mem::take(&mut self.writes),
            ..RunRequest::new(
                self.account.clone(),
                Some(self.session.to_owned()),
                Work::Python {
                    code: String::new(),
                },
                limits,
            )
        };
        match self.sandbox.sessions.run(request).await {
            Ok(_) => true,
            Err(error) => {
                tracing::warn!(%error, "a run's long output could not be kept as files");
                false
            }
        }
    }
}

/// Where a long text's whole is, as its preview says.
enum Whereabouts<'a> {
    /// kept as this file, with a link
    Kept(&'a Whole),
    /// the run was in the caller's session, but the whole could not be kept there
    NotKept,
    /// no session of the caller's to keep it in
    NoSession,
}

/// The preview of a long text: its head, a note of what is left out (and where the whole is),
/// its tail when it is known.
fn preview(
    long: &Long<'_>,
    redacted: &str,
    tail: Option<&str>,
    limit: usize,
    whereabouts: &Whereabouts<'_>,
) -> String {
    let total = match whereabouts {
        Whereabouts::Kept(whole) => whole.size,
        _ => long.bytes.max(redacted.len() as u64),
    };
    let (head, tail) = match tail {
        // the session kept the head (1 MiB) and the tail apart
        Some(tail) => (head_chars(redacted, limit / 2), tail_chars(tail, limit / 2)),
        None if long.cut => (head_chars(redacted, limit), ""),
        None => {
            let head = head_chars(redacted, limit / 2);
            let rest = &redacted[head.len()..];
            (head, tail_chars(rest, limit / 2))
        }
    };
    let left_out = total.saturating_sub((head.len() + tail.len()) as u64);
    let whereabouts = match whereabouts {
        Whereabouts::Kept(whole) => format!(
            "the whole {} ({total} bytes) is in the workspace file {} and at the link below",
            long.name, whole.path
        ),
        Whereabouts::NotKept => format!(
            "the whole {} could not be kept as a file (the workspace may be full)",
            long.name
        ),
        Whereabouts::NoSession => format!(
            "only a run with a session_id keeps the whole {} as a file with a link",
            long.name
        ),
    };
    let mut shown = String::with_capacity(head.len() + tail.len() + 160);
    shown.push_str(head);
    shown.push_str(&format!(
        "\n[… {left_out} of {total} bytes left out; {whereabouts} …]\n"
    ));
    shown.push_str(tail);
    shown
}

/// Whether `text` has more than `limit` characters (counted only when its bytes could be).
fn longer_than(text: &str, limit: usize) -> bool {
    text.len() > limit && text.chars().count() > limit
}

/// The first `n` characters of `text`.
fn head_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// The last `n` characters of `text`.
fn tail_chars(text: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    match text.char_indices().rev().nth(n - 1) {
        Some((start, _)) => &text[start..],
        None => text,
    }
}

fn redact(redactor: Option<&Redactor>, text: &str) -> String {
    match redactor {
        Some(redactor) => redactor.redact(text),
        None => text.to_owned(),
    }
}

/// Eight hex digits: the files one call keeps are named apart from every other call's, across
/// restarts too.
fn random_tag() -> String {
    let mut bytes = [0u8; 4];
    // without randomness the names fall back to the time: still apart in practice
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        bytes = nanos.to_be_bytes();
    }
    format!("call-{:08x}", u32::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_tails_are_cut_on_characters() {
        assert_eq!(head_chars("héllo", 2), "hé");
        assert_eq!(tail_chars("héllo", 4), "éllo");
        assert_eq!(tail_chars("hé", 5), "hé");
        assert_eq!(tail_chars("hé", 0), "");
        assert!(longer_than("ééé", 2) && !longer_than("ééé", 3));
    }

    #[test]
    fn a_preview_says_what_is_left_out_and_where_the_whole_is() {
        let text = format!("{}{}", "a".repeat(100), "z".repeat(100));
        let long = Long {
            name: "stdout",
            text: &text,
            cut: false,
            bytes: 200,
            spilled: None,
        };
        let whole = Whole {
            path: ".toolgate/output/call-1.stdout.txt".into(),
            size: 200,
            spilled_as_is: false,
        };
        let shown = preview(&long, &text, None, 20, &Whereabouts::Kept(&whole));
        assert!(shown.starts_with(&"a".repeat(10)), "{shown}");
        assert!(shown.ends_with(&"z".repeat(10)), "{shown}");
        assert!(shown.contains("180 of 200 bytes left out"), "{shown}");
        assert!(
            shown.contains(".toolgate/output/call-1.stdout.txt"),
            "{shown}"
        );
        let cut = Long {
            cut: true,
            bytes: 5_000,
            ..long
        };
        let shown = preview(&cut, &text, None, 20, &Whereabouts::NoSession);
        assert!(shown.contains("4980 of 5000 bytes left out"), "{shown}");
        assert!(shown.contains("session_id"), "{shown}");
        let shown = preview(&cut, &text, None, 20, &Whereabouts::NotKept);
        assert!(shown.contains("could not be kept"), "{shown}");
    }
}
