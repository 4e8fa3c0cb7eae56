//! The signed-in owner over real HTTP: pages need a live session, the anti-forgery value and
//! origin on every form, key rotation (the old key ends at once, open MCP sessions too), one
//! account's secrets out of another's reach and never shown, and signing out here or
//! everywhere. Asking for and using links is in `dashboard`, the wallet in `dashboard_wallet`.

use crate::common::*;
use serde_json::json;

#[tokio::test]
async fn pages_need_a_live_session() {
    let d = Dash::start(&[]).await;
    let bogus = format!("{COOKIE}={}", forged_token());
    for path in [
        "/dashboard",
        "/dashboard/",
        "/dashboard/secrets",
        "/dashboard/usage",
        "/dashboard/history",
        "/dashboard/history.csv",
        "/dashboard/history/call_0",
        "/dashboard/wallet",
        "/dashboard/sessions",
        "/dashboard/network",
    ] {
        let none = d.get(path, None).await;
        assert_see_other(&none, "/dashboard/sign-in");
        assert!(set_cookies(&none).is_empty(), "{none:?}");
        let stale = d.get(path, Some(&bogus)).await;
        assert_see_other(&stale, "/dashboard/sign-in");
        assert!(clears_cookie(&stale), "{stale:?}");
        let junk = d.get(path, Some("toolgate_session=nothex; other=1")).await;
        assert_see_other(&junk, "/dashboard/sign-in");
    }
    for path in [
        "/dashboard/key/rotate",
        "/dashboard/secrets/set",
        "/dashboard/secrets/delete",
        "/dashboard/wallet/top-up",
        "/dashboard/sessions/end",
        "/dashboard/network/set",
        "/dashboard/sign-out",
        "/dashboard/sign-out-everywhere",
    ] {
        let reply = d
            .post_from(path, Some(&bogus), &[("csrf", "x")], Some(&d.origin()))
            .await;
        assert_see_other(&reply, "/dashboard/sign-in");
    }
    let sign_in = d.get("/dashboard/sign-in", None).await;
    assert_eq!(sign_in.status, 200);
    assert!(sign_in.body.contains(r#"id="sign-in""#), "{sign_in:?}");
}

#[tokio::test]
async fn rotating_the_key_takes_the_form_and_ends_the_old_key_at_once() {
    let d = Dash::start(&[]).await;
    let owner = create_account(&d.storage, "rotor@example.org");
    let s = d.sign_in("rotor@example.org").await;
    let mcp = client();

    // every page's forms carry the session's csrf value
    for path in [
        "/dashboard",
        "/dashboard/secrets",
        "/dashboard/usage",
        "/dashboard/wallet",
        "/dashboard/sessions",
    ] {
        let html = d.page(path, &s).await;
        let posts = html.matches(r#"method="post""#).count();
        assert!(posts >= 2, "{path}: sign-out forms at least");
        assert_eq!(csrf_values(&html).len(), posts, "{path}: {html}");
        assert_eq!(csrf_of(&html), s.csrf, "{path}");
    }
    let overview = d.page("/dashboard", &s).await;
    assert_eq!(
        text_of_id(&overview, "personal-url-full").unwrap(),
        d.server.personal(&owner.key)
    );
    let masked = text_of_id(&overview, "personal-url").unwrap();
    assert!(!masked.contains(&owner.key[5..]), "{masked}");
    assert!(
        masked.ends_with(&owner.key[owner.key.len() - 4..]),
        "{masked}"
    );

    // an open session of the 2025-11-25 generation
    let old_url = d.server.personal(&owner.key);
    let mcp_session = open_session(&mcp, &old_url).await.unwrap();
    billing_of(&send(in_session(&mcp, &old_url, &mcp_session, &billing_call())).await);

    let wrong = "0".repeat(32);
    let forged = d
        .post(
            "/dashboard/key/rotate",
            &s,
            &[("csrf", &wrong), ("confirm", "yes")],
        )
        .await;
    assert_error_page(&forged, 403);
    let no_csrf = d
        .post("/dashboard/key/rotate", &s, &[("confirm", "yes")])
        .await;
    assert_error_page(&no_csrf, 403);
    let cross = d
        .post_from(
            "/dashboard/key/rotate",
            Some(&s.cookie),
            &[("csrf", &s.csrf), ("confirm", "yes")],
            Some("http://evil.example"),
        )
        .await;
    assert_error_page(&cross, 403);
    let unconfirmed = d
        .post("/dashboard/key/rotate", &s, &[("csrf", &s.csrf)])
        .await;
    assert_error_page(&unconfirmed, 400);
    // none of them rotated anything
    billing_of(&post_personal(&mcp, &d.server, &owner.key, &billing_call()).await);
    billing_of(&send(in_session(&mcp, &old_url, &mcp_session, &billing_call())).await);

    let rotated = d
        .post(
            "/dashboard/key/rotate",
            &s,
            &[("csrf", &s.csrf), ("confirm", "yes")],
        )
        .await;
    assert_see_other(&rotated, "/dashboard?notice=rotated");

    post_personal(&mcp, &d.server, &owner.key, &billing_call())
        .await
        .assert_error(401, -32001);
    let in_old = send(in_session(&mcp, &old_url, &mcp_session, &billing_call())).await;
    in_old.assert_error(401, -32001);

    let page = d.page("/dashboard?notice=rotated", &s).await;
    assert!(
        text_of_id(&page, "notice")
            .unwrap()
            .starts_with("Key rotated")
    );
    let new_url = text_of_id(&page, "personal-url-full").unwrap();
    assert_ne!(new_url, old_url);
    let new_key = new_url
        .strip_prefix(&format!("{}/u/", d.server.base))
        .unwrap_or_else(|| panic!("{new_url}"))
        .to_owned();
    assert_key_shape(&new_key);
    billing_of(&post_personal(&mcp, &d.server, &new_key, &billing_call()).await);
    // the old MCP session is gone, not merely refused to the old key (its owner is the
    // account, so the new key would otherwise be served in it)
    let in_old_new_key = send(in_session(&mcp, &new_url, &mcp_session, &billing_call())).await;
    assert_eq!(in_old_new_key.status, 404, "{in_old_new_key:?}");
    assert!(
        in_old_new_key.body.contains("Session not found"),
        "{in_old_new_key:?}"
    );
    // the setup snippets carry the new URL, never the old key
    assert!(page.contains(&new_key) && !page.contains(&owner.key));
}

/// Names of the account's secrets over MCP (`svc_read` `list_secrets`).
async fn listed_over_mcp(d: &Dash, key: &str) -> Vec<String> {
    let reply = post_personal(
        &client(),
        &d.server,
        key,
        &tool_call("svc_read", json!({"list_secrets": true})),
    )
    .await;
    let result = reply.result();
    assert_eq!(result["isError"], false, "{result}");
    result["structuredContent"]["list_secrets"]["secrets"]
        .as_array()
        .unwrap_or_else(|| panic!("{result}"))
        .iter()
        .map(|row| row["name"].as_str().unwrap().to_owned())
        .collect()
}

/// `tr[data-name=NAME]` rows of the secrets page.
fn rows_named(html: &str, name: &str) -> usize {
    html.matches(&format!(r#"data-name="{name}""#)).count()
}

#[tokio::test]
async fn an_owner_reaches_only_the_own_secrets_and_never_their_values() {
    let mut d = Dash::start(&[]).await;
    let alice = create_account(&d.storage, "alice@example.org");
    let bob = create_account(&d.storage, "bob@example.org");
    let a = d.sign_in("alice@example.org").await;
    let b = d.sign_in("bob@example.org").await;
    assert_ne!(a.csrf, b.csrf);
    const FIRST: &str = "alpha-value-7f3e9b1c55";
    const SECOND: &str = "alpha-value-replaced-0d4a";

    let saved = d
        .post(
            "/dashboard/secrets/set",
            &a,
            &[("csrf", &a.csrf), ("name", "ALPHA_TOKEN"), ("value", FIRST)],
        )
        .await;
    assert_see_other(&saved, "/dashboard/secrets?notice=secret-saved");
    assert!(!saved.body.contains(FIRST));
    let mine = d.page("/dashboard/secrets?notice=secret-saved", &a).await;
    assert_eq!(rows_named(&mine, "ALPHA_TOKEN"), 1, "{mine}");
    assert!(has_id(&mine, "notice"));
    let theirs = d.page("/dashboard/secrets", &b).await;
    assert_eq!(rows_named(&theirs, "ALPHA_TOKEN"), 0, "{theirs}");
    assert!(!theirs.contains("ALPHA_TOKEN"));

    // Bob deletes "ALPHA_TOKEN": his own (none), not Alice's
    let deleted = d
        .post(
            "/dashboard/secrets/delete",
            &b,
            &[("csrf", &b.csrf), ("name", "ALPHA_TOKEN")],
        )
        .await;
    assert_eq!(deleted.status, 303, "{deleted:?}");
    assert_eq!(listed_over_mcp(&d, &alice.key).await, ["ALPHA_TOKEN"]);
    assert!(listed_over_mcp(&d, &bob.key).await.is_empty());
    // Bob's anti-forgery value does not pass on Alice's session
    for (path, fields) in [
        (
            "/dashboard/secrets/set",
            vec![
                ("csrf", b.csrf.as_str()),
                ("name", "ALPHA_TOKEN"),
                ("value", "x"),
            ],
        ),
        (
            "/dashboard/secrets/delete",
            vec![("csrf", b.csrf.as_str()), ("name", "ALPHA_TOKEN")],
        ),
    ] {
        assert_error_page(&d.post(path, &a, &fields).await, 403);
    }
    assert_eq!(listed_over_mcp(&d, &alice.key).await, ["ALPHA_TOKEN"]);

    // refused: bad names, a value over the vault's limit (nothing echoed back)
    for name in ["", "1ALPHA", "HAS-DASH", "has space", "É", &"N".repeat(129)] {
        let refused = d
            .post(
                "/dashboard/secrets/set",
                &a,
                &[("csrf", &a.csrf), ("name", name), ("value", FIRST)],
            )
            .await;
        assert_error_page(&refused, 400);
        assert!(!refused.body.contains(FIRST), "{name}: the value is echoed");
    }
    let huge = "v".repeat(toolgate_domain::MAX_SECRET_BYTES + 1);
    let too_big = d
        .post(
            "/dashboard/secrets/set",
            &a,
            &[("csrf", &a.csrf), ("name", "BIG"), ("value", &huge)],
        )
        .await;
    assert_error_page(&too_big, 400);
    assert!(!too_big.body.contains(&huge[..100]));
    let just_fits = "w".repeat(toolgate_domain::MAX_SECRET_BYTES);
    let fits = d
        .post(
            "/dashboard/secrets/set",
            &a,
            &[("csrf", &a.csrf), ("name", "BIG"), ("value", &just_fits)],
        )
        .await;
    assert_eq!(fits.status, 303, "{fits:?}");

    // replacing keeps one row
    let replaced = d
        .post(
            "/dashboard/secrets/set",
            &a,
            &[
                ("csrf", &a.csrf),
                ("name", "ALPHA_TOKEN"),
                ("value", SECOND),
            ],
        )
        .await;
    assert_eq!(replaced.status, 303, "{replaced:?}");
    let mine = d.page("/dashboard/secrets", &a).await;
    assert_eq!(rows_named(&mine, "ALPHA_TOKEN"), 1, "{mine}");
    assert_eq!(rows_named(&mine, "BIG"), 1, "{mine}");
    let mut names = listed_over_mcp(&d, &alice.key).await;
    names.sort();
    assert_eq!(names, ["ALPHA_TOKEN", "BIG"]);

    // no page of either owner shows a value
    for session in [&a, &b] {
        for path in [
            "/dashboard",
            "/dashboard/secrets",
            "/dashboard/usage",
            "/dashboard/wallet",
            "/dashboard/sessions",
        ] {
            let html = d.page(path, session).await;
            for value in [FIRST, SECOND, &just_fits[..64]] {
                assert!(!html.contains(value), "{path} shows a secret's value");
            }
        }
    }

    let gone = d
        .post(
            "/dashboard/secrets/delete",
            &a,
            &[("csrf", &a.csrf), ("name", "ALPHA_TOKEN")],
        )
        .await;
    assert_see_other(&gone, "/dashboard/secrets?notice=secret-deleted");
    let mine = d.page("/dashboard/secrets", &a).await;
    assert_eq!(rows_named(&mine, "ALPHA_TOKEN"), 0, "{mine}");
    assert_eq!(listed_over_mcp(&d, &alice.key).await, ["BIG"]);
    let log = d.server.stop_and_read_log();
    assert!(!log.contains(FIRST) && !log.contains(SECOND));
}

#[tokio::test]
async fn signing_out_ends_this_session_or_every_session_of_the_account() {
    let d = Dash::start(&[]).await;
    let a1 = d.sign_in("owner@example.org").await;
    let a2 = d.sign_in("owner@example.org").await;
    let other = d.sign_in("someone@example.org").await;
    assert_ne!(a1.token, a2.token);
    assert_ne!(
        a1.csrf, a2.csrf,
        "each session has its own anti-forgery value"
    );
    let alive = |s: &SignInSession| {
        let s = s.clone();
        let d = &d;
        async move { d.get("/dashboard", Some(&s.cookie)).await.status == 200 }
    };

    // without the form's value, or from elsewhere: nothing ends
    let forged = d
        .post("/dashboard/sign-out", &a1, &[("csrf", &a2.csrf)])
        .await;
    assert_error_page(&forged, 403);
    let cross = d
        .post_from(
            "/dashboard/sign-out-everywhere",
            Some(&a1.cookie),
            &[("csrf", &a1.csrf)],
            Some("http://evil.example"),
        )
        .await;
    assert_error_page(&cross, 403);
    assert!(alive(&a1).await && alive(&a2).await);

    let out = d
        .post("/dashboard/sign-out", &a1, &[("csrf", &a1.csrf)])
        .await;
    assert_see_other(&out, "/dashboard/sign-in?notice=signed-out");
    assert!(clears_cookie(&out), "{out:?}");
    let after = d.get("/dashboard", Some(&a1.cookie)).await;
    assert_see_other(&after, "/dashboard/sign-in");
    assert!(clears_cookie(&after), "{after:?}");
    assert!(alive(&a2).await, "signing out ends this session only");
    let signed_out = d.get("/dashboard/sign-in?notice=signed-out", None).await;
    assert!(has_id(&signed_out.body, "notice"), "{signed_out:?}");

    // the sessions page (no sandbox here: none to end)
    let sessions = d.page("/dashboard/sessions", &a2).await;
    assert!(has_id(&sessions, "sessions"), "{sessions}");
    let gone = d
        .post(
            "/dashboard/sessions/end",
            &a2,
            &[("csrf", &a2.csrf), ("id", "nope")],
        )
        .await;
    assert_see_other(&gone, "/dashboard/sessions?notice=session-gone");
    let forged = d
        .post(
            "/dashboard/sessions/end",
            &a2,
            &[("csrf", &other.csrf), ("id", "nope")],
        )
        .await;
    assert_error_page(&forged, 403);

    let a3 = d.sign_in("owner@example.org").await;
    assert!(alive(&a3).await);
    let everywhere = d
        .post("/dashboard/sign-out-everywhere", &a2, &[("csrf", &a2.csrf)])
        .await;
    assert_see_other(&everywhere, "/dashboard/sign-in?notice=signed-out");
    assert!(clears_cookie(&everywhere));
    assert!(!alive(&a2).await && !alive(&a3).await);
    assert!(alive(&other).await, "another account's session stays");
    // an ended session's forms no longer do anything
    let late = d
        .post(
            "/dashboard/key/rotate",
            &a3,
            &[("csrf", &a3.csrf), ("confirm", "yes")],
        )
        .await;
    assert_see_other(&late, "/dashboard/sign-in");
}

/// Runs `code` in `session_id` of the owner of `key`; the Python result's structured part.
async fn run_code(d: &Dash, key: &str, session_id: &str, code: &str) -> serde_json::Value {
    let reply = post_personal(
        &client(),
        &d.server,
        key,
        &tool_call("svc_write", json!({"code": code, "session_id": session_id})),
    )
    .await;
    let result = reply.result();
    assert_eq!(result["isError"], false, "{result}");
    result["structuredContent"]["python"].clone()
}

#[tokio::test]
async fn the_sessions_page_lists_and_ends_only_the_owners_sandbox_sessions() {
    let d = Dash::start_sandboxed().await;
    let alice = d.sign_in("alice@example.org").await;
    let bob = d.sign_in("bob@example.org").await;
    let key = d.key_of(&alice).await;
    run_code(&d, &key, "notebook-1", "x = 41").await;
    let page = d.page("/dashboard/sessions", &alice).await;
    assert!(page.contains(r#"data-id="notebook-1""#), "{page}");
    assert!(
        !d.page("/dashboard/sessions", &bob)
            .await
            .contains("notebook-1"),
        "another account sees no session of Alice's"
    );
    // Bob cannot end it, and is told there was none
    let refused = d
        .post(
            "/dashboard/sessions/end",
            &bob,
            &[("csrf", &bob.csrf), ("id", "notebook-1")],
        )
        .await;
    assert_see_other(&refused, "/dashboard/sessions?notice=session-gone");
    assert_eq!(
        run_code(&d, &key, "notebook-1", "x + 1").await["result"]["text"],
        "42"
    );
    // a forged anti-forgery value changes nothing
    let forged = "0".repeat(32);
    let refused = d
        .post(
            "/dashboard/sessions/end",
            &alice,
            &[("csrf", &forged), ("id", "notebook-1")],
        )
        .await;
    assert_eq!(refused.status, 403, "{refused:?}");
    let ended = d
        .post(
            "/dashboard/sessions/end",
            &alice,
            &[("csrf", &alice.csrf), ("id", "notebook-1")],
        )
        .await;
    assert_see_other(&ended, "/dashboard/sessions?notice=session-ended");
    assert!(
        !d.page("/dashboard/sessions", &alice)
            .await
            .contains(r#"data-id="notebook-1""#)
    );
    let fresh = run_code(&d, &key, "notebook-1", "'x' in globals()").await;
    assert_eq!(
        fresh["result"]["text"], "False",
        "the ended session's variables are gone: {fresh}"
    );
}

#[tokio::test]
async fn the_sessions_page_shows_a_hibernated_session_and_end_deletes_its_checkpoint() {
    let d = Dash::start_sandboxed_with(&["--sandbox-hibernate-after-s", "1"]).await;
    let alice = d.sign_in("alice@example.org").await;
    let key = d.key_of(&alice).await;
    run_code(&d, &key, "sleepy", "x = 41").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let page = loop {
        let page = d.page("/dashboard/sessions", &alice).await;
        if page.contains(">hibernated<") {
            break page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never hibernated: {page}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(page.contains(r#"data-id="sleepy""#), "{page}");
    assert!(
        page.contains(" ago"),
        "the checkpoint's age is shown: {page}"
    );
    let ended = d
        .post(
            "/dashboard/sessions/end",
            &alice,
            &[("csrf", &alice.csrf), ("id", "sleepy")],
        )
        .await;
    assert_see_other(&ended, "/dashboard/sessions?notice=session-ended");
    assert!(
        !d.page("/dashboard/sessions", &alice)
            .await
            .contains(r#"data-id="sleepy""#)
    );
    let fresh = run_code(&d, &key, "sleepy", "'x' in globals()").await;
    assert_eq!(fresh["result"]["text"], "False", "{fresh}");
}
