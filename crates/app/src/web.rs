//! The web seam: what `url` (and later `http`) needs from an HTTP client, as values. The binary
//! wires in the real client (crate `web`: reqwest behind the egress guard); `app` never speaks
//! HTTP itself.

use async_trait::async_trait;

/// One GET on a tenant's behalf.
#[derive(Clone)]
pub struct WebRequest {
    /// The URL, secrets already substituted.
    pub url: String,
    /// Extra request headers, secrets already substituted.
    pub headers: Vec<(String, String)>,
    /// Bytes of the (decompressed) body to read at most; the rest is cut.
    pub max_bytes: usize,
}

impl std::fmt::Debug for WebRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // a URL or a header value may hold a secret's value
        f.debug_struct("WebRequest")
            .field("headers", &self.headers.len())
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

/// What a page became.
#[derive(Debug, Clone, PartialEq)]
pub enum WebContent {
    /// Readable text: `format` is `markdown` (from HTML), `json` (pretty-printed) or `text`.
    Text {
        /// the text
        text: String,
        /// how it was made
        format: &'static str,
    },
    /// An image, base64-encoded.
    Image {
        /// base64 of the bytes
        data: String,
        /// its MIME type
        mime_type: String,
    },
    /// Anything else, summarised (type, size, first bytes in hex).
    Binary {
        /// the summary
        summary: String,
    },
}

/// A fetched page.
#[derive(Debug, Clone)]
pub struct WebPage {
    /// The final response's status.
    pub status: u16,
    /// The URL after redirects.
    pub final_url: String,
    /// Its Content-Type, or empty.
    pub content_type: String,
    /// Body bytes read (decompressed).
    pub bytes: usize,
    /// The body was longer than `max_bytes`.
    pub truncated: bool,
    /// The body, rendered.
    pub content: WebContent,
}

/// Why a fetch failed; messages are safe to show the caller (they may echo the URL, which the
/// caller redacts).
#[derive(Debug, Clone, thiserror::Error)]
pub enum WebError {
    /// the egress guard, the scheme or the redirect limit refused it
    #[error("{0}")]
    Refused(String),
    /// the request failed or timed out
    #[error("{0}")]
    Failed(String),
}

/// Fetches pages.
#[async_trait]
pub trait Web: Send + Sync {
    /// GETs `request`.
    async fn get(&self, request: WebRequest) -> Result<WebPage, WebError>;
}
