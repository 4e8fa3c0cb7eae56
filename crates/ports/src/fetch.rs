//! The Fetcher port: what `url`, `http` and the fetch of OAuth client metadata documents need
//! from an HTTP client, as values. The binary wires in the real client (crate `fetch`: reqwest
//! behind the egress guard); `app` never speaks HTTP itself.

use async_trait::async_trait;

/// The methods a tenant's request may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `url` on the read tool
    Get,
    /// `http` on the write tool, like the three below
    Post,
    /// replaces a resource
    Put,
    /// changes part of a resource
    Patch,
    /// deletes a resource
    Delete,
}

impl Method {
    /// The methods `http` accepts, as they are written.
    pub const WRITES: [&'static str; 4] = ["POST", "PUT", "PATCH", "DELETE"];

    /// Reads a method name (upper case).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "GET" => Some(Self::Get),
            "POST" => Some(Self::Post),
            "PUT" => Some(Self::Put),
            "PATCH" => Some(Self::Patch),
            "DELETE" => Some(Self::Delete),
            _ => None,
        }
    }

    /// The method as it is written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Patch => "PATCH",
            Self::Delete => "DELETE",
        }
    }
}

/// One request on a tenant's behalf.
#[derive(Clone)]
pub struct FetchRequest {
    /// The method.
    pub method: Method,
    /// The URL, secrets already substituted.
    pub url: String,
    /// Extra request headers, secrets already substituted.
    pub headers: Vec<(String, String)>,
    /// The request body, secrets already substituted.
    pub body: Option<String>,
    /// The body holds a secret's value: it is never sent again to another origin (a 307 or
    /// 308 redirect there is refused). Headers the caller set are never sent to another
    /// origin at all.
    pub body_holds_secret: bool,
    /// Bytes of the (decompressed) body to read at most; the rest is cut.
    pub max_bytes: usize,
}

impl std::fmt::Debug for FetchRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // a URL or a header value may hold a secret's value
        f.debug_struct("FetchRequest")
            .field("method", &self.method)
            .field("headers", &self.headers.len())
            .field("body_bytes", &self.body.as_ref().map(String::len))
            .field("body_holds_secret", &self.body_holds_secret)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

/// What a page became.
#[derive(Debug, Clone, PartialEq)]
pub enum PageContent {
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
#[derive(Debug, Clone, PartialEq)]
pub struct FetchedPage {
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
    pub content: PageContent,
    /// The final answer's headers, name (lower case) and value, in the order they came: at
    /// most [`MAX_ANSWER_HEADERS`], values of text only, each cut to
    /// [`MAX_ANSWER_HEADER_CHARS`] (the site chooses them).
    pub headers: Vec<(String, String)>,
}

/// Headers of an answer kept at most.
pub const MAX_ANSWER_HEADERS: usize = 64;
/// Characters of an answer's header value kept at most.
pub const MAX_ANSWER_HEADER_CHARS: usize = 4096;

/// Why a fetch failed; messages are safe to show the caller (they may echo the URL, which the
/// caller redacts).
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    /// the egress guard, the scheme or the redirect limit refused it
    #[error("{0}")]
    Refused(String),
    /// the request failed or timed out
    #[error("{0}")]
    Failed(String),
}

/// Sends requests and reads their answers.
#[async_trait]
pub trait Fetcher: Send + Sync {
    /// Sends `request`.
    async fn send(&self, request: FetchRequest) -> Result<FetchedPage, FetchError>;
}
