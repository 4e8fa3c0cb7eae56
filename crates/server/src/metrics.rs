//! Prometheus metrics: requests, tool calls by tool and outcome, JSON-RPC errors by code, and
//! latency histograms. Labels never hold keys, account ids or other caller-supplied text.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: &'static str,
    method: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolNameLabels {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: i64,
}

type Latency<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 50 µs … ~1.6 s, doubling: covers a cached tools/list and a slow tool alike.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// All of the service's metrics, registered once.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_latency: Latency<RouteLabels>,
    tool_calls: Family<ToolLabels, Counter>,
    tool_latency: Latency<ToolNameLabels>,
    rpc_errors: Family<CodeLabels, Counter>,
}

/// What happened to one `tools/call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallLabel {
    /// ran and succeeded
    Ok,
    /// ran and reported `isError`
    ToolError,
    /// refused for its arguments before metering
    InvalidArguments,
    /// no turn of the work it needs came in time; free
    Busy,
    /// refused by metering (-32002)
    Refused,
    /// storage or another internal failure
    Internal,
}

impl CallLabel {
    fn label(self) -> &'static str {
        match self {
            CallLabel::Ok => "ok",
            CallLabel::ToolError => "tool_error",
            CallLabel::InvalidArguments => "invalid_arguments",
            CallLabel::Busy => "busy",
            CallLabel::Refused => "refused",
            CallLabel::Internal => "internal_error",
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("toolgate");
        let requests = Family::<RequestLabels, Counter>::default();
        let request_latency: Latency<RouteLabels> = Family::new_with_constructor(latency_histogram);
        let tool_calls = Family::<ToolLabels, Counter>::default();
        let tool_latency: Latency<ToolNameLabels> = Family::new_with_constructor(latency_histogram);
        let rpc_errors = Family::<CodeLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests by route, method and status",
            requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by route",
            request_latency.clone(),
        );
        registry.register(
            "tool_calls",
            "tools/call requests by tool and outcome",
            tool_calls.clone(),
        );
        registry.register(
            "tool_call_duration_seconds",
            "tools/call latency by tool",
            tool_latency.clone(),
        );
        registry.register(
            "jsonrpc_errors",
            "JSON-RPC errors answered, by code",
            rpc_errors.clone(),
        );
        Self {
            registry,
            requests,
            request_latency,
            tool_calls,
            tool_latency,
            rpc_errors,
        }
    }

    /// Counts one HTTP request.
    pub fn request(&self, route: &'static str, method: &'static str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                route,
                method,
                status,
            })
            .inc();
        self.request_latency
            .get_or_create(&RouteLabels { route })
            .observe(seconds);
    }

    /// Counts one tool call.
    /// `tool` must be one of the registry's names, never caller-supplied text.
    pub fn tool_call(&self, tool: &str, outcome: CallLabel, seconds: f64) {
        let labels = ToolLabels {
            tool: tool.to_owned(),
            outcome: outcome.label(),
        };
        self.tool_calls.get_or_create(&labels).inc();
        self.tool_latency
            .get_or_create(&ToolNameLabels { tool: labels.tool })
            .observe(seconds);
    }

    /// Counts one JSON-RPC error answered.
    pub fn rpc_error(&self, code: i64) {
        self.rpc_errors.get_or_create(&CodeLabels { code }).inc();
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_what_was_counted() {
        let metrics = Metrics::new();
        metrics.request("/u/{api_key}", "POST", 200, 0.001);
        metrics.tool_call("svc_read", CallLabel::Refused, 0.002);
        metrics.rpc_error(-32002);
        let text = metrics.render();
        assert!(
            text.contains(
                r#"toolgate_http_requests_total{route="/u/{api_key}",method="POST",status="200"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"toolgate_tool_calls_total{tool="svc_read",outcome="refused"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"toolgate_jsonrpc_errors_total{code="-32002"} 1"#),
            "{text}"
        );
        assert!(
            text.contains("toolgate_tool_call_duration_seconds_bucket"),
            "{text}"
        );
    }
}
