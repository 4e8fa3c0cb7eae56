use serde_json::{Value, json};

use super::*;

fn result(overrides: Value) -> Vec<u8> {
    let mut frame = json!({
        "op": "result", "id": 1, "kind": "exec",
        "stdout": "out", "stderr": "", "stdout_truncated": false, "stderr_truncated": false,
        "stdout_bytes": 3, "stderr_bytes": 0,
        "result": {"text/plain": "2"}, "images": [], "images_truncated": false,
        "error": null, "exit_status": null, "signal": null, "timed_out": false,
        "execution_count": 1, "duration_ms": 0.5, "future_field": {"x": [1, 2]},
    });
    if let (Some(frame), Some(overrides)) = (frame.as_object_mut(), overrides.as_object()) {
        for (key, value) in overrides {
            frame.insert(key.clone(), value.clone());
        }
    }
    serde_json::to_vec(&frame).unwrap()
}

#[test]
fn an_honest_result_decodes_whole() {
    let outcome = decode_result(&result(json!({
        "images": ["aGk=", "aGk="],
        "error": {"type": "ValueError", "message": "m", "traceback": "t"},
        "result": {"text/plain": "x", "text/html": "<b>x</b>", "image/png": "aGk="},
    })))
    .unwrap();
    assert_eq!(outcome.stdout, "out");
    assert_eq!(outcome.images.len(), 2);
    assert_eq!(outcome.error.unwrap().error_type, "ValueError");
    let value = outcome.result.unwrap();
    assert_eq!(value.text_html.as_deref(), Some("<b>x</b>"));
    assert_eq!(value.image_png.as_deref(), Some("aGk="));
}

#[test]
fn strings_are_held_to_their_caps_in_characters() {
    // 1 Mi characters of three bytes each is the session's most: accepted
    let most = "\u{fffd}".repeat(MAX_OUTPUT_CHARS);
    let outcome = decode_result(&result(json!({ "stdout": most }))).unwrap();
    assert_eq!(outcome.stdout.chars().count(), MAX_OUTPUT_CHARS);
    // one character more is not, nor 4 MiB, escaped or not
    for stdout in [
        "x".repeat(MAX_OUTPUT_CHARS + 1),
        "\u{1}".repeat(4 << 20),
        "x".repeat(4 << 20),
    ] {
        let error = decode_result(&result(json!({ "stdout": stdout }))).unwrap_err();
        assert!(
            error.contains("stdout is over its limit of 1048576"),
            "{error}"
        );
    }
    let error =
        decode_result(&result(json!({"stderr": "e".repeat(MAX_OUTPUT_CHARS + 1)}))).unwrap_err();
    assert!(error.contains("stderr is over"), "{error}");
    let text = json!({"result": {"text/plain": "v".repeat(MAX_TEXT_CHARS + 1)}});
    assert!(
        decode_result(&result(text))
            .unwrap_err()
            .contains("text/plain")
    );
    let error = json!({"error": {"type": "T".repeat(300), "message": "", "traceback": ""}});
    assert!(decode_result(&result(error)).unwrap_err().contains("type"));
    let signal = json!({"signal": "S".repeat(100)});
    assert!(
        decode_result(&result(signal))
            .unwrap_err()
            .contains("signal")
    );
}

#[test]
fn images_are_counted_as_they_are_read() {
    let most = vec![""; MAX_IMAGES];
    assert_eq!(
        decode_result(&result(json!({ "images": most })))
            .unwrap()
            .images
            .len(),
        MAX_IMAGES
    );
    // the forged 1.5 million empty images: refused at the 65th
    let many = vec![""; 1_500_000];
    let error = decode_result(&result(json!({ "images": many }))).unwrap_err();
    assert!(error.contains("more than 64 entries"), "{error}");
    // 64 images of 1 MiB each are more PNG than a call may carry
    let big = vec!["A".repeat(1 << 20); MAX_IMAGES];
    let error = decode_result(&result(json!({ "images": big }))).unwrap_err();
    assert!(error.contains("images is over its limit"), "{error}");
    // an image that is not a string
    let error = decode_result(&result(json!({"images": [[]]}))).unwrap_err();
    assert!(error.contains("bad result frame"), "{error}");
}

