-- MCP tasks (a tools/call that runs on after its request was answered), so that every front end
-- on this database answers tasks/get. Times are Unix milliseconds (UTC) of this server's clock
-- (placement_now_ms(), migration 0007), so front ends on several hosts judge expiry and silence
-- alike; a task is seen and kept until expires_ms, and beat_ms is its runner's last beat (its
-- creation until the runner first beats).
CREATE TABLE tasks (
    id TEXT PRIMARY KEY CHECK (octet_length(id) BETWEEN 1 AND 128),
    account_id TEXT NOT NULL REFERENCES accounts (id),
    tool TEXT NOT NULL,
    state TEXT NOT NULL
        CHECK (state IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
    status_message TEXT,
    input_requests TEXT,
    outcome TEXT,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    ttl_ms BIGINT NOT NULL CHECK (ttl_ms >= 0),
    expires_ms BIGINT NOT NULL GENERATED ALWAYS AS (created_ms + ttl_ms) STORED,
    runner TEXT NOT NULL,
    beat_ms BIGINT NOT NULL
);

CREATE INDEX tasks_by_owner ON tasks (account_id, created_ms DESC, id DESC);
CREATE INDEX tasks_unended_by_runner ON tasks (runner)
    WHERE state IN ('working', 'input_required');
CREATE INDEX tasks_unended_by_beat ON tasks (beat_ms)
    WHERE state IN ('working', 'input_required');
CREATE INDEX tasks_by_expiry ON tasks (expires_ms);
