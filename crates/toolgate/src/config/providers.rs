//! The model providers' and search engines' settings, as a table keyed by the catalogs' names:
//! `<name>_base_url` and `<name>_api_key` for every name of `toolgate_providers::BUILTIN` (by
//! its setting prefix, so `google` and `gemini` share `gemini_`) and of `SEARCH_ENGINES`.
//!
//! The binary spells no provider: clap's arguments, the environment variables and the config
//! file's keys are made from the catalogs when the command line is built, so a provider added to
//! the catalog gets its settings with no change here. That is why this table implements clap's
//! `Args` by hand instead of deriving it (a derive needs a field per flag, a second list).

use std::collections::BTreeMap;

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use toolgate_egress::EgressPolicy;
use toolgate_providers::{
    BUILTIN, ModelClients, ProviderSettings, SEARCH_ENGINES, SearchSettings, setting_prefix,
};
use toolgate_vault::Zeroizing;

use super::{ConfigError, Secret, Settings};

/// What a name of the table is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Model,
    Search,
}

/// Every name the table has, models first: the model catalog's setting prefixes (each once),
/// then the search engines.
fn names() -> Vec<(&'static str, Kind)> {
    let mut names: Vec<(&'static str, Kind)> = Vec::new();
    for builtin in BUILTIN {
        let prefix = setting_prefix(builtin.name);
        if !names.iter().any(|(name, _)| *name == prefix) {
            names.push((prefix, Kind::Model));
        }
    }
    names.extend(
        SEARCH_ENGINES
            .iter()
            .map(|(name, _, _)| (*name, Kind::Search)),
    );
    names
}

fn base_url_setting(name: &str) -> String {
    format!("{name}_base_url")
}

fn api_key_setting(name: &str) -> String {
    format!("{name}_api_key")
}

/// The endpoints and keys the operator gave, by catalog name, as given (checked by
/// [`Providers::from_settings`]).
#[derive(Debug, Default, Clone)]
pub struct ProviderTable {
    /// `<name>_base_url`
    pub base_urls: BTreeMap<&'static str, String>,
    /// `<name>_api_key`
    pub api_keys: BTreeMap<&'static str, Secret>,
}

impl ProviderTable {
    /// Fills every entry not given from `other` (the config file's).
    pub fn fill_from(&mut self, other: ProviderTable) {
        for (name, url) in other.base_urls {
            self.base_urls.entry(name).or_insert(url);
        }
        for (name, key) in other.api_keys {
            self.api_keys.entry(name).or_insert(key);
        }
    }

    /// Takes the entry a config file's key names; `Err(())`: the key is none of the table's.
    fn take(&mut self, key: &str, value: String) -> Result<(), ()> {
        for (name, _) in names() {
            if key == base_url_setting(name) {
                self.base_urls.insert(name, value);
                return Ok(());
            }
            if key == api_key_setting(name) {
                self.api_keys.insert(name, Secret(value));
                return Ok(());
            }
        }
        Err(())
    }
}

impl Args for ProviderTable {
    fn augment_args(mut command: Command) -> Command {
        for (name, kind) in names() {
            let url_help = match kind {
                Kind::Model => format!("{name}'s API endpoint [default: the provider's own]"),
                Kind::Search => format!("{name}'s search API endpoint [default: the engine's own]"),
            };
            let key_help =
                format!("The operator's {name} key, used when the caller's vault has none");
            for (setting, help, secret) in [
                (base_url_setting(name), url_help, false),
                (api_key_setting(name), key_help, true),
            ] {
                command = command.arg(
                    Arg::new(setting.clone())
                        .long(setting.replace('_', "-"))
                        .env(format!("TOOLGATE_{}", setting.to_ascii_uppercase()))
                        .value_name(setting.to_ascii_uppercase())
                        .value_parser(clap::value_parser!(String))
                        .action(ArgAction::Set)
                        .global(true)
                        .hide_env_values(secret)
                        .help(help),
                );
            }
        }
        command
    }

    fn augment_args_for_update(command: Command) -> Command {
        Self::augment_args(command)
    }
}

impl FromArgMatches for ProviderTable {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut table = Self::default();
        table.update_from_arg_matches(matches)?;
        Ok(table)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for (name, _) in names() {
            if let Some(url) = matches.get_one::<String>(&base_url_setting(name)) {
                self.base_urls.insert(name, url.clone());
            }
            if let Some(key) = matches.get_one::<String>(&api_key_setting(name)) {
                self.api_keys.insert(name, Secret(key.clone()));
            }
        }
        Ok(())
    }
}

