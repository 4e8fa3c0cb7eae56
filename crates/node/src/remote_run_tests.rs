#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use http::Response;
use http_body_util::BodyExt;
use http_body_util::channel::Channel;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::oneshot;
use toolgate_sandbox::upcall::{Upcall, UpcallValue};
use toolgate_sandbox::{LimitSettings, Work};

use super::*;
use crate::NodeToken;
use crate::wire::WireError;

/// Answers every upcall after a while, with an error (what it answers does not matter here).
struct Slow;

#[async_trait]
impl UpcallHandler for Slow {
    async fn answer(&self, _: UpcallOrigin, _: Upcall) -> Result<UpcallValue, UpcallError> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Err(UpcallError::new(UpcallErrorCode::Failed, "answered"))
    }
}

const FLOOD: u32 = 12;

/// A node gone hostile: it answers a run with `FLOOD` upcalls at once, counts the front end's
/// replies (busy, answered), reports them, and ends the run.
async fn hostile_node(report: oneshot::Sender<(usize, usize)>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let report = std::sync::Arc::new(Mutex::new(Some(report)));
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let report = std::sync::Arc::clone(&report);
            async move {
                let (mut sink, body) = Channel::<Bytes, std::convert::Infallible>::new(64);
                tokio::spawn(async move {
                    for id in 0..FLOOD {
                        let call = UpcallCall {
                            id,
                            upcall: Upcall::Billing {},
                        };
                        sink.send_data(json_frame(Tag::Upcall, &call))
                            .await
                            .unwrap();
                    }
                    let mut frames = FrameReader::new(request.into_body());
                    let (mut busy, mut answered) = (0, 0);
                    while busy + answered < FLOOD as usize {
                        let Ok(Some((tag, payload))) = frames.next().await else {
                            break;
                        };
                        if tag != Tag::UpcallAnswer {
                            continue;
                        }
                        match parse::<UpcallReply>(tag, &payload).unwrap().answer {
                            UpcallAnswer::Error(e) if e.code == UpcallErrorCode::Busy => busy += 1,
                            _ => answered += 1,
                        }
                    }
                    if let Some(report) = report.lock().unwrap().take() {
                        let _ = report.send((busy, answered));
                    }
                    let done = Done::Error(WireError {
                        kind: ErrorKind::Refused,
                        message: "done".into(),
                    });
                    let _ = sink.send_data(json_frame(Tag::Done, &done)).await;
                });
                Ok::<_, std::convert::Infallible>(Response::new(body.boxed()))
            }
        });
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), service)
            .await;
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_flooding_upcalls_gets_busy_answers_past_the_front_ends_own_bound() {
    let (report, reported) = oneshot::channel();
    let url = hostile_node(report).await;
    let link = NodeLink::new(&url, NodeToken::parse(&"n".repeat(48)).unwrap(), None).unwrap();
    let mut request = RunRequest::new(
        "acct",
        None,
        Work::Bash {
            command: "true".into(),
        },
        LimitSettings::default().for_call(None).unwrap(),
    );
    request.upcalls = Some(Arc::new(Slow));
    let ended = tokio::time::timeout(Duration::from_secs(10), run(&link, &request, 1)).await;
    assert!(matches!(
        ended,
        Ok(Err(RunError::Seam(SandboxSessionsError::Refused(_))))
    ));
    let (busy, answered) = reported.await.unwrap();
    assert_eq!(
        answered, MAX_UPCALLS_IN_FLIGHT,
        "as many answered as may wait at once"
    );
    assert_eq!(
        busy,
        FLOOD as usize - MAX_UPCALLS_IN_FLIGHT,
        "the rest told busy at once"
    );
}
