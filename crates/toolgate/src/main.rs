//! `toolgate`: the service's single binary.

mod accounts;
mod backend;
mod commands;
mod config;
mod keys;
mod node;
mod sandbox;
mod serve;
mod vault;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{NodeConfig, ServeConfig, Settings};

// Many small, short-lived allocations per request (JSON values, rmcp messages): mimalloc's
// thread-local free lists beat glibc malloc's arenas here.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A hosted tool-execution service: three MCP tools behind one personal URL.
///
/// Every option is also read from the environment (TOOLGATE_<OPTION>, e.g. TOOLGATE_DATA_DIR)
/// and from the TOML file given by --config (keys in snake_case, e.g. data_dir = "/var/lib/toolgate").
/// A flag beats the environment, which beats the file, which beats the default.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,

    /// TOML file with settings
    #[arg(long, env = "TOOLGATE_CONFIG", global = true)]
    config: Option<PathBuf>,

    #[command(flatten)]
    settings: Settings,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the service (HTTP on --listen; embedded SQLite in --data-dir unless --database-url)
    Serve,
    /// Runs an execution node: owns sandbox sessions (needs root) and serves them to front
    /// ends (`serve --nodes`) holding the node token, over HTTP/2 on --listen [default:
    /// 127.0.0.1:7070]
    Node {
        /// Instead of running a node: tell the node at --listen to take no new sessions and
        /// hibernate the rest (front ends then give them up, and each next call restores its
        /// session on another node); prints {"drained": true, "hibernated": N}
        #[arg(long)]
        drain: bool,
    },
    #[command(flatten)]
    Operator(OperatorCommand),
}

/// The operator's commands: each opens the store, does one thing and prints one JSON object.
#[derive(Debug, Subcommand)]
enum OperatorCommand {
    /// Creates accounts and rotates their keys
    #[command(subcommand)]
    Account(AccountCommand),
    /// An account's named keys: create, list, revoke
    #[command(subcommand)]
    Key(KeyCommand),
    /// Operator changes to wallets
    #[command(subcommand)]
    Wallet(WalletCommand),
    /// The secrets vault's master keys
    #[command(subcommand)]
    Vault(VaultCommand),
}

#[derive(Debug, Subcommand)]
enum VaultCommand {
    /// Adds a new master key version to the key file and wraps every secret's data key again
    /// under it; the service may keep running. Prints {key_version, rewrapped, …} as JSON
    RotateMasterKey,
}

#[derive(Debug, Subcommand)]
enum AccountCommand {
    /// Creates an account; prints {account_id, email, api_key, personal_url} as JSON
    Create {
        /// The account holder's e-mail address
        #[arg(long)]
        email: String,
    },
    /// Issues a new key; the old one stops working at once. Prints the same JSON as create
    RotateKey {
        /// The account's e-mail address
        #[arg(long)]
        email: String,
    },
}

#[derive(Debug, Subcommand)]
enum KeyCommand {
    /// Creates a named key; prints {key_id, name, api_key, personal_url, …} as JSON (the only
    /// time the key is shown)
    Create {
        /// The account's e-mail address
        #[arg(long)]
        email: String,
        /// The key's name (1 to 200 characters, unique among the account's live keys)
        #[arg(long)]
        name: String,
        /// Most the key's calls may spend from the wallet in a calendar month, in USD
        #[arg(long)]
        month_cap_usd: Option<String>,
        /// Most the key's calls may spend from the wallet in a day (UTC), in USD
        #[arg(long)]
        day_cap_usd: Option<String>,
        /// The only tools the key may call, by kind, separated by commas: read, write, ai
        /// [default: all]
        #[arg(long)]
        tools: Option<String>,
        /// The only argument fields the key's calls may use, separated by commas [default: all]
        #[arg(long)]
        fields: Option<String>,
    },
    /// Lists the account's named keys, live and revoked; prints {keys: [...]} (never a key)
    List {
        /// The account's e-mail address
        #[arg(long)]
        email: String,
    },
    /// Revokes a named key at once; prints the key's record with `revoked`
    Revoke {
        /// The account's e-mail address
        #[arg(long)]
        email: String,
        /// The key's id (key_…) or name
        #[arg(long)]
        key: String,
    },
}

