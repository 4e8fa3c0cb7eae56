//! Results larger than a client takes, and files in by link, through the real binary and sandbox:
//! a 10 MB output comes back as a preview and a signed link that gives it whole without the key;
//! a bad link is 404; a client's `anthropic/maxResultSizeChars` raises the inline limit; figures
//! are kept with links; a link never shows a secret the answer redacted; an upload link takes one
//! PUT into its session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use serde_json::{Value, json};

use crate::common::*;
use crate::sandbox::{is_error, text};

/// The items of a result of type `kind`.
fn items<'a>(result: &'a Value, kind: &str) -> Vec<&'a Value> {
    result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == kind)
        .collect()
}

/// GET `url` without any key: status, content type, body.
async fn fetch(url: &str) -> (u16, String, Vec<u8>) {
    let response = client().get(url).send().await.unwrap();
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, kind, response.bytes().await.unwrap().to_vec())
}

/// `url` with one character of its signature changed.
fn tampered(url: &str) -> String {
    let (head, name) = url.rsplit_once('/').unwrap();
    let (payload, signature) = head.rsplit_once('.').unwrap();
    let mut signature = signature.to_owned();
    let last = signature.pop().unwrap();
    signature.push(if last == 'A' { 'B' } else { 'A' });
    format!("{payload}.{signature}/{name}")
}

