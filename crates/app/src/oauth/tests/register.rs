//! Dynamic Client Registration: what is accepted, answered and refused.

use serde_json::{Value, json};
use toolgate_store::OAuthStore;

use super::{CLIENT, Harness};
use toolgate_oauth::OAuthError;

async fn register(h: &Harness, body: &Value) -> Result<Value, OAuthError> {
    h.server.register(CLIENT, body.to_string().as_bytes()).await
}

#[tokio::test]
async fn registration_answers_a_public_client_and_stores_it() {
    let h = Harness::new().await;
    let answer = register(
        &h,
        &json!({
            "client_name": "  Chat App  ",
            "redirect_uris": ["https://app.example/cb", "https://app.example/cb"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_basic",
            "scope": "mcp",
        }),
    )
    .await
    .unwrap();
    let client_id = answer["client_id"].as_str().unwrap();
    let hex = client_id.strip_prefix("tgc_").unwrap();
    assert_eq!(hex.len(), 32);
    assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(answer["client_id_issued_at"].as_i64().unwrap() > 1_700_000_000);
    assert_eq!(answer["client_name"], "Chat App");
    assert_eq!(answer["redirect_uris"], json!(["https://app.example/cb"]));
    assert_eq!(
        answer["grant_types"],
        json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(answer["response_types"], json!(["code"]));
    // public clients: whatever was asked, no secret is issued
    assert_eq!(answer["token_endpoint_auth_method"], "none");
    assert!(answer.get("client_secret").is_none());

    let stored = h.store.client(client_id).await.unwrap().unwrap();
    assert_eq!(stored.name, "Chat App");
    assert_eq!(stored.redirect_uris, ["https://app.example/cb"]);

    let second = register(&h, &json!({ "redirect_uris": ["https://app.example/cb"] }))
        .await
        .unwrap();
    assert_ne!(second["client_id"], answer["client_id"]);
}

#[tokio::test]
async fn registration_fills_in_defaults() {
    let h = Harness::new().await;
    let answer = register(
        &h,
        &json!({ "redirect_uris": ["http://127.0.0.1:33418/callback"] }),
    )
    .await
    .unwrap();
    assert_eq!(answer["client_name"], "127.0.0.1");
    assert_eq!(
        answer["grant_types"],
        json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(answer["response_types"], json!(["code"]));
    let native = register(
        &h,
        &json!({ "redirect_uris": ["com.example.app:/oauth2redirect"] }),
    )
    .await
    .unwrap();
    assert_eq!(native["client_name"], "com.example.app");
}

#[tokio::test]
async fn loopback_https_and_app_schemes_are_accepted() {
    let h = Harness::new().await;
    for uri in [
        "https://app.example/cb?tenant=1",
        "https://app.example:8443/cb",
        "http://127.0.0.1:33418/callback",
        "http://[::1]/cb",
        "http://localhost:8080/cb",
        "http://LOCALHOST/cb",
        "cursor://anysphere.cursor-retrieval/oauth/user-toolgate/callback",
        "com.example.app:/oauth2redirect",
    ] {
        let answer = register(&h, &json!({ "redirect_uris": [uri] })).await;
        assert!(answer.is_ok(), "{uri}: {answer:?}");
    }
}

#[tokio::test]
async fn bad_redirect_uris_are_refused() {
    let h = Harness::new().await;
    let eleven: Vec<String> = (0..11)
        .map(|n| format!("https://app.example/cb{n}"))
        .collect();
    let long = format!("https://app.example/{}", "a".repeat(2000));
    let cases = [
        json!({}),
        json!({ "redirect_uris": [] }),
        json!({ "redirect_uris": "https://app.example/cb" }),
        json!({ "redirect_uris": [42] }),
        json!({ "redirect_uris": eleven }),
        json!({ "redirect_uris": ["/cb"] }),
        json!({ "redirect_uris": ["app.example/cb"] }),
        json!({ "redirect_uris": ["https://app.example/cb#frag"] }),
        json!({ "redirect_uris": ["http://app.example/cb"] }),
        json!({ "redirect_uris": ["http://127.0.0.2/cb"] }),
        json!({ "redirect_uris": ["http://localhost.evil.example/cb"] }),
        json!({ "redirect_uris": ["javascript:alert(1)"] }),
        json!({ "redirect_uris": ["JavaScript:alert(1)"] }),
        json!({ "redirect_uris": ["data:text/html,hi"] }),
        json!({ "redirect_uris": ["file:///etc/passwd"] }),
        json!({ "redirect_uris": ["vbscript:x"] }),
        json!({ "redirect_uris": ["about:blank"] }),
        json!({ "redirect_uris": ["blob:https://app.example/x"] }),
        json!({ "redirect_uris": ["https://app.example@evil.example/cb"] }),
        json!({ "redirect_uris": ["https://app.example/c b"] }),
        json!({ "redirect_uris": ["https://app.example/cb\n"] }),
        json!({ "redirect_uris": ["https:///cb"] }),
        json!({ "redirect_uris": ["https://app.example:99999/cb"] }),
        json!({ "redirect_uris": ["https://app.example:/cb"] }),
        json!({ "redirect_uris": [long] }),
        json!({ "redirect_uris": ["https://app.example/cb", "ftp:"] }),
    ];
    for body in cases {
        match register(&h, &body).await {
            Err(OAuthError::InvalidRedirectUri(_)) => {}
            other => panic!("{body}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn bad_client_metadata_is_refused() {
    let h = Harness::new().await;
    let uris = json!(["https://app.example/cb"]);
    let too_big = json!({ "redirect_uris": uris, "padding": "x".repeat(16 * 1024) });
    let cases = [
        too_big.to_string().into_bytes(),
        b"not json".to_vec(),
        b"[]".to_vec(),
        json!({ "redirect_uris": uris, "grant_types": ["client_credentials"] })
            .to_string()
            .into_bytes(),
        json!({ "redirect_uris": uris, "grant_types": "authorization_code" })
            .to_string()
            .into_bytes(),
        json!({ "redirect_uris": uris, "response_types": ["token"] })
            .to_string()
            .into_bytes(),
        json!({ "redirect_uris": uris, "client_name": "n".repeat(201) })
            .to_string()
            .into_bytes(),
        json!({ "redirect_uris": uris, "client_name": 7 })
            .to_string()
            .into_bytes(),
        json!({ "redirect_uris": uris, "client_name": "a\u{7}b" })
            .to_string()
            .into_bytes(),
    ];
    for body in cases {
        match h.server.register(CLIENT, &body).await {
            Err(OAuthError::InvalidClientMetadata(_)) => {}
            other => panic!("{}: {other:?}", String::from_utf8_lossy(&body)),
        }
    }
    // the limits are inclusive
    let longest = json!({ "redirect_uris": uris, "client_name": "n".repeat(200) });
    assert!(register(&h, &longest).await.is_ok());
}

#[tokio::test]
async fn one_client_address_registers_sixty_clients_an_hour_and_the_next_is_refused_unstored() {
    let h = Harness::new().await;
    let body = json!({ "client_name": "App", "redirect_uris": ["https://app.example/cb"] });
    let neighbour = "2001:db8:1:2::9".parse().unwrap();
    for n in 0..toolgate_oauth::REGISTRATIONS_PER_HOUR {
        // an IPv6 subscriber's /64 counts as one address
        let address = if n % 2 == 0 {
            "2001:db8:1:2::1".parse().unwrap()
        } else {
            neighbour
        };
        let answer = h
            .server
            .register(address, body.to_string().as_bytes())
            .await;
        assert!(answer.is_ok(), "registration {n}: {answer:?}");
    }
    let refused = h
        .server
        .register(neighbour, body.to_string().as_bytes())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "temporarily_unavailable", "{refused:?}");
    assert_eq!(refused.http_status(), 503);
    assert!(
        refused
            .description()
            .starts_with("too many client registrations from this address; retry in "),
        "{refused:?}"
    );
    // another address is another count
    assert!(register(&h, &body).await.is_ok());
    // the refused one stored nothing: a day later, the unused clients purged are the 61 made
    h.advance(std::time::Duration::from_secs(25 * 3600));
    assert_eq!(h.server.purge_unused_clients().await.unwrap(), 61);
}
