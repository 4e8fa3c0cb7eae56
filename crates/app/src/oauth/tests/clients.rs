//! Client ID Metadata Documents: fetched through the Fetcher port, checked, kept for a day.

use std::time::Duration;

use serde_json::json;
use toolgate_store::OAuthStore;

use super::{Canned, Harness, REDIRECT, VERIFIER, params};
use toolgate_oauth::AuthorizeError;

const DOC: &str = "https://app.example/oauth/client.json";

fn document(client_id: &str) -> String {
    json!({
        "client_id": client_id,
        "client_name": "Document App",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_method": "none",
    })
    .to_string()
}

async fn authorize(
    h: &Harness,
    client_id: &str,
) -> Result<toolgate_oauth::AuthorizeRequest, AuthorizeError> {
    h.server
        .authorize(&params(client_id, VERIFIER), Some(&h.account.id))
        .await
}

fn refused(outcome: Result<toolgate_oauth::AuthorizeRequest, AuthorizeError>, says: &str) {
    match outcome {
        Err(AuthorizeError::NoRedirect(message)) => {
            assert!(message.contains(says), "{message:?} lacks {says:?}");
        }
        other => panic!("expected NoRedirect({says}), got {other:?}"),
    }
}

#[tokio::test]
async fn a_document_client_is_fetched_once_a_day() {
    let h = Harness::new().await;
    h.fetcher.serve(DOC, Canned::json(document(DOC)));
    let request = authorize(&h, DOC).await.unwrap();
    assert_eq!(request.client_id(), DOC);
    assert_eq!(request.client_name(), "Document App");
    assert_eq!(h.fetcher.calls(), 1);
    let stored = h.store.client(DOC).await.unwrap().unwrap();
    assert_eq!(stored.redirect_uris, [REDIRECT]);

    authorize(&h, DOC).await.unwrap();
    assert_eq!(h.fetcher.calls(), 1, "the stored copy is reused");

    // a day later the document is read again, and a change shows
    h.advance(Duration::from_secs(24 * 3600 + 1));
    h.fetcher.serve(
        DOC,
        Canned::json(
            json!({ "client_id": DOC, "client_name": "Renamed", "redirect_uris": [REDIRECT] })
                .to_string(),
        ),
    );
    let request = authorize(&h, DOC).await.unwrap();
    assert_eq!(h.fetcher.calls(), 2);
    assert_eq!(request.client_name(), "Renamed");
}

#[tokio::test]
async fn a_document_must_name_itself() {
    let h = Harness::new().await;
    h.fetcher.serve(
        DOC,
        Canned::json(document("https://evil.example/oauth/client.json")),
    );
    refused(authorize(&h, DOC).await, "client_id");
    h.fetcher.serve(
        DOC,
        Canned::json(json!({ "redirect_uris": [REDIRECT] }).to_string()),
    );
    refused(authorize(&h, DOC).await, "client_id");
    assert!(h.store.client(DOC).await.unwrap().is_none());
}

#[tokio::test]
async fn a_document_larger_than_64_kib_is_refused() {
    let h = Harness::new().await;
    let padded = json!({
        "client_id": DOC,
        "redirect_uris": [REDIRECT],
        "padding": "x".repeat(64 * 1024),
    });
    h.fetcher.serve(DOC, Canned::json(padded.to_string()));
    refused(authorize(&h, DOC).await, "64 KiB");
    // just under the limit is fine
    let fitting = json!({
        "client_id": DOC,
        "redirect_uris": [REDIRECT],
        "padding": "x".repeat(60 * 1024),
    });
    h.fetcher.serve(DOC, Canned::json(fitting.to_string()));
    assert!(authorize(&h, DOC).await.is_ok());
}

#[tokio::test]
async fn a_document_with_bad_redirect_uris_is_refused() {
    let h = Harness::new().await;
    for uris in [
        json!(["javascript:alert(1)"]),
        json!(["http://app.example/cb"]),
        json!([]),
        json!("https://app.example/cb"),
        json!(null),
    ] {
        h.fetcher.serve(
            DOC,
            Canned::json(json!({ "client_id": DOC, "redirect_uris": uris }).to_string()),
        );
        refused(authorize(&h, DOC).await, "is not acceptable");
    }
    h.fetcher.serve(
        DOC,
        Canned::json(
            json!({ "client_id": DOC, "redirect_uris": [REDIRECT], "client_name": 5 }).to_string(),
        ),
    );
    refused(authorize(&h, DOC).await, "client_name");
}

