-- Accounts, their key hashes, the monthly allowance, the wallet and the call ledger.
-- Money is integer micro-dollars; times are Unix milliseconds (UTC).
CREATE TABLE accounts (
    id TEXT PRIMARY KEY,
    email TEXT NOT NULL UNIQUE,
    key_hash BYTEA NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    tier TEXT NOT NULL DEFAULT 'free',
    wallet_micros BIGINT NOT NULL DEFAULT 0 CHECK (wallet_micros >= 0),
    created_at BIGINT NOT NULL,
    key_rotated_at BIGINT
);

CREATE TABLE monthly_usage (
    account_id TEXT NOT NULL REFERENCES accounts (id),
    month TEXT NOT NULL,
    free_used BIGINT NOT NULL CHECK (free_used >= 0),
    PRIMARY KEY (account_id, month)
);

CREATE TABLE call_ledger (
    id BIGSERIAL PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    month TEXT NOT NULL,
    tool TEXT NOT NULL,
    paid_from TEXT NOT NULL CHECK (paid_from IN ('free', 'wallet')),
    cost_micros BIGINT NOT NULL CHECK (cost_micros >= 0),
    created_at BIGINT NOT NULL
);

CREATE INDEX call_ledger_by_account_month ON call_ledger (account_id, month);

CREATE TABLE wallet_credits (
    reference TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    amount_micros BIGINT NOT NULL CHECK (amount_micros > 0),
    created_at BIGINT NOT NULL
);
