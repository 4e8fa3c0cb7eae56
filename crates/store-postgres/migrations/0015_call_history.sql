-- Call history: one row per call of the three tools, written in batches off the calls' path and
-- purged after `history_days` in bounded batches (at most a few thousand rows a statement), so
-- the table holds at most the retention's calls and autovacuum reuses the space. Times are Unix
-- milliseconds (UTC); money is micro-dollars (NULL: a free call); destinations are hosts, one a
-- line; the model columns are NULL but for svc_ai.
CREATE TABLE call_history (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    at_ms BIGINT NOT NULL,
    key_label TEXT NOT NULL,
    key_id TEXT,
    client TEXT,
    tool TEXT NOT NULL,
    fields TEXT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'tool_error', 'refused')),
    detail TEXT NOT NULL,
    duration_ms BIGINT NOT NULL,
    charge_micros BIGINT,
    session_id TEXT,
    destinations TEXT NOT NULL,
    provider TEXT,
    model TEXT,
    input_tokens BIGINT,
    output_tokens BIGINT
);

-- pages are one account's, newest first; the purge walks by time
CREATE INDEX call_history_by_account_time ON call_history (account_id, at_ms DESC, id DESC);
CREATE INDEX call_history_by_time ON call_history (at_ms);

-- The month's model calls and tokens per provider, kept apart from the history, which may be
-- purged before the month ends.
CREATE TABLE model_tokens (
    account_id TEXT NOT NULL REFERENCES accounts (id),
    month TEXT NOT NULL,
    provider TEXT NOT NULL,
    calls BIGINT NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    PRIMARY KEY (account_id, month, provider)
);
