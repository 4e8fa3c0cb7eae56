-- The dashboard: sign-in links, dashboard sessions and the account's sealed key. Tokens are
-- stored only as their SHA-256, so a copy of the file cannot sign anyone in. Times are Unix
-- milliseconds (UTC).
CREATE TABLE sign_in_links (
    token_hash BLOB PRIMARY KEY CHECK (length(token_hash) = 32),
    email TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at INTEGER
) STRICT, WITHOUT ROWID;

-- Serves the rate limit's count of recent links per address.
CREATE INDEX sign_in_links_by_email ON sign_in_links (email, created_at);

CREATE TABLE web_sessions (
    token_hash BLOB PRIMARY KEY CHECK (length(token_hash) = 32),
    account_id TEXT NOT NULL REFERENCES accounts (id),
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- Serves "sign out everywhere".
CREATE INDEX web_sessions_by_account ON web_sessions (account_id);

-- The current key sealed by the vault (as a secret is), so its owner can see the personal URL
-- again; all three NULL until stored, and set back to NULL when the key is replaced. The CHECK
-- that keeps them whole names all three, so it rides on the last one added.
ALTER TABLE accounts ADD COLUMN key_sealed_version INTEGER CHECK (key_sealed_version >= 0);
ALTER TABLE accounts ADD COLUMN key_wrapped BLOB;
ALTER TABLE accounts ADD COLUMN key_ciphertext BLOB
    CHECK ((key_sealed_version IS NULL) = (key_wrapped IS NULL)
       AND (key_wrapped IS NULL) = (key_ciphertext IS NULL));

-- Serves the wallet page's newest credits of one account.
CREATE INDEX wallet_credits_by_account ON wallet_credits (account_id, created_at);