#[test]
fn a_field_given_twice_or_missing_is_refused() {
    let mut twice = result(json!({}));
    twice.pop();
    twice.extend_from_slice(br#","stdout":"again"}"#);
    assert!(decode_result(&twice).unwrap_err().contains("duplicate"));
    let mut missing: Value = serde_json::from_slice(&result(json!({}))).unwrap();
    missing.as_object_mut().unwrap().remove("images");
    let error = decode_result(&serde_json::to_vec(&missing).unwrap()).unwrap_err();
    assert!(error.contains("images"), "{error}");
}

#[test]
fn frame_heads_keep_no_more_than_a_number() {
    let head: SessionFrameHead = serde_json::from_value(json!({"op": "result", "id": 7})).unwrap();
    assert_eq!(head.id, FrameId::Number(7));
    let head: SessionFrameHead = serde_json::from_value(json!({"op": "error"})).unwrap();
    assert_eq!(head.id, FrameId::Null);
    let nested = vec![vec![Value::Null; 4]; 100_000];
    let head: SessionFrameHead = serde_json::from_slice(
        &serde_json::to_vec(&json!({"op": "output", "id": nested, "x": {"y": "z"}})).unwrap(),
    )
    .unwrap();
    assert_eq!(head.id, FrameId::Other);
    for id in [
        json!(-1),
        json!(1.5),
        json!("1"),
        json!(true),
        json!({"a": 1}),
    ] {
        let head: SessionFrameHead =
            serde_json::from_value(json!({"op": "result", "id": id})).unwrap();
        assert_eq!(head.id, FrameId::Other);
    }
    let long_op = serde_json::from_value::<SessionFrameHead>(json!({"op": "o".repeat(33)}));
    assert!(long_op.is_err());
    let message = "m".repeat(MAX_ERROR_CHARS + 1);
    let error =
        serde_json::from_value::<SessionErrorFrame>(json!({"code": "c", "message": message}));
    assert!(error.is_err());
}

#[test]
fn a_call_budget_counts_frames_and_streamed_characters() {
    let mut budget = CallBudget::default();
    assert_eq!(budget.frame_limit(), CALL_FRAME_BYTES);
    budget.charge_frame(1000);
    assert_eq!(budget.frame_limit(), CALL_FRAME_BYTES - 1000);
    // an output frame gives its bytes back and counts its characters
    budget.charge_frame(100);
    budget
        .charge_output(100, OutputStream::Stdout, MAX_OUTPUT_CHARS)
        .unwrap();
    assert_eq!(budget.frame_limit(), CALL_FRAME_BYTES - 1000);
    budget.charge_frame(10);
    let error = budget
        .charge_output(10, OutputStream::Stdout, 1)
        .unwrap_err();
    assert!(error.contains("streamed stdout"), "{error}");
    let mut budget = CallBudget::default();
    budget.charge_output(0, OutputStream::Stderr, 5).unwrap();
    assert!(budget.charge_output(0, OutputStream::Stderr, 0).is_err());
    budget.charge_frame(usize::MAX);
    assert_eq!(budget.frame_limit(), 0);
}

#[test]
fn a_sqlite_table_is_decoded_only_within_its_size() {
    let table = json!({"columns": [{"name": "n", "type": "integer"}], "rows": [[1]],
                       "truncated": false, "changes": 0});
    let outcome = decode_result(&result(
        json!({"kind": "sqlite", "result": null, "table": table}),
    ))
    .unwrap();
    assert_eq!(outcome.table.unwrap()["rows"], json!([[1]]));
    // just over the cap: refused before it is parsed into values
    let rows: Vec<Value> = (0..MAX_TABLE_BYTES / 2).map(|_| json!(0)).collect();
    let big = json!({"columns": [], "rows": rows, "truncated": false, "changes": 0});
    let error = decode_result(&result(
        json!({"kind": "sqlite", "result": null, "table": big}),
    ))
    .unwrap_err();
    assert!(error.contains("sqlite table is over its limit"), "{error}");
    // nested past serde_json's recursion limit: refused, not a stack overflow
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let mut frame = String::from_utf8(result(json!({"kind": "sqlite", "result": null}))).unwrap();
    frame.insert_str(frame.len() - 1, &format!(",\"table\":{deep}"));
    assert!(decode_result(frame.as_bytes()).is_err());
}

#[test]
fn a_kept_streams_path_and_tail_decode_within_their_caps() {
    let kept = json!({"path": ".toolgate/output/run-1-ab.stdout.txt", "tail": "xyz"});
    let outcome = decode_result(&result(json!({ "stdout_file": kept }))).unwrap();
    let spilled = outcome.stdout_file.unwrap();
    assert_eq!(spilled.path, ".toolgate/output/run-1-ab.stdout.txt");
    assert_eq!(spilled.tail, "xyz");
    assert!(outcome.stderr_file.is_none());
    let long_tail = json!({"path": "p", "tail": "t".repeat(MAX_SPILL_TAIL_CHARS + 1)});
    let error = decode_result(&result(json!({ "stderr_file": long_tail }))).unwrap_err();
    assert!(error.contains("a kept stream's tail is over"), "{error}");
}
