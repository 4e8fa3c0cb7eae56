-- Placement: the execution nodes that run sandbox sessions, and which of them owns each
-- session. Times are Unix milliseconds (UTC). A session's owner is valid only while its node's
-- row holds that same incarnation with lease_until in the future, so one heartbeat renews all
-- of a node's sessions and a lapsed, replaced or removed node loses them all at once.

-- The last incarnation handed out (one row): incarnations are never reused, even after a node's
-- row is deleted, so an old owner row can never become valid again.
CREATE TABLE node_incarnations (
    last INTEGER NOT NULL CHECK (last >= 0)
) STRICT;
INSERT INTO node_incarnations (last) VALUES (0);

CREATE TABLE nodes (
    name TEXT PRIMARY KEY CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 64),
    incarnation INTEGER NOT NULL UNIQUE,
    url TEXT NOT NULL,
    lease_until INTEGER NOT NULL,
    sessions INTEGER NOT NULL DEFAULT 0 CHECK (sessions >= 0),
    memory_bytes INTEGER NOT NULL DEFAULT 0 CHECK (memory_bytes >= 0),
    draining INTEGER NOT NULL DEFAULT 0 CHECK (draining IN (0, 1)),
    started_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- node and incarnation are both NULL once the owner released the session (kept at its epoch
-- for the next claim); epoch grows by one each time the session changes hands.
CREATE TABLE session_owners (
    account_id TEXT NOT NULL REFERENCES accounts (id),
    session_id TEXT NOT NULL CHECK (length(CAST(session_id AS BLOB)) BETWEEN 1 AND 256),
    node TEXT,
    incarnation INTEGER,
    epoch INTEGER NOT NULL CHECK (epoch >= 1),
    PRIMARY KEY (account_id, session_id),
    CHECK ((node IS NULL) = (incarnation IS NULL))
) STRICT, WITHOUT ROWID;
