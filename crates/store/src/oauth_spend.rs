//! Spending a code or a refresh token: `toolgate-oauth`'s rule over a backend's primitives.
//! Read the credential's state, ask the rule, write its answer by compare-and-set against the
//! stage read; if the credential moved meanwhile (another presenter, a revocation), read again.
//! A stage only moves forward and has three steps to take, so a few rounds always settle it;
//! exactly one presenter wins each step, which is what keeps one winner among concurrent ones.

use toolgate_oauth::credential::{Event, Outcome, Transition, step};

use crate::{
    Advance, CodeUse, NewTokens, OAuthStore, Refreshed, StoreError, StoredRefresh, TokenHash,
};

/// More rounds than a stage has steps: reaching it means the primitives misbehave.
const MAX_ROUNDS: usize = 8;

/// [`OAuthStore::use_code`].
pub(crate) async fn use_code<S: OAuthStore + ?Sized>(
    store: &S,
    code_hash: &TokenHash,
    now: i64,
) -> Result<CodeUse, StoreError> {
    for _ in 0..MAX_ROUNDS {
        let Some(stored) = store.code_state(code_hash).await? else {
            return Ok(CodeUse::Invalid);
        };
        let t = step(stored.state, Event::Present { now });
        if !t.writes() {
            return Ok(CodeUse::Invalid);
        }
        let change = advance(code_hash, stored.state.stage, &t, now);
        if store.advance_code(&change).await? {
            return Ok(match t.outcome {
                Outcome::Spent => CodeUse::Fresh(stored.code),
                _ => CodeUse::Reused,
            });
        }
    }
    Err(unsettled())
}

/// [`OAuthStore::refresh`].
pub(crate) async fn refresh<S: OAuthStore + ?Sized>(
    store: &S,
    token_hash: &TokenHash,
    client_id: &str,
    now: i64,
    next: &NewTokens,
) -> Result<Refreshed, StoreError> {
    for _ in 0..MAX_ROUNDS {
        let Some(StoredRefresh {
            family,
            grant,
            state,
        }) = store.refresh_state(token_hash, client_id).await?
        else {
            return Ok(Refreshed::Invalid);
        };
        let t = step(state, Event::Present { now });
        let change = advance(token_hash, state.stage, &t, now);
        let done = match t.outcome {
            Outcome::Spent => {
                if next.family != family {
                    return Err(StoreError::Conflict(
                        "a rotated refresh token's tokens must join its family",
                    ));
                }
                let inherited = NewTokens {
                    grant: grant.clone(),
                    ..next.clone()
                };
                let rotated = store.advance_refresh(&change, Some(&inherited)).await?;
                rotated.then_some(Refreshed::Rotated(grant))
            }
            Outcome::Replayed | Outcome::Revoked => {
                let revoked = store.advance_refresh(&change, None).await?;
                revoked.then_some(Refreshed::Reused)
            }
            Outcome::Refused => Some(Refreshed::Invalid),
        };
        if let Some(done) = done {
            return Ok(done);
        }
    }
    Err(unsettled())
}

/// The compare-and-set writing `t` over the stage read.
fn advance<'a>(
    hash: &'a TokenHash,
    seen: toolgate_oauth::credential::Stage,
    t: &Transition,
    now: i64,
) -> Advance<'a> {
    Advance {
        hash,
        seen,
        next: t.next,
        revoke_family: t.revoke_family,
        now,
    }
}

/// A credential that kept moving under every read.
fn unsettled() -> StoreError {
    StoreError::Unavailable("an oauth credential kept changing while it was presented".to_owned())
}
