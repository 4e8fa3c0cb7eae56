//! Upcalls that reach the web, databases and the vault: each is the tool field it stands for,
//! answered typed and redacted, and refused before metering where the tool refuses.
#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;
use std::sync::Arc;

use toolgate_domain::{Brand, Email, Pricing};
use toolgate_store::Store;
use toolgate_store_sqlite::{Durability, SqliteStore};

use super::*;
use crate::App;

fn origin(account: &Account) -> UpcallOrigin {
    UpcallOrigin {
        account: account.id.to_string(),
        session_id: Some("s".into()),
    }
}

async fn free_left(app: &App, account: &Account) -> i64 {
    app.meter()
        .status(account, None)
        .await
        .unwrap()
        .free_remaining_this_month
}

/// A web site as the fetcher port reaches it (the real fetcher, behind the egress guard, is the
/// suite's): it keeps what it was sent, answers `/missing` with a 404, and echoes the request's
/// headers and body in its page and its own headers, as a careless site does.
#[derive(Default)]
struct EchoSite {
    sent: std::sync::Mutex<Vec<toolgate_ports::fetch::FetchRequest>>,
}

#[async_trait]
impl toolgate_ports::fetch::Fetcher for EchoSite {
    async fn send(
        &self,
        request: toolgate_ports::fetch::FetchRequest,
    ) -> Result<FetchedPage, toolgate_ports::fetch::FetchError> {
        self.sent.lock().unwrap().push(request.clone());
        let echoed: Vec<String> = request
            .headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}"))
            .chain(request.body.clone())
            .collect();
        let text = echoed.join("\n");
        Ok(FetchedPage {
            status: if request.url.ends_with("/missing") {
                404
            } else {
                200
            },
            final_url: request.url.clone(),
            content_type: "text/plain".into(),
            bytes: text.len(),
            truncated: false,
            content: PageContent::Text {
                text,
                format: "text",
            },
            headers: vec![("x-echo".into(), echoed.join(", "))],
        })
    }
}

/// A database server as the database seam reaches it (the suite runs a real PostgreSQL): one
/// row whose JSON column holds what it was asked, as a careless table may.
struct EchoDatabase;

#[async_trait]
impl toolgate_ports::database::Databases for EchoDatabase {
    async fn query(
        &self,
        query: toolgate_ports::database::DbQuery,
    ) -> Result<Table, toolgate_ports::database::DatabaseError> {
        let column = |name: &str, type_name: &str| toolgate_ports::database::Column {
            name: name.into(),
            type_name: type_name.into(),
        };
        Ok(Table {
            columns: vec![column("n", "int8"), column("doc", "jsonb")],
            rows: vec![vec![
                json!(7),
                json!({"statement": query.statement, "dsn": [query.connection.as_str()],
                       "params": query.params.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>()}),
            ]],
            truncated: false,
            changes: 0,
        })
    }
}

const TOKEN: &str = "tok-3f9a-very-secret";
const DSN: &str = "postgres://u:pw-7c1e@db.example/app";

/// An app over a real SQLite store and a real vault holding TOKEN and PG_URL, with the site
/// and the database above.
async fn web_rig(free: i64) -> (tempfile::TempDir, App, Account, Arc<EchoSite>) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("t.db"), Durability::Full)
            .await
            .unwrap(),
    );
    let keys = toolgate_vault::MasterKeys::generate().unwrap();
    let vault = toolgate_vault::Vault::open_source(toolgate_vault::KeySource::Given(keys)).unwrap();
    let site = Arc::new(EchoSite::default());
    let services = crate::Services {
        vault: Some(Arc::new(vault)),
        fetcher: Some(site.clone()),
        databases: Some(Arc::new(EchoDatabase)),
        ..crate::Services::default()
    };
    let pricing = Pricing {
        free_monthly_calls: free,
        ..Pricing::default()
    };
    let brand = Brand::parse("svc").unwrap();
    let app = App::new(store.clone(), brand, pricing, "http://127.0.0.1", services);
    app.admin()
        .create_account("code@example.org")
        .await
        .unwrap();
    let email = Email::parse("code@example.org").unwrap();
    let account = store.find_by_email(&email).await.unwrap().unwrap();
    let secrets = app.secrets().unwrap();
    for (name, value) in [("TOKEN", TOKEN), ("PG_URL", DSN)] {
        let name = toolgate_domain::SecretName::parse(name).unwrap();
        secrets.set(&account.id, &name, value, None).await.unwrap();
    }
    (dir, app, account, site)
}

fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

/// `toolgate.fetch` and `toolgate.http` are the tools' `url` and `http`: the site gets the
/// secret's value in place of `{{secret:NAME}}`, the session gets the page typed (body text,
/// status, headers) with the value redacted everywhere, a 404 is an answer and not an error,
/// a GET goes to the read tool and a POST to the write tool, and each is one metered call.
#[tokio::test]
async fn fetch_and_http_upcalls_are_the_tools_fields_answered_typed_and_redacted() {
    let (_dir, app, account, site) = web_rig(10).await;
    let upcalls = SessionUpcalls::new(app.calls.clone(), account.clone());
    let fetch = Upcall::Fetch {
        url: "https://api.example/missing".into(),
        headers: headers(&[("Authorization", "Bearer {{secret:TOKEN}}")]),
        max_bytes: Some(4096),
    };
    let UpcallValue::Fetch(page) = upcalls.answer(origin(&account), fetch).await.unwrap() else {
        panic!("not a page")
    };
    let sent = site.sent.lock().unwrap().pop().unwrap();
    assert_eq!(
        sent.headers,
        vec![("Authorization".to_owned(), format!("Bearer {TOKEN}"))]
    );
    assert_eq!(sent.max_bytes, 4096);
    assert_eq!(page.status, 404);
    assert_eq!(page.format, "text");
    assert_eq!(page.text, "Authorization: Bearer [REDACTED:TOKEN]");
    assert_eq!(
        page.headers,
        vec![(
            "x-echo".to_owned(),
            "Authorization: Bearer [REDACTED:TOKEN]".to_owned()
        )]
    );
    assert_eq!(free_left(&app, &account).await, 9);

    let post = Upcall::Http {
        method: "POST".into(),
        url: "https://api.example/hook".into(),
        headers: headers(&[("Content-Type", "application/json")]),
        body: Some(r#"{"key": "{{secret:TOKEN}}"}"#.into()),
        max_bytes: None,
    };
    let UpcallValue::Http(answer) = upcalls.answer(origin(&account), post).await.unwrap() else {
        panic!("not an HTTP answer")
    };
    let sent = site.sent.lock().unwrap().pop().unwrap();
    assert_eq!(sent.method, toolgate_ports::fetch::Method::Post);
    assert_eq!(
        sent.body.as_deref(),
        Some(&*format!(r#"{{"key": "{TOKEN}"}}"#))
    );
    assert!(sent.body_holds_secret);
    assert_eq!(answer.status, 200);
    assert!(
        answer.text.ends_with(r#"{"key": "[REDACTED:TOKEN]"}"#),
        "{}",
        answer.text
    );
    assert!(!format!("{answer:?}").contains(TOKEN));

    let get = Upcall::Http {
        method: "GET".into(),
        url: "https://api.example/".into(),
        headers: BTreeMap::new(),
        body: None,
        max_bytes: None,
    };
    let UpcallValue::Http(_) = upcalls.answer(origin(&account), get).await.unwrap() else {
        panic!("not an HTTP answer")
    };
    let sent = site.sent.lock().unwrap().pop().unwrap();
    assert_eq!(sent.method, toolgate_ports::fetch::Method::Get);
    assert_eq!(free_left(&app, &account).await, 7);
}

/// Arguments the tools refuse are refused for an upcall too, as `bad_request`, before the
/// call is metered: nothing is sent and nothing is charged.
#[tokio::test]
async fn bad_fetch_and_http_arguments_are_refused_before_metering() {
    let (_dir, app, account, site) = web_rig(10).await;
    let upcalls = SessionUpcalls::new(app.calls.clone(), account.clone());
    let fetch = |url: String, pairs: &[(&str, &str)]| Upcall::Fetch {
        url,
        headers: headers(pairs),
        max_bytes: None,
    };
    let http = |method: &str, body: Option<&str>| Upcall::Http {
        method: method.into(),
        url: "https://api.example/".into(),
        headers: BTreeMap::new(),
        body: body.map(str::to_owned),
        max_bytes: None,
    };
    let refused = [
        fetch("https://api.example/".repeat(600_000), &[]),
        fetch("https://api.example/".into(), &[("X-A", "a\r\nHost: evil")]),
        fetch("https://api.example/".into(), &[("Bad Name", "a")]),
        fetch("https://api.example/".into(), &[("Host", "evil")]),
        fetch("https://api.example/{{secret:not a name}}".into(), &[]),
        Upcall::Fetch {
            url: "https://api.example/".into(),
            headers: BTreeMap::new(),
            max_bytes: Some(0),
        },
        http("GET", Some("body")),
        http("TRACE", None),
        http("post", None),
    ];
    for upcall in refused {
        let shown = format!("{upcall:?}").chars().take(120).collect::<String>();
        let error = upcalls.answer(origin(&account), upcall).await.unwrap_err();
        assert_eq!(error.code, UpcallErrorCode::BadRequest, "{shown}: {error}");
        assert!(!error.message.contains("evil"), "{}", error.message);
    }
    assert!(site.sent.lock().unwrap().is_empty());
    assert_eq!(free_left(&app, &account).await, 10);
}

/// `toolgate.sql` is `sql` with `database` on a server: the typed table with its JSON column
/// kept as JSON and the connection string redacted inside it, read-only on the read tool or
/// (`write`) on the write tool; a `sqlite:` file (a session's own) is refused before metering.
/// `toolgate.secrets()` lists names only.
#[tokio::test]
async fn sql_and_secrets_upcalls_answer_typed_and_never_reach_a_session() {
    let (_dir, app, account, _site) = web_rig(10).await;
    let upcalls = SessionUpcalls::new(app.calls.clone(), account.clone());
    let sql = |database: &str, write: bool| Upcall::Sql {
        database: database.into(),
        query: "select 7".into(),
        params: Vec::new(),
        write,
        max_rows: Some(5),
    };
    let UpcallValue::Sql(table) = upcalls
        .answer(origin(&account), sql("PG_URL", false))
        .await
        .unwrap()
    else {
        panic!("not a table")
    };
    assert_eq!(table.database, "postgres");
    assert_eq!(table.columns[1].type_name, "jsonb");
    assert_eq!(table.row_count, 1);
    assert_eq!(table.rows[0][0], SqlValue::Integer(7));
    let SqlValue::Json(doc) = &table.rows[0][1] else {
        panic!("not JSON: {:?}", table.rows[0][1])
    };
    let doc: Value = serde_json::from_str(doc).unwrap();
    assert_eq!(
        doc,
        json!({"statement": "select 7", "dsn": ["[REDACTED:PG_URL]"], "params": []})
    );
    // values for the placeholders reach the server as bound values, in order
    let bound = Upcall::Sql {
        database: "PG_URL".into(),
        query: "select $1, $2, $3".into(),
        params: vec![
            SqlValue::Integer(1),
            SqlValue::Null,
            SqlValue::Text("a'b".into()),
        ],
        write: false,
        max_rows: None,
    };
    let UpcallValue::Sql(table) = upcalls.answer(origin(&account), bound).await.unwrap() else {
        panic!("not a table")
    };
    let SqlValue::Json(doc) = &table.rows[0][1] else {
        panic!("not JSON")
    };
    let doc: Value = serde_json::from_str(doc).unwrap();
    assert_eq!(doc["params"], json!(["Int(1)", "Null", "Text(\"a'b\")"]));
    // a JSON value is no parameter: refused before metering, as by the tool
    let nested = Upcall::Sql {
        database: "PG_URL".into(),
        query: "select $1".into(),
        params: vec![SqlValue::Json("[1]".into())],
        write: false,
        max_rows: None,
    };
    let error = upcalls.answer(origin(&account), nested).await.unwrap_err();
    assert_eq!(error.code, UpcallErrorCode::BadRequest, "{error}");
    assert!(
        upcalls
            .answer(origin(&account), sql("PG_URL", true))
            .await
            .is_ok()
    );
    assert_eq!(free_left(&app, &account).await, 7);
    for own in [
        "sqlite:data.db",
        "sqlite:/workspace/x.db",
        " SQLite:data.db",
    ] {
        let error = upcalls
            .answer(origin(&account), sql(own, false))
            .await
            .unwrap_err();
        assert_eq!(error.code, UpcallErrorCode::BadRequest, "{own}");
        assert!(error.message.contains("sqlite3"), "{}", error.message);
    }
    let error = upcalls
        .answer(origin(&account), sql("not a secret name", false))
        .await
        .unwrap_err();
    assert_eq!(error.code, UpcallErrorCode::BadRequest);
    assert_eq!(free_left(&app, &account).await, 7);

    let names = upcalls
        .answer(origin(&account), Upcall::Secrets {})
        .await
        .unwrap();
    assert_eq!(
        names,
        UpcallValue::Secrets(vec!["PG_URL".into(), "TOKEN".into()])
    );
    assert_eq!(free_left(&app, &account).await, 6);
}
