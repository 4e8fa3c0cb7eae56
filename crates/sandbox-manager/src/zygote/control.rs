//! The zygote's control channel and process, each owned by a task: the reader that hands every
//! frame to its waiter, the writer that sends frames (a fork frame with its descriptor), the
//! watcher that owns the process, and the forwarder of its stderr.

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::process::{Child, ChildStderr};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::{Dispatch, Forked, Outgoing, ZygoteError};
use crate::signal_name;
use toolgate_sandbox::frame::FrameError;
use toolgate_sandbox::protocol::ControlEvent;

use crate::frame_io;

/// Reads every control frame as it comes and hands it to its waiter; never waits on anyone.
pub(super) async fn read_control(mut input: OwnedReadHalf, dispatch: Arc<Dispatch>) {
    let why = loop {
        let frame = match frame_io::read::<ControlEvent>(&mut input).await {
            Ok(frame) => frame,
            Err(FrameError::Malformed(e)) => {
                // the whole body was read, so the channel is still in step
                tracing::warn!("zygote sent a control frame this server cannot read: {e}");
                continue;
            }
            Err(FrameError::Closed) => break "its control channel closed".to_owned(),
            Err(e) => break format!("its control channel failed: {e}"),
        };
        let mut state = dispatch.lock();
        match frame {
            ControlEvent::Forked {
                session,
                pid,
                ready_ms,
                fork_ms,
                hardened,
            } => {
                // the exit slot exists before anyone learns the pid, so no `exited` is missed
                let (exit_tx, exit) = watch::channel(None);
                state.exits.insert(pid, exit_tx);
                tracing::debug!(
                    target: "toolgate_sandbox::timing",
                    pid,
                    zygote_ready_ms = ready_ms.unwrap_or(f64::NAN),
                    zygote_fork_ms = fork_ms.unwrap_or(f64::NAN),
                    hardened = hardened.as_deref().unwrap_or(""),
                    "session forked"
                );
                state.spawned.remove(&session);
                if let Some(waiter) = state.forks.remove(&session) {
                    let _ = waiter.send(Ok(Forked { pid, exit }));
                }
            }
            ControlEvent::Spawned { session } => {
                if let Some(waiter) = state.spawned.remove(&session) {
                    let _ = waiter.send(());
                }
            }
            ControlEvent::Exited(info) => {
                if let Some(slot) = state.exits.remove(&info.pid) {
                    let _ = slot.send(Some(info));
                }
            }
            ControlEvent::Error(error) => {
                if let Some(session) = &error.session {
                    state.spawned.remove(session);
                }
                let waiter = error.session.as_ref().and_then(|s| state.forks.remove(s));
                match waiter {
                    Some(waiter) => {
                        let _ = waiter.send(Err(ZygoteError::Refused {
                            code: error.code,
                            message: error.message,
                        }));
                    }
                    None => tracing::warn!(
                        code = %error.code,
                        "zygote error frame: {}",
                        error.message
                    ),
                }
            }
            ControlEvent::Hello(_) | ControlEvent::Pong | ControlEvent::Other => {}
        }
    };
    let mut state = dispatch.lock();
    state.closed = Some(why);
    // waiters learn that the zygote is gone (their senders drop); sessions see their exit slot
    // close, and their sockets reach end of file as the children die with the zygote
    state.forks.clear();
    state.spawned.clear();
    state.exits.clear();
}

/// Sends frames in order. A fork frame's descriptors go with its first byte, in one sendmsg.
pub(super) async fn write_control(
    mut out: OwnedWriteHalf,
    mut frames: mpsc::UnboundedReceiver<Outgoing>,
    stop: CancellationToken,
) {
    loop {
        let message = tokio::select! {
            message = frames.recv() => message,
            () = stop.cancelled() => None,
        };
        let Some(message) = message else { break };
        if let Err(e) = send_frame(&mut out, &message.bytes, &message.fds).await {
            tracing::warn!("writing to the zygote failed: {e}");
            break;
        }
    }
    // dropping the write half shuts the socket down for writing: the zygote reads end of file
    // and exits
}

/// The most descriptors a frame carries (a hardened fork: its socket and its workspace).
const MAX_FDS: usize = 2;

async fn send_frame(out: &mut OwnedWriteHalf, bytes: &[u8], fds: &[OwnedFd]) -> io::Result<()> {
    let mut sent = 0;
    if !fds.is_empty() {
        if fds.len() > MAX_FDS {
            return Err(io::Error::other("more descriptors than a frame carries"));
        }
        let stream: &UnixStream = out.as_ref();
        sent = stream
            .async_io(tokio::io::Interest::WRITABLE, || {
                let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
                let mut control = SendAncillaryBuffer::new(&mut space);
                let fds: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
                if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
                    return Err(io::Error::other("no room for SCM_RIGHTS"));
                }
                let iov = [IoSlice::new(bytes)];
                Ok(rustix::net::sendmsg(
                    stream,
                    &iov,
                    &mut control,
                    SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
                )?)
            })
            .await?;
    }
    // the rest of a frame the socket buffer could not take at once (no descriptor with it)
    out.write_all(&bytes[sent..]).await?;
    Ok(())
}

/// Owns the zygote process: records how it ended; on stop, gives it two seconds to exit on its
/// own (it does, at end of file) and kills it otherwise.
pub(super) async fn watch_process(
    mut child: Child,
    status_tx: watch::Sender<Option<String>>,
    stop: CancellationToken,
) {
    let status = tokio::select! {
        status = child.wait() => status,
        () = stop.cancelled() => {
            match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            }
        }
    };
    let text = match status {
        Ok(status) => describe_status(status),
        Err(e) => format!("waiting for it failed: {e}"),
    };
    let _ = status_tx.send(Some(text));
}

pub(super) fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("it exited with status {code}"),
        (None, Some(signal)) => format!("it was killed by signal {}", signal_name(signal)),
        _ => "it ended".to_owned(),
    }
}

/// Passes the zygote's stderr on to the log, keeping the last few KiB for start-up errors.
pub(super) async fn forward_stderr(stderr: ChildStderr, tail: Arc<Mutex<String>>) {
    const KEEP: usize = 4096;
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::warn!(target: "toolgate::zygote", "{line}");
        let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
        tail.push_str(&line);
        tail.push('\n');
        if tail.len() > KEEP {
            let mut cut = tail.len() - KEEP;
            while !tail.is_char_boundary(cut) {
                cut += 1;
            }
            tail.drain(..cut);
        }
    }
}
