//! The accounts' host lists over the real binary: set with `network` on `svc_write`, read back
//! with `network` on `svc_read`, private to the account, refused before metering when malformed,
//! whole under concurrent writes; and the dashboard's Network page, which edits the same lists
//! behind its session, origin and anti-forgery checks.

use crate::common::*;
use serde_json::{Value, json};

fn network(result: &Value) -> &Value {
    &result["structuredContent"]["network"]
}

#[tokio::test]
async fn lists_set_with_svc_write_are_read_back_by_their_account_only() {
    let f = fixture().await;
    let empty = f.call(&f.alice, "svc_read", json!({"network": true})).await;
    assert_eq!(empty["isError"], false, "{empty}");
    assert_eq!(network(&empty)["allow"], json!([]));
    assert_eq!(network(&empty)["deny"], json!([]));

    let set = f
        .write(
            json!({"network": {"allow": ["*.PyPI.org", "files.pythonhosted.org."],
                                  "deny": ["evil.pypi.org"]}}),
        )
        .await;
    assert_eq!(set["isError"], false, "{set}");
    let expected_allow = json!(["*.pypi.org", "files.pythonhosted.org"]);
    assert_eq!(network(&set)["allow"], expected_allow);
    let read = f.call(&f.alice, "svc_read", json!({"network": true})).await;
    assert_eq!(network(&read)["allow"], expected_allow, "{read}");
    assert_eq!(network(&read)["deny"], json!(["evil.pypi.org"]));
    assert!(
        read["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("only *.pypi.org, files.pythonhosted.org, except evil.pypi.org"),
        "{read}"
    );
    let bobs = f.call(&f.bob, "svc_read", json!({"network": true})).await;
    assert_eq!(
        network(&bobs)["allow"],
        json!([]),
        "another account's lists: {bobs}"
    );

    // refused before metering: free, and nothing changes
    let before = f.server.free_remaining(&f.alice.key).await;
    let many: Vec<String> = (0..10_000).map(|i| format!("h{i}.example.org")).collect();
    for bad in [
        json!({"network": {"allow": ["not a host"]}}),
        json!({"network": {"allow": many}}),
        json!({"network": {"deny": ["x".repeat(1 << 20)]}}),
        json!({"network": {"allow": "example.org"}}),
        json!({"network": true}),
    ] {
        let refused = f.write(bad).await;
        assert_eq!(refused["isError"], true, "{refused}");
        assert!(refused.to_string().len() < 4_000, "a refusal quotes little");
    }
    assert_eq!(
        f.server.free_remaining(&f.alice.key).await,
        before,
        "refusals are free"
    );
    let after = f.call(&f.alice, "svc_read", json!({"network": true})).await;
    assert_eq!(network(&after)["allow"], expected_allow);
}

#[tokio::test]
async fn concurrent_writes_leave_one_whole_pair_of_lists() {
    let f = fixture().await;
    let pair = |n: usize| {
        (
            (0..40)
                .map(|i| format!("a{i}.w{n}.example.org"))
                .collect::<Vec<_>>(),
            (0..40)
                .map(|i| format!("d{i}.w{n}.example.org"))
                .collect::<Vec<_>>(),
        )
    };
    let writes = (0..12).map(|n| {
        let (allow, deny) = pair(n);
        let (server, key) = (&f.server, f.alice.key.clone());
        async move {
            let result = write(
                server,
                &key,
                json!({"network": {"allow": allow, "deny": deny}}),
            )
            .await;
            assert_eq!(result["isError"], false, "{result}");
        }
    });
    futures::future::join_all(writes).await;
    let read = f.call(&f.alice, "svc_read", json!({"network": true})).await;
    let left = (
        network(&read)["allow"].clone(),
        network(&read)["deny"].clone(),
    );
    assert!(
        (0..12).any(|n| {
            let (allow, deny) = pair(n);
            left == (json!(allow), json!(deny))
        }),
        "one writer's lists, whole: {}",
        read["structuredContent"]
    );
}

#[tokio::test]
async fn the_network_page_edits_the_lists_behind_its_checks() {
    let d = Dash::start_sandboxed().await;
    let alice = d.sign_in("alice@example.org").await;
    let key = d.key_of(&alice).await;
    let set = write(
        &d.server,
        &key,
        json!({"network": {"deny": ["tracker.example"]}}),
    )
    .await;
    assert_eq!(set["isError"], false, "{set}");

    let page = d.page("/dashboard/network", &alice).await;
    assert!(page.contains(r#"aria-current="page">Network"#), "{page}");
    assert_eq!(
        text_of_id(&page, "deny").as_deref(),
        Some("tracker.example")
    );
    assert!(has_id(&page, "network-state"));

    let saved = d
        .post(
            "/dashboard/network/set",
            &alice,
            &[
                ("csrf", &alice.csrf),
                ("allow", "api.github.com\r\n\r\n *.PyPI.org \r\n"),
                ("deny", ""),
            ],
        )
        .await;
    assert_see_other(&saved, "/dashboard/network?notice=network-saved");
    let read = post_personal(
        &client(),
        &d.server,
        &key,
        &tool_call("svc_read", json!({"network": true})),
    )
    .await
    .result();
    assert_eq!(
        network(&read)["allow"],
        json!(["api.github.com", "*.pypi.org"]),
        "{read}"
    );
    assert_eq!(network(&read)["deny"], json!([]));

    // a bad line: 400, the error names it, and the text sent is shown again, not lost
    let refused = d
        .post(
            "/dashboard/network/set",
            &alice,
            &[
                ("csrf", &alice.csrf),
                ("allow", "good.example\nbad host"),
                ("deny", "x.example"),
            ],
        )
        .await;
    assert_eq!(refused.status, 400, "{refused:?}");
    assert!(
        text_of_id(&refused.body, "error")
            .unwrap()
            .contains("bad host"),
        "{}",
        refused.body
    );
    assert_eq!(
        text_of_id(&refused.body, "allow").as_deref(),
        Some("good.example\nbad host")
    );
    // a forged anti-forgery value or a foreign origin changes nothing
    let forged = d
        .post(
            "/dashboard/network/set",
            &alice,
            &[("csrf", &"0".repeat(32)), ("allow", "x.example")],
        )
        .await;
    assert_eq!(forged.status, 403, "{forged:?}");
    let foreign = d
        .post_from(
            "/dashboard/network/set",
            Some(&alice.cookie),
            &[("csrf", &alice.csrf), ("allow", "x.example")],
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(foreign.status, 403, "{foreign:?}");
    let read = post_personal(
        &client(),
        &d.server,
        &key,
        &tool_call("svc_read", json!({"network": true})),
    )
    .await
    .result();
    assert_eq!(
        network(&read)["allow"],
        json!(["api.github.com", "*.pypi.org"]),
        "unchanged: {read}"
    );

    // another owner sees only their own lists
    let bob = d.sign_in("bob@example.org").await;
    let theirs = d.page("/dashboard/network", &bob).await;
    assert_eq!(text_of_id(&theirs, "allow").as_deref().unwrap_or(""), "");
}