#[derive(Debug, Subcommand)]
enum WalletCommand {
    /// Adds money to an account's wallet (a manual top-up); prints the billing status record
    Credit {
        /// The account's e-mail address
        #[arg(long)]
        email: String,
        /// Amount in US dollars, e.g. 12.50 (up to six decimals)
        #[arg(long)]
        usd: String,
        /// Idempotency reference: a second credit with the same reference changes nothing
        /// [default: a fresh one]
        #[arg(long)]
        reference: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match cli.settings.merged_with_file(cli.config.as_deref()) {
        Ok(settings) => settings,
        Err(err) => return fail(&err.into()),
    };
    // a role's whole configuration is checked here, before logging, the runtime or anything
    // else starts: a refusal names its setting and leaves nothing behind
    let role = match cli.command {
        Command::Serve => match ServeConfig::from_settings(&settings) {
            Ok(config) => Role::Serve(Box::new(config)),
            Err(err) => return fail(&err.into()),
        },
        Command::Node { drain: false } => match NodeConfig::from_settings(&settings) {
            Ok(config) => Role::Node(Box::new(config)),
            Err(err) => return fail(&err.into()),
        },
        Command::Node { drain: true } => match config::drain_target(&settings) {
            Ok(target) => Role::Drain(target),
            Err(err) => return fail(&err.into()),
        },
        Command::Operator(command) => Role::Operator(command),
    };
    let _log_guard = serve::init_logging(match &role {
        Role::Serve(config) => &config.log,
        Role::Node(config) => &config.log,
        Role::Drain(..) | Role::Operator(_) => serve::command_log(settings.log.as_deref()),
    });
    // an operator's one-shot command waits on one thing at a time
    let workers = match &role {
        Role::Serve(config) => config.worker_threads,
        Role::Node(config) => config.worker_threads,
        Role::Drain(..) | Role::Operator(_) => 1,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            return fail(&anyhow::Error::new(err).context("cannot start the async runtime"));
        }
    };
    let outcome = runtime.block_on(async move {
        match role {
            Role::Serve(config) => serve::run(*config).await,
            Role::Node(config) => node::run(*config).await,
            Role::Drain(target) => node::drain(target).await,
            Role::Operator(command) => operator(command, &settings).await,
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err),
    }
}

/// What this process runs as, its configuration read: the server, an execution node, or one operator command
/// (which reads the few pieces it needs itself).
enum Role {
    Serve(Box<ServeConfig>),
    Node(Box<NodeConfig>),
    Drain(config::DrainTarget),
    Operator(OperatorCommand),
}

async fn operator(command: OperatorCommand, settings: &Settings) -> anyhow::Result<()> {
    match command {
        OperatorCommand::Account(AccountCommand::Create { email }) => {
            commands::create_account(settings, &email).await
        }
        OperatorCommand::Account(AccountCommand::RotateKey { email }) => {
            commands::rotate_key(settings, &email).await
        }
        OperatorCommand::Key(KeyCommand::Create {
            email,
            name,
            month_cap_usd,
            day_cap_usd,
            tools,
            fields,
        }) => {
            let request = toolgate_app::KeyRequest {
                name: &name,
                month_cap_usd: month_cap_usd.as_deref(),
                day_cap_usd: day_cap_usd.as_deref(),
                tools: tools.as_deref(),
                fields: fields.as_deref(),
            };
            keys::create(settings, &email, &request).await
        }
        OperatorCommand::Key(KeyCommand::List { email }) => keys::list(settings, &email).await,
        OperatorCommand::Key(KeyCommand::Revoke { email, key }) => {
            keys::revoke(settings, &email, &key).await
        }
        OperatorCommand::Wallet(WalletCommand::Credit {
            email,
            usd,
            reference,
        }) => commands::credit_wallet(settings, &email, &usd, reference.as_deref()).await,
        OperatorCommand::Vault(VaultCommand::RotateMasterKey) => {
            commands::rotate_vault_master_key(settings).await
        }
    }
}

fn fail(err: &anyhow::Error) -> ExitCode {
    eprintln!("error: {err:#}");
    ExitCode::FAILURE
}
