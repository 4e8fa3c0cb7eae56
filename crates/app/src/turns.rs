//! Turns for work the server does on a tenant's behalf, one budget per kind of work (web
//! requests, database statements, model calls and searches, workspace reads), shared by every
//! capability and upcall that does it and fair across accounts:
//! - an account holds at most `per_account` turns of a kind, and the server `global`;
//! - an account's second and later turns are granted only while more than `reserve` are free,
//!   so accounts that hold none always find one (eight accounts with slow fetches cannot make
//!   a ninth wait for them to finish);
//! - waiting calls are served in order, accounts holding no turn first;
//! - a wait is bounded: past `wait`, or with too many calls already waiting, the call gets a
//!   "busy, try again" answer. Turns are taken before a call is charged, so that answer is free.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

/// The kinds of work with a budget of their own, in the order a call takes their turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TurnKind {
    /// `url` and `http`: each may hold an 8 MiB answer while it is rendered.
    Fetch,
    /// `sql` on a tenant's database server.
    Database,
    /// Model calls and searches, from tools and from code.
    Models,
    /// `path`: a workspace file read back and encoded.
    WorkspaceRead,
}

impl TurnKind {
    /// What the caller reads when the kind is busy.
    fn work(self) -> &'static str {
        match self {
            Self::Fetch => "web requests",
            Self::Database => "database statements",
            Self::Models => "model calls and searches",
            Self::WorkspaceRead => "workspace reads",
        }
    }
}

/// The bounds of one kind's budget.
#[derive(Debug, Clone, Copy)]
pub struct TurnLimits {
    /// Turns on the whole server at once.
    pub global: usize,
    /// Turns one account may hold at once.
    pub per_account: usize,
    /// Turns kept for accounts that hold none.
    pub reserve: usize,
    /// The longest a call waits for a turn.
    pub wait: Duration,
    /// Calls of one account that may wait at once; one more is busy at once.
    pub waiting_per_account: usize,
    /// Calls that may wait on the server at once.
    pub waiting: usize,
}

impl TurnLimits {
    /// `global` at once, `per_account` of them for one account, a quarter kept for accounts
    /// holding none, 10 s of waiting at most.
    pub const fn new(global: usize, per_account: usize) -> Self {
        Self {
            global,
            per_account,
            reserve: global / 4,
            wait: Duration::from_secs(10),
            waiting_per_account: 16,
            waiting: 1024,
        }
    }
}

/// The budgets of every kind, as the service sets them.
pub struct Budgets {
    fetcher: Arc<Turns>,
    database: Arc<Turns>,
    models: Arc<Turns>,
    workspace_reads: Arc<Turns>,
}

impl Default for Budgets {
    /// 32 web requests, database statements, and model calls or searches on the server (4
    /// of each per account), two workspace reads (one per account).
    fn default() -> Self {
        Self {
            fetcher: Turns::new(TurnKind::Fetch, TurnLimits::new(32, 4)),
            database: Turns::new(TurnKind::Database, TurnLimits::new(32, 4)),
            models: Turns::new(TurnKind::Models, TurnLimits::new(32, 4)),
            workspace_reads: Turns::new(TurnKind::WorkspaceRead, TurnLimits::new(2, 1)),
        }
    }
}

impl Budgets {
    /// The budget of `kind`.
    pub fn of(&self, kind: TurnKind) -> &Arc<Turns> {
        match kind {
            TurnKind::Fetch => &self.fetcher,
            TurnKind::Database => &self.database,
            TurnKind::Models => &self.models,
            TurnKind::WorkspaceRead => &self.workspace_reads,
        }
    }

    /// One turn of each of `kinds` (taken in their order) for `account`, or why not.
    pub async fn take(&self, kinds: &[TurnKind], account: &str) -> Result<Vec<Turn>, Busy> {
        let mut turns = Vec::with_capacity(kinds.len());
        for kind in kinds {
            turns.push(self.of(*kind).turn(account).await?);
        }
        Ok(turns)
    }
}

/// No turn came within the bounds: the call did not run and is not charged.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "busy: this service is running as many {} as it takes at once (or this account has many \
     waiting); nothing ran and nothing was charged. Try again in a few seconds.",
    kind.work()
)]
pub struct Busy {
    /// The kind of work that was busy.
    pub kind: TurnKind,
}

/// One kind's budget.
pub struct Turns {
    kind: TurnKind,
    limits: TurnLimits,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Turns held per account (accounts holding none are not kept).
    held: HashMap<String, usize>,
    in_use: usize,
    /// Calls waiting, in the order they came.
    queue: VecDeque<Waiter>,
    /// Calls waiting per account.
    waiting: HashMap<String, usize>,
    next_id: u64,
}

struct Waiter {
    id: u64,
    account: String,
    grant: oneshot::Sender<Turn>,
}

