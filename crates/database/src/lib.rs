//! The client of tenants' own PostgreSQL, MySQL and MariaDB servers: the implementation of the
//! database seam
//! ([`toolgate_ports::database::Databases`]). A connection string is read strictly
//! ([`endpoint`]), its host checked by the egress guard and connected to by address; each
//! (account, secret, connection string) has its own small pool, closed when idle.

mod endpoint;
mod my_values;
mod mysql;
mod pg_values;
mod postgres;
mod rows;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use sqlx::{MySqlPool, PgPool};
use toolgate_egress::EgressPolicy;
use toolgate_ports::database::{DatabaseError, Databases, DbQuery, Table};

pub use endpoint::{Endpoint, Engine, Tls};

/// A pool unused this long is closed and forgotten (its password with it).
pub const POOL_IDLE: Duration = Duration::from_secs(300);
/// Pools one account may hold; beyond, its least recently used one is closed.
pub const POOLS_PER_ACCOUNT: usize = 8;
/// Pools on the whole server; beyond, the least recently used one is closed.
pub const POOLS_GLOBAL: usize = 512;

/// Environment variables sqlx applies to every PostgreSQL connection, which a tenant's
/// connection string cannot override: with one set, tenants' connections would carry the
/// operator's certificate, key or options.
const OPERATOR_ENVIRONMENT: [&str; 5] = [
    "PGSSLROOTCERT",
    "PGSSLCERT",
    "PGSSLKEY",
    "PGOPTIONS",
    "PGSSLKEYPASSWORD",
];

/// Refuses a process environment that sets one of the variables sqlx would add to every
/// tenant's PostgreSQL connection; the binary asks before it opens anything, `new` again.
pub fn check_operator_environment() -> Result<(), String> {
    let set: Vec<&str> = OPERATOR_ENVIRONMENT
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some())
        .collect();
    if set.is_empty() {
        return Ok(());
    }
    Err(format!(
        "unset {} before serving: the PostgreSQL client would add them to tenants' \
         database connections",
        set.join(", ")
    ))
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    account: String,
    secret: String,
    /// SHA-256 of the connection string: a replaced secret gets a new pool
    connection: [u8; 32],
}

/// One engine's pool.
#[derive(Clone)]
enum AnyPool {
    Postgres(PgPool),
    Mysql(MySqlPool),
}

impl AnyPool {
    async fn close(&self) {
        match self {
            Self::Postgres(pool) => pool.close().await,
            Self::Mysql(pool) => pool.close().await,
        }
    }
}

struct Entry {
    pool: AnyPool,
    last_used: Instant,
}

type Pools = Mutex<HashMap<PoolKey, Entry>>;

/// Runs tenants' statements on their database servers.
pub struct DatabaseServers {
    policy: EgressPolicy,
    pools: Arc<Pools>,
}

impl std::fmt::Debug for DatabaseServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseServers").finish_non_exhaustive()
    }
}

impl DatabaseServers {
    /// Connects under `policy`. Refused while this process's environment holds a variable
    /// that sqlx would add to every tenant's connection. Call within a tokio runtime (a task
    /// closes idle pools).
    pub fn new(policy: EgressPolicy) -> Result<Self, String> {
        check_operator_environment()?;
        let pools: Arc<Pools> = Arc::default();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(sweep_forever(Arc::downgrade(&pools)));
        }
        Ok(Self { policy, pools })
    }

    /// Pools held now (for tests and metrics).
    pub fn pool_count(&self) -> usize {
        lock(&self.pools).len()
    }

    async fn pool(&self, query: &DbQuery, endpoint: &Endpoint) -> Result<AnyPool, DatabaseError> {
        let key = PoolKey {
            account: query.account.clone(),
            secret: query.secret.clone(),
            connection: Sha256::digest(query.connection.as_bytes()).into(),
        };
        if let Some(entry) = lock(&self.pools).get_mut(&key) {
            entry.last_used = Instant::now();
            return Ok(entry.pool.clone());
        }
        // the guard's first allowed address (resolve never returns none)
        let address = endpoint
            .resolve(&self.policy)
            .await?
            .first()
            .copied()
            .ok_or_else(|| DatabaseError::Failed(format!("{} has no address", endpoint.host)))?;
        let pool = match endpoint.engine {
            Engine::Postgres => AnyPool::Postgres(postgres::pool(endpoint, address)),
            Engine::Mysql => AnyPool::Mysql(mysql::pool(endpoint, address)),
        };
        let mut pools = lock(&self.pools);
        let pool = pools
            .entry(key.clone())
            .or_insert(Entry {
                pool,
                last_used: Instant::now(),
            })
            .pool
            .clone();
        evict(&mut pools, &key.account);
        Ok(pool)
    }
}

#[async_trait]
impl Databases for DatabaseServers {
    async fn query(&self, query: DbQuery) -> Result<Table, DatabaseError> {
        let endpoint = Endpoint::parse(&query.connection)?;
        let pool = self.pool(&query, &endpoint).await?;
        let caps = rows::Caps {
            max_rows: query.max_rows,
            max_bytes: query.max_bytes,
            timeout: query.timeout,
        };
        let statement = (query.statement.as_str(), query.params.as_slice());
        match &pool {
            AnyPool::Postgres(pool) => {
                let engine = (postgres::set_up as rows::SetUp<_>, &postgres::READER);
                rows::run(pool, statement, query.access, caps, engine).await
            }
            AnyPool::Mysql(pool) => {
                let engine = (mysql::set_up as rows::SetUp<_>, &mysql::READER);
                rows::run(pool, statement, query.access, caps, engine).await
            }
        }
    }
}

fn lock(pools: &Pools) -> std::sync::MutexGuard<'_, HashMap<PoolKey, Entry>> {
    pools.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Closes pools idle past [`POOL_IDLE`], then the least recently used of `account` beyond
/// [`POOLS_PER_ACCOUNT`] and of the server beyond [`POOLS_GLOBAL`].
fn evict(pools: &mut HashMap<PoolKey, Entry>, account: &str) {
    let now = Instant::now();
    let mut gone: Vec<PoolKey> = pools
        .iter()
        .filter(|(_, e)| now.duration_since(e.last_used) > POOL_IDLE)
        .map(|(k, _)| k.clone())
        .collect();
    let oldest = |filter: &dyn Fn(&PoolKey) -> bool, keep: usize, gone: &mut Vec<PoolKey>| {
        let mut mine: Vec<(&PoolKey, Instant)> = pools
            .iter()
            .filter(|(k, _)| filter(k) && !gone.contains(k))
            .map(|(k, e)| (k, e.last_used))
            .collect();
        mine.sort_by_key(|(_, used)| *used);
        let excess = mine.len().saturating_sub(keep);
        let drop: Vec<PoolKey> = mine
            .into_iter()
            .take(excess)
            .map(|(k, _)| k.clone())
            .collect();
        gone.extend(drop);
    };
    oldest(&|k| k.account == account, POOLS_PER_ACCOUNT, &mut gone);
    oldest(&|_| true, POOLS_GLOBAL, &mut gone);
    for key in gone {
        if let Some(entry) = pools.remove(&key) {
            tokio::spawn(async move { entry.pool.close().await });
        }
    }
}

/// Every minute, closes the pools idle past [`POOL_IDLE`]; ends with the client.
async fn sweep_forever(pools: Weak<Pools>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        let Some(pools) = pools.upgrade() else {
            return;
        };
        evict(&mut lock(&pools), "");
    }
}
