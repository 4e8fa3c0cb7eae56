//! The gated store's other storage, passed straight through: the gate holds admissions only.

use async_trait::async_trait;
use toolgate_domain::*;
use toolgate_store::*;

use super::GatedStore;

#[async_trait]
impl toolgate_store::SingleUseLinks for GatedStore {
    async fn use_link_once(
        &self,
        token_hash: &toolgate_store::TokenHash,
        expires_at: i64,
    ) -> Result<bool, StoreError> {
        self.inner.use_link_once(token_hash, expires_at).await
    }
}

#[async_trait]
impl toolgate_store::SignIns for GatedStore {
    async fn put_sign_in_link(
        &self,
        token_hash: &toolgate_store::TokenHash,
        email: &Email,
        created_at: i64,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        self.inner
            .put_sign_in_link(token_hash, email, created_at, expires_at)
            .await
    }
    async fn peek_sign_in_link(
        &self,
        token_hash: &toolgate_store::TokenHash,
        now: i64,
    ) -> Result<Option<Email>, StoreError> {
        self.inner.peek_sign_in_link(token_hash, now).await
    }
    async fn use_sign_in_link(
        &self,
        token_hash: &toolgate_store::TokenHash,
        now: i64,
    ) -> Result<Option<Email>, StoreError> {
        self.inner.use_sign_in_link(token_hash, now).await
    }
    async fn count_sign_in_links(&self, email: &Email, since: i64) -> Result<i64, StoreError> {
        self.inner.count_sign_in_links(email, since).await
    }
    async fn create_sign_in_session(
        &self,
        session: &toolgate_store::NewSignInSession,
    ) -> Result<(), StoreError> {
        self.inner.create_sign_in_session(session).await
    }
    async fn find_sign_in_session(
        &self,
        token_hash: &toolgate_store::TokenHash,
        now: i64,
    ) -> Result<Option<Account>, StoreError> {
        self.inner.find_sign_in_session(token_hash, now).await
    }
    async fn end_sign_in_session(
        &self,
        token_hash: &toolgate_store::TokenHash,
    ) -> Result<bool, StoreError> {
        self.inner.end_sign_in_session(token_hash).await
    }
    async fn end_all_sign_in_sessions(&self, account: &AccountId) -> Result<u64, StoreError> {
        self.inner.end_all_sign_in_sessions(account).await
    }
    async fn purge_expired(&self, now: i64) -> Result<u64, StoreError> {
        self.inner.purge_expired(now).await
    }
}

#[async_trait]
impl toolgate_store::SealedKeys for GatedStore {
    async fn put_sealed_key(
        &self,
        account: &AccountId,
        key_hash: &KeyHash,
        sealed: &SealedSecret,
    ) -> Result<bool, StoreError> {
        self.inner.put_sealed_key(account, key_hash, sealed).await
    }
    async fn sealed_key(&self, account: &AccountId) -> Result<Option<SealedSecret>, StoreError> {
        self.inner.sealed_key(account).await
    }
}