/// The config file's keys that no field of [`Settings`] takes: each must be one of the table's,
/// else the file is refused naming the key (as `deny_unknown_fields` would, which serde cannot
/// combine with this flattened table).
impl<'de> Deserialize<'de> for ProviderTable {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = ProviderTable;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("settings")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ProviderTable, A::Error> {
                use serde::de::Error;
                let mut table = ProviderTable::default();
                while let Some(key) = map.next_key::<String>()? {
                    let value: toml::Value = map.next_value()?;
                    let Some(text) = value.as_str() else {
                        // a known key of the wrong type, or an unknown key: never echo the value
                        let known = names().iter().any(|(name, _)| {
                            key == base_url_setting(name) || key == api_key_setting(name)
                        });
                        return Err(A::Error::custom(if known {
                            format!("{key}: expected a string")
                        } else {
                            format!("unknown setting `{key}`")
                        }));
                    };
                    if table.take(&key, text.to_owned()).is_err() {
                        return Err(A::Error::custom(format!("unknown setting `{key}`")));
                    }
                }
                Ok(table)
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

/// The model providers and search engines `serve` uses, checked: every base URL a URL with a
/// host (named by its setting), `ai_endpoints` and `ai_endpoint_keys` well-formed.
#[derive(Debug, Clone)]
pub struct Providers {
    /// The model clients' settings.
    pub models: ProviderSettings,
    /// The search engines' settings.
    pub search: SearchSettings,
}

impl Providers {
    /// Reads and checks the providers' settings.
    pub fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        let mut models = ProviderSettings {
            timeout: settings.ai_timeout_s.map(std::time::Duration::from_secs),
            ..ProviderSettings::default()
        };
        let mut search = SearchSettings {
            searxng_url: settings.searxng_url.clone(),
            ..SearchSettings::default()
        };
        if let Some(url) = &settings.searxng_url {
            check_endpoint("searxng_url", url)?;
        }
        let table = &settings.providers;
        for (name, kind) in names() {
            let (base_urls, api_keys) = match kind {
                Kind::Model => (&mut models.base_urls, &mut models.api_keys),
                Kind::Search => (&mut search.base_urls, &mut search.api_keys),
            };
            if let Some(url) = table.base_urls.get(name) {
                check_endpoint(&base_url_setting(name), url)?;
                base_urls.insert(name.to_owned(), url.clone());
            }
            if let Some(key) = table.api_keys.get(name) {
                api_keys.insert(name.to_owned(), Zeroizing::new(key.expose().to_owned()));
            }
        }
        models.compatible = compatible_endpoints(settings)?;
        // the rules of the clients themselves (an endpoint named like a built-in provider)
        ModelClients::new(EgressPolicy::default(), models.clone())
            .map_err(|reason| ConfigError::new("ai_endpoints", reason))?;
        Ok(Self { models, search })
    }
}

/// A configured endpoint is reachable at its host and port: it must name both.
fn check_endpoint(setting: &str, url: &str) -> Result<(), ConfigError> {
    EgressPolicy::default()
        .with_endpoints([url])
        .map(drop)
        .map_err(|reason| ConfigError::new(setting, reason))
}

/// An OpenAI-compatible endpoint as the model clients take it: name, base URL, key.
type Compatible = (String, String, Option<Zeroizing<String>>);

/// `ai_endpoints` (NAME=BASE_URL) with their keys from `ai_endpoint_keys` (NAME=KEY).
fn compatible_endpoints(settings: &Settings) -> Result<Vec<Compatible>, ConfigError> {
    let keys: Vec<(String, String)> = settings
        .ai_endpoint_keys
        .iter()
        .flatten()
        .map(|entry| split(entry.expose(), "ai_endpoint_keys"))
        .collect::<Result<_, _>>()?;
    let mut endpoints = Vec::new();
    for entry in settings.ai_endpoints.iter().flatten() {
        let (name, url) = split(entry, "ai_endpoints")?;
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(ConfigError::new(
                "ai_endpoints",
                format!("the name {name:?} may hold letters, digits, - and _ only"),
            ));
        }
        check_endpoint("ai_endpoints", &url)?;
        let key = keys
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, k)| Zeroizing::new(k.clone()));
        endpoints.push((name, url, key));
    }
    Ok(endpoints)
}

/// `NAME=VALUE`; the error never repeats the value (it may be a key).
fn split(entry: &str, setting: &str) -> Result<(String, String), ConfigError> {
    match entry.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() && !value.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(ConfigError::new(setting, "each entry is NAME=VALUE")),
    }
}

/// The settings' names for the table, for the test that they follow the catalogs.
#[cfg(test)]
pub(super) fn setting_names() -> Vec<String> {
    names()
        .into_iter()
        .flat_map(|(name, _)| [base_url_setting(name), api_key_setting(name)])
        .collect()
}
