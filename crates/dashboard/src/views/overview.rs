//! Overview: the personal URL (masked, reveal, copy), setup for the usual clients, key rotation.

use maud::{Markup, html};

use super::{Chrome, layout};

/// The page; `url` is `None` when the current key was not kept (rotating shows the new one).
pub fn page(chrome: &Chrome<'_>, url: Option<&str>, read_tool: &str) -> Markup {
    layout(
        "Overview",
        chrome,
        html! {
            section.card aria-labelledby="url-title" {
                h2 #url-title { "Your personal URL" }
                @if let Some(url) = url {
                    p.muted { "Any MCP client that has this URL acts as you: keep it like a password." }
                    code #personal-url .url { (masked(url)) }
                    details #reveal {
                        summary { "Reveal" }
                        code #personal-url-full .url { (url) }
                    }
                    div.row {
                        button #copy type="button" data-copy="personal-url-full" { "Copy URL" }
                        span #copy-status role="status" aria-live="polite" {}
                    }
                } @else {
                    p #personal-url { "This key was issued before the dashboard could keep it. \
                        Rotate the key below to get a URL you can see and copy here." }
                }
            }
            @if let Some(url) = url { (setup(url, read_tool)) }
            section.card aria-labelledby="rotate-title" {
                h2 #rotate-title { "Rotate key" }
                p { "Issues a new key. The old URL stops working at once, also in MCP sessions \
                     that are open now; update your clients afterwards." }
                form #rotate method="post" action="/dashboard/key/rotate" {
                    (chrome.csrf_field())
                    p {
                        input #rotate-confirm type="checkbox" name="confirm" value="yes" required;
                        " "
                        label.inline for="rotate-confirm" {
                            "I understand the old URL stops working at once"
                        }
                    }
                    button.danger type="submit" { "Rotate key" }
                }
            }
        },
    )
}

/// `…/u/svck_••••••••1a2b`: enough to recognise the key, not to use it.
fn masked(url: &str) -> String {
    match url.rsplit_once("/u/") {
        Some((base, key)) => {
            let prefix_end = key.find('_').map_or(0, |i| i + 1);
            let tail = key.len().saturating_sub(4).max(prefix_end);
            format!("{base}/u/{}••••••••{}", &key[..prefix_end], &key[tail..])
        }
        None => "••••••••".to_owned(),
    }
}

fn setup(url: &str, read_tool: &str) -> Markup {
    let claude = format!(
        r#"{{ "mcpServers": {{ "toolgate": {{ "command": "npx", "args": ["-y", "mcp-remote", "{url}"] }} }} }}"#
    );
    let cursor = format!(r#"{{ "mcpServers": {{ "toolgate": {{ "url": "{url}" }} }} }}"#);
    let vscode =
        format!(r#"{{ "servers": {{ "toolgate": {{ "type": "http", "url": "{url}" }} }} }}"#);
    let python = format!(
        "from mcp import Client\nfrom mcp.client.streamable_http import streamable_http_client\n\n\
         async with Client(streamable_http_client(\"{url}\")) as client:\n    \
         result = await client.call_tool(\"{read_tool}\", {{\"billing\": True}})\n    \
         print(result.structured_content)"
    );
    let typescript = format!(
        "import {{ Client }} from \"@modelcontextprotocol/sdk/client/index.js\";\n\
         import {{ StreamableHTTPClientTransport }} from \"@modelcontextprotocol/sdk/client/streamableHttp.js\";\n\n\
         const client = new Client({{ name: \"me\", version: \"1.0.0\" }});\n\
         await client.connect(new StreamableHTTPClientTransport(new URL(\"{url}\")));\n\
         console.log(await client.callTool({{ name: \"{read_tool}\", arguments: {{ billing: true }} }}));"
    );
    let curl = format!(
        "curl -s '{url}' -H 'Content-Type: application/json' \\\n  -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"{read_tool}\",\"arguments\":{{\"billing\":true}}}}}}'"
    );
    let snippets = [
        (
            "setup-claude-desktop",
            "Claude Desktop",
            "Settings → Connectors → Add custom connector, with the URL above; or in claude_desktop_config.json:",
            claude,
        ),
        ("setup-cursor", "Cursor", "~/.cursor/mcp.json:", cursor),
        ("setup-vscode", "VS Code", ".vscode/mcp.json:", vscode),
        (
            "setup-python",
            "Python SDK",
            "pip install mcp (2.x), inside an async function:",
            python,
        ),
        (
            "setup-typescript",
            "TypeScript SDK",
            "npm install @modelcontextprotocol/sdk:",
            typescript,
        ),
        (
            "setup-curl",
            "curl",
            "one JSON-RPC POST, no handshake needed:",
            curl,
        ),
    ];
    html! {
        section.card aria-labelledby="setup-title" {
            h2 #setup-title { "Set up your client" }
            @for (id, name, hint, text) in &snippets {
                details {
                    summary { (name) }
                    p.muted { (hint) }
                    pre id=(id) { (text) }
                    div.row {
                        button.secondary type="button" data-copy=(id) data-status=(format!("{id}-status")) { "Copy" }
                        span id=(format!("{id}-status")) role="status" aria-live="polite" {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_mask_keeps_prefix_and_last_four() {
        let url = "http://h/u/svck_0123456789abcdef";
        assert_eq!(super::masked(url), "http://h/u/svck_••••••••cdef");
        assert_eq!(super::masked("nothing"), "••••••••");
    }
}
