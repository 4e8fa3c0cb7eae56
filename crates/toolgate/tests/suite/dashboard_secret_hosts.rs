//! The dashboard's secrets page and secrets bound to hosts: it shows each secret's hosts, sets
//! them with the value, keeps them when a replacement leaves the field empty, unbinds on
//! request, and refuses a bad pattern with the vault's own message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use crate::common::*;

/// Each secret's hosts over MCP (`svc_read` `list_secrets`), by name.
async fn hosts_over_mcp(d: &Dash, key: &str) -> Vec<(String, Value)> {
    let reply = post_personal(
        &client(),
        &d.server,
        key,
        &tool_call("svc_read", json!({"list_secrets": true})),
    )
    .await;
    let result = reply.result();
    result["structuredContent"]["list_secrets"]["secrets"]
        .as_array()
        .unwrap_or_else(|| panic!("{result}"))
        .iter()
        .map(|row| {
            (
                row["name"].as_str().unwrap().to_owned(),
                row["hosts"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn an_owner_binds_a_secret_to_hosts_on_the_secrets_page() {
    let d = Dash::start(&[]).await;
    let owner = create_account(&d.storage, "hosts@example.org");
    let s = d.sign_in("hosts@example.org").await;
    let set = |value: &'static str, hosts: &'static str, unbind: bool| {
        let mut fields = vec![("name", "GH_TOKEN"), ("value", value), ("hosts", hosts)];
        if unbind {
            fields.push(("unbind", "on"));
        }
        fields
    };
    let post = async |fields: Vec<(&str, &str)>| {
        let mut all = vec![("csrf", s.csrf.as_str())];
        all.extend(fields);
        d.post("/dashboard/secrets/set", &s, &all).await
    };
    let saved = post(set("ghp-1", "api.github.com, *.GitHub.com", false)).await;
    assert_eq!(saved.status, 303, "{saved:?}");
    let bound = json!(["api.github.com", "*.github.com"]);
    assert_eq!(
        hosts_over_mcp(&d, &owner.key).await,
        [("GH_TOKEN".to_owned(), bound.clone())]
    );
    let page = d.page("/dashboard/secrets", &s).await;
    assert!(page.contains("api.github.com, *.github.com"), "{page}");

    // a new value with the field empty keeps the hosts; "bind to no host" unbinds
    assert_eq!(post(set("ghp-2", "", false)).await.status, 303);
    assert_eq!(hosts_over_mcp(&d, &owner.key).await[0].1, bound);
    assert_eq!(post(set("ghp-3", "", true)).await.status, 303);
    assert_eq!(hosts_over_mcp(&d, &owner.key).await[0].1, json!([]));

    // a bad pattern is refused with the vault's message, and nothing changes
    let refused = post(set("ghp-secret-value-4", "*", false)).await;
    assert_error_page(&refused, 400);
    assert!(refused.body.contains("every host"), "{refused:?}");
    assert!(!refused.body.contains("ghp-secret-value-4"));
    assert_eq!(hosts_over_mcp(&d, &owner.key).await[0].1, json!([]));
}
