-- Accounts, their key hashes, the monthly allowance, the wallet and the call ledger.
-- Money is integer micro-dollars; times are Unix milliseconds (UTC).
CREATE TABLE accounts (
    id TEXT PRIMARY KEY,
    email TEXT NOT NULL UNIQUE,
    key_hash BLOB NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    tier TEXT NOT NULL DEFAULT 'free',
    wallet_micros INTEGER NOT NULL DEFAULT 0 CHECK (wallet_micros >= 0),
    created_at INTEGER NOT NULL,
    key_rotated_at INTEGER
) STRICT;

CREATE TABLE monthly_usage (
    account_id TEXT NOT NULL REFERENCES accounts (id),
    month TEXT NOT NULL,
    free_used INTEGER NOT NULL CHECK (free_used >= 0),
    PRIMARY KEY (account_id, month)
) STRICT, WITHOUT ROWID;

CREATE TABLE call_ledger (
    id INTEGER PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    month TEXT NOT NULL,
    tool TEXT NOT NULL,
    paid_from TEXT NOT NULL CHECK (paid_from IN ('free', 'wallet')),
    cost_micros INTEGER NOT NULL CHECK (cost_micros >= 0),
    created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX call_ledger_by_account_month ON call_ledger (account_id, month);

CREATE TABLE wallet_credits (
    reference TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    amount_micros INTEGER NOT NULL CHECK (amount_micros > 0),
    created_at INTEGER NOT NULL
) STRICT;
