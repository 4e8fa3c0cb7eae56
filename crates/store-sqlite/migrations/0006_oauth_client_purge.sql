-- Serves the periodic purge of clients that were never used (registration is open to anyone):
-- the old clients, then whether any account holds a live token or a pending code of each.
CREATE INDEX oauth_clients_by_updated_at ON oauth_clients (updated_at);
CREATE INDEX oauth_tokens_by_client ON oauth_tokens (client_id, expires_at);
CREATE INDEX oauth_codes_by_client ON oauth_codes (client_id, expires_at);
