-- The vault's sealed secrets: each value encrypted under a data key of its own, that key wrapped
-- by the master key of version key_version. Storage holds only these opaque bytes, never a
-- plaintext. Times are Unix milliseconds (UTC); updated_at is the last replacement.
-- COLLATE "C": rotation pages through (account_id, name) in byte order, as SQLite does, whatever
-- the database's locale, and the primary key's index serves that order.
CREATE TABLE secrets (
    account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts (id),
    name TEXT COLLATE "C" NOT NULL,
    key_version INTEGER NOT NULL CHECK (key_version >= 0),
    wrapped_key BYTEA NOT NULL,
    ciphertext BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (account_id, name)
);
