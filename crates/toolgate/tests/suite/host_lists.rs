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

/// A site on loopback answering `/hello`; how many requests reached it.
async fn site() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().route(
        "/hello",
        axum::routing::get(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { "hello from the site" }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, hits)
}

/// Runs a GET of the site from a session of `who` (urllib, which takes the proxy from the
/// environment as every client does): the status code, and why the proxy refused it, if it did.
async fn fetch_from_a_session(f: &Fixture, who: &Account, port: u16) -> (String, Option<String>) {
    let code = format!(
        "import urllib.request, urllib.error\n\
         def get():\n\
         \x20   try:\n\
         \x20       return urllib.request.urlopen('http://127.0.0.1:{port}/hello', timeout=20).status\n\
         \x20   except urllib.error.HTTPError as e:\n\
         \x20       return e.code\n\
         get()"
    );
    let result = f.call(who, "svc_write", json!({"code": code})).await;
    let status = result["structuredContent"]["python"]["result"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{result}"))
        .to_owned();
    let refused = result["structuredContent"]["python"]["network"][0]["refused"]
        .as_str()
        .map(str::to_owned);
    (status, refused)
}

#[tokio::test]
async fn a_session_reaches_only_what_the_lists_let_it_and_the_guard_still_holds() {
    let (port, hits) = site().await;
    let f = fixture_with(&["--egress-allow-private", "127.0.0.1"]).await;
    assert_eq!(
        fetch_from_a_session(&f, &f.alice, port).await.0,
        "200",
        "no lists: every host"
    );

    f.write(json!({"network": {"deny": ["127.0.0.1"]}})).await;
    let (status, refused) = fetch_from_a_session(&f, &f.alice, port).await;
    assert_eq!(status, "403");
    assert!(refused.unwrap().contains("may not reach"), "denied");

    f.write(json!({"network": {"allow": ["*.example.org"], "deny": []}}))
        .await;
    let (status, refused) = fetch_from_a_session(&f, &f.alice, port).await;
    assert_eq!(status, "403");
    assert!(
        refused.unwrap().contains("is not on this account's list"),
        "not allowed"
    );

    f.write(json!({"network": {"allow": ["example.org", "127.0.0.1"]}}))
        .await;
    assert_eq!(
        fetch_from_a_session(&f, &f.alice, port).await,
        ("200".to_owned(), None),
        "allowed"
    );
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "refused requests never reached the site"
    );

    // another account's lists are its own
    assert_eq!(fetch_from_a_session(&f, &f.bob, port).await.0, "200");

    // the lists never widen the guard: without egress_allow_private, loopback stays refused
    drop(f);
    let f = fixture().await;
    f.write(json!({"network": {"allow": ["127.0.0.1"]}})).await;
    let (status, refused) = fetch_from_a_session(&f, &f.alice, port).await;
    assert_eq!(status, "403");
    assert!(refused.unwrap().contains("address"), "the guard's refusal");
}
