-- Legacy MCP sessions (Mcp-Session-Id), so that any process on this database serves them.
-- Times are Unix milliseconds (UTC); closed_at is set by DELETE, key rotation or eviction
-- under the per-account cap, and closed or long-idle rows are purged.
CREATE TABLE mcp_sessions (
    id TEXT PRIMARY KEY CHECK (length(CAST(id AS BLOB)) BETWEEN 1 AND 128),
    account_id TEXT NOT NULL REFERENCES accounts (id),
    created_at INTEGER NOT NULL,
    last_used INTEGER NOT NULL,
    closed_at INTEGER
) STRICT, WITHOUT ROWID;

CREATE INDEX mcp_sessions_by_account ON mcp_sessions (account_id, last_used);
CREATE INDEX mcp_sessions_by_last_use ON mcp_sessions (last_used);
