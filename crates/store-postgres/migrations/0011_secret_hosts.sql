-- Secrets bound to hosts: the host patterns (one a line; empty: none) a secret may be sent to
-- by the sessions' network proxy, which writes it into requests in place of {{secret:NAME}}.
-- A secret without hosts is used as before (an environment variable of a run, {{secret:NAME}}
-- in the service's own requests).
ALTER TABLE secrets ADD COLUMN hosts TEXT NOT NULL DEFAULT '';
