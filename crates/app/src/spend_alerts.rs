//! Spend alerts by mail: the wallet fell below the owner's amount, or a spend cap (the
//! account's, or a named key's) is 80 % or 100 % used. Paid and capped calls tell a bounded
//! queue of their account and go on; one background task takes every account queued meanwhile
//! once, reads its spend from the database, and mails each alert whose row it is first to insert
//! into `alerts_sent`, so that an alert goes once per period across front ends and restarts.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::mpsc;
use toolgate_domain::time_reexport::OffsetDateTime;
use toolgate_domain::{AccountId, CapPeriod, DayKey, Email, Micros, MonthKey, SpendCaps};
use toolgate_ports::mail::{Mail, Mailer};
use toolgate_store::{SpendOverview, Store, StoreError};

/// Accounts waiting to be checked; when full, a notice is dropped, which costs nothing: the
/// account's next paid or capped call queues it again.
const QUEUE: usize = 1024;
/// The alert kind of a wallet below the owner's amount; its period is the amount, and its row
/// goes once the balance is at or above the amount again.
const WALLET_BELOW: &str = "wallet_below";

/// The paid calls' side of the alerts: a cheap notice that an account's spend moved.
#[derive(Clone)]
pub struct SpendWatch {
    queue: mpsc::Sender<AccountId>,
}

impl SpendWatch {
    /// Starts the task that checks and mails, on the current Tokio runtime.
    pub fn start(
        store: Arc<dyn Store>,
        mailer: Arc<dyn Mailer>,
        paid_call_cost: Micros,
        public_url: &str,
    ) -> Self {
        let (queue, waiting) = mpsc::channel(QUEUE);
        let checker = Checker {
            store,
            mailer,
            paid_call_cost,
            public_url: public_url.trim_end_matches('/').to_owned(),
        };
        tokio::spawn(checker.run(waiting));
        Self { queue }
    }

    /// Queues `account` for a check, never waiting.
    pub fn notify(&self, account: &AccountId) {
        let _dropped_when_full = self.queue.try_send(account.clone());
    }
}

struct Checker {
    store: Arc<dyn Store>,
    mailer: Arc<dyn Mailer>,
    paid_call_cost: Micros,
    public_url: String,
}

impl Checker {
    async fn run(self, mut waiting: mpsc::Receiver<AccountId>) {
        while let Some(first) = waiting.recv().await {
            let mut due = HashSet::from([first]);
            while let Ok(next) = waiting.try_recv() {
                due.insert(next);
            }
            for account in due {
                if let Err(err) = self.check(&account).await {
                    tracing::warn!(error = %err, account = %account, "spend alerts not checked");
                }
            }
        }
    }

    async fn check(&self, account: &AccountId) -> Result<(), StoreError> {
        let now = OffsetDateTime::now_utc();
        let (month, day) = (MonthKey::containing(now), DayKey::containing(now));
        let overview = self.store.spend_overview(account, &month, &day).await?;
        for alert in cap_alerts(&overview, self.paid_call_cost) {
            let period = match alert.period {
                CapPeriod::Month => month.as_str(),
                CapPeriod::Day => day.as_str(),
            };
            let kind = alert.kind();
            if !self.store.record_alert(account, &kind, period).await? {
                continue;
            }
            if alert.used_up {
                // the 80 % mail would come after the 100 % one: it is spent with it
                let eighty = CapAlert {
                    used_up: false,
                    ..alert.clone()
                };
                self.store
                    .record_alert(account, &eighty.kind(), period)
                    .await?;
            }
            let text = self.cap_text(&overview, account, &alert, period);
            self.send(
                &overview.email,
                account,
                &kind,
                period,
                alert.subject(),
                text,
            )
            .await?;
        }
        let Some(amount) = overview.limits.alert_below else {
            return Ok(());
        };
        if overview.balance >= amount {
            self.store
                .forget_alerts(account, WALLET_BELOW, None)
                .await?;
            return Ok(());
        }
        let period = amount.0.to_string();
        if self
            .store
            .record_alert(account, WALLET_BELOW, &period)
            .await?
        {
            let text = format!(
                "Account {email} ({account}):\n\nthe wallet balance is {balance} USD, below the \
                 {amount} USD you set for this alert. Paid calls stop when the wallet cannot pay \
                 for the next one ({price} USD).\n\nTop up: {url}/dashboard/wallet\n\
                 Alert settings: {url}/dashboard/limits\n\nThis alert comes once until the \
                 balance is at or above {amount} USD again.\n",
                email = overview.email.as_str(),
                balance = overview.balance.to_usd_price_string(),
                amount = amount.to_usd_price_string(),
                price = self.paid_call_cost.to_usd_price_string(),
                url = self.public_url,
            );
            let subject = format!("Wallet below {} USD", amount.to_usd_price_string());
            self.send(
                &overview.email,
                account,
                WALLET_BELOW,
                &period,
                subject,
                text,
            )
            .await?;
        }
        Ok(())
    }

