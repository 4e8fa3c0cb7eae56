-- Spend alerts: the balance below which the owner is mailed (NULL: no wallet alert), and each
-- alert sent, once per kind and period (a cap's month or day; the wallet alert's amount, its
-- row removed once the balance is at or above it again), so that of every front end and every
-- restart one sends it. Money is integer micro-dollars; times are Unix milliseconds (UTC).
ALTER TABLE accounts ADD COLUMN alert_below_micros BIGINT CHECK (alert_below_micros > 0);

CREATE TABLE alerts_sent (
    account_id TEXT NOT NULL REFERENCES accounts (id),
    kind TEXT NOT NULL,
    period TEXT NOT NULL,
    sent_at BIGINT NOT NULL,
    PRIMARY KEY (account_id, kind, period)
);
