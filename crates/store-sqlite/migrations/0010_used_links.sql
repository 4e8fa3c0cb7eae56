-- The uses of single-use links (a signed upload link takes one PUT), so that of all the
-- processes on this database one use succeeds. Times are Unix milliseconds (UTC); a row goes
-- with the link's expiry (purge_expired).
CREATE TABLE used_links (
    token_hash BLOB PRIMARY KEY CHECK (length(token_hash) = 32),
    expires_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX used_links_by_expiry ON used_links (expires_at);