    /// Mails the owner; when the transport fails, the alert's row goes again, so that a later
    /// check retries it.
    async fn send(
        &self,
        to: &Email,
        account: &AccountId,
        kind: &str,
        period: &str,
        subject: String,
        text: String,
    ) -> Result<(), StoreError> {
        let mail = Mail {
            to: to.clone(),
            subject,
            text,
            link: None,
        };
        if let Err(err) = self.mailer.send(&mail).await {
            tracing::warn!(error = %err, kind, "a spend alert was not sent; it is retried");
            self.store
                .forget_alerts(account, kind, Some(period))
                .await?;
        }
        Ok(())
    }

    fn cap_text(
        &self,
        overview: &SpendOverview,
        account: &AccountId,
        alert: &CapAlert,
        period: &str,
    ) -> String {
        let (spent_in, renews) = match alert.period {
            CapPeriod::Month => ("this month", "on the 1st of next month (UTC)"),
            CapPeriod::Day => ("today", "at 00:00 UTC"),
        };
        let state = if alert.used_up {
            "is used up: the next paid call would pass it, so paid calls are refused until it renews"
        } else {
            "is 80 % used"
        };
        format!(
            "Account {email} ({account}):\n\n{whose} {which} spend cap of {cap} USD {state}: \
             {spent} USD paid from the wallet {spent_in} ({period}, UTC), at {price} USD per \
             paid call. Free calls are not counted against it. The cap renews {renews}.\n\n\
             Raise or remove the cap: {url}/dashboard/limits\n\n\
             This alert comes once per {period_name}.\n",
            email = overview.email.as_str(),
            whose = alert.whose_text(),
            which = alert.period_word(),
            cap = alert.cap.to_usd_price_string(),
            spent = alert.spent.to_usd_price_string(),
            price = self.paid_call_cost.to_usd_price_string(),
            url = self.public_url,
            period_name = match alert.period {
                CapPeriod::Month => "month",
                CapPeriod::Day => "day",
            },
        )
    }
}

/// One cap's alert that is due.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CapAlert {
    /// `None`: the account's cap; else the named key's id and name.
    key: Option<(String, String)>,
    period: CapPeriod,
    cap: Micros,
    spent: Micros,
    /// 100 %: spent reached the cap, or the next paid call would pass it; else 80 %.
    used_up: bool,
}

impl CapAlert {
    /// The alert's row kind, e.g. `cap:account:month:80`, `cap:key_…:day:100`.
    fn kind(&self) -> String {
        let whose = self.key.as_ref().map_or("account", |(id, _)| id.as_str());
        let level = if self.used_up { 100 } else { 80 };
        format!("cap:{whose}:{}:{level}", self.period_word())
    }

    fn period_word(&self) -> &'static str {
        match self.period {
            CapPeriod::Month => "monthly",
            CapPeriod::Day => "daily",
        }
    }

    fn whose_text(&self) -> String {
        match &self.key {
            None => "the account's".to_owned(),
            Some((_, name)) => format!("the key \"{name}\"'s"),
        }
    }

    fn subject(&self) -> String {
        let level = if self.used_up { "100 %" } else { "80 %" };
        format!(
            "Spend alert: {} {} cap is {level} used",
            self.whose_text(),
            self.period_word()
        )
    }
}

/// The caps' alerts due at this spend: each cap at 80 % or more, the higher level only.
fn cap_alerts(overview: &SpendOverview, paid_call_cost: Micros) -> Vec<CapAlert> {
    let mut caps = Vec::new();
    let mut add = |key: Option<(String, String)>, caps_of: SpendCaps, month, day| {
        for (period, cap, spent) in [
            (CapPeriod::Month, caps_of.month, month),
            (CapPeriod::Day, caps_of.day, day),
        ] {
            if let Some(cap) = cap {
                caps.push((key.clone(), period, cap, spent));
            }
        }
    };
    add(None, overview.limits.caps, overview.month, overview.day);
    for key in &overview.keys {
        add(
            Some((key.id.as_str().to_owned(), key.name.clone())),
            key.caps,
            key.month,
            key.day,
        );
    }
    caps.into_iter()
        .filter_map(|(key, period, cap, spent)| {
            let (cap_i, spent_i) = (i128::from(cap.0), i128::from(spent.0));
            let used_up = spent_i >= cap_i || spent_i + i128::from(paid_call_cost.0) > cap_i;
            let eighty = spent_i * 100 >= cap_i * 80 && spent_i > 0;
            (used_up || eighty).then_some(CapAlert {
                key,
                period,
                cap,
                spent,
                used_up,
            })
        })
        .collect()
}

#[cfg(test)]
#[path = "spend_alerts_tests.rs"]
mod tests;