#[tokio::test]
async fn a_document_must_be_served_plainly_as_json() {
    let h = Harness::new().await;
    let mut missing = Canned::json(document(DOC));
    missing.status = 404;
    h.fetcher.serve(DOC, missing);
    refused(authorize(&h, DOC).await, "HTTP 404");

    let mut moved = Canned::json(document(DOC));
    moved.final_url = Some("https://elsewhere.example/client.json".to_owned());
    h.fetcher.serve(DOC, moved);
    refused(authorize(&h, DOC).await, "redirected");

    let mut binary = Canned::json(document(DOC));
    binary.content_type = "application/octet-stream";
    h.fetcher.serve(DOC, binary);
    refused(authorize(&h, DOC).await, "not JSON");

    let mut text = Canned::json("[1, 2]".to_owned());
    text.content_type = "text/plain";
    h.fetcher.serve(DOC, text);
    refused(authorize(&h, DOC).await, "not a JSON object");

    refused(
        authorize(&h, "https://app.example/unserved.json").await,
        "could not be fetched",
    );
    // and a document served as text/plain that is JSON is fine
    let mut plain = Canned::json(document(DOC));
    plain.content_type = "text/plain";
    h.fetcher.serve(DOC, plain);
    assert!(authorize(&h, DOC).await.is_ok());
}

#[tokio::test]
async fn document_fetches_are_counted_per_signed_in_account() {
    let h = Harness::new().await;
    let unserved = |n: u32| format!("https://app.example/unserved-{n}.json");
    // nobody signed in: nothing is fetched
    refused(
        h.server.authorize(&params(DOC, VERIFIER), None).await,
        "signed-in owner",
    );
    assert_eq!(h.fetcher.calls(), 0);
    // an account's fetches count, failed ones too, up to the hourly limit
    for n in 0..toolgate_oauth::DOCUMENT_FETCHES_PER_HOUR {
        refused(authorize(&h, &unserved(n)).await, "could not be fetched");
    }
    assert_eq!(h.fetcher.calls(), 20);
    let over = authorize(&h, &unserved(99)).await;
    let Err(AuthorizeError::TooManyFetches(wait)) = over else {
        panic!("expected TooManyFetches, got {over:?}");
    };
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(3600),
        "{wait:?}"
    );
    let shown = AuthorizeError::TooManyFetches(wait).to_string();
    assert!(shown.contains("20 client metadata documents"), "{shown}");
    assert_eq!(h.fetcher.calls(), 20, "the refused one was not fetched");
    // another account has its own count, and a stored copy costs no fetch
    let other = super::create_account(&h.store, "other@example.com").await;
    h.fetcher.serve(DOC, Canned::json(document(DOC)));
    for _ in 0..25 {
        let request = h
            .server
            .authorize(&params(DOC, VERIFIER), Some(&other.id))
            .await;
        assert_eq!(request.unwrap().client_id(), DOC);
    }
    assert_eq!(h.fetcher.calls(), 21);
    // the stored copy serves the first account as well
    assert!(authorize(&h, DOC).await.is_ok());
}

#[tokio::test]
async fn documents_need_the_web_seam() {
    let h = Harness::without_web().await;
    h.fetcher.serve(DOC, Canned::json(document(DOC)));
    refused(authorize(&h, DOC).await, "register");
    assert_eq!(h.fetcher.calls(), 0);
}

#[tokio::test]
async fn document_urls_must_have_a_path_and_no_tricks() {
    let h = Harness::new().await;
    for url in [
        "https://app.example",
        "https://app.example/",
        "https://app.example/a/../client.json",
        "https://user@app.example/client.json",
        "https://app.example/client.json#x",
    ] {
        h.fetcher.serve(url, Canned::json(document(url)));
        assert!(
            matches!(authorize(&h, url).await, Err(AuthorizeError::NoRedirect(_))),
            "{url}"
        );
    }
    assert_eq!(h.fetcher.calls(), 0, "none of them was fetched");
}

#[tokio::test]
async fn clients_unused_for_a_day_are_purged() {
    let h = Harness::new().await;
    let idle = h.register(&[REDIRECT]).await;
    let (connected, _) = h.tokens(None).await;
    h.fetcher.serve(DOC, Canned::json(document(DOC)));
    authorize(&h, DOC).await.unwrap();
    // within the day nothing goes
    h.advance(Duration::from_secs(23 * 3600));
    assert_eq!(h.server.purge_unused_clients().await.unwrap(), 0);
    let young = h.register(&[REDIRECT]).await;
    h.advance(Duration::from_secs(3600 + 1));
    // the idle client and the fetched document's go; the one whose refresh token lives stays
    assert_eq!(h.server.purge_unused_clients().await.unwrap(), 2);
    refused(authorize(&h, &idle).await, "unknown");
    assert!(h.store.client(DOC).await.unwrap().is_none());
    assert!(h.store.client(&connected).await.unwrap().is_some());
    assert!(authorize(&h, &young).await.is_ok());
}
