//! A tenant's connection string, read strictly, and the address it may be reached at.
//!
//! Only what is written in the string counts: nothing is taken from this process's environment
//! or files (sqlx would read `PGPASSWORD`, `~/.pgpass` and certificate paths), no query
//! parameter may name a file or a socket on this host, and the host is resolved here and every
//! address checked by the egress guard; the connection then goes to that address, so a second
//! resolution (DNS rebinding) cannot send it elsewhere.

use std::net::{IpAddr, SocketAddr};

use toolgate_egress::EgressPolicy;
use toolgate_ports::database::DatabaseError;
use toolgate_vault::Zeroizing;
use url::Url;

/// Which database protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// PostgreSQL
    Postgres,
    /// MySQL or MariaDB
    Mysql,
}

/// How the connection is encrypted (PostgreSQL's `sslmode`, those that need no file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tls {
    /// never
    Disable,
    /// when the server offers it (the default)
    Prefer,
    /// always; the server's certificate is not checked against the host name, since the
    /// connection goes to the address the guard checked
    Require,
}

/// A connection string, read.
pub struct Endpoint {
    pub engine: Engine,
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Zeroizing<String>,
    pub database: String,
    pub tls: Tls,
    pub application_name: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("engine", &self.engine)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("database", &self.database)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

fn refused(message: impl Into<String>) -> DatabaseError {
    DatabaseError::Refused(message.into())
}

impl Endpoint {
    /// Reads `connection`; the errors never repeat it (it holds a password).
    pub fn parse(connection: &str) -> Result<Self, DatabaseError> {
        let url = Url::parse(connection)
            .map_err(|e| refused(format!("the connection string is not a URL ({e})")))?;
        let engine = match url.scheme() {
            "postgres" | "postgresql" => Engine::Postgres,
            "mysql" | "mariadb" => Engine::Mysql,
            other => {
                return Err(refused(format!(
                    "{}:// databases are not served here; postgres:// and mysql:// are",
                    other.chars().take(16).collect::<String>()
                )));
            }
        };
        let host = match url.host() {
            Some(url::Host::Domain(name)) if !name.is_empty() => decode(name, "host")?,
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            _ => return Err(refused("the connection string names no host")),
        };
        if host.starts_with('/') || host.contains(',') {
            return Err(refused(
                "the host must be one network host name or address (not a socket path or a list)",
            ));
        }
        let user = decode(url.username(), "user name")?;
        if user.is_empty() {
            return Err(refused("the connection string needs a user name"));
        }
        let password = Zeroizing::new(decode(url.password().unwrap_or_default(), "password")?);
        let path = url.path().trim_start_matches('/');
        let database = match decode(path, "database name")? {
            // PostgreSQL's default; MySQL has none
            name if name.is_empty() && engine == Engine::Postgres => user.clone(),
            name => name,
        };
        let mut endpoint = Self {
            engine,
            host,
            port: url.port().unwrap_or(match engine {
                Engine::Postgres => 5432,
                Engine::Mysql => 3306,
            }),
            user,
            password,
            database,
            tls: Tls::Prefer,
            application_name: None,
        };
        for (key, value) in url.query_pairs() {
            endpoint.apply(&key, &value)?;
        }
        Ok(endpoint)
    }

    /// One `?key=value` of the string: only those that need nothing of this host. MySQL's
    /// `ssl-mode` (`DISABLED`, `PREFERRED`, `REQUIRED`) is read as `sslmode`.
    fn apply(&mut self, key: &str, value: &str) -> Result<(), DatabaseError> {
        let (key, value) = match (key, value.to_ascii_uppercase().as_str()) {
            ("ssl-mode", "DISABLED") => ("sslmode", "disable"),
            ("ssl-mode", "PREFERRED") => ("sslmode", "prefer"),
            ("ssl-mode", "REQUIRED") => ("sslmode", "require"),
            ("ssl-mode", "VERIFY_CA" | "VERIFY_IDENTITY") => ("sslmode", "verify-full"),
            _ => (key, value),
        };
        match (key, value) {
            ("sslmode", "disable") => self.tls = Tls::Disable,
            ("sslmode", "allow" | "prefer") => self.tls = Tls::Prefer,
            ("sslmode", "require") => self.tls = Tls::Require,
            ("sslmode", "verify-ca" | "verify-full") => {
                return Err(refused(
                    "sslmode=verify-ca and verify-full are not supported: the connection goes \
                     to the address the egress guard checked, not to the name; use require",
                ));
            }
            ("application_name", name) if name.len() <= 64 => {
                self.application_name = Some(name.to_owned());
            }
            _ => {
                return Err(refused(format!(
                    "the connection parameter {:?} is not accepted here (sslmode, ssl-mode \
                     and application_name are)",
                    key.chars().take(64).collect::<String>()
                )));
            }
        }
        Ok(())
    }

