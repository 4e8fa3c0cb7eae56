//! What the PostgreSQL and MySQL tests share: a client allowed onto loopback, statements on the
//! suite's server named by an environment variable, and table names of their own.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::time::Duration;

use toolgate_database::DatabaseServers;
use toolgate_egress::EgressPolicy;
use toolgate_ports::database::{Access, DatabaseError, Databases, DbQuery, Table};
use toolgate_vault::Zeroizing;

/// The suite's server of one engine.
pub struct Db {
    pub servers: DatabaseServers,
    url: String,
}

impl Db {
    /// The server whose URL `variable` holds (`scripts/test.sh` starts it and sets it).
    pub fn from_env(variable: &str) -> Self {
        let url = std::env::var(variable)
            .unwrap_or_else(|_| panic!("{variable}: scripts/test.sh starts a server and sets it"));
        Self {
            servers: DatabaseServers::new(EgressPolicy::new(&["127.0.0.0/8".to_owned()]).unwrap())
                .unwrap(),
            url,
        }
    }

    /// The connection string.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `statement` as account `acct-1`'s secret `DB`, with room for 1000 rows and 10 s.
    pub fn query(&self, statement: &str, access: Access) -> DbQuery {
        DbQuery {
            account: "acct-1".into(),
            secret: "DB".into(),
            connection: Zeroizing::new(self.url.clone()),
            statement: statement.into(),
            access,
            max_rows: 1000,
            max_bytes: 1 << 20,
            timeout: Duration::from_secs(10),
            params: Vec::new(),
        }
    }

    pub async fn read(&self, statement: &str) -> Result<Table, DatabaseError> {
        self.servers
            .query(self.query(statement, Access::Read))
            .await
    }

    pub async fn write(&self, statement: &str) -> Result<Table, DatabaseError> {
        self.servers
            .query(self.query(statement, Access::Write))
            .await
    }
}

/// A table name of this test run, so that runs and tests do not meet.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}_{nanos}")
}
