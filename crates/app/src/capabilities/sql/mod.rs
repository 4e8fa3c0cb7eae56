//! `sql` + `database` on both tools: a statement on the caller's own database. `database` names
//! a vault secret that holds `postgres://…` or `mysql://…` (served through the database seam,
//! behind the egress guard), or `sqlite:PATH` (a file of the session's workspace, served by the
//! session itself). On the read tool the statement runs read-only, so the database refuses a
//! write; on the write tool the statements run as one transaction.

mod params;
mod render;
mod session_table;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use toolgate_domain::SecretName;
use toolgate_sandbox::{RunRequest, SqliteWork, Work};
use toolgate_vault::Zeroizing;

use super::sandbox::Sandbox;
use crate::capability::{CallContext, Capability, Failure, Field, JsonObject, Output, ToolKind};
use crate::schema::FieldKind;
use crate::secrets::Secrets;
use toolgate_ports::database::{Access, Databases, DbParam, DbQuery, Table};

/// Longest statement, in bytes.
const MAX_SQL_BYTES: usize = 1024 * 1024;
/// Longest `database` (`sqlite:` and a workspace path).
const MAX_DATABASE_BYTES: usize = 4096 + 7;
/// Rows returned by default, and at most.
const DEFAULT_MAX_ROWS: u64 = 1000;
const MAX_MAX_ROWS: u64 = 10_000;
/// Bytes of values returned at most (the Markdown table and the rows each hold them).
const MAX_VALUE_BYTES: u64 = 1024 * 1024;
/// A statement's time limit when the call sets none, and the most it may set.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_TIMEOUT: Duration = Duration::from_secs(300);

const NO_SQLITE_PARAMS: &str = "`params` are bound by database servers; a sqlite: file takes none (code in the session \
     binds values with Python's sqlite3)";

/// `sql` on one tool.
pub struct Sql {
    tool: ToolKind,
    databases: Option<Arc<dyn Databases>>,
    secrets: Option<Arc<Secrets>>,
    sandbox: Option<Arc<Sandbox>>,
}

/// Where a statement goes.
enum Target {
    /// a workspace file, served by the session
    Sqlite(String),
    /// a database server: the secret's name and the connection string
    Server(SecretName, Zeroizing<String>),
}

/// The read and the write capability.
pub fn capabilities(
    databases: Option<Arc<dyn Databases>>,
    secrets: Option<Arc<Secrets>>,
    sandbox: Option<Arc<Sandbox>>,
) -> Vec<Arc<dyn Capability>> {
    [ToolKind::Read, ToolKind::Write]
        .into_iter()
        .map(|tool| {
            Arc::new(Sql {
                tool,
                databases: databases.clone(),
                secrets: secrets.clone(),
                sandbox: sandbox.clone(),
            }) as Arc<dyn Capability>
        })
        .collect()
}

impl Sql {
    fn access(&self) -> Access {
        match self.tool {
            ToolKind::Write => Access::Write,
            _ => Access::Read,
        }
    }

    /// Where `database` points: `sqlite:PATH` as it is, else the secret it names, opened.
    async fn target(&self, ctx: &CallContext<'_>, database: &str) -> Result<Target, Failure> {
        if let Some(path) = database.strip_prefix("sqlite:") {
            return Ok(Target::Sqlite(path.to_owned()));
        }
        let name =
            SecretName::parse(database).map_err(|e| Failure::new(format!("`database`: {e}")))?;
        let secrets = self.secrets.as_ref().ok_or_else(|| {
            Failure::new("this service has no vault, so `database` can only be `sqlite:PATH`")
        })?;
        let opened = secrets
            .open(&ctx.account.id, std::slice::from_ref(&name))
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        let value = opened
            .iter()
            .next()
            .map(|(_, value)| Zeroizing::new(value.to_owned()))
            .unwrap_or_default();
        match value.strip_prefix("sqlite:") {
            Some(path) => Ok(Target::Sqlite(path.to_owned())),
            None => Ok(Target::Server(name, value)),
        }
    }

