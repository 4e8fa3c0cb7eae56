//! Host patterns: how an owner names the hosts a session may reach, may not reach, or a secret
//! may be sent to. `example.org` is that host only; `*.example.org` is every host beneath it
//! (`api.example.org`, `a.b.example.org`) but not `example.org` itself; `*` is every host.
//! Names compare without case and without a trailing dot. An IP literal is a host like any
//! other (`10.0.0.7`, `[::1]` written `::1`).

use std::fmt;

/// Longest pattern accepted (a DNS name is at most 253 characters).
pub const MAX_HOST_PATTERN_CHARS: usize = 255;

/// A parsed host pattern.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HostPattern {
    /// lowercase, without a trailing dot; for a wildcard, the suffix after `*.`
    name: String,
    wildcard: bool,
}

/// Why a pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PatternError(String);

impl HostPattern {
    /// Parses `text` (`host`, `*.domain` or `*`).
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let trimmed = text.trim();
        let shown: String = trimmed.chars().take(64).collect();
        if trimmed.is_empty() {
            return Err(PatternError("a host pattern is empty".into()));
        }
        if trimmed.chars().count() > MAX_HOST_PATTERN_CHARS {
            return Err(PatternError(format!(
                "the host pattern {shown:?}… is longer than {MAX_HOST_PATTERN_CHARS} characters"
            )));
        }
        if trimmed == "*" {
            return Ok(Self {
                name: String::new(),
                wildcard: true,
            });
        }
        let (wildcard, rest) = match trimmed.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, trimmed),
        };
        let name = normalise(rest);
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':'))
            && !name.starts_with('.')
            && !name.contains("..");
        if !valid {
            return Err(PatternError(format!(
                "{shown:?} is not a host pattern: write a host name (api.example.org), \
                 *.domain for every host beneath a domain, or * for every host"
            )));
        }
        Ok(Self { name, wildcard })
    }

    /// Whether `host` (as a request names it) is one this pattern names.
    pub fn matches(&self, host: &str) -> bool {
        let host = normalise(host);
        if !self.wildcard {
            return host == self.name;
        }
        if self.name.is_empty() {
            return true;
        }
        host.len() > self.name.len() + 1
            && host.ends_with(&self.name)
            && host.as_bytes()[host.len() - self.name.len() - 1] == b'.'
    }
}

/// Whether any of `patterns` matches `host`.
pub fn any_matches(patterns: &[HostPattern], host: &str) -> bool {
    patterns.iter().any(|pattern| pattern.matches(host))
}

/// Lowercase, without the brackets of an IPv6 literal and without a trailing dot.
fn normalise(host: &str) -> String {
    let host = host.trim();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.trim_end_matches('.').to_ascii_lowercase()
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.wildcard, self.name.is_empty()) {
            (true, true) => f.write_str("*"),
            (true, false) => write!(f, "*.{}", self.name),
            (false, _) => f.write_str(&self.name),
        }
    }
}

impl fmt::Debug for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostPattern({self})")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn p(text: &str) -> HostPattern {
        HostPattern::parse(text).unwrap()
    }

    #[test]
    fn exact_names_match_themselves_without_case_or_trailing_dot() {
        assert!(p("API.example.org").matches("api.example.org."));
        assert!(!p("example.org").matches("api.example.org"));
        assert!(!p("example.org").matches("badexample.org"));
        assert!(p("::1").matches("[::1]"));
    }

    #[test]
    fn a_wildcard_names_what_is_beneath_a_domain_not_the_domain() {
        let pattern = p("*.github.com");
        assert!(pattern.matches("api.github.com"));
        assert!(pattern.matches("a.b.github.com"));
        assert!(!pattern.matches("github.com"));
        assert!(!pattern.matches("evilgithub.com"));
        assert!(!pattern.matches("github.com.evil.org"));
        assert!(p("*").matches("anything.example"));
        assert_eq!(p("*.GitHub.com.").to_string(), "*.github.com");
    }

    #[test]
    fn hostile_patterns_are_refused_with_a_clear_message() {
        for bad in [
            "",
            " ",
            "*.",
            "**",
            "a..b",
            ".a",
            "a/b",
            "a b",
            "*x.org",
            "http://x.org",
            "x.org:*",
            "\u{0}",
            "é.org",
        ] {
            let err = HostPattern::parse(bad).unwrap_err().to_string();
            assert!(err.contains("host pattern"), "{bad:?}: {err}");
        }
        let long = "a".repeat(300);
        assert!(
            HostPattern::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("longer")
        );
    }
}
