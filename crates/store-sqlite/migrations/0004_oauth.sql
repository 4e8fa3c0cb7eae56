-- The OAuth authorization server: registered clients, authorization codes, and access and
-- refresh tokens. Codes and tokens are stored only as their SHA-256, so a copy of the file
-- cannot act for anyone. A family is one authorization (its code and every token issued from
-- it, all of one account and one client) and is revoked as a whole. Times are Unix
-- milliseconds (UTC).
CREATE TABLE oauth_clients (
    client_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    -- A JSON array of strings, matched exactly.
    redirect_uris TEXT NOT NULL
        CHECK (json_valid(redirect_uris) AND json_type(redirect_uris) = 'array'),
    updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- client_id is no foreign key, here or below: a client known by its metadata document may be
-- stored only later, and connected apps name a client without a row by its id.
CREATE TABLE oauth_codes (
    code_hash BLOB PRIMARY KEY CHECK (length(code_hash) = 32),
    family TEXT NOT NULL UNIQUE,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    client_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    resource TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at INTEGER,
    -- Set when its family is revoked (the code replayed, the client disconnected), so that
    -- tokens stored into the family afterwards are stored revoked.
    revoked_at INTEGER
) STRICT, WITHOUT ROWID;

-- Serves disconnecting a client, which revokes its pending codes too.
CREATE INDEX oauth_codes_by_account_client ON oauth_codes (account_id, client_id);

CREATE TABLE oauth_tokens (
    token_hash BLOB PRIMARY KEY CHECK (length(token_hash) = 32),
    kind TEXT NOT NULL CHECK (kind IN ('access', 'refresh')),
    family TEXT NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    client_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    resource TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    -- When a refresh token was rotated; an access token is never used up.
    used_at INTEGER CHECK (used_at IS NULL OR kind = 'refresh'),
    revoked_at INTEGER
) STRICT, WITHOUT ROWID;

-- Serves revoking a family.
CREATE INDEX oauth_tokens_by_family ON oauth_tokens (family);

-- Serves disconnecting a client and the account's connected apps.
CREATE INDEX oauth_tokens_by_account_client ON oauth_tokens (account_id, client_id);
