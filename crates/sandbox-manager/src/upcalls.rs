//! Upcalls during a call: the handler and the session's identity a call brings, and the
//! answers being made while the call goes on. What a session may ask, and how much of it, is
//! bounded here and in `bounded` (the frame itself): at most [`MAX_UPCALLS_IN_FLIGHT`] wait at
//! once, and none outlives its call.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::task::{Id, JoinSet};
use toolgate_sandbox::upcall::{
    UpcallAnswer, UpcallError, UpcallErrorCode, UpcallHandler, UpcallOrigin,
};

use crate::bounded::MAX_UPCALLS_IN_FLIGHT;
use crate::session_input::UpcallAsked;

/// Where a call's upcalls go: the handler, and who the session is (attached to every upcall).
#[derive(Clone)]
pub(crate) struct Upcalls {
    pub(crate) handler: Arc<dyn UpcallHandler>,
    pub(crate) origin: UpcallOrigin,
}

impl std::fmt::Debug for Upcalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upcalls")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// The upcalls of one call that are being answered.
pub(crate) struct PendingUpcalls {
    /// Where they go; `None`: this call takes none (each is answered with an error).
    upcalls: Option<Upcalls>,
    /// The answers being made. Dropping the set aborts them.
    answering: JoinSet<(u64, UpcallAnswer)>,
    /// The session's number of each upcall being answered, by task.
    numbers: HashMap<Id, u64>,
}

impl PendingUpcalls {
    pub(crate) fn new(upcalls: Option<Upcalls>) -> Self {
        Self {
            upcalls,
            answering: JoinSet::new(),
            numbers: HashMap::new(),
        }
    }

    /// Takes an upcall the session made: starts answering it, or returns the answer at once
    /// when it cannot be taken.
    pub(crate) fn ask(&mut self, asked: UpcallAsked) -> Option<(u64, UpcallAnswer)> {
        let refuse = |code, message: &str| {
            Some((
                asked.upcall,
                UpcallAnswer::Error(UpcallError::new(code, message)),
            ))
        };
        let request = match asked.request {
            Ok(request) => request,
            Err(why) => return refuse(UpcallErrorCode::BadRequest, &why),
        };
        let Some(upcalls) = &self.upcalls else {
            return refuse(
                UpcallErrorCode::Unavailable,
                "this run takes no requests to the service",
            );
        };
        if self.answering.len() >= MAX_UPCALLS_IN_FLIGHT {
            return refuse(
                UpcallErrorCode::Busy,
                &format!(
                    "at most {MAX_UPCALLS_IN_FLIGHT} requests to the service may wait at once"
                ),
            );
        }
        let (handler, origin) = (Arc::clone(&upcalls.handler), upcalls.origin.clone());
        let upcall = asked.upcall;
        let task = self
            .answering
            .spawn(async move { (upcall, handler.answer(origin, request).await.into()) });
        self.numbers.insert(task.id(), upcall);
        None
    }

    /// The next answer made, once one is; pending while none is being made.
    pub(crate) async fn next(&mut self) -> Option<(u64, UpcallAnswer)> {
        let joined = self.answering.join_next_with_id().await?;
        let (task, answer) = match joined {
            Ok((task, (_, answer))) => (task, answer),
            // a handler that panicked: its upcall is answered all the same, not left waiting
            Err(e) => (
                e.id(),
                UpcallAnswer::Error(UpcallError::new(
                    UpcallErrorCode::Unavailable,
                    "the service failed to answer; nothing was charged for it",
                )),
            ),
        };
        let upcall = self.numbers.remove(&task)?;
        Some((upcall, answer))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use async_trait::async_trait;
    use toolgate_sandbox::upcall::{Upcall, UpcallValue};

    /// Never answers.
    struct Stubborn;

    #[async_trait]
    impl UpcallHandler for Stubborn {
        async fn answer(
            &self,
            _origin: UpcallOrigin,
            _upcall: Upcall,
        ) -> Result<UpcallValue, UpcallError> {
            std::future::pending().await
        }
    }

    struct Panicking;

    #[async_trait]
    impl UpcallHandler for Panicking {
        async fn answer(
            &self,
            _origin: UpcallOrigin,
            _upcall: Upcall,
        ) -> Result<UpcallValue, UpcallError> {
            panic!("a broken handler")
        }
    }

    fn pending(handler: Arc<dyn UpcallHandler>) -> PendingUpcalls {
        PendingUpcalls::new(Some(Upcalls {
            handler,
            origin: UpcallOrigin {
                account: "a".into(),
                session_id: None,
            },
        }))
    }

    fn ask(upcall: u64) -> UpcallAsked {
        UpcallAsked {
            upcall,
            request: Ok(Upcall::Billing {}),
        }
    }

    fn code(answer: Option<(u64, UpcallAnswer)>) -> Option<(u64, UpcallErrorCode)> {
        match answer? {
            (n, UpcallAnswer::Error(e)) => Some((n, e.code)),
            (_, UpcallAnswer::Value(_)) => None,
        }
    }

    /// A session may keep only so many upcalls waiting; the next is answered `busy` at once,
    /// and one the service does not know `bad_request`, without a handler seeing them.
    #[tokio::test]
    async fn waiting_upcalls_are_bounded() {
        let mut upcalls = pending(Arc::new(Stubborn));
        for n in 1..=MAX_UPCALLS_IN_FLIGHT as u64 {
            assert!(upcalls.ask(ask(n)).is_none(), "upcall {n} was not taken");
        }
        let over = MAX_UPCALLS_IN_FLIGHT as u64 + 1;
        assert_eq!(
            code(upcalls.ask(ask(over))),
            Some((over, UpcallErrorCode::Busy))
        );
        let unknown = UpcallAsked {
            upcall: 50,
            request: Err("no such kind".into()),
        };
        assert_eq!(
            code(upcalls.ask(unknown)),
            Some((50, UpcallErrorCode::BadRequest))
        );
        let mut none = PendingUpcalls::new(None);
        assert_eq!(
            code(none.ask(ask(1))),
            Some((1, UpcallErrorCode::Unavailable))
        );
    }

    /// A handler that panics still answers its upcall (`unavailable`), so the code that asked
    /// is not left waiting.
    #[tokio::test]
    async fn a_panicking_handler_still_answers() {
        let mut upcalls = pending(Arc::new(Panicking));
        assert!(upcalls.ask(ask(99)).is_none());
        let answer = tokio::time::timeout(std::time::Duration::from_secs(5), upcalls.next())
            .await
            .unwrap();
        assert_eq!(code(answer), Some((99, UpcallErrorCode::Unavailable)));
    }
}
