//! The channel end to end on loopback: a real `NodeServer` over a scripted `SandboxSessions`
//! (the real manager is the suite's: `toolgate node` with confined sessions), reached through
//! `RemoteSessions` as a front end reaches it, placing sessions through a real SQLite store.
//! What is checked is what crosses: files, output in order, upcalls and their streamed pieces,
//! cancellation both ways, errors in their kinds, reads, listing, a wrong token, a node lost
//! mid-run, placement over two nodes seen alike by two front ends, and a node that no front end
//! renews fencing itself, its sessions placed again elsewhere and said to be.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod scripted;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolgate_node::{NODE_LOST, NodeServer, NodeToken};
use toolgate_sandbox::{
    Interruption, SandboxSessions, SandboxSessionsError, SessionState, WorkspaceFile,
};

use scripted::{Answers, Scripted, bash, books, front_end, node, token};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_crosses_with_its_files_environment_and_output_in_order() {
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(Arc::clone(&sessions)).await;
    let (remote, _fleet) = front_end(&b, &[&url], token()).await;
    let mut request = bash(&b.account, Some("s1"), "echo");
    request.env = BTreeMap::from([("TOKEN".to_owned(), "v4lue".to_owned())]);
    request.files = vec![
        WorkspaceFile {
            path: "a.bin".into(),
            content: vec![0; 70_000],
        },
        WorkspaceFile {
            path: "dir/b.txt".into(),
            content: b"hi".to_vec(),
        },
    ];
    let (output, mut chunks) = mpsc::channel(1024);
    request.output = Some(output);
    let outcome = remote.run(request).await.unwrap();
    assert_eq!(outcome.outcome.stdout, "echoed");
    assert_eq!(outcome.pid, 42);
    assert!(!outcome.node_lost);
    let mut streamed = String::new();
    while let Ok(chunk) = chunks.try_recv() {
        streamed.push_str(&chunk.data);
    }
    let expected: String = (0..50).map(|i| format!("{i};")).collect();
    assert_eq!(
        streamed, expected,
        "every chunk, in order, before the outcome"
    );
    assert_eq!(
        sessions.seen.lock().unwrap().as_slice(),
        [format!(
            "{}|Some(\"s1\")|v4lue|a.bin=70000,dir/b.txt=2",
            b.account
        )]
    );
    // an outcome bigger than the link's flow-control window still arrives whole
    let big = remote.run(bash(&b.account, None, "big")).await.unwrap();
    assert_eq!(big.outcome.stdout.len(), 3 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upcalls_are_answered_by_the_front_end_with_their_pieces() {
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(sessions).await;
    let (remote, _fleet) = front_end(&b, &[&url], token()).await;
    let mut request = bash(&b.account, Some("s9"), "upcall");
    request.upcalls = Some(Arc::new(Answers));
    let outcome = remote.run(request).await.unwrap();
    let text = outcome.outcome.stdout;
    assert!(
        text.contains(&format!("no money for {}", b.account)),
        "{text}"
    );
    assert!(text.contains("done for Some(\\\"s9\\\")"), "{text}");
    assert!(
        text.ends_with("|one two three"),
        "the pieces before the answer: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_interrupts_the_run_on_the_node_and_so_does_dropping_it() {
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(Arc::clone(&sessions)).await;
    let (remote, _fleet) = front_end(&b, &[&url], token()).await;
    let remote = Arc::new(remote);
    let mut request = bash(&b.account, Some("cancelled"), "wait");
    let cancel = CancellationToken::new();
    request.cancel = Some(cancel.clone());
    let running = tokio::spawn({
        let remote = Arc::clone(&remote);
        async move { remote.run(request).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    cancel.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        outcome.outcome.interrupted,
        Some(Interruption::Cancelled),
        "the interruption crosses"
    );
    // a caller that goes away (its future dropped) interrupts the run as well
    let dropped = tokio::spawn({
        let remote = Arc::clone(&remote);
        let account = b.account.clone();
        async move { remote.run(bash(&account, Some("dropped"), "wait")).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    dropped.abort();
    for _ in 0..100 {
        if sessions
            .cancelled
            .lock()
            .unwrap()
            .iter()
            .any(|s| s == "dropped")
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the node's run was not interrupted when its caller left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_keep_their_kind_and_never_their_internals() {
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(sessions).await;
    let (remote, _fleet) = front_end(&b, &[&url], token()).await;
    let refused = remote
        .run(bash(&b.account, None, "refuse"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, SandboxSessionsError::Refused(ref m) if m.contains("too many sessions"))
    );
    let failed = remote
        .run(bash(&b.account, None, "nope"))
        .await
        .unwrap_err();
    assert!(matches!(failed, SandboxSessionsError::Failed(_)));
    let unavailable = remote
        .run(bash(&b.account, None, "unavailable"))
        .await
        .unwrap_err();
    assert!(matches!(unavailable, SandboxSessionsError::Unavailable(_)));
    let shown = format!(
        "{unavailable} {:?}",
        std::error::Error::source(&unavailable).map(ToString::to_string)
    );
    assert!(!shown.contains("/secret/host/path"), "{shown}");
    // a session id placement cannot take is refused before anything is sent
    let long = "x".repeat(300);
    let bad = remote
        .run(bash(&b.account, Some(&long), "echo"))
        .await
        .unwrap_err();
    assert!(matches!(bad, SandboxSessionsError::Refused(_)), "{bad:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_closes_and_lists_cross_and_a_wrong_token_gets_nothing() {
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(sessions).await;
    let (remote, _fleet) = front_end(&b, &[&url], token()).await;
    let read = remote.read_file(&b.account, "s", "f.txt", 8).await.unwrap();
    let whole = format!("{}/s/f.txt", b.account);
    assert_eq!(
        (read.bytes.as_slice(), read.size),
        (&whole.as_bytes()[..8], whole.len() as u64)
    );
    let missing = remote
        .read_file(&b.account, "s", "missing", 8)
        .await
        .unwrap_err();
    assert!(matches!(missing, SandboxSessionsError::Refused(ref m) if m == "no such file"));
    assert!(remote.close(&b.account, "open").await);
    assert!(!remote.close(&b.account, "other").await);
    let listed = remote.list(&b.account).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.clone(), listed[0].state),
        (format!("{}-s", b.account), SessionState::Live)
    );

    let other = books().await;
    let (intruder, _fleet) =
        front_end(&other, &[&url], NodeToken::parse(&"x".repeat(48)).unwrap()).await;
    let refused = intruder
        .run(bash(&other.account, Some("s"), "echo"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, SandboxSessionsError::Unavailable(_)),
        "{refused:?}"
    );
    assert!(intruder.list(&other.account).await.is_empty());
    assert!(
        intruder
            .read_file(&other.account, "s", "f.txt", 8)
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lost_mid_run_ends_the_call_with_a_clear_error() {
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // the node runs on a runtime of its own, which is dropped as a process dies
    let node_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    node_runtime.spawn({
        let sessions = Arc::clone(&sessions);
        let stop = stop.clone();
        async move {
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            NodeServer::new(sessions.clone(), token(), None, sessions)
                .serve(listener, stop)
                .await;
        }
    });
    let (remote, fleet) = front_end(&b, &[&url], token()).await;
    let remote = Arc::new(remote);
    let running = tokio::spawn({
        let remote = Arc::clone(&remote);
        let account = b.account.clone();
        async move { remote.run(bash(&account, Some("s"), "wait")).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    node_runtime.shutdown_background();
    let lost = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(lost, SandboxSessionsError::Failed(ref m) if m == NODE_LOST),
        "{lost:?}"
    );
    // once its lease ran out, no node is live: nothing runs and the caller is told so
    tokio::time::sleep(Duration::from_secs(4)).await;
    fleet.renew_all().await;
    let after = remote
        .run(bash(&b.account, Some("s"), "echo"))
        .await
        .unwrap_err();
    assert!(
        matches!(after, SandboxSessionsError::Unavailable(_)),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_spread_over_the_nodes_and_stay_where_they_were_placed() {
    let b = books().await;
    let first = Arc::new(Scripted::default());
    let second = Arc::new(Scripted::default());
    let (x, _s1, _t1) = node(Arc::clone(&first)).await;
    let (y, _s2, _t2) = node(Arc::clone(&second)).await;
    // two front ends on one store, naming the nodes in another order
    let (one, _f1) = front_end(&b, &[&x, &y], token()).await;
    let (two, _f2) = front_end(&b, &[&y, &x], token()).await;
    for i in 0..20 {
        let id = format!("session-{i}");
        one.run(bash(&b.account, Some(&id), "echo-none"))
            .await
            .unwrap_err();
        two.run(bash(&b.account, Some(&id), "echo-none"))
            .await
            .unwrap_err();
    }
    let on_first = first.seen.lock().unwrap().clone();
    let on_second = second.seen.lock().unwrap().clone();
    assert_eq!(on_first.len() + on_second.len(), 40);
    assert!(
        !on_first.is_empty() && !on_second.is_empty(),
        "both nodes take sessions"
    );
    for seen in &on_first {
        assert!(!on_second.contains(seen), "{seen} ran on both nodes");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_nobody_renews_fences_itself_and_its_sessions_move() {
    let b = books().await;
    let lonely = Arc::new(Scripted::default());
    let (x, _s1, _t1) = node(Arc::clone(&lonely)).await;
    // this front end knows only the first node; it places a session there, then goes away
    let (before, fleet) = front_end(&b, &[&x], token()).await;
    before
        .run(bash(&b.account, Some("moving"), "echo-none"))
        .await
        .unwrap_err();
    assert_eq!(lonely.seen.lock().unwrap().len(), 1);
    drop((before, fleet));
    // with nobody renewing it, the node fences itself once its lease (3 s less the margin) ends
    for _ in 0..100 {
        if *lonely.fences.lock().unwrap() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(*lonely.fences.lock().unwrap(), 1, "the node fenced itself");
    // the session moves to a node that is live, and the run says its node was lost; the fenced
    // node, until someone registers it again, takes nothing placed on its old incarnation
    tokio::time::sleep(Duration::from_secs(2)).await;
    let other = Arc::new(Scripted::default());
    let (y, _s2, _t2) = node(Arc::clone(&other)).await;
    let (after, _fleet) = front_end(&b, &[&y], token()).await;
    let mut request = bash(&b.account, Some("moving"), "echo");
    let (output, _chunks) = mpsc::channel(1024);
    request.output = Some(output);
    let moved = after.run(request).await.unwrap();
    assert!(moved.node_lost, "the run says the session's node was lost");
    assert_eq!(other.seen.lock().unwrap().len(), 1);
    assert_eq!(
        lonely.seen.lock().unwrap().len(),
        1,
        "nothing more ran on the fenced node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_does_not_answer_delays_no_other_nodes_lease() {
    let b = books().await;
    let healthy = Arc::new(Scripted::default());
    let (x, _s1, _t1) = node(Arc::clone(&healthy)).await;
    // a "node" that accepts connections and never says a word: every request to it times out
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mute = format!("http://{}", silent.local_addr().unwrap());
    let _held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream);
        }
    });
    // the front end's own renewal (not a round awaited first, which would wait for the mute one)
    let placement: Arc<dyn toolgate_store::Placement> = b.store.clone();
    let urls = [x.clone(), mute];
    let fleet = toolgate_node::Fleet::new(&urls, &token(), None, placement, Duration::from_secs(3))
        .unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(Arc::clone(&fleet).keep(stop.clone()));
    let remote = toolgate_node::RemoteSessions::new(Arc::clone(&fleet), Duration::from_secs(600));
    // several leases long: the healthy node is renewed on time all along, never fences
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        *healthy.fences.lock().unwrap(),
        0,
        "the healthy node fenced itself"
    );
    remote
        .run(scripted::bash(&b.account, Some("steady"), "echo-none"))
        .await
        .unwrap_err();
    assert_eq!(
        healthy.seen.lock().unwrap().len(),
        1,
        "and it still takes runs"
    );
    stop.cancel();
}