    async fn on_server(
        &self,
        ctx: &CallContext<'_>,
        secret: SecretName,
        connection: Zeroizing<String>,
        (statement, params): (String, Vec<DbParam>),
        (max_rows, timeout): (u64, Duration),
    ) -> Result<(Table, &'static str), Failure> {
        // the call redacts it from the answer and from the errors of the server and the driver
        ctx.secrets.add([(&secret, connection.as_bytes())]);
        let kind = render::kind_of(&connection).ok_or_else(|| {
            Failure::new(format!(
                "the secret {secret} does not hold a connection string this service knows: \
                 postgres://…, postgresql://…, mysql://… or sqlite:PATH"
            ))
        })?;
        let databases = self.databases.as_ref().ok_or_else(|| {
            Failure::new("this service does not connect to database servers; use sqlite:PATH")
        })?;
        let account = ctx.account.id.to_string();
        let table = databases
            .query(DbQuery {
                account,
                secret: secret.to_string(),
                connection,
                statement,
                access: self.access(),
                max_rows,
                max_bytes: MAX_VALUE_BYTES,
                timeout,
                params,
            })
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        Ok((table, kind))
    }

    async fn in_session(
        &self,
        ctx: &CallContext<'_>,
        path: String,
        statement: String,
        session_id: Option<&str>,
        (max_rows, timeout): (u64, Duration),
    ) -> Result<Table, Failure> {
        let sandbox = self.sandbox.as_ref().ok_or_else(|| {
            Failure::new("this service runs no sessions, so it has no sqlite: files")
        })?;
        let session_id = session_id.ok_or_else(|| {
            Failure::new(
                "a sqlite: database is a file in a session's workspace: give that session_id",
            )
        })?;
        let account = ctx.account.id.to_string();
        let limits = sandbox.limits_for(timeout)?;
        let work = Work::Sqlite(SqliteWork {
            path,
            statement,
            write: self.tool == ToolKind::Write,
            max_rows,
            max_bytes: MAX_VALUE_BYTES,
        });
        let request = RunRequest {
            cancel: ctx.cancel.cloned(),
            // a read never starts a session (an empty one would hold no database anyway)
            existing_only: self.tool == ToolKind::Read,
            ..RunRequest::new(account, Some(session_id.to_owned()), work, limits)
        };
        let run = sandbox.run(request).await?;
        if let Some(error) = run.outcome.error {
            return Err(Failure::new(error.message));
        }
        run.outcome
            .table
            .and_then(session_table::table_from_session)
            .ok_or_else(|| Failure::new("the session answered without a table"))
    }
}

