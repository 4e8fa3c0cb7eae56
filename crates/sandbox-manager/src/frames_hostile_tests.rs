//! Frames a session's code can forge, at 10^6 levels of nesting and at each size limit: JSON
//! nested deep in a field the server skips, in one it reads, as the whole frame, and frames
//! exactly at and one byte over their limits. Each is read within bounds to a clean verdict
//! (a step, or a violation that names itself), never a stack overflow.
#![allow(clippy::unwrap_used)]

use serde_json::json;
use toolgate_sandbox::frame::{FrameError, MAX_FRAME_BYTES};

use super::*;
use crate::bounded::MAX_UPCALL_FRAME_BYTES;
use crate::frame_io::FrameReader;

const DEEP: usize = 1_000_000;

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn step(body: &[u8]) -> Step {
    let (output, _keep) = mpsc::channel(4);
    on_frame(7, body, Some(&output), &mut CallBudget::default())
}

fn broken(step: Step) -> String {
    match step {
        Step::Broken(why) => why,
        other => panic!("expected a violation, got {}", describe(&other)),
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

#[test]
fn json_nested_a_million_deep_in_a_skipped_field_is_skipped_without_recursion() {
    for (frame, expected) in [
        (
            format!(
                r#"{{"op":"output","id":7,"stream":"stdout","data":"hi","x":{}}}"#,
                nested(DEEP)
            ),
            "continue",
        ),
        // a frame of another request, or of an op this server does not know
        (
            format!(r#"{{"op":"output","id":{}}}"#, nested(DEEP)),
            "continue",
        ),
        (
            format!(r#"{{"op":"future","id":7,"x":{}}}"#, nested(DEEP)),
            "continue",
        ),
    ] {
        assert_eq!(
            describe(&step(frame.as_bytes())),
            expected,
            "{}",
            &frame[..40]
        );
    }
}

#[test]
fn json_nested_a_million_deep_where_the_server_reads_is_a_violation() {
    let frames = [
        nested(DEEP),
        "{\"op\":".repeat(DEEP),
        format!(r#"{{"op":{}}}"#, nested(DEEP)),
        format!(
            r#"{{"op":"output","id":7,"stream":"stdout","data":{}}}"#,
            nested(DEEP)
        ),
        format!(
            r#"{{"op":"upcall","id":7,"upcall":1,"request":{}}}"#,
            nested(DEEP)
        ),
        format!(
            r#"{{"op":"error","id":7,"code":"x","message":{}}}"#,
            nested(DEEP)
        ),
        format!(
            r#"{{"op":"result","id":7,"kind":"sqlite","stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false,"stdout_bytes":0,"stderr_bytes":0,"result":null,"images":[],"images_truncated":false,"error":null,"exit_status":null,"signal":null,"timed_out":false,"execution_count":1,"duration_ms":1.0,"table":{}}}"#,
            nested(DEEP)
        ),
    ];
    for frame in frames {
        let why = broken(step(frame.as_bytes()));
        assert!(!why.is_empty(), "{}", &frame[..40]);
    }
    // the same result frame with a table the session could send is a reply
    let honest = r#"{"op":"result","id":7,"kind":"sqlite","stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false,"stdout_bytes":0,"stderr_bytes":0,"result":null,"images":[],"images_truncated":false,"error":null,"exit_status":null,"signal":null,"timed_out":false,"execution_count":1,"duration_ms":1.0,"table":{"rows":[[1]]}}"#;
    assert_eq!(describe(&step(honest.as_bytes())), "reply");
}

#[test]
fn an_upcall_frame_of_exactly_its_limit_is_read_and_one_byte_more_is_a_violation() {
    let sized = |size: usize| {
        let bare = json!({"op": "upcall", "id": 7, "upcall": 1,
                          "request": {"kind": "billing"}, "pad": ""})
        .to_string();
        let frame = json!({"op": "upcall", "id": 7, "upcall": 1,
                           "request": {"kind": "billing"}, "pad": "p".repeat(size - bare.len())})
        .to_string();
        assert_eq!(frame.len(), size);
        frame
    };
    assert_eq!(
        describe(&step(sized(MAX_UPCALL_FRAME_BYTES).as_bytes())),
        "upcall"
    );
    let why = broken(step(sized(MAX_UPCALL_FRAME_BYTES + 1).as_bytes()));
    assert!(why.contains("over its limit"), "{why}");
}

#[tokio::test]
async fn a_frame_of_exactly_the_readers_limit_is_read_and_one_byte_more_is_refused_by_its_header() {
    let body = format!(
        r#"{{"op":"output","id":7,"stream":"stdout","data":"{}"}}"#,
        "d".repeat(1000)
    );
    let limit = u32::try_from(body.len()).unwrap();
    let mut wire = limit.to_be_bytes().to_vec();
    wire.extend_from_slice(body.as_bytes());
    let read = FrameReader::default()
        .next(&mut wire.as_slice(), limit)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read, body.as_bytes());
    let refused = FrameReader::default()
        .next(&mut wire.as_slice(), limit - 1)
        .await;
    assert!(matches!(refused, Err(FrameError::Oversized(n)) if n == u64::from(limit)));
    // the protocol's ceiling: one byte over it is refused from the header alone, with no body
    let over = (MAX_FRAME_BYTES + 1).to_be_bytes();
    let refused = FrameReader::default()
        .next(&mut &over[..], MAX_FRAME_BYTES)
        .await;
    assert!(matches!(refused, Err(FrameError::Oversized(_))));
    assert!(matches!(
        toolgate_sandbox::frame::read_body(&mut &over[..]),
        Err(FrameError::Oversized(_))
    ));
}
