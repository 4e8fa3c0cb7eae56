//! Upcalls during a call: the handler and the session's identity a call brings, and the
//! answers being made while the call goes on. What a session may ask, and how much of it, is
//! bounded here and in `bounded` (the frame itself): at most [`MAX_UPCALLS_IN_FLIGHT`] wait at
//! once, and none outlives its call.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
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

/// Pieces of streamed answers waiting to be written, for all of a call's upcalls: a session
/// that does not read them holds its answers back, not the server's memory.
const PIECES_QUEUE: usize = 64;

/// A piece of upcall `n`'s streamed answer, as it waits to be written.
type Tagged = (u64, String);

/// What is ready for the session.
pub(crate) enum Ready {
    /// A piece of upcall `n`'s streamed answer.
    Piece(u64, String),
    /// Upcall `n`'s answer (after all its pieces).
    Answer(u64, UpcallAnswer),
}

impl From<(u64, UpcallAnswer)> for Ready {
    fn from((n, answer): (u64, UpcallAnswer)) -> Self {
        Self::Answer(n, answer)
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
    /// Pieces of streamed answers, tagged with their upcall: where tasks send them, and
    /// where they are read.
    pieces: (mpsc::Sender<Tagged>, mpsc::Receiver<Tagged>),
}

impl PendingUpcalls {
    pub(crate) fn new(upcalls: Option<Upcalls>) -> Self {
        Self {
            upcalls,
            answering: JoinSet::new(),
            numbers: HashMap::new(),
            pieces: mpsc::channel(PIECES_QUEUE),
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
        let task = if request.streams() {
            let tagged = self.pieces.0.clone();
            self.answering.spawn(async move {
                (
                    upcall,
                    streaming(handler, origin, request, upcall, tagged)
                        .await
                        .into(),
                )
            })
        } else {
            self.answering
                .spawn(async move { (upcall, handler.answer(origin, request).await.into()) })
        };
        self.numbers.insert(task.id(), upcall);
        None
    }

    /// What is ready next: a piece, else an answer; pending while nothing is.
    pub(crate) async fn next(&mut self) -> Option<Ready> {
        // pieces first: a task queues all of its pieces before its answer is joined
        if let Ok((n, piece)) = self.pieces.1.try_recv() {
            return Some(Ready::Piece(n, piece));
        }
        let Self {
            answering,
            numbers,
            pieces,
            ..
        } = self;
        tokio::select! {
            biased;
            Some((n, piece)) = pieces.1.recv() => Some(Ready::Piece(n, piece)),
            answer = next_answer(answering, numbers) => answer.map(|(n, a)| Ready::Answer(n, a)),
        }
    }
}

/// The next answer made, once one is; pending while none is being made.
async fn next_answer(
    answering: &mut JoinSet<(u64, UpcallAnswer)>,
    numbers: &mut HashMap<Id, u64>,
) -> Option<(u64, UpcallAnswer)> {
    let joined = answering.join_next_with_id().await?;
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
    let upcall = numbers.remove(&task)?;
    Some((upcall, answer))
}

/// Answers a streaming upcall, passing its pieces on tagged with its number; every piece is
/// queued before the answer is returned.
async fn streaming(
    handler: Arc<dyn UpcallHandler>,
    origin: UpcallOrigin,
    request: toolgate_sandbox::upcall::Upcall,
    upcall: u64,
    tagged: mpsc::Sender<Tagged>,
) -> Result<toolgate_sandbox::upcall::UpcallValue, UpcallError> {
    let (pieces, mut coming) = mpsc::channel(PIECES_QUEUE);
    let answering = handler.answer_streaming(origin, request, pieces);
    tokio::pin!(answering);
    loop {
        tokio::select! {
            biased;
            Some(piece) = coming.recv() => {
                let _ = tagged.send((upcall, piece)).await;
            }
            result = &mut answering => {
                while let Ok(piece) = coming.try_recv() {
                    let _ = tagged.send((upcall, piece)).await;
                }
                return result;
            }
        }
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

    fn code(answer: Option<Ready>) -> Option<(u64, UpcallErrorCode)> {
        match answer? {
            Ready::Answer(n, UpcallAnswer::Error(e)) => Some((n, e.code)),
            Ready::Answer(_, UpcallAnswer::Value(_)) | Ready::Piece(..) => None,
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
            code(upcalls.ask(ask(over)).map(Ready::from)),
            Some((over, UpcallErrorCode::Busy))
        );
        let unknown = UpcallAsked {
            upcall: 50,
            request: Err("no such kind".into()),
        };
        assert_eq!(
            code(upcalls.ask(unknown).map(Ready::from)),
            Some((50, UpcallErrorCode::BadRequest))
        );
        let mut none = PendingUpcalls::new(None);
        assert_eq!(
            code(none.ask(ask(1)).map(Ready::from)),
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