    /// The host's addresses that the guard allows, in the resolver's order; refused when none is.
    pub async fn resolve(&self, policy: &EgressPolicy) -> Result<Vec<SocketAddr>, DatabaseError> {
        let found: Vec<SocketAddr> = match self.host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, self.port)],
            Err(_) => tokio::net::lookup_host((self.host.as_str(), self.port))
                .await
                .map_err(|e| DatabaseError::Failed(format!("cannot resolve {}: {e}", self.host)))?
                .collect(),
        };
        policy.allowed(found).map_err(|refusal| match refusal {
            Some(refusal) => refused(format!("{}: {refusal}", self.host)),
            None => DatabaseError::Failed(format!("{} has no address", self.host)),
        })
    }
}

/// A part of the URL percent-decoded, exactly: `&`, `=` and `+` are themselves (a password
/// may hold them unescaped), and one that is not UTF-8 or holds NUL is refused.
fn decode(text: &str, what: &str) -> Result<String, DatabaseError> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .ok()
        .filter(|v| !v.contains('\0'))
        .map(std::borrow::Cow::into_owned)
        .ok_or_else(|| refused(format!("the {what} is not valid")))
}

#[cfg(test)]
#[path = "endpoint_proptests.rs"]
mod proptests;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn err(connection: &str) -> String {
        Endpoint::parse(connection).unwrap_err().to_string()
    }

    #[test]
    fn a_connection_string_is_read_with_its_escapes() {
        let e = Endpoint::parse("postgres://al%40ice:p%2Fw+d%3F@db.example.com:6543/my%20db?sslmode=require&application_name=x")
            .unwrap();
        assert_eq!((e.host.as_str(), e.port), ("db.example.com", 6543));
        assert_eq!((e.user.as_str(), e.password.as_str()), ("al@ice", "p/w+d?"));
        assert_eq!(e.database, "my db");
        assert_eq!(e.tls, Tls::Require);
        let e = Endpoint::parse("postgresql://bob@[::1]").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.database.as_str()),
            ("::1", 5432, "bob")
        );
        assert!(e.password.is_empty());
        let e = Endpoint::parse("mysql://root:pw@db.example.com?ssl-mode=REQUIRED").unwrap();
        assert_eq!(
            (e.engine, e.port, e.tls),
            (Engine::Mysql, 3306, Tls::Require)
        );
        assert_eq!(e.database, "", "MySQL has no default database");
    }

    #[test]
    fn what_would_reach_this_host_or_leak_the_password_is_refused() {
        for (bad, says) in [
            (
                "postgres://u:pw@%2Fvar%2Frun%2Fpostgresql/db",
                "socket path",
            ),
            (
                "postgres://u:pw@h/db?host=/var/run/postgresql",
                "\"host\" is not accepted",
            ),
            (
                "postgres://u:pw@h/db?sslrootcert=/etc/shadow",
                "\"sslrootcert\"",
            ),
            ("postgres://u:pw@h/db?sslkey=/dev/zero", "\"sslkey\""),
            ("postgres://u:pw@h/db?hostaddr=127.0.0.1", "\"hostaddr\""),
            ("postgres://u:pw@h/db?sslmode=verify-full", "verify-full"),
            ("postgres://:pw@h/db", "needs a user name"),
            ("postgres:///db", "names no host"),
            ("redis://u:pw@h", "redis:// databases are not served"),
            ("mysql://u:pw@h/db?ssl-mode=VERIFY_IDENTITY", "verify-full"),
            ("mysql://u:pw@h/db?local_infile=1", "\"local_infile\""),
            ("not a url pw", "not a URL"),
        ] {
            let message = err(bad);
            assert!(message.contains(says), "{bad}: {message}");
            assert!(!message.contains("pw"), "{bad}: {message}");
        }
    }

    #[tokio::test]
    async fn every_address_is_checked_in_every_notation() {
        let policy = EgressPolicy::default();
        for host in [
            "127.0.0.1",
            "[::1]",
            "[::ffff:127.0.0.1]",
            "localhost",
            "169.254.169.254",
            "10.1.2.3",
            "0x7f000001",
            "2130706433",
            "0177.0.0.1",
        ] {
            let e = Endpoint::parse(&format!("postgres://u:pw@{host}/db")).unwrap();
            let refusal = e.resolve(&policy).await.unwrap_err();
            assert!(
                matches!(&refusal, DatabaseError::Refused(m) if m.contains("which this service does not connect to")),
                "{host}: {refusal}"
            );
        }
        let open = EgressPolicy::new(&["127.0.0.0/8".to_owned()]).unwrap();
        let e = Endpoint::parse("postgres://u:pw@127.0.0.1:1/db").unwrap();
        assert_eq!(
            e.resolve(&open).await.unwrap(),
            vec!["127.0.0.1:1".parse().unwrap()]
        );
    }
}
