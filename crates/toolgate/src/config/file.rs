//! Settings from a config file: every option not given on the command line or in the
//! environment is filled from the file.

use std::path::Path;

use super::{ConfigError, Settings};

macro_rules! fill {
    ($target:ident, $source:ident, $($field:ident),+) => {
        $( if $target.$field.is_none() { $target.$field = $source.$field; } )+
    };
}

impl Settings {
    /// Fills every option not given on the command line or in the environment from `file`.
    pub fn merged_with_file(mut self, file: Option<&Path>) -> Result<Self, ConfigError> {
        let Some(path) = file else { return Ok(self) };
        let text = std::fs::read_to_string(path).map_err(|err| {
            ConfigError::new("config", format!("cannot read {}: {err}", path.display()))
        })?;
        let from_file: Settings = toml::from_str(&text).map_err(|err| {
            ConfigError::new("config", format!("invalid file {}: {err}", path.display()))
        })?;
        self.providers.fill_from(from_file.providers);
        fill!(
            self,
            from_file,
            data_dir,
            database_url,
            public_url,
            listen,
            brand,
            free_monthly_calls,
            paid_call_cost_usd,
            min_topup_usd,
            max_topup_usd,
            allowed_origins,
            allowed_hosts,
            max_request_bytes,
            max_connections,
            server_timing,
            history_days,
            max_mcp_sessions_per_account,
            task_after_s,
            task_ttl_s,
            task_max_running,
            max_mcp_sessions,
            sqlite_synchronous,
            worker_threads,
            log,
            nodes,
            node_token_file,
            node_lease_s,
            node_tls_cert,
            node_tls_key,
            node_tls_ca,
            sandbox,
            sandbox_runtime,
            sandbox_zygote,
            sandbox_harden_lib,
            sandbox_confinement,
            sandbox_root,
            sandbox_idle_minutes,
            sandbox_max_sessions,
            sandbox_warm_sessions,
            sandbox_warm_sessions_max,
            sandbox_hibernate_after_s,
            sandbox_checkpoint_every_s,
            sandbox_session_retention_days,
            sandbox_account_checkpoint_mib,
            checkpoint_url,
            checkpoint_s3_endpoint,
            checkpoint_s3_region,
            checkpoint_s3_access_key_id,
            checkpoint_s3_secret_access_key,
            sandbox_default_timeout_s,
            sandbox_max_timeout_s,
            sandbox_max_task_s,
            sandbox_memory_mib,
            sandbox_workspace_mib,
            inline_result_chars,
            download_url_ttl_s,
            upload_url_ttl_s,
            sandbox_max_processes,
            sandbox_first_uid,
            sandbox_budget_memory_mib,
            sandbox_budget_processes,
            sandbox_account_memory_mib,
            vault_master_key,
            vault_key_file,
            egress_allow_private,
            sandbox_network,
            egress_max_connections,
            egress_max_mib,
            egress_rate_mib_s,
            egress_extra_ca_file,
            pip_index_url,
            pip_extra_index_url,
            pip_cache_mib,
            ai_endpoints,
            ai_endpoint_keys,
            ai_timeout_s,
            operator_max_tokens,
            operator_tokens_per_day,
            searxng_url,
            smtp_url,
            mail_from,
            stripe_secret_key,
            stripe_webhook_secret,
            stripe_api_base,
            sign_in_limit_per_address,
            sign_in_limit_per_client,
            trusted_proxies
        );
        Ok(self)
    }
}
