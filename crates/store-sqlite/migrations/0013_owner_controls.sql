-- The owner's controls: spend caps per account and per named key, named keys, and which key
-- made each call in the ledger (NULL: the account's first key, or an OAuth app). Money is
-- integer micro-dollars; NULL caps are no cap. Times are Unix milliseconds (UTC).
ALTER TABLE accounts ADD COLUMN cap_month_micros INTEGER CHECK (cap_month_micros >= 0);
ALTER TABLE accounts ADD COLUMN cap_day_micros INTEGER CHECK (cap_day_micros >= 0);

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    name TEXT NOT NULL,
    key_hash BLOB NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    -- tool kinds (read, write, ai) and fields the key may use, one a line; empty: all
    scope_tools TEXT NOT NULL DEFAULT '',
    scope_fields TEXT NOT NULL DEFAULT '',
    cap_month_micros INTEGER CHECK (cap_month_micros >= 0),
    cap_day_micros INTEGER CHECK (cap_day_micros >= 0),
    created_at INTEGER NOT NULL,
    revoked_at INTEGER,
    last_used_at INTEGER
) STRICT;

-- a name is unique among the account's live keys; a revoked key's name may be used again
CREATE UNIQUE INDEX api_keys_live_name ON api_keys (account_id, name) WHERE revoked_at IS NULL;
CREATE INDEX api_keys_by_account ON api_keys (account_id);

ALTER TABLE call_ledger ADD COLUMN key_id TEXT;
-- a day's spend, against a daily cap, is summed from here
CREATE INDEX call_ledger_by_account_time ON call_ledger (account_id, created_at);

-- What the wallet paid, per account (key_id '') and per named key, per month ('2026-11') and
-- per UTC day ('2026-11-28'): what spend caps are checked against, in O(1). Every admission
-- that charges the wallet adds to its rows in the same transaction as its ledger row. Filled
-- here from the ledger so far (no named keys existed before).
CREATE TABLE spend (
    account_id TEXT NOT NULL REFERENCES accounts (id),
    key_id TEXT NOT NULL,
    period TEXT NOT NULL,
    spent_micros INTEGER NOT NULL CHECK (spent_micros >= 0),
    PRIMARY KEY (account_id, key_id, period)
) STRICT, WITHOUT ROWID;

INSERT INTO spend (account_id, key_id, period, spent_micros)
SELECT account_id, '', month, sum(cost_micros) FROM call_ledger
WHERE paid_from = 'wallet' GROUP BY account_id, month;

INSERT INTO spend (account_id, key_id, period, spent_micros)
SELECT account_id, '', strftime('%Y-%m-%d', created_at / 1000, 'unixepoch'), sum(cost_micros)
FROM call_ledger WHERE paid_from = 'wallet'
GROUP BY account_id, strftime('%Y-%m-%d', created_at / 1000, 'unixepoch');
