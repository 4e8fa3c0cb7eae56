-- The vault's sealed secrets: each value encrypted under a data key of its own, that key wrapped
-- by the master key of version key_version. Storage holds only these opaque bytes, never a
-- plaintext. Times are Unix milliseconds (UTC); updated_at is the last replacement.
CREATE TABLE secrets (
    account_id TEXT NOT NULL REFERENCES accounts (id),
    name TEXT NOT NULL,
    key_version INTEGER NOT NULL CHECK (key_version >= 0),
    wrapped_key BLOB NOT NULL,
    ciphertext BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, name)
) STRICT, WITHOUT ROWID;
