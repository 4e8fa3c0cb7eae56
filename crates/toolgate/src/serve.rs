//! `toolgate serve`: open storage, bind, serve until SIGTERM or Ctrl-C, then drain.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;
use toolgate_app::{App, Services};
use toolgate_egress::EgressPolicy;
use toolgate_providers::{ModelClients, SearchEngines};
use toolgate_server::{ConnectionLimits, Metrics};

use crate::config::ServeConfig;

/// Requests still running this long after a shutdown signal are abandoned.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// The longest a `url` fetch may take, redirects included.
const WEB_TIMEOUT: Duration = Duration::from_secs(30);

/// A search's time limit.
const SEARCH_TIMEOUT: Duration = Duration::from_secs(20);

/// The commands' default log filter: only warnings, so their stdout stays JSON.
const COMMAND_LOG: &str = "warn,rmcp=error";

/// Logs go to stderr through a background writer, so a request never waits on a log write.
/// `filter`: `serve`'s checked `log`, or a command's (one that does not parse gives way to the
/// commands' default). Keep the guard alive until exit: dropping it flushes what is queued.
pub fn init_logging(filter: &str) -> tracing_appender::non_blocking::WorkerGuard {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(COMMAND_LOG));
    let (writer, guard) = tracing_appender::non_blocking(std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_target(false)
        .with_ansi(false)
        .init();
    guard
}

/// A command's log filter: its `log` setting, else warnings only.
pub fn command_log(setting: Option<&str>) -> &str {
    setting.unwrap_or(COMMAND_LOG)
}

/// Runs the service from its checked configuration: nothing was opened before this.
pub async fn run(config: ServeConfig) -> Result<()> {
    // bound first: a port in use is refused before anything is opened, and a server told to
    // listen on port 0 knows its port (and so its public URL) from here on
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let bound = listener.local_addr().context("the bound address")?;
    let public_url = config.public_url_for(bound)?;
    let mut http = config.http;
    http.public_url.clone_from(&public_url);
    let backend = config.store.backend();
    let store = crate::backend::open(&config.store, crate::backend::Opener::Server).await?;
    let vault = crate::vault::open(config.vault, &store).await?;
    let fetcher: Arc<dyn toolgate_ports::fetch::Fetcher> = Arc::new(
        toolgate_fetch::FetchClient::new(config.egress.clone(), WEB_TIMEOUT)
            .map_err(anyhow::Error::msg)?,
    );
    let databases: Arc<dyn toolgate_ports::database::Databases> = Arc::new(
        toolgate_database::DatabaseServers::new(config.egress.clone())
            .map_err(anyhow::Error::msg)?,
    );
    // `egress_allow_private` is for tenants' destinations; the service's own endpoints are
    // reachable because the operator configured them, each at its host and port only
    let models: Arc<dyn toolgate_ports::ai::Models> = Arc::new(
        ModelClients::new(EgressPolicy::default(), config.providers.models)
            .map_err(anyhow::Error::msg)?,
    );
    let searches: Arc<dyn toolgate_ports::ai::Searches> = Arc::new(
        SearchEngines::new(
            EgressPolicy::default(),
            config.providers.search,
            SEARCH_TIMEOUT,
        )
        .map_err(anyhow::Error::msg)?,
    );
    let shutdown = CancellationToken::new();
    let (capabilities, manager) = match config.sandbox {
        Some(sandbox) => {
            let (capabilities, manager) =
                crate::sandbox::start(sandbox, Arc::clone(&vault)).await?;
            (Some(capabilities), Some(manager))
        }
        None => match config.nodes {
            Some(nodes) => (
                Some(crate::sandbox::on_nodes(nodes, &store, &shutdown)?),
                None,
            ),
            None => (None, None),
        },
    };
    let mailer = crate::accounts::mailer(config.mail, &public_url)?;
    let payments = crate::accounts::payments(config.payments)?;
    let app = App::new(
        store,
        config.brand,
        config.pricing,
        &public_url,
        Services {
            vault: Some(vault),
            fetcher: Some(fetcher),
            sandbox: capabilities.map(|sandbox| {
                let sandbox = sandbox.with_inline_chars(config.results.inline_chars);
                match config.network {
                    Some(limits) => sandbox.with_network(limits),
                    None => sandbox,
                }
            }),
            databases: Some(databases),
            models: Some(models),
            searches: Some(searches),
            operator_keys: config.operator_keys,
            mailer: Some(mailer),
            payments,
            sign_in_limits: config.sign_in_limits,
            links: Some(toolgate_app::links::LinkSettings {
                public_url: public_url.clone(),
                download_ttl: config.results.download_ttl,
                upload_ttl: config.results.upload_ttl,
            }),
            history: config.history_days > 0,
        },
    );
    let app = app.with_task_settings(config.tasks);
    app.tasks().start_upkeep(shutdown.clone());
    crate::accounts::purge_expired(&app, config.history_days);
    crate::accounts::flush_key_uses(&app, shutdown.clone());
    let tasks = app.tasks().clone();
    let router = toolgate_server::router(app, &http, Arc::new(Metrics::new()), shutdown.clone());
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    tracing::info!(listen = %bound, %public_url, backend, workers, "toolgate serving");
    announce(bound, &public_url);
    let signal = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down: no new connections, draining requests");
        signal.cancel();
    });
    let server = toolgate_server::serve(
        listener,
        router,
        connection_limits(config.max_connections),
        shutdown.clone(),
    );
    tokio::select! {
        () = server => {}
        () = async { shutdown.cancelled().await; tokio::time::sleep(DRAIN_LIMIT).await } => {
            tracing::warn!("requests still running after {DRAIN_LIMIT:?}; stopping anyway");
        }
    }
    // tasks still running end now, as failed with the reason, not after a sweep finds them lost
    tasks.stop_running().await;
    if let Some(manager) = manager {
        // every session ends with its processes, mounts and cgroups, not at the OS's leisure
        manager.shutdown().await;
    }
    Ok(())
}

/// Tells whoever started the server where it listens: one JSON line on stdout (which `serve`
/// uses for nothing else), `{"listening":"127.0.0.1:43210","public_url":"http://…"}`, written
/// once the socket is bound and the service is ready to accept.
pub(crate) fn announce(bound: std::net::SocketAddr, public_url: &str) {
    use std::io::Write;
    let line = serde_json::json!({"listening": bound.to_string(), "public_url": public_url});
    let mut stdout = std::io::stdout().lock();
    // nobody reading stdout is no reason to stop serving
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
}

/// The connection limit, after raising the soft open-file limit to the hard one: idle
/// connections must not run the process out of descriptors before the limit is reached.
fn connection_limits(max_connections: Option<usize>) -> ConnectionLimits {
    let open_files = raise_open_file_limit();
    let mut limits = ConnectionLimits::for_open_files(open_files);
    if let Some(max) = max_connections {
        limits.max_connections = max;
    }
    tracing::info!(
        open_files,
        max_connections = limits.max_connections,
        "connection limit"
    );
    limits
}

/// Raises `RLIMIT_NOFILE`'s soft limit to its hard limit; returns the soft limit in force.
pub(crate) fn raise_open_file_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    let before = limit.current.unwrap_or(u64::MAX);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if let Err(err) = setrlimit(Resource::Nofile, limit) {
            tracing::warn!(error = %err, "cannot raise the open-file limit");
            return before;
        }
    }
    limit.current.unwrap_or(u64::MAX).min(1 << 20)
}

pub(crate) async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { () = ctrl_c => {}, () = term => {} }
}