/// A turn; the next call may have it when this is dropped.
pub struct Turn {
    turns: Arc<Turns>,
    account: String,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn")
            .field("kind", &self.turns.kind)
            .finish_non_exhaustive()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let orphans = {
            let mut state = self.turns.lock();
            if let Some(held) = state.held.get_mut(&self.account) {
                *held -= 1;
                if *held == 0 {
                    state.held.remove(&self.account);
                }
            }
            state.in_use -= 1;
            self.turns.dispatch(&mut state)
        };
        // turns granted to calls that stopped waiting are given back outside the lock
        drop(orphans);
    }
}

impl Turns {
    /// A budget of `kind` within `limits`.
    pub fn new(kind: TurnKind, limits: TurnLimits) -> Arc<Self> {
        Arc::new(Self {
            kind,
            limits,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits (within the limits) for a turn of `account`.
    pub async fn turn(self: &Arc<Self>, account: &str) -> Result<Turn, Busy> {
        let busy = Busy { kind: self.kind };
        let (id, granted, orphans) = {
            let mut state = self.lock();
            let waiting = state.waiting.get(account).copied().unwrap_or(0);
            if waiting >= self.limits.waiting_per_account
                || state.queue.len() >= self.limits.waiting
            {
                return Err(busy);
            }
            let (grant, granted) = oneshot::channel();
            let id = state.next_id;
            state.next_id += 1;
            state.queue.push_back(Waiter {
                id,
                account: account.to_owned(),
                grant,
            });
            *state.waiting.entry(account.to_owned()).or_insert(0) += 1;
            let orphans = self.dispatch(&mut state);
            (id, granted, orphans)
        };
        drop(orphans);
        let mut leaving = Leaving {
            turns: self,
            id,
            account: account.to_owned(),
        };
        match tokio::time::timeout(self.limits.wait, leaving.wait(granted)).await {
            Ok(Some(turn)) => Ok(turn),
            // the sender went without a turn: only when the budget itself went away
            Ok(None) | Err(_) => Err(busy),
        }
    }

    /// Grants turns to waiting calls while the rules allow, accounts holding none first;
    /// returns the turns of calls that stopped waiting, to be dropped after the lock.
    fn dispatch(self: &Arc<Self>, state: &mut State) -> Vec<Turn> {
        let mut orphans = Vec::new();
        while let Some(at) = self.next_grantable(state) {
            let Some(waiter) = state.queue.remove(at) else {
                break;
            };
            forget_waiting(state, &waiter.account);
            *state.held.entry(waiter.account.clone()).or_insert(0) += 1;
            state.in_use += 1;
            let turn = Turn {
                turns: Arc::clone(self),
                account: waiter.account,
            };
            if let Err(turn) = waiter.grant.send(turn) {
                orphans.push(turn);
            }
        }
        orphans
    }

    /// The waiter to serve next: the first whose account holds no turn, else the first that
    /// may take one more.
    fn next_grantable(&self, state: &State) -> Option<usize> {
        let free = self.limits.global.saturating_sub(state.in_use);
        if free == 0 {
            return None;
        }
        let held = |account: &str| state.held.get(account).copied().unwrap_or(0);
        let first_turn = state.queue.iter().position(|w| held(&w.account) == 0);
        first_turn.or_else(|| {
            if free <= self.limits.reserve {
                return None;
            }
            state
                .queue
                .iter()
                .position(|w| held(&w.account) < self.limits.per_account)
        })
    }

    /// Turns held now, and calls waiting (for figures and tests).
    pub fn load(&self) -> (usize, usize) {
        let state = self.lock();
        (state.in_use, state.queue.len())
    }
}

fn forget_waiting(state: &mut State, account: &str) {
    if let Some(count) = state.waiting.get_mut(account) {
        *count -= 1;
        if *count == 0 {
            state.waiting.remove(account);
        }
    }
}

/// A call's place in the queue: given up when the call stops waiting (its time ran out or
/// it was cancelled), so the queue never keeps a call that is gone.
struct Leaving<'a> {
    turns: &'a Arc<Turns>,
    id: u64,
    account: String,
}

impl Leaving<'_> {
    async fn wait(&mut self, granted: oneshot::Receiver<Turn>) -> Option<Turn> {
        let turn = granted.await.ok();
        // granted: nothing to leave
        self.id = u64::MAX;
        turn
    }
}

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        if self.id == u64::MAX {
            return;
        }
        let mut state = self.turns.lock();
        if let Some(at) = state.queue.iter().position(|w| w.id == self.id) {
            state.queue.remove(at);
            forget_waiting(&mut state, &self.account);
        }
        // if it was granted meanwhile, the turn sits in the dropped receiver and is given
        // back when that is dropped
    }
}

#[cfg(test)]
#[path = "turns_tests.rs"]
mod tests;