#[async_trait]
impl toolgate_store::History for GatedStore {
    async fn daily_calls(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<Vec<toolgate_store::DailyCalls>, StoreError> {
        self.inner.daily_calls(account, month).await
    }
    async fn wallet_credits(
        &self,
        account: &AccountId,
        limit: u32,
    ) -> Result<Vec<toolgate_store::WalletCredit>, StoreError> {
        self.inner.wallet_credits(account, limit).await
    }
}

#[async_trait]
impl toolgate_store::OAuthStore for GatedStore {
    async fn put_client(&self, client: &toolgate_store::OAuthClient) -> Result<(), StoreError> {
        self.inner.put_client(client).await
    }
    async fn client(
        &self,
        client_id: &str,
    ) -> Result<Option<toolgate_store::OAuthClient>, StoreError> {
        self.inner.client(client_id).await
    }
    async fn put_code(&self, code: &toolgate_store::NewCode) -> Result<(), StoreError> {
        self.inner.put_code(code).await
    }
    async fn code_state(
        &self,
        code_hash: &toolgate_store::TokenHash,
    ) -> Result<Option<toolgate_store::StoredCode>, StoreError> {
        self.inner.code_state(code_hash).await
    }
    async fn advance_code(&self, change: &toolgate_store::Advance<'_>) -> Result<bool, StoreError> {
        self.inner.advance_code(change).await
    }
    async fn put_tokens(&self, tokens: &toolgate_store::NewTokens) -> Result<(), StoreError> {
        self.inner.put_tokens(tokens).await
    }
    async fn find_access(
        &self,
        token_hash: &toolgate_store::TokenHash,
        now: i64,
    ) -> Result<Option<toolgate_store::AccessGrant>, StoreError> {
        self.inner.find_access(token_hash, now).await
    }
    async fn refresh_state(
        &self,
        token_hash: &toolgate_store::TokenHash,
        client_id: &str,
    ) -> Result<Option<toolgate_store::StoredRefresh>, StoreError> {
        self.inner.refresh_state(token_hash, client_id).await
    }
    async fn advance_refresh(
        &self,
        change: &toolgate_store::Advance<'_>,
        issue: Option<&toolgate_store::NewTokens>,
    ) -> Result<bool, StoreError> {
        self.inner.advance_refresh(change, issue).await
    }
    async fn revoke_token(
        &self,
        token_hash: &toolgate_store::TokenHash,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.inner.revoke_token(token_hash, now).await
    }
    async fn revoke_client(
        &self,
        account: &AccountId,
        client_id: &str,
        now: i64,
    ) -> Result<u64, StoreError> {
        self.inner.revoke_client(account, client_id, now).await
    }
    async fn connected_apps(
        &self,
        account: &AccountId,
        now: i64,
    ) -> Result<Vec<toolgate_store::ConnectedApp>, StoreError> {
        self.inner.connected_apps(account, now).await
    }
    async fn purge_clients(&self, stored_before: i64, now: i64) -> Result<u64, StoreError> {
        self.inner.purge_clients(stored_before, now).await
    }
}

#[async_trait]
impl toolgate_store::OperatorTokens for GatedStore {
    async fn operator_tokens(
        &self,
        account: &AccountId,
        day: &toolgate_domain::DayKey,
    ) -> Result<i64, StoreError> {
        self.inner.operator_tokens(account, day).await
    }
    async fn add_operator_tokens(
        &self,
        account: &AccountId,
        day: &toolgate_domain::DayKey,
        tokens: i64,
    ) -> Result<i64, StoreError> {
        self.inner.add_operator_tokens(account, day, tokens).await
    }
}

#[async_trait]
impl toolgate_store::TakeBacks for GatedStore {
    async fn credit_payment(
        &self,
        credit: &toolgate_store::PaymentCredit<'_>,
    ) -> Result<(Micros, bool), StoreError> {
        self.inner.credit_payment(credit).await
    }
    async fn take_back(
        &self,
        take: &toolgate_store::TakeBack<'_>,
    ) -> Result<toolgate_store::TakenBack, StoreError> {
        self.inner.take_back(take).await
    }
}

#[async_trait]
impl toolgate_store::Placement for GatedStore {
    async fn register_node(
        &self,
        name: &NodeName,
        url: &str,
        lease: Lease,
    ) -> Result<Incarnation, StoreError> {
        self.inner.register_node(name, url, lease).await
    }
    async fn heartbeat_node(&self, beat: &toolgate_store::NodeBeat) -> Result<bool, StoreError> {
        self.inner.heartbeat_node(beat).await
    }
    async fn live_nodes(&self) -> Result<Vec<toolgate_store::NodeRecord>, StoreError> {
        self.inner.live_nodes().await
    }
    async fn remove_node(
        &self,
        name: &NodeName,
        incarnation: Incarnation,
    ) -> Result<bool, StoreError> {
        self.inner.remove_node(name, incarnation).await
    }
    async fn session_owner(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
    ) -> Result<Option<SessionOwner>, StoreError> {
        self.inner.session_owner(account, session).await
    }
    async fn claim_view(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
        name: &NodeName,
        incarnation: Incarnation,
    ) -> Result<toolgate_store::ClaimView, StoreError> {
        self.inner
            .claim_view(account, session, name, incarnation)
            .await
    }
    async fn take_session(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
        seen: &OwnerState,
        next: &SessionOwner,
    ) -> Result<bool, StoreError> {
        self.inner.take_session(account, session, seen, next).await
    }
    async fn release_session(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
        name: &NodeName,
        incarnation: Incarnation,
    ) -> Result<bool, StoreError> {
        self.inner
            .release_session(account, session, name, incarnation)
            .await
    }
    async fn forget_session(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
    ) -> Result<(), StoreError> {
        self.inner.forget_session(account, session).await
    }
}

#[async_trait]
impl toolgate_store::McpSessionStore for GatedStore {
    async fn open_mcp_session(
        &self,
        id: &str,
        owner: &AccountId,
        cap: u32,
        idle: std::time::Duration,
    ) -> Result<McpSessionOpened, StoreError> {
        self.inner.open_mcp_session(id, owner, cap, idle).await
    }
    async fn mcp_session_owner(
        &self,
        id: &str,
        idle: std::time::Duration,
    ) -> Result<Option<AccountId>, StoreError> {
        self.inner.mcp_session_owner(id, idle).await
    }
    async fn renew_mcp_session(&self, id: &str) -> Result<Option<AccountId>, StoreError> {
        self.inner.renew_mcp_session(id).await
    }
    async fn touch_mcp_session(&self, id: &str) -> Result<(), StoreError> {
        self.inner.touch_mcp_session(id).await
    }
    async fn close_mcp_session(&self, id: &str, owner: &AccountId) -> Result<bool, StoreError> {
        self.inner.close_mcp_session(id, owner).await
    }
    async fn close_mcp_sessions_of(&self, owner: &AccountId) -> Result<u64, StoreError> {
        self.inner.close_mcp_sessions_of(owner).await
    }
    async fn purge_mcp_sessions(&self, idle: std::time::Duration) -> Result<u64, StoreError> {
        self.inner.purge_mcp_sessions(idle).await
    }
}

#[async_trait]
impl toolgate_store::TaskStore for GatedStore {
    async fn create_task(&self, task: &NewTask<'_>) -> Result<TaskRecord, StoreError> {
        self.inner.create_task(task).await
    }
    async fn task(&self, id: &str, owner: &AccountId) -> Result<Option<TaskRecord>, StoreError> {
        self.inner.task(id, owner).await
    }
    async fn tasks_of(
        &self,
        owner: &AccountId,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        self.inner.tasks_of(owner, after, limit).await
    }
    async fn update_task(
        &self,
        id: &str,
        state: TaskState,
        message: Option<&str>,
        input_requests: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.inner
            .update_task(id, state, message, input_requests)
            .await
    }
    async fn end_task(
        &self,
        id: &str,
        state: TaskState,
        message: Option<&str>,
        outcome: &str,
    ) -> Result<bool, StoreError> {
        self.inner.end_task(id, state, message, outcome).await
    }
    async fn cancel_task(
        &self,
        id: &str,
        owner: &AccountId,
        message: &str,
    ) -> Result<TaskCancel, StoreError> {
        self.inner.cancel_task(id, owner, message).await
    }
    async fn beat_tasks(&self, runner: &str) -> Result<u64, StoreError> {
        self.inner.beat_tasks(runner).await
    }
    async fn fail_lost_tasks(
        &self,
        silent: std::time::Duration,
        spare_runner: &str,
        message: &str,
        outcome: &str,
    ) -> Result<u64, StoreError> {
        self.inner
            .fail_lost_tasks(silent, spare_runner, message, outcome)
            .await
    }
    async fn purge_tasks(&self) -> Result<u64, StoreError> {
        self.inner.purge_tasks().await
    }
}

#[async_trait]
impl toolgate_store::HostListStore for GatedStore {
    async fn host_lists(&self, account: &AccountId) -> Result<HostLists, StoreError> {
        self.inner.host_lists(account).await
    }
    async fn change_host_lists(
        &self,
        account: &AccountId,
        change: HostListsChange<'_>,
    ) -> Result<HostLists, StoreError> {
        self.inner.change_host_lists(account, change).await
    }
}

#[async_trait]
impl toolgate_store::SpendControls for GatedStore {
    async fn set_spend_limits(
        &self,
        account: &AccountId,
        limits: &toolgate_store::SpendLimits,
    ) -> Result<(), StoreError> {
        self.inner.set_spend_limits(account, limits).await
    }
    async fn spend_overview(
        &self,
        account: &AccountId,
        month: &MonthKey,
        day: &toolgate_domain::DayKey,
    ) -> Result<toolgate_store::SpendOverview, StoreError> {
        self.inner.spend_overview(account, month, day).await
    }
    async fn spend_by_key(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<Vec<toolgate_store::SpendLine>, StoreError> {
        self.inner.spend_by_key(account, month).await
    }
    async fn spend_by_tool(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<Vec<toolgate_store::SpendLine>, StoreError> {
        self.inner.spend_by_tool(account, month).await
    }
    async fn record_alert(
        &self,
        account: &AccountId,
        kind: &str,
        period: &str,
    ) -> Result<bool, StoreError> {
        self.inner.record_alert(account, kind, period).await
    }
    async fn purge_spend_days(&self, before: &toolgate_domain::DayKey) -> Result<u64, StoreError> {
        self.inner.purge_spend_days(before).await
    }
    async fn forget_alerts(
        &self,
        account: &AccountId,
        kind: &str,
        period: Option<&str>,
    ) -> Result<u64, StoreError> {
        self.inner.forget_alerts(account, kind, period).await
    }
}
#[async_trait]
impl toolgate_store::NamedKeys for GatedStore {
    async fn create_named_key(&self, key: &NewNamedKey<'_>) -> Result<KeyRecord, StoreError> {
        self.inner.create_named_key(key).await
    }
    async fn named_keys(&self, account: &AccountId) -> Result<Vec<KeyRecord>, StoreError> {
        self.inner.named_keys(account).await
    }
    async fn revoke_named_key(
        &self,
        account: &AccountId,
        id: &KeyId,
    ) -> Result<(KeyRecord, bool), StoreError> {
        self.inner.revoke_named_key(account, id).await
    }
    async fn change_named_key(
        &self,
        account: &AccountId,
        id: &KeyId,
        change: KeyChange<'_>,
    ) -> Result<KeyRecord, StoreError> {
        self.inner.change_named_key(account, id, change).await
    }
    async fn record_key_uses(&self, uses: &[(KeyId, i64)]) -> Result<(), StoreError> {
        self.inner.record_key_uses(uses).await
    }
}
#[async_trait]
impl toolgate_store::CallHistory for GatedStore {
    async fn append_calls(&self, records: &[CallRecord]) -> Result<(), StoreError> {
        self.inner.append_calls(records).await
    }

    async fn call_page(
        &self,
        account: &AccountId,
        filter: &HistoryFilter,
        cursor: Option<&HistoryCursor>,
        limit: u32,
    ) -> Result<Vec<CallRecord>, StoreError> {
        self.inner.call_page(account, filter, cursor, limit).await
    }

    async fn call_record(
        &self,
        account: &AccountId,
        id: &str,
    ) -> Result<Option<CallRecord>, StoreError> {
        self.inner.call_record(account, id).await
    }

    async fn purge_calls(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
        self.inner.purge_calls(before_ms, limit).await
    }

    async fn model_tokens(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<Vec<ProviderTokens>, StoreError> {
        self.inner.model_tokens(account, month).await
    }
}
