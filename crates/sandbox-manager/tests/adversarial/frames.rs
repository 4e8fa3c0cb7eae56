//! The adversarial suite, part 5: a session's frames are hostile input. The code of a cell runs
//! in the interpreter that reports to the server, so it can find the request's id (up the stack)
//! and the session's socket (a descriptor of its own) and write any frame it likes: a result
//! whose streams are over their caps, one that lists 1.5 million images, output without end, or
//! a frame that a thread keeps writing after its call has returned. The server holds every frame
//! to the session's own limits while it decodes: the session is killed, the call fails naming
//! the violation, the server's memory stays flat, and the next call gets a fresh session.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::harness::{Sandbox, Traced, session_error, small, text, within};
use toolgate_sandbox_manager::{
    KillReason, OUTPUT_QUEUE, OutputChunk, RunRequest, SessionError, Work,
};

/// The memory-measured cases run one at a time: they share this process's peak RSS.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Finds the request id (a local of the executor, up the stack) and the session's socket, and
/// defines `forge(**fields)` (a result frame for this request) and `send(bytes)`.
const FORGER: &str = "import json, os, struct, sys, threading, time\n\
    def link(fd):\n    \
        try:\n        \
            return os.readlink(f'/proc/self/fd/{fd}')\n    \
        except OSError:\n        \
            return ''\n\
    channel = [int(fd) for fd in os.listdir('/proc/self/fd') if link(fd).startswith('socket:')][0]\n\
    def request_id():\n    \
        f = sys._getframe()\n    \
        while 'rid' not in f.f_locals:\n        \
            f = f.f_back\n    \
        return f.f_locals['rid']\n\
    def send(data):\n    \
        view = memoryview(data)\n    \
        while view:\n        \
            view = view[os.write(channel, view):]\n\
    def frame(obj):\n    \
        body = json.dumps(obj).encode()\n    \
        return struct.pack('>I', len(body)) + body\n\
    def forge(times=1, **fields):\n    \
        reply = {'op': 'result', 'id': request_id(), 'kind': 'exec', 'stdout': '', 'stderr': '',\n             \
                 'stdout_truncated': False, 'stderr_truncated': False, 'stdout_bytes': 0,\n             \
                 'stderr_bytes': 0, 'result': None, 'images': [], 'images_truncated': False,\n             \
                 'error': None, 'exit_status': None, 'signal': None, 'timed_out': False,\n             \
                 'execution_count': 1, 'duration_ms': 1.0}\n    \
        reply.update(fields)\n    \
        send(frame(reply) * times)\n";

/// The highest resident set of this process since the last [`reset_peak`], and the current one.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    };
    (field("VmHWM:") * 1024, field("VmRSS:") * 1024)
}

/// Resets this process's peak resident set (`VmHWM`) to its current one.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// Runs `code` after [`FORGER`] in `id`'s session, which must be killed for a protocol violation
/// whose description contains `violation`. Returns the error and how much this process's peak
/// resident set grew during the call.
async fn forged_call(s: &Sandbox, id: &str, code: &str, violation: &str) -> (SessionError, u64) {
    let limits = small(20);
    let first = s.ok("attacker", id, "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    reset_peak();
    let (_, before) = rss();
    let start = Instant::now();
    let call = s
        .exec("attacker", id, &format!("{FORGER}{code}"), &limits)
        .await;
    let took = start.elapsed();
    let (peak, _) = rss();
    let error = session_error(&call).clone();
    let SessionError::Killed {
        reason,
        violation: ref seen,
        ..
    } = error
    else {
        panic!("{id}: not killed: {error:?}");
    };
    assert_eq!(reason, KillReason::Protocol, "{id}");
    assert!(
        seen.as_deref().is_some_and(|s| s.contains(violation)),
        "{id}: {error}"
    );
    assert!(error.to_string().contains("protocol"), "{id}: {error}");
    // killed for the violation, not at its 20 s limit (the reason says so; no speed asserted)
    assert!(took < Duration::from_secs(20), "{id}: {took:?}");
    traced.assert_gone().await;
    s.assert_fresh("attacker", id, "kept").await;
    (error, peak.saturating_sub(before))
}

/// A forged result with 4 MiB of stdout (the session keeps 1 MiB) is refused while it is
/// decoded: the call's answer is a short protocol error, not 4 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_result_with_4_mib_of_stdout_is_refused() {
    let _serial = SERIAL.lock().await;
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let code = "forge(stdout='x' * (4 << 20), stdout_bytes=4 << 20)\ntime.sleep(30)";
    let (error, grew) = forged_call(&s, "stdout", code, "stdout is over its limit").await;
    let answer = error.to_string();
    assert!(answer.len() < 512, "{answer}");
    eprintln!(
        "forged 4 MiB stdout: answer {} bytes, peak RSS +{} KiB",
        answer.len(),
        grew >> 10
    );
    let code = "forge(stderr='\\x01' * ((1 << 20) + 1))\ntime.sleep(30)";
    forged_call(&s, "stderr", code, "stderr is over its limit").await;
    s.assert_healthy(zygote).await;
    s.m.shutdown().await;
}