#[async_trait]
impl Capability for Sql {
    fn key(&self) -> &'static str {
        "sql"
    }

    fn tool(&self) -> ToolKind {
        self.tool
    }

    fn summary(&self) -> &'static str {
        match self.tool {
            ToolKind::Write => {
                "`sql` with `database` runs statements that change data (several, `;`-separated, as \
                 one transaction) on your PostgreSQL or MySQL server (`database`: a secret \
                 holding its URL) or on a SQLite file of a session (`database: \"sqlite:data.db\"` \
                 with `session_id`; created if missing)."
            }
            _ => {
                "`sql` with `database` runs one statement read-only on your PostgreSQL or MySQL \
                 server (`database`: a secret holding its URL) or on a SQLite file of a session \
                 (`database: \"sqlite:data.db\"` with `session_id`); the database itself refuses \
                 writes. Rows come back as a Markdown table and typed in structuredContent."
            }
        }
    }

    fn fields(&self) -> Vec<Field> {
        let mut fields = vec![
            Field {
                name: "sql",
                kind: FieldKind::String {
                    max_len: MAX_SQL_BYTES,
                },
                description: "the SQL statement (needs `database`)",
            },
            Field {
                name: "database",
                kind: FieldKind::String {
                    max_len: MAX_DATABASE_BYTES,
                },
                description: "where `sql` runs: the name of a vault secret holding postgres://…, \
                              mysql://… or sqlite:PATH, or sqlite:PATH itself (a file of the \
                              session's workspace; needs session_id)",
            },
            Field {
                name: "params",
                kind: FieldKind::Custom {
                    schema: params::schema,
                    check: params::check,
                },
                description: "values for the statement's placeholders ($1, $2, … in PostgreSQL, \
                              ? in MySQL), in order: null, booleans, numbers, strings; bound by \
                              the server, never spliced into the SQL (with `params` a statement \
                              is one statement; not for sqlite: files)",
            },
            Field {
                name: "max_rows",
                kind: FieldKind::Integer {
                    min: 1,
                    max: MAX_MAX_ROWS as i64,
                },
                description: "most rows `sql` returns (default 1000); the answer says when \
                              more were left out",
            },
        ];
        if let Some(sandbox) = &self.sandbox {
            fields.push(sandbox.session_id_field());
        }
        fields
    }

    fn output_schema(&self) -> Value {
        render::output_schema()
    }

    fn overlaps_commit(&self) -> bool {
        true
    }

    /// A tenant's database server, named by a secret.
    fn reaches_outside(&self) -> bool {
        true
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key("sql")
    }

    /// A database server's statement takes a turn; a `sqlite:` file is the session's work.
    fn turn_kind(&self, args: &JsonObject) -> Option<crate::turns::TurnKind> {
        let database = args.get("database").and_then(Value::as_str)?;
        (!database.starts_with("sqlite:")).then_some(crate::turns::TurnKind::Database)
    }

    fn validate(&self, args: &JsonObject) -> Result<(), String> {
        let database = args
            .get("database")
            .and_then(Value::as_str)
            .ok_or("`sql` needs `database`: a secret's name or sqlite:PATH")?;
        if !database.starts_with("sqlite:") {
            SecretName::parse(database).map_err(|e| format!("`database`: {e}"))?;
        } else if args.contains_key("params") {
            return Err(NO_SQLITE_PARAMS.to_owned());
        }
        Ok(())
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let text = |key: &str| args.get(key).and_then(Value::as_str);
        let statement = text("sql").unwrap_or_default().to_owned();
        let max_rows = args
            .get("max_rows")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_MAX_ROWS);
        let timeout = args
            .get("timeout_s")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_TIMEOUT, |s| Duration::from_secs(s).min(MAX_TIMEOUT));
        let session_id = text("session_id");
        let params = params::of(args);
        let (mut table, kind) = match self
            .target(ctx, text("database").unwrap_or_default())
            .await?
        {
            Target::Sqlite(_) if !params.is_empty() => return Err(Failure::new(NO_SQLITE_PARAMS)),
            Target::Sqlite(path) => {
                let table = self
                    .in_session(ctx, path, statement, session_id, (max_rows, timeout))
                    .await?;
                if let (Some(sandbox), Some(id)) = (&self.sandbox, session_id) {
                    // the file may hold what code given secrets wrote into it
                    sandbox.register_given(ctx, id).await;
                }
                (table, "sqlite")
            }
            Target::Server(name, connection) => {
                self.on_server(
                    ctx,
                    name,
                    connection,
                    (statement, params),
                    (max_rows, timeout),
                )
                .await?
            }
        };
        // The call redacts the answer where it finishes, but the Markdown escapes `|`, `\` and
        // line breaks on the way, which would hide a value holding one of them from it: the
        // values are redacted, with the call's redactor, before they are escaped.
        if let Some(redactor) = ctx.secrets.redactor() {
            render::redact(&mut table, &redactor);
        }
        Ok(render::output(table, kind, self.tool == ToolKind::Write))
    }
}
