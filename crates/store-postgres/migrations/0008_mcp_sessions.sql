-- Legacy MCP sessions (Mcp-Session-Id), so that every front end on this database serves them.
-- Times are Unix milliseconds (UTC) of this server's clock (placement_now_ms(), migration 0007),
-- so front ends on several hosts judge idleness alike; closed_at is set by DELETE, key rotation
-- or eviction under the per-account cap, and closed or long-idle rows are purged.
CREATE TABLE mcp_sessions (
    id TEXT PRIMARY KEY CHECK (octet_length(id) BETWEEN 1 AND 128),
    account_id TEXT NOT NULL REFERENCES accounts (id),
    created_at BIGINT NOT NULL,
    last_used BIGINT NOT NULL,
    closed_at BIGINT
);

CREATE INDEX mcp_sessions_by_account ON mcp_sessions (account_id, last_used);
CREATE INDEX mcp_sessions_by_last_use ON mcp_sessions (last_used);
