-- Placement: the execution nodes that run sandbox sessions, and which of them owns each
-- session. Times are Unix milliseconds (UTC) of this server's clock, so that front ends and
-- nodes on several hosts judge every lease by one clock. A session's owner is valid only while
-- its node's row holds that same incarnation with lease_until in the future, so one heartbeat
-- renews all of a node's sessions and a lapsed, replaced or removed node loses them all at once.

-- The placement clock: the time of the statement's execution (not of its transaction's start).
CREATE FUNCTION placement_now_ms() RETURNS BIGINT
    LANGUAGE sql VOLATILE
    AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT $$;

-- Incarnations are never reused, even after a node's row is deleted, so an old owner row can
-- never become valid again.
CREATE SEQUENCE node_incarnations AS BIGINT;

CREATE TABLE nodes (
    name TEXT PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 64),
    incarnation BIGINT NOT NULL UNIQUE,
    url TEXT NOT NULL,
    lease_until BIGINT NOT NULL,
    sessions BIGINT NOT NULL DEFAULT 0 CHECK (sessions >= 0),
    memory_bytes BIGINT NOT NULL DEFAULT 0 CHECK (memory_bytes >= 0),
    draining BOOLEAN NOT NULL DEFAULT FALSE,
    started_at BIGINT NOT NULL
);

-- node and incarnation are both NULL once the owner released the session (kept at its epoch
-- for the next claim); epoch grows by one each time the session changes hands.
CREATE TABLE session_owners (
    account_id TEXT NOT NULL REFERENCES accounts (id),
    session_id TEXT NOT NULL CHECK (octet_length(session_id) BETWEEN 1 AND 256),
    node TEXT,
    incarnation BIGINT,
    epoch BIGINT NOT NULL CHECK (epoch >= 1),
    PRIMARY KEY (account_id, session_id),
    CHECK ((node IS NULL) = (incarnation IS NULL))
);