/// The forged result of 4.3 MiB that lists 1.5 million empty images: refused at the 65th, so
/// this process's peak resident set grows by about the frame, not by a list of 1.5 million
/// strings (36 MiB and more, and several times that once it is answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_result_with_a_million_images_costs_the_server_nothing_much() {
    let _serial = SERIAL.lock().await;
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let code = "forge(images=[''] * 1_500_000)\ntime.sleep(30)";
    let (_, grew) = forged_call(&s, "images", code, "more than 64 entries").await;
    eprintln!("forged 1.5M images: peak RSS +{} KiB", grew >> 10);
    assert!(grew < 16 << 20, "the server grew by {} KiB", grew >> 10);
    s.assert_healthy(zygote).await;
    s.m.shutdown().await;
}

/// Streamed output is held to the same 1 MiB per stream, and an output frame for another stream
/// cannot carry more; frames of unknown ops count against the call's budget of frame bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_output_and_unknown_frames_are_bounded_per_call() {
    let _serial = SERIAL.lock().await;
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(20);
    s.ok("attacker", "output", "kept = 'yes'", &limits).await;
    let code = format!(
        "{FORGER}chunk = frame({{'op': 'output', 'id': request_id(), 'stream': 'stdout', \
         'data': 'y' * 65536}})\nfor _ in range(17):\n    send(chunk)\ntime.sleep(30)"
    );
    let mut streamed = 0usize;
    let mut on_output = |chunk: OutputChunk| streamed += chunk.data.len();
    let call =
        s.m.exec(
            "attacker",
            Some("output"),
            &code,
            &limits,
            &[],
            Some(&mut on_output),
        )
        .await;
    let error = session_error(&call);
    assert!(
        error
            .to_string()
            .contains("streamed stdout is over its limit"),
        "{error}"
    );
    assert!(streamed <= 1 << 20, "{streamed}");
    s.assert_fresh("attacker", "output", "kept").await;
    // 65 frames of 1 MiB of an op nobody knows: over the call's 64 MiB of frames
    let code = "junk = frame({'op': 'future', 'pad': 'z' * (1 << 20)})\n\
                for _ in range(65):\n    send(junk)\ntime.sleep(30)";
    forged_call(&s, "unknown", code, "budget").await;
    s.assert_healthy(zygote).await;
    s.m.shutdown().await;
}

/// After its call has returned, a thread of the cell writes a frame without end (a 60 MiB
/// header, then bytes until it is stopped). Nothing is due between calls: the first byte ends
/// the session, within a moment, and none of it is kept. A well-behaved call afterwards gets a
/// fresh session and its full answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_frame_after_the_call_kills_the_session_at_once() {
    let _serial = SERIAL.lock().await;
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(20);
    let first = s.ok("attacker", "late", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let code = format!(
        "{FORGER}def endless():\n    time.sleep(0.3)\n    send(struct.pack('>I', 60 << 20))\n    \
         block = b'x' * (1 << 20)\n    while True:\n        send(block)\n\
         threading.Thread(target=endless).start()\n'returned'"
    );
    reset_peak();
    let (_, before) = rss();
    let call = s.ok("attacker", "late", &code, &limits).await;
    let returned = Instant::now();
    assert_eq!(text(&call), "'returned'");
    within(Duration::from_secs(5), "the session killed", || {
        !traced.session.exists()
    })
    .await;
    let gone = returned.elapsed();
    let (peak, _) = rss();
    let grew = peak.saturating_sub(before);
    eprintln!(
        "endless frame after the call: session gone {} ms after the call returned (0.3 s of \
         them the thread's own wait), peak RSS +{} KiB",
        gone.as_millis(),
        grew >> 10
    );
    // at once, not when the idle session would expire (no speed is asserted)
    assert!(gone < Duration::from_secs(20), "{gone:?}");
    assert!(grew < 16 << 20, "the server grew by {} KiB", grew >> 10);
    // (its empty groups stay until the session is retired: its next call makes new ones)
    traced.assert_processes_gone().await;
    s.assert_fresh("attacker", "late", "kept").await;

    // the honest edge: 2 MB printed (1 MiB kept), a value's text near its cap, a figure-free
    // result; all accepted whole
    let code = "print('x' * 2_000_000)\n'v' * 1_000_000";
    let call = s.ok("attacker", "late", code, &limits).await;
    assert!(call.outcome.stdout_truncated);
    assert_eq!(call.outcome.stdout.len(), 1 << 20);
    assert_eq!(text(&call).len(), 1_000_002);
    assert!(!call.fresh);
    let call = s
        .ok("attacker", "late", "kept = 'again'\nkept", &limits)
        .await;
    assert_eq!(text(&call), "'again'");
    assert!(s.m.close_session("attacker", "late").await);
    traced.assert_gone().await;
    s.assert_healthy(zygote).await;
    s.m.shutdown().await;
}

