//! Call history over the real binary: a row for each outcome (ok, a tool error with its first
//! line, invalid arguments, refused -32002 once the allowance is used up), the client from the
//! session's `initialize`, a secret set with `secret_set` in neither the page nor the export,
//! `code` over 4 KiB cut, the page's filters, the CSV (quoted, filtered), another account's
//! record out of reach, and the retention's purge at start.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Value, json};

const SECRET: &str = "hist-secret-value-9f3c1e";

/// The ids of the rows of a History page, in order.
fn row_ids(html: &str) -> Vec<String> {
    html.split(r#"<tr data-id=""#)
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_owned())
        .collect()
}

/// The History page at `query`, once it shows `rows` rows (the writer stores off the call's path).
async fn history_rows(d: &Dash, session: &SignInSession, query: &str, rows: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let html = d.page(&format!("/dashboard/history{query}"), session).await;
        if row_ids(&html).len() >= rows || Instant::now() > deadline {
            return html;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn call_in(d: &Dash, url: &str, mcp: &str, tool: &str, args: Value) -> Reply {
    send(in_session(&d.http, url, mcp, &tool_call(tool, args))).await
}

#[tokio::test]
async fn every_call_is_recorded_redacted_filtered_and_exported() {
    let d = Dash::start(&[("TOOLGATE_FREE_MONTHLY_CALLS", "3")]).await;
    let alice = d.sign_in("history-alice@example.org").await;
    let key = d.key_of(&alice).await;
    let url = d.server.personal(&key);
    let mcp = open_session(&d.http, &url).await.unwrap();

    let ok = call_in(&d, &url, &mcp, "svc_read", json!({"billing": true})).await;
    assert_eq!(ok.result()["isError"], json!(false), "{ok:?}");
    let failed = call_in(
        &d,
        &url,
        &mcp,
        "svc_read",
        json!({"url": "http://127.0.0.1:9/x"}),
    )
    .await;
    assert_eq!(failed.result()["isError"], json!(true), "{failed:?}");
    let invalid = call_in(&d, &url, &mcp, "svc_read", json!({"no_such_field": 1})).await;
    assert_eq!(invalid.result()["isError"], json!(true), "{invalid:?}");
    let long_code = format!("print('{}')", "a".repeat(6000));
    call_in(&d, &url, &mcp, "svc_write", json!({"code": long_code})).await;
    let set = call_in(
        &d,
        &url,
        &mcp,
        "svc_write",
        json!({"secret_set": {"name": "HIST_TOKEN", "value": SECRET}}),
    )
    .await;
    assert_eq!(set.result()["isError"], json!(false), "{set:?}");
    let refused = call_in(&d, &url, &mcp, "svc_read", json!({"billing": true})).await;
    assert_eq!(refused.error_code(), Some(-32002), "{refused:?}");

    let html = history_rows(&d, &alice, "", 6).await;
    let ids = row_ids(&html);
    assert_eq!(ids.len(), 6, "six calls, six rows: {html}");
    assert!(!html.contains(SECRET), "the secret's value is on the page");
    assert!(
        html.contains("toolgate-tests 1"),
        "the client from initialize: {html}"
    );
    assert!(html.contains(&mcp), "the session id is shown");
    assert!(html.contains("refused: -32002"), "{html}");

    // the newest first: the refused call, then secret_set
    let refused_row = d
        .page(&format!("/dashboard/history/{}", ids[0]), &alice)
        .await;
    assert!(refused_row.contains("refused: -32002"), "{refused_row}");
    let set_row = d
        .page(&format!("/dashboard/history/{}", ids[1]), &alice)
        .await;
    assert!(set_row.contains("HIST_TOKEN"), "{set_row}");
    assert!(set_row.contains("[secret value]"), "{set_row}");
    assert!(!set_row.contains(SECRET));
    let code_row = d
        .page(&format!("/dashboard/history/{}", ids[2]), &alice)
        .await;
    let fields = text_of_id(&code_row, "record-fields").unwrap();
    assert!(fields.contains("…[cut: 6009 bytes]"), "{fields}");
    assert!(
        fields.len() < 4096 + 200,
        "code over 4 KiB is cut: {}",
        fields.len()
    );
    let failed_row = d
        .page(&format!("/dashboard/history/{}", ids[4]), &alice)
        .await;
    let outcome = text_of_id(&failed_row, "record-outcome").unwrap();
    assert!(outcome.starts_with("tool_error: "), "{outcome}");
    assert!(!outcome.contains('\n'), "only the first line: {outcome}");
    assert!(
        failed_row.contains("127.0.0.1:9"),
        "the URL's host is a destination"
    );
    let ok_row = d
        .page(&format!("/dashboard/history/{}", ids[5]), &alice)
        .await;
    assert_eq!(text_of_id(&ok_row, "record-outcome").unwrap(), "ok");
    assert_eq!(
        text_of_id(&ok_row, "record-client").unwrap(),
        "toolgate-tests 1"
    );

    // filters, alone and combined
    let refused_only = d.page("/dashboard/history?outcome=refused", &alice).await;
    assert_eq!(row_ids(&refused_only), vec![ids[0].clone()]);
    let writes = d.page("/dashboard/history?tool=svc_write", &alice).await;
    assert_eq!(row_ids(&writes), vec![ids[1].clone(), ids[2].clone()]);
    let searched = d.page("/dashboard/history?q=HIST_TOKEN", &alice).await;
    assert_eq!(row_ids(&searched), vec![ids[1].clone()]);
    let combined = d
        .page(
            &format!(
                "/dashboard/history?tool=svc_read&outcome=tool_error&session={mcp}&key=default"
            ),
            &alice,
        )
        .await;
    assert_eq!(row_ids(&combined), vec![ids[3].clone(), ids[4].clone()]);
    let none = d
        .page("/dashboard/history?from=2001-01-01&to=2001-01-02", &alice)
        .await;
    assert!(row_ids(&none).is_empty() && has_id(&none, "no-calls"));
    let bad = d
        .get("/dashboard/history?from=yesterday", Some(&alice.cookie))
        .await;
    assert_error_page(&bad, 400);

    // the export: every row, no secret, the filter applied, cells quoted
    let csv = d.get("/dashboard/history.csv", Some(&alice.cookie)).await;
    assert_eq!(csv.status, 200);
    assert!(csv.header("content-type").unwrap().starts_with("text/csv"));
    assert!(
        !csv.body.contains(SECRET),
        "the secret's value is in the export"
    );
    assert_eq!(csv.body.matches("\r\n\"call_").count(), 6, "{}", csv.body);
    assert!(
        csv.body.contains(r#""'-32002""#),
        "a leading minus is defused: {}",
        csv.body
    );
    assert!(
        csv.body
            .contains(r#"{""secret_set"":{""name"":""HIST_TOKEN"",""value"":""[secret value]""}}"#)
    );
    let filtered = d
        .get(
            "/dashboard/history.csv?outcome=tool_error",
            Some(&alice.cookie),
        )
        .await;
    let lines: Vec<&str> = filtered.body.trim_end().split("\r\n").skip(1).collect();
    assert_eq!(lines.len(), 3, "{}", filtered.body);
    assert!(lines.iter().all(|line| line.contains(r#","tool_error","#)));

    // another account sees none of it, and not one record by its id
    let bob = d.sign_in("history-bob@example.org").await;
    let theirs = d.page("/dashboard/history", &bob).await;
    assert!(row_ids(&theirs).is_empty());
    let stolen = d
        .get(&format!("/dashboard/history/{}", ids[1]), Some(&bob.cookie))
        .await;
    assert_eq!(stolen.status, 404, "{stolen:?}");
    let stolen_csv = d.get("/dashboard/history.csv", Some(&bob.cookie)).await;
    assert_eq!(stolen_csv.body.matches("call_").count(), 0);
}
