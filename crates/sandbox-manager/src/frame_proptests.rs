//! Property tests of the session frame reader and decoder: arbitrary bytes never panic (in the
//! reader, the frame decoder, or the decoding of a result); any valid frame round-trips; and a
//! stream of frames split at any points into any pieces reads exactly as the whole.
#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, ReadBuf};
use toolgate_sandbox::frame::{MAX_FRAME_BYTES, encode};
use toolgate_sandbox::{OutputChunk, OutputStream};

use crate::bounded::{self, CallBudget};
use crate::frame_io::FrameReader;
use crate::session_input::{Step, on_frame};

/// A stream that hands its bytes over in the pieces given, one piece per read.
struct Pieces(VecDeque<Vec<u8>>);

impl AsyncRead for Pieces {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(mut piece) = self.0.pop_front() {
            let n = piece.len().min(buf.remaining());
            buf.put_slice(&piece[..n]);
            if n < piece.len() {
                piece.drain(..n);
                self.0.push_front(piece);
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// `bytes` cut at `cuts` (fractions of its length) into non-empty pieces.
fn pieces(bytes: &[u8], cuts: &[f64]) -> Pieces {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|f| (f * bytes.len() as f64) as usize)
        .collect();
    at.push(0);
    at.push(bytes.len());
    at.sort_unstable();
    at.dedup();
    Pieces(at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect())
}

/// Every frame body the reader hands over, and how it stopped (`None`: a clean end).
fn read_all(input: Pieces, limit: u32) -> (Vec<Vec<u8>>, Option<String>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let mut input = input;
        let mut reader = FrameReader::default();
        let mut bodies = Vec::new();
        loop {
            match reader.next(&mut input, limit).await {
                Ok(Some(body)) => bodies.push(body),
                Ok(None) => return (bodies, None),
                Err(e) => return (bodies, Some(e.to_string())),
            }
        }
    })
}