#[tokio::test]
async fn a_ten_megabyte_result_reaches_the_client_whole_through_a_link() {
    let f = fixture().await;
    // 1,250,000 distinct lines of 8 bytes: 10 MB, any part misplaced would show
    let code = "import sys\nfor i in range(1_250_000):\n    sys.stdout.write(f'{i:07d}\\n')";
    let expected: Vec<u8> = (0..1_250_000)
        .flat_map(|i| format!("{i:07}\n").into_bytes())
        .collect();
    let result = f
        .write(json!({"code": code, "session_id": "big", "timeout_s": 120}))
        .await;
    assert!(!is_error(&result), "{}", text(&result));
    // the answer is small: a preview of head and tail, saying what is left out
    let answer = serde_json::to_string(&result).unwrap();
    assert!(answer.len() < 100_000, "{} bytes inline", answer.len());
    let shown = text(&result);
    assert!(shown.starts_with("0000000\n0000001\n"), "{shown:.200}");
    assert!(shown.trim_end().ends_with("1249999"), "{shown:.200}");
    assert!(shown.contains("bytes left out"), "{shown:.200}");
    let links = items(&result, "resource_link");
    assert_eq!(links.len(), 1, "{result:.2000}");
    let link = links[0];
    assert_eq!(link["size"], 10_000_000);
    assert!(link["mimeType"].as_str().unwrap().starts_with("text/plain"));
    let python = &result["structuredContent"]["python"];
    assert_eq!(python["stdout_file"]["uri"], link["uri"]);
    assert_eq!(python["stdout_bytes"], 10_000_000);
    let uri = link["uri"].as_str().unwrap();
    assert!(uri.starts_with(&f.server.url("/files/")), "{uri}");
    assert!(!uri.contains(&f.alice.key), "a link never carries the key");

    // the link gives the whole, byte for byte, without the key
    let (status, kind, body) = fetch(uri).await;
    assert_eq!(status, 200);
    assert!(kind.starts_with("text/plain"), "{kind}");
    assert_eq!(body.len(), expected.len());
    assert!(
        body == expected,
        "the download differs from what was printed"
    );

    // the file is in the session's workspace, where the session can read it
    let path = python["stdout_file"]["path"].as_str().unwrap();
    let read = f
        .write(json!({"code": format!("len(open({path:?}, 'rb').read())"), "session_id": "big"}))
        .await;
    assert_eq!(value(&read), "10000000");

    // a tampered link, and a link to a file that is gone, are 404 alike
    assert_eq!(fetch(&tampered(uri)).await.0, 404);
    let gone = f
        .write(json!({"code": format!("import os; os.remove({path:?})"), "session_id": "big"}))
        .await;
    assert!(!is_error(&gone), "{gone}");
    let (status, _, body) = fetch(uri).await;
    assert_eq!(status, 404);
    assert_eq!(
        String::from_utf8(body).unwrap(),
        r#"{"error":"no such file"}"#
    );
    // a session of another account with the same id and file is another session
    let mine = f
        .write(json!({"code": "print('a' * 30_000)", "session_id": "same"}))
        .await;
    let theirs = f
        .call(
            &f.bob,
            "svc_write",
            json!({"code": "print('b' * 30_000)", "session_id": "same"}),
        )
        .await;
    let uri_of = |result: &Value| {
        items(result, "resource_link")[0]["uri"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (mine, theirs) = (uri_of(&mine), uri_of(&theirs));
    assert_eq!(
        fetch(&mine).await.2,
        format!("{}\n", "a".repeat(30_000)).into_bytes()
    );
    assert_eq!(
        fetch(&theirs).await.2,
        format!("{}\n", "b".repeat(30_000)).into_bytes()
    );
}

#[tokio::test]
async fn the_inline_limit_is_raised_by_the_client_and_held_without_a_session() {
    let f = fixture().await;
    let args = json!({"code": "print('z' * 50_000)", "session_id": "s"});
    let default = f.write(args.clone()).await;
    assert_eq!(items(&default, "resource_link").len(), 1, "{default:.500}");
    assert!(text(&default).len() < 25_000);
    // the client takes 100,000 characters: the whole comes inline, no link
    let mut call = tool_call("svc_write", args);
    call["params"]["_meta"] = json!({"anthropic/maxResultSizeChars": 100_000});
    let raised = post_personal(&f.http, &f.server, &f.alice.key, &call)
        .await
        .result();
    assert!(items(&raised, "resource_link").is_empty(), "{raised:.500}");
    assert_eq!(text(&raised), format!("{}\n", "z".repeat(50_000)));
    // without a session there is nothing to keep the whole in: the preview says how to get it
    let fresh = f.write(json!({"code": "print('y' * 50_000)"})).await;
    assert!(items(&fresh, "resource_link").is_empty());
    assert!(text(&fresh).contains("session_id"), "{}", text(&fresh));
    assert!(text(&fresh).len() < 25_000);
}

#[tokio::test]
async fn figures_stay_images_and_are_kept_with_links() {
    let f = fixture().await;
    let code = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()";
    let result = f.write(json!({"code": code, "session_id": "plots"})).await;
    assert!(!is_error(&result), "{}", text(&result));
    let images = items(&result, "image");
    let links = items(&result, "resource_link");
    assert_eq!((images.len(), links.len()), (1, 1), "{result:.500}");
    assert_eq!(links[0]["mimeType"], "image/png");
    let png = base64::engine::general_purpose::STANDARD
        .decode(images[0]["data"].as_str().unwrap())
        .unwrap();
    let (status, kind, body) = fetch(links[0]["uri"].as_str().unwrap()).await;
    assert_eq!((status, kind.as_str()), (200, "image/png"));
    assert!(body == png, "the kept figure is the image shown");
    // without a session a figure is an image only
    let fresh = f.write(json!({"code": code})).await;
    assert_eq!(items(&fresh, "image").len(), 1);
    assert!(items(&fresh, "resource_link").is_empty());
}

#[tokio::test]
async fn a_link_never_shows_a_secret_the_answer_redacted() {
    let f = fixture().await;
    let secret = "s3cr3t-value-for-links";
    let set = f
        .write(json!({"secret_set": {"name": "TOKEN", "value": secret}}))
        .await;
    assert!(!is_error(&set), "{set}");
    // one stream within the session's 1 MiB (kept by the service), one past it (kept by the
    // session, then rewritten redacted)
    for (session, pad) in [("short", 30_000), ("long", 2_000_000)] {
        let code =
            format!("import os\nprint(os.environ['TOKEN'] + 'x' * {pad} + os.environ['TOKEN'])");
        let result = f
            .write(json!({"code": code, "session_id": session, "secrets": ["TOKEN"]}))
            .await;
        assert!(!serde_json::to_string(&result).unwrap().contains(secret));
        let links = items(&result, "resource_link");
        assert_eq!(links.len(), 1, "{session}: {result:.500}");
        let body = String::from_utf8(fetch(links[0]["uri"].as_str().unwrap()).await.2).unwrap();
        assert!(
            !body.contains(secret),
            "{session}: the link shows the secret"
        );
        assert!(
            body.starts_with("[REDACTED:TOKEN]xxx"),
            "{session}: {body:.100}"
        );
        assert!(body.ends_with("xxx[REDACTED:TOKEN]\n"), "{session}");
    }
}

/// A PUT to `url` written by hand (`head` ends the headers), with what of `body` the server
/// reads before it answers; the answer's head.
async fn raw_put(url: &str, head: &str, body: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let request = format!("PUT {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{head}");
    stream.write_all(request.as_bytes()).await.unwrap();
    // the server may answer and close before all of it is written
    let _ = stream.write_all(body).await;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn an_upload_link_takes_one_put_into_its_session() {
    let f = fixture_with(&["--sandbox-workspace-mib", "2"]).await;
    let asked = f
        .write(json!({"upload_url": {"path": "in/data.csv", "session_id": "up"}}))
        .await;
    assert!(!is_error(&asked), "{}", text(&asked));
    let record = &asked["structuredContent"]["upload_url"];
    assert_eq!(record["method"], "PUT");
    let url = record["url"].as_str().unwrap();
    assert!(!url.contains(&f.alice.key));
    let csv = "a,b\n1,2\n3,4\n";
    let put = |url: String, body: Vec<u8>| async move {
        let response = client().put(&url).body(body).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    };
    // a bad signature is 404, and uses nothing up
    assert_eq!(put(tampered(url), csv.into()).await.0, 404);
    let (status, body) = put(url.to_owned(), csv.into()).await;
    assert_eq!(status, 201, "{body}");
    let read = f
        .write(json!({"code": "open('in/data.csv').read()", "session_id": "up"}))
        .await;
    assert_eq!(value(&read), format!("{csv:?}").replace('"', "'"));
    // the link is used: a second PUT is refused and changes nothing
    let (status, body) = put(url.to_owned(), b"other".to_vec()).await;
    assert_eq!(status, 410, "{body}");
    assert!(body.contains("used already"), "{body}");
    // more than the workspace holds is refused (Content-Length first), nothing used up
    let big = f
        .write(json!({"upload_url": {"path": "big.bin", "session_id": "up"}}))
        .await;
    let big = big["structuredContent"]["upload_url"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let announced = format!("Content-Length: {}\r\n\r\n", 3 << 20);
    assert!(
        raw_put(&big, &announced, &[])
            .await
            .starts_with("HTTP/1.1 413")
    );
    // without a length, refused once the body passes the limit
    let chunk = format!("{:x}\r\n{}\r\n", 1 << 20, "c".repeat(1 << 20));
    let chunks = chunk.repeat(3).into_bytes();
    let streamed = raw_put(&big, "Transfer-Encoding: chunked\r\n\r\n", &chunks).await;
    // (the server stops reading there: its answer may be lost to the reset of what is unread)
    assert!(
        streamed.is_empty() || streamed.starts_with("HTTP/1.1 413"),
        "{streamed:.200}"
    );
    // neither used the link up nor wrote anything
    assert_eq!(put(big, b"fits".to_vec()).await.0, 201);
    let read = f
        .write(json!({"code": "open('big.bin').read()", "session_id": "up"}))
        .await;
    assert_eq!(value(&read), "'fits'");
    // hostile paths make no link, with a clear error, before anything is metered
    for (path, says) in [
        ("../escape.csv", "'..'"),
        ("/etc/passwd", "relative"),
        ("a\u{0}b", "NUL"),
    ] {
        let refused = f
            .write(json!({"upload_url": {"path": path, "session_id": "up"}}))
            .await;
        assert!(is_error(&refused), "{path:?}: {refused}");
        assert!(
            text(&refused).contains(says),
            "{path:?}: {}",
            text(&refused)
        );
    }
}

/// With `--nodes` the front end reaches sessions only over the node channel: the session keeps
/// the whole there, the link reads it through the node, an upload lands there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_work_with_sessions_on_nodes() {
    let dir = sandbox_dir();
    let cluster = Cluster::start(dir.path(), 1).await;
    let storage = Storage::sqlite(&dir.path().join("front"));
    let front = cluster.front_end(&storage, &[]).await;
    let alice = create_account(&storage, "links-on-nodes@example.org");
    let result = write(
        &front,
        &alice.key,
        json!({"code": "print('n' * 2_000_000)", "session_id": "remote"}),
    )
    .await;
    let links = items(&result, "resource_link");
    assert_eq!(links.len(), 1, "{result:.500}");
    let body = fetch(links[0]["uri"].as_str().unwrap()).await.2;
    assert!(body == format!("{}\n", "n".repeat(2_000_000)).into_bytes());
    let asked = write(
        &front,
        &alice.key,
        json!({"upload_url": {"path": "up.txt", "session_id": "remote"}}),
    )
    .await;
    let url = asked["structuredContent"]["upload_url"]["url"]
        .as_str()
        .unwrap();
    let response = client()
        .put(url)
        .body("over the node")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let read = write(
        &front,
        &alice.key,
        json!({"code": "open('up.txt').read()", "session_id": "remote"}),
    )
    .await;
    assert_eq!(value(&read), "'over the node'");
}

/// `upload_url` is in svc_write's schema, and its line of the description is short.
#[tokio::test]
async fn upload_url_is_listed_within_the_description_budget() {
    let f = fixture().await;
    let listed = post_personal(&f.http, &f.server, &f.alice.key, &tools_list())
        .await
        .result();
    let write = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "svc_write")
        .unwrap();
    let field = &write["inputSchema"]["properties"]["upload_url"];
    assert_eq!(field["required"], json!(["path", "session_id"]), "{field}");
    // its line of the description is short: clients cut a tool's description past about 2 KB
    let description = write["description"].as_str().unwrap();
    let line = description
        .lines()
        .find(|line| line.starts_with("- `upload_url`"))
        .unwrap_or_else(|| panic!("{description}"));
    assert!(line.len() <= 160, "{} bytes: {line}", line.len());
}

/// Two front ends on one PostgreSQL sign and honour the same links (the key is derived from the
/// vault they share), and an upload link's one use is recorded where both see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_hold_across_front_ends() {
    let url = std::env::var("TOOLGATE_TEST_POSTGRES_URL")
        .expect("TOOLGATE_TEST_POSTGRES_URL: scripts/test.sh starts a server and sets it");
    let dir = sandbox_dir();
    let cluster = Cluster::start(dir.path(), 1).await;
    let one = Storage::postgres(&dir.path().join("front-1"), &url);
    let two = Storage::postgres(&dir.path().join("front-2"), &url);
    let first = cluster.front_end(&one, &[]).await;
    let second = cluster.front_end(&two, &[]).await;
    let alice = create_account(
        &one,
        &format!("links-two-front-ends-{}@example.org", std::process::id()),
    );
    let through_second = |link: &str| link.replacen(&first.url(""), &second.url(""), 1);
    let printed = write(
        &first,
        &alice.key,
        json!({"code": "print('q' * 30_000)", "session_id": "both"}),
    )
    .await;
    let download = items(&printed, "resource_link")[0]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(
        through_second(&download),
        download,
        "the link names the first"
    );
    let (status, _, body) = fetch(&through_second(&download)).await;
    assert_eq!(status, 200);
    assert!(body == format!("{}\n", "q".repeat(30_000)).into_bytes());
    let asked = write(
        &first,
        &alice.key,
        json!({"upload_url": {"path": "in.txt", "session_id": "both"}}),
    )
    .await;
    let upload = asked["structuredContent"]["upload_url"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let put = |link: String, body: &'static str| async move {
        client()
            .put(link)
            .body(body)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(put(through_second(&upload), "via the second").await, 201);
    assert_eq!(put(upload.clone(), "via the first").await, 410);
    let read = write(
        &first,
        &alice.key,
        json!({"code": "open('in.txt').read()", "session_id": "both"}),
    )
    .await;
    assert_eq!(value(&read), "'via the second'");
}
