//! The MCP conformance suite's fixture tools, compiled only with the `conformance-fixtures`
//! feature. They ride the same transport, origin check and authentication as the real tools,
//! so the suite judges the real stack; they are not metered and never ship in a release build.

use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ProgressNotificationParam,
    ResourceContents, Tool,
};
use rmcp::service::RequestContext;
use serde_json::{Map, json};

const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
const WAV_EMPTY: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";

const NAMES: [&str; 7] = [
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_error_handling",
    "test_tool_with_progress",
];

/// The fixture tools, for `tools/list`.
pub fn tools() -> Vec<Tool> {
    let schema = match json!({"type": "object", "properties": {}}) {
        serde_json::Value::Object(object) => object,
        _ => Map::new(),
    };
    let schema = Arc::new(schema);
    NAMES
        .iter()
        .map(|name| {
            Tool::new(
                *name,
                format!("conformance fixture `{name}`"),
                schema.clone(),
            )
        })
        .collect()
}

/// Runs the fixture `request` names, or `None` when it names none.
pub async fn call(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Option<CallToolResult> {
    let result = match request.name.as_ref() {
        "test_simple_text" => CallToolResult::success(vec![ContentBlock::text(
            "This is a simple text response for testing.",
        )]),
        "test_image_content" => {
            CallToolResult::success(vec![ContentBlock::image(PNG_1X1, "image/png")])
        }
        "test_audio_content" => {
            CallToolResult::success(vec![ContentBlock::audio(WAV_EMPTY, "audio/wav")])
        }
        "test_embedded_resource" => {
            CallToolResult::success(vec![ContentBlock::resource(ResourceContents::text(
                "This is an embedded resource content.",
                "test://embedded-resource",
            ))])
        }
        "test_multiple_content_types" => CallToolResult::success(vec![
            ContentBlock::text("Multiple content types test:"),
            ContentBlock::image(PNG_1X1, "image/png"),
            ContentBlock::resource(
                ResourceContents::text(
                    r#"{"test":"data","value":123}"#,
                    "test://mixed-content-resource",
                )
                .with_mime_type("application/json"),
            ),
        ]),
        "test_error_handling" => CallToolResult::error(vec![ContentBlock::text(
            "This tool intentionally returns an error for testing",
        )]),
        "test_tool_with_progress" => with_progress(context).await,
        _ => return None,
    };
    Some(result)
}

async fn with_progress(context: &RequestContext<RoleServer>) -> CallToolResult {
    if let Some(token) = context.meta.get_progress_token() {
        for step in [0.0, 50.0, 100.0] {
            let note = ProgressNotificationParam::new(token.clone(), step).with_total(100.0);
            if context.peer.notify_progress(note).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    CallToolResult::success(vec![ContentBlock::text("Progress test completed")])
}
