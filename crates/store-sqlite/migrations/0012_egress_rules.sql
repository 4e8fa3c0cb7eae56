-- Each account's host lists for its sessions' network (the egress proxy): patterns code may
-- reach (allow_hosts; empty: every public host) and may not (deny_hosts, applied after), one
-- pattern a line. One row per account, so a write replaces a list whole. Times are Unix
-- milliseconds (UTC).
CREATE TABLE egress_rules (
    account_id TEXT PRIMARY KEY REFERENCES accounts (id),
    allow_hosts TEXT NOT NULL,
    deny_hosts TEXT NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