/// A forged result within the caps is the code's own business (it could print the same), but
/// another reply follows it, when nothing is due: whether the server has read it with the first
/// (two forged results in one write) or finds it on the socket afterwards (the real result), the
/// session is killed, and the next call is fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_reply_to_one_request_kills_the_session() {
    let _serial = SERIAL.lock().await;
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(20);
    for id in ["twice", "twice-late"] {
        let first = s.ok("attacker", id, "kept = 'yes'", &limits).await;
        let traced = Traced::of(first.pid);
        let code = if id == "twice" {
            format!("{FORGER}forge(times=2, stdout='forged')\ntime.sleep(30)")
        } else {
            format!("{FORGER}forge(stdout='forged')\ntime.sleep(0.3)\n'real'")
        };
        let call = s.ok("attacker", id, &code, &limits).await;
        assert_eq!(call.outcome.stdout, "forged");
        traced.assert_processes_gone().await;
        s.assert_fresh("attacker", id, "kept").await;
        assert!(s.m.close_session("attacker", id).await);
    }
    s.assert_healthy(zygote).await;
    s.m.shutdown().await;
}

/// 200,000 output frames of one character each (within the 1 MiB of stdout) while the caller
/// reads none of its output until the call has returned: the server reads every frame, at most
/// the output channel's `OUTPUT_QUEUE` chunks wait for the caller, the rest are dropped, so the
/// server does not pile up 200,000 chunks; the outcome still arrives. The session returns only
/// once its socket holds nothing unread, so every frame was read while the caller was away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_tiny_output_frames_waits_in_a_bounded_queue() {
    let _serial = SERIAL.lock().await;
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(30);
    s.ok("attacker", "tiny", "kept = 'yes'", &limits).await;
    let code = format!(
        "{FORGER}import fcntl, termios\n\
         chunk = frame({{'op': 'output', 'id': request_id(), 'stream': 'stdout', 'data': 'y'}})\n\
         send(chunk * 200_000)\n\
         while struct.unpack('i', fcntl.ioctl(channel, termios.TIOCOUTQ, bytes(4)))[0]:\n    \
             time.sleep(0.001)\n\
         'sent'"
    );
    let (output, mut chunks) = tokio::sync::mpsc::channel::<OutputChunk>(OUTPUT_QUEUE);
    let mut request = RunRequest::new(
        "attacker",
        Some("tiny".to_owned()),
        Work::Python { code },
        limits.clone(),
    );
    request.output = Some(output);
    reset_peak();
    let (_, before) = rss();
    // the caller is away: nothing reads `chunks` until the call has returned
    let call = s.m.run(request).await.unwrap();
    let (peak, _) = rss();
    let grew = peak.saturating_sub(before);
    assert_eq!(text(&call), "'sent'", "{:?}", call.outcome.error);
    let mut received = 0usize;
    while chunks.try_recv().is_ok() {
        received += 1;
    }
    eprintln!(
        "200,000 tiny output frames, caller away: {received} chunks passed on, peak RSS +{} KiB",
        grew >> 10
    );
    assert!(received <= OUTPUT_QUEUE, "{received}");
    assert!(received > 0, "no chunk was passed on");
    assert!(grew < 8 << 20, "the server grew by {} KiB", grew >> 10);
    s.assert_healthy(zygote).await;
    s.m.shutdown().await;
}