/// A frame a session sends: output, an upcall, an error, a result, or one of another op.
fn frame() -> impl Strategy<Value = Value> {
    let text = "\\PC{0,40}";
    prop_oneof![
        (any::<u64>(), any::<bool>(), text).prop_map(|(id, err, data)| json!({
            "op": "output", "id": id, "stream": if err { "stderr" } else { "stdout" }, "data": data
        })),
        (any::<u64>(), any::<u64>()).prop_map(|(id, n)| json!({
            "op": "upcall", "id": id, "upcall": n, "request": {"kind": "billing"}
        })),
        (any::<u64>(), text, text).prop_map(|(id, code, message)| json!({
            "op": "error", "id": id, "code": code, "message": message
        })),
        (any::<u64>(), text, text, 0u64..1000).prop_map(|(id, out, err, n)| json!({
            "op": "result", "id": id, "kind": "exec", "stdout": out, "stderr": err,
            "stdout_truncated": false, "stderr_truncated": false,
            "stdout_bytes": out.len(), "stderr_bytes": err.len(),
            "result": {"text/plain": "1"}, "images": [], "images_truncated": false,
            "error": null, "exit_status": null, "signal": null, "timed_out": false,
            "execution_count": n, "duration_ms": 1.5,
        })),
        ("[a-z]{1,8}", any::<i64>())
            .prop_filter("an op the server reads", |(op, _)| {
                !["output", "upcall", "error", "result"].contains(&op.as_str())
            })
            .prop_map(|(op, id)| json!({"op": op, "id": id, "x": [1, {}]})),
    ]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..300),
            // a plausible header before arbitrary bytes, JSON-like or not
            (0u32..80, prop_oneof![
                prop::collection::vec(any::<u8>(), 0..100),
                "[{}\\[\\]\":,a-z0-9 ]{0,100}".prop_map(String::into_bytes),
            ])
            .prop_map(|(len, body)| [len.to_be_bytes().to_vec(), body].concat()),
        ],
        cuts in prop::collection::vec(0.0..1.0f64, 0..6),
        limit in prop_oneof![Just(MAX_FRAME_BYTES), 0u32..400],
        id in 0u64..3,
    ) {
        let (bodies, _) = read_all(pieces(&bytes, &cuts), limit);
        for body in bodies.iter().chain(std::iter::once(&bytes)) {
            let (output, _keep) = tokio::sync::mpsc::channel::<OutputChunk>(4);
            let _ = on_frame(id, body, Some(&output), &mut CallBudget::default());
            let _ = bounded::decode_result(body);
            let _ = toolgate_sandbox::frame::decode::<Value>(body);
        }
        let _ = toolgate_sandbox::frame::read_body(&mut bytes.as_slice());
    }

    #[test]
    fn a_valid_frame_round_trips(frame in frame()) {
        let wire = encode(&frame).unwrap();
        let (bodies, end) = read_all(pieces(&wire, &[]), MAX_FRAME_BYTES);
        prop_assert_eq!(end, None);
        prop_assert_eq!(bodies.len(), 1);
        let back: Value = toolgate_sandbox::frame::decode(&bodies[0]).unwrap();
        prop_assert_eq!(&back, &frame);
        let id = frame["id"].as_u64().unwrap_or(u64::MAX);
        let (output, mut chunks) = tokio::sync::mpsc::channel::<OutputChunk>(4);
        let step = on_frame(id, &bodies[0], Some(&output), &mut CallBudget::default());
        match (frame["op"].as_str().unwrap(), step) {
            ("output", Step::Continue) if frame["data"] == "" => {}
            ("output", Step::Broken(why)) if frame["data"] == "" => {
                prop_assert!(why.contains("empty output frame"), "{}", why);
            }
            ("output", Step::Continue) => {
                let chunk = chunks.try_recv().unwrap();
                prop_assert_eq!(chunk.data.as_str(), frame["data"].as_str().unwrap());
                let stream = if frame["stream"] == "stderr" { OutputStream::Stderr } else { OutputStream::Stdout };
                prop_assert_eq!(chunk.stream, stream);
            }
            ("upcall", Step::Upcall(asked)) => {
                prop_assert_eq!(asked.upcall, frame["upcall"].as_u64().unwrap());
                prop_assert!(asked.request.is_ok());
            }
            ("error", Step::Rejected(_)) => {}
            ("result", Step::Reply(outcome)) => {
                prop_assert_eq!(outcome.stdout.as_str(), frame["stdout"].as_str().unwrap());
                prop_assert_eq!(outcome.stderr.as_str(), frame["stderr"].as_str().unwrap());
                prop_assert_eq!(outcome.execution_count, frame["execution_count"].as_u64().unwrap());
            }
            (_, Step::Continue) if !["output", "upcall", "error", "result"].contains(&frame["op"].as_str().unwrap()) => {}
            (op, other) => prop_assert!(false, "{} frame read as {}", op, describe(&other)),
        }
    }

    #[test]
    fn frames_split_anywhere_read_as_the_whole(
        frames in prop::collection::vec(frame(), 1..5),
        cuts in prop::collection::vec(0.0..1.0f64, 0..40),
        trailing in prop::collection::vec(any::<u8>(), 0..3),
    ) {
        let mut wire = Vec::new();
        for frame in &frames {
            wire.extend(encode(frame).unwrap());
        }
        wire.extend(&trailing);
        let whole = read_all(pieces(&wire, &[]), MAX_FRAME_BYTES);
        let split = read_all(pieces(&wire, &cuts), MAX_FRAME_BYTES);
        prop_assert_eq!(&split, &whole);
        prop_assert_eq!(whole.0.len(), frames.len());
        // a byte or three left over is a frame cut short, never a frame
        prop_assert_eq!(whole.1.is_some(), !trailing.is_empty());
        // read one byte at a time, too
        let bytes: Vec<f64> = (1..wire.len()).map(|i| i as f64 / wire.len() as f64).collect();
        prop_assert_eq!(&read_all(pieces(&wire, &bytes), MAX_FRAME_BYTES), &whole);
    }
}

fn describe(step: &Step) -> &'static str {
    match step {
        Step::Continue => "continue",
        Step::Upcall(_) => "upcall",
        Step::Reply(_) => "reply",
        Step::Rejected(_) => "rejected",
        Step::Broken(_) => "broken",
    }
}
