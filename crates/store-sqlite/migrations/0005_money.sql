-- Money: the tokens each account's model calls used of the operator's provider keys per UTC
-- day, and refunds and disputes taken back from wallets. Money is integer micro-dollars; times
-- are Unix milliseconds (UTC).

-- Input + output tokens of calls on the operator's keys, per account and day (YYYY-MM-DD,
-- UTC), counted against operator_tokens_per_day; a new day is a new row, so nothing resets.
CREATE TABLE operator_tokens (
    account_id TEXT NOT NULL REFERENCES accounts (id),
    day TEXT NOT NULL,
    tokens INTEGER NOT NULL CHECK (tokens >= 0),
    PRIMARY KEY (account_id, day)
) STRICT, WITHOUT ROWID;

-- What refunds and disputes took back beyond what the wallet held, until credits repay it. A
-- take-back empties the wallet first and a credit repays first, so at most one of the two is
-- non-zero: admission, which pays from the wallet alone, refuses paid calls while anything is
-- owed. The balance shown is wallet_micros - owed_micros.
ALTER TABLE accounts ADD COLUMN owed_micros INTEGER NOT NULL DEFAULT 0
    CHECK (owed_micros >= 0 AND (owed_micros = 0 OR wallet_micros = 0));

-- Each payment (Stripe's payment intent) that credited a wallet, so that its refunds and
-- disputes find the account; what was taken back of it never passes what it credited.
-- refunded_micros is the largest refunds total seen (Stripe's amount_refunded is cumulative).
CREATE TABLE wallet_payments (
    payment TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    reference TEXT NOT NULL REFERENCES wallet_credits (reference),
    credited_micros INTEGER NOT NULL CHECK (credited_micros > 0),
    refunded_micros INTEGER NOT NULL DEFAULT 0 CHECK (refunded_micros >= 0),
    taken_micros INTEGER NOT NULL DEFAULT 0
        CHECK (taken_micros >= 0 AND taken_micros <= credited_micros),
    created_at INTEGER NOT NULL
) STRICT;

-- Each refund or dispute event applied: once per event id, and a dispute once per dispute id.
CREATE TABLE wallet_takebacks (
    reference TEXT PRIMARY KEY,
    dispute TEXT UNIQUE,
    payment TEXT NOT NULL REFERENCES wallet_payments (payment),
    account_id TEXT NOT NULL REFERENCES accounts (id),
    amount_micros INTEGER NOT NULL CHECK (amount_micros >= 0),
    created_at INTEGER NOT NULL
) STRICT;

-- Serves the wallet page's history of one account.
CREATE INDEX wallet_takebacks_by_account ON wallet_takebacks (account_id, created_at);
