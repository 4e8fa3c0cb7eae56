//! The dashboard's Keys page: a key created there works at once with its own restriction and
//! its URL is shown once; its caps change; revoking it (after the confirmation) closes its open
//! MCP session while the first key's stays open; bad forms get a message and change nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

use crate::common::*;

fn keys_of(storage: &Storage, email: &str) -> Vec<Value> {
    cli_json(storage, &["key", "list", "--email", email])["keys"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn an_owner_creates_caps_and_revokes_a_key_on_the_keys_page() {
    let d = Dash::start(&[]).await;
    let email = "keys-page@example.org";
    let owner = create_account(&d.storage, email);
    let s = d.sign_in(email).await;
    let http = client();

    let created = d
        .post(
            "/dashboard/keys/create",
            &s,
            &[
                ("csrf", &s.csrf),
                ("name", "ci agent"),
                ("month_cap_usd", "2.50"),
                ("tool_read", "on"),
            ],
        )
        .await;
    assert_eq!(created.status, 200, "{created:?}");
    let url = text_of_id(&created.body, "created-url").expect("the new URL is shown");
    let agent = url.rsplit_once("/u/").unwrap().1.to_owned();
    assert_key_shape(&agent);
    let page = d.page("/dashboard/keys", &s).await;
    assert!(!page.contains(&agent), "the key is shown once only");
    assert!(
        page.contains("ci agent") && page.contains("$2.50 a month"),
        "{page}"
    );

    let listed = post_personal(&http, &d.server, &agent, &tools_list()).await;
    let listed = listed.result();
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["svc_read"]);

    let key_id = keys_of(&d.storage, email)[0]["key_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let capped = d
        .post(
            "/dashboard/keys/caps",
            &s,
            &[
                ("csrf", &s.csrf),
                ("key", &key_id),
                ("month_cap_usd", ""),
                ("day_cap_usd", "0.75"),
            ],
        )
        .await;
    assert_see_other(&capped, "/dashboard/keys?notice=key-caps-saved");
    let key = &keys_of(&d.storage, email)[0];
    assert_eq!(key["day_cap_usd"], "0.75");
    assert!(key["month_cap_usd"].is_null(), "{key}");

    // a session of the key and one of the first key, then the key revoked
    let agent_url = d.server.personal(&agent);
    let agent_session = open_session(&http, &agent_url).await.unwrap();
    let owner_url = d.server.personal(&owner.key);
    let owner_session = open_session(&http, &owner_url).await.unwrap();
    let unconfirmed = d
        .post(
            "/dashboard/keys/revoke",
            &s,
            &[("csrf", &s.csrf), ("key", &key_id)],
        )
        .await;
    assert_eq!(unconfirmed.status, 400, "{unconfirmed:?}");
    billing_of(
        &send(in_session(
            &http,
            &agent_url,
            &agent_session,
            &billing_call(),
        ))
        .await,
    );
    let revoked = d
        .post(
            "/dashboard/keys/revoke",
            &s,
            &[("csrf", &s.csrf), ("key", &key_id), ("confirm", "on")],
        )
        .await;
    assert_see_other(&revoked, "/dashboard/keys?notice=key-revoked");
    send(in_session(
        &http,
        &agent_url,
        &agent_session,
        &billing_call(),
    ))
    .await
    .assert_error(401, -32001);
    // the session itself is closed: not even the account's first key may carry it on
    let reused = send(in_session(
        &http,
        &owner_url,
        &agent_session,
        &billing_call(),
    ))
    .await;
    assert_eq!(reused.status, 404, "{reused:?}");
    billing_of(
        &send(in_session(
            &http,
            &owner_url,
            &owner_session,
            &billing_call(),
        ))
        .await,
    );
    let page = d.page("/dashboard/keys", &s).await;
    assert!(page.contains("revoked "), "{page}");
}

#[tokio::test]
async fn bad_key_forms_get_a_message_and_change_nothing() {
    let d = Dash::start(&[]).await;
    let email = "keys-hostile@example.org";
    create_account(&d.storage, email);
    create_account(&d.storage, "keys-other@example.org");
    let theirs = cli_json(
        &d.storage,
        &[
            "key",
            "create",
            "--email",
            "keys-other@example.org",
            "--name",
            "theirs",
        ],
    );
    let theirs_id = theirs["key_id"].as_str().unwrap();
    let s = d.sign_in(email).await;
    let ok = d
        .post(
            "/dashboard/keys/create",
            &s,
            &[("csrf", &s.csrf), ("name", "taken")],
        )
        .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let mine = keys_of(&d.storage, email)[0]["key_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let long = "n".repeat(201);
    let bad_creates: [&[(&str, &str)]; 6] = [
        &[("name", "")],
        &[("name", &long)],
        &[("name", "taken")],
        &[("name", "x"), ("month_cap_usd", "-5")],
        &[("name", "x"), ("day_cap_usd", "ten")],
        &[("name", "x"), ("month_cap_usd", "1.1234567")],
    ];
    for fields in bad_creates {
        let mut all = vec![("csrf", s.csrf.as_str())];
        all.extend_from_slice(fields);
        let reply = d.post("/dashboard/keys/create", &s, &all).await;
        assert_eq!(reply.status, 400, "{fields:?}: {reply:?}");
        assert!(has_id(&reply.body, "error"), "{fields:?}: {}", reply.body);
        assert!(!has_id(&reply.body, "created-url"));
    }
    let bad_changes: [(&str, &[(&str, &str)]); 5] = [
        (
            "/dashboard/keys/revoke",
            &[("key", theirs_id), ("confirm", "on")],
        ),
        (
            "/dashboard/keys/revoke",
            &[("key", "taken"), ("confirm", "on")],
        ),
        (
            "/dashboard/keys/caps",
            &[("key", theirs_id), ("day_cap_usd", "1")],
        ),
        (
            "/dashboard/keys/caps",
            &[("key", &mine), ("day_cap_usd", "-1")],
        ),
        (
            "/dashboard/keys/caps",
            &[("key", "<script>"), ("day_cap_usd", "1")],
        ),
    ];
    for (path, fields) in bad_changes {
        let mut all = vec![("csrf", s.csrf.as_str())];
        all.extend_from_slice(fields);
        let reply = d.post(path, &s, &all).await;
        assert_eq!(reply.status, 400, "{path} {fields:?}: {reply:?}");
        assert!(has_id(&reply.body, "error"), "{}", reply.body);
        assert!(
            !reply.body.contains("<script>"),
            "nothing is reflected unescaped"
        );
    }
    let forged = d
        .post_from(
            "/dashboard/keys/create",
            Some(&s.cookie),
            &[("csrf", &forged_token()), ("name", "forged")],
            Some(&d.origin()),
        )
        .await;
    assert_eq!(forged.status, 403, "{forged:?}");

    let keys = keys_of(&d.storage, email);
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(keys[0]["revoked_at"].is_null() && keys[0]["day_cap_usd"].is_null());
    let others = keys_of(&d.storage, "keys-other@example.org");
    assert!(others[0]["revoked_at"].is_null() && others[0]["day_cap_usd"].is_null());
}
