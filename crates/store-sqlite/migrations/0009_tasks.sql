-- MCP tasks (a tools/call that runs on after its request was answered), so that any process on
-- this database answers tasks/get. Times are Unix milliseconds (UTC) of the process clock; a
-- task is seen and kept until expires_ms, and beat_ms is its runner's last beat (its creation
-- until the runner first beats). A rowid table, not WITHOUT ROWID: outcome may hold megabytes.
CREATE TABLE tasks (
    id TEXT PRIMARY KEY CHECK (length(CAST(id AS BLOB)) BETWEEN 1 AND 128),
    account_id TEXT NOT NULL REFERENCES accounts (id),
    tool TEXT NOT NULL,
    state TEXT NOT NULL
        CHECK (state IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
    status_message TEXT,
    input_requests TEXT,
    outcome TEXT,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    ttl_ms INTEGER NOT NULL CHECK (ttl_ms >= 0),
    expires_ms INTEGER NOT NULL AS (created_ms + ttl_ms) STORED,
    runner TEXT NOT NULL,
    beat_ms INTEGER NOT NULL
) STRICT;

CREATE INDEX tasks_by_owner ON tasks (account_id, created_ms DESC, id DESC);
CREATE INDEX tasks_unended_by_runner ON tasks (runner)
    WHERE state IN ('working', 'input_required');
CREATE INDEX tasks_unended_by_beat ON tasks (beat_ms)
    WHERE state IN ('working', 'input_required');
CREATE INDEX tasks_by_expiry ON tasks (expires_ms);
