//! What a client (or whoever serves its metadata document) controls, at 10^6 levels of nesting
//! and at each size limit: a clean refusal, nothing stored, and the server goes on answering.

use serde_json::json;
use toolgate_store::OAuthStore;

use super::{CLIENT, Canned, Harness, REDIRECT, VERIFIER, params};
use toolgate_oauth::{AuthorizeError, OAuthError};

const DOC: &str = "https://app.example/oauth/client.json";
const LIMIT: usize = toolgate_oauth::document::MAX_DOCUMENT_BYTES;

/// `[` nested `depth` deep around nothing.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// A valid document padded to exactly `size` bytes.
fn document_of(size: usize) -> String {
    let bare = json!({"client_id": DOC, "redirect_uris": [REDIRECT], "padding": ""}).to_string();
    let padded = json!({
        "client_id": DOC,
        "redirect_uris": [REDIRECT],
        "padding": "x".repeat(size - bare.len()),
    })
    .to_string();
    assert_eq!(padded.len(), size);
    padded
}

fn refused_saying(outcome: Result<toolgate_oauth::AuthorizeRequest, AuthorizeError>, says: &str) {
    match outcome {
        Err(AuthorizeError::NoRedirect(message)) => {
            assert!(message.contains(says), "{message:?} lacks {says:?}");
        }
        other => panic!("expected NoRedirect({says}), got {other:?}"),
    }
}

#[tokio::test]
async fn a_metadata_document_of_exactly_64_kib_is_read_and_one_byte_more_is_refused() {
    let h = Harness::new().await;
    h.fetcher.serve(DOC, Canned::json(document_of(LIMIT + 1)));
    refused_saying(
        h.server
            .authorize(&params(DOC, VERIFIER), Some(&h.account.id))
            .await,
        "larger than 64 KiB",
    );
    assert!(h.store.client(DOC).await.unwrap().is_none());
    h.fetcher.serve(DOC, Canned::json(document_of(LIMIT)));
    let request = h
        .server
        .authorize(&params(DOC, VERIFIER), Some(&h.account.id))
        .await
        .unwrap();
    assert_eq!(request.client_id(), DOC);
}

#[tokio::test]
async fn a_metadata_document_nested_a_million_deep_is_refused_cleanly() {
    let h = Harness::new().await;
    // as served (over the size limit), and as much of it as fits, handed over as text so that
    // this crate's own parse meets it
    let deep = format!(
        r#"{{"client_id":"{DOC}","redirect_uris":["{REDIRECT}"],"x":{}}}"#,
        nested(1_000_000)
    );
    h.fetcher.serve(DOC, Canned::json(deep));
    refused_saying(
        h.server
            .authorize(&params(DOC, VERIFIER), Some(&h.account.id))
            .await,
        "64 KiB",
    );
    let fitting = format!(
        r#"{{"client_id":"{DOC}","redirect_uris":["{REDIRECT}"],"x":{}}}"#,
        nested(30_000)
    );
    assert!(fitting.len() <= LIMIT);
    for content_type in ["application/json", "text/plain"] {
        h.fetcher.serve(
            DOC,
            Canned {
                content_type,
                ..Canned::json(fitting.clone())
            },
        );
        refused_saying(
            h.server
                .authorize(&params(DOC, VERIFIER), Some(&h.account.id))
                .await,
            "JSON",
        );
    }
    assert!(h.store.client(DOC).await.unwrap().is_none());
    // the same server still reads an honest document
    h.fetcher.serve(DOC, Canned::json(document_of(200)));
    assert!(
        h.server
            .authorize(&params(DOC, VERIFIER), Some(&h.account.id))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_registration_nested_a_million_deep_or_over_16_kib_is_refused_cleanly() {
    let h = Harness::new().await;
    let limit = toolgate_oauth::MAX_REGISTRATION_BYTES;
    for body in [
        nested(1_000_000),
        format!(
            r#"{{"redirect_uris":["{REDIRECT}"],"x":{}}}"#,
            nested(5_000)
        ),
    ] {
        let refused = h
            .server
            .register(CLIENT, body.as_bytes())
            .await
            .unwrap_err();
        assert!(
            matches!(refused, OAuthError::InvalidClientMetadata(_)),
            "{refused:?}"
        );
    }
    let sized = |size: usize| {
        let bare = json!({"redirect_uris": [REDIRECT], "client_name": "n", "x": ""}).to_string();
        json!({"redirect_uris": [REDIRECT], "client_name": "n", "x": "y".repeat(size - bare.len())})
            .to_string()
    };
    assert!(
        h.server
            .register(CLIENT, sized(limit).as_bytes())
            .await
            .is_ok()
    );
    let over = h
        .server
        .register(CLIENT, sized(limit + 1).as_bytes())
        .await
        .unwrap_err();
    assert!(
        over.to_string().contains("16 KiB") || format!("{over:?}").contains("16 KiB"),
        "{over:?}"
    );
}
