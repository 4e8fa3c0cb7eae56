//! Scopes: what an authorization request and a refresh ask for, and what a grant allows.

use crate::{OAuthError, SCOPE_MCP, SCOPE_OFFLINE, SCOPES};

/// The scopes asked for, deduplicated in a fixed order; `mcp` when none; `None` when one is
/// not offered.
pub fn normalize_scope(asked: Option<&str>) -> Option<String> {
    let asked: Vec<&str> = asked.unwrap_or(SCOPE_MCP).split_whitespace().collect();
    if asked.iter().any(|scope| !SCOPES.contains(scope)) {
        return None;
    }
    let granted: Vec<&str> = SCOPES
        .into_iter()
        .filter(|scope| asked.contains(scope))
        .collect();
    Some(if granted.is_empty() {
        SCOPE_MCP.to_owned()
    } else {
        granted.join(" ")
    })
}

/// The scopes a refresh request names (`None`: it names none, and keeps the grant's); one not
/// offered is `invalid_scope`.
pub fn asked_on_refresh(scope: Option<&str>) -> Result<Option<Vec<&str>>, OAuthError> {
    let asked: Option<Vec<&str>> = scope.map(|scope| scope.split_whitespace().collect());
    if asked.iter().flatten().any(|scope| !SCOPES.contains(scope)) {
        return Err(OAuthError::InvalidScope(format!(
            "the scopes offered are: {}",
            SCOPES.join(" ")
        )));
    }
    Ok(asked)
}

/// Whether a refresh asks for more than `granted` (RFC 6749 §6). `offline_access` is never
/// "more": holding a refresh token is what it asks for.
pub fn exceeds_grant(asked: Option<&[&str]>, granted: &str) -> bool {
    let granted: Vec<&str> = granted.split_whitespace().collect();
    asked
        .into_iter()
        .flatten()
        .any(|scope| *scope != SCOPE_OFFLINE && !granted.contains(scope))
}

/// Whether a grant of `scope` may use the three tools.
pub fn allows_tools(scope: &str) -> bool {
    scope.split_whitespace().any(|scope| scope == SCOPE_MCP)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn authorization_scopes_are_normalized_and_unknown_ones_refused() {
        assert_eq!(normalize_scope(None).unwrap(), "mcp");
        assert_eq!(normalize_scope(Some("   ")).unwrap(), "mcp");
        assert_eq!(
            normalize_scope(Some("offline_access mcp mcp")).unwrap(),
            "mcp offline_access"
        );
        assert_eq!(
            normalize_scope(Some("offline_access")).unwrap(),
            "offline_access"
        );
        assert!(normalize_scope(Some("mcp admin")).is_none());
    }

    #[test]
    fn a_refresh_may_keep_or_narrow_its_grant_but_not_widen_it() {
        assert_eq!(asked_on_refresh(None).unwrap(), None);
        assert!(matches!(
            asked_on_refresh(Some("mcp admin")),
            Err(OAuthError::InvalidScope(_))
        ));
        let asked = asked_on_refresh(Some("mcp offline_access")).unwrap();
        // offline_access is never more than a grant: holding a refresh token is what it asks
        assert!(!exceeds_grant(asked.as_deref(), "mcp"));
        assert!(exceeds_grant(Some(&["mcp"]), "offline_access"));
        assert!(!exceeds_grant(None, "offline_access"));
        assert!(allows_tools("offline_access mcp"));
        assert!(!allows_tools("offline_access mcpx"));
    }
}
