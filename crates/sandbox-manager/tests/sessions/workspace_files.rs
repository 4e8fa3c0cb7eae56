//! Files into and out of a session's workspace through the manager, against hostile input: bad
//! paths, links and FIFOs planted by the session's own code, huge files, other accounts, and
//! concurrent uploads.

// The helpers are test code too: a panic is how they report failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{limits, manager, text};
use toolgate_sandbox_manager::{
    FileProblem, ManagerError, OutputChunk, RunOutcome, RunRequest, SandboxManager, WorkspaceFile,
    WorkspaceRead,
};

fn file(path: &str, content: &[u8]) -> WorkspaceFile {
    WorkspaceFile {
        path: path.to_owned(),
        content: content.to_vec(),
    }
}

async fn exec(m: &SandboxManager, id: &str, code: &str, files: &[WorkspaceFile]) -> RunOutcome {
    let call = m
        .exec("acct", Some(id), code, &limits(30), files, None)
        .await
        .unwrap();
    assert!(
        call.outcome.error.is_none(),
        "{code}: {:?}",
        call.outcome.error
    );
    call
}

/// The problem of a refused read or upload, checking that its message names no host path.
fn problem(
    result: Result<impl std::fmt::Debug, ManagerError>,
    root: &std::path::Path,
) -> FileProblem {
    match result {
        Err(ManagerError::File(error)) => {
            let message = error.to_string();
            assert!(
                !message.contains(root.to_str().unwrap()),
                "a host path in {message:?}"
            );
            error.problem
        }
        other => panic!("expected a file error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_land_in_the_workspace_before_the_code_runs() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    let files = [
        file("data/in.csv", b"a,b\n1,2\n"),
        file("./notes//x.bin", &[0, 1, 255]),
    ];
    let call = exec(
        &m,
        "s",
        "open('data/in.csv').read() + str(list(open('notes/x.bin', 'rb').read()))",
        &files,
    )
    .await;
    assert_eq!(text(&call), "'a,b\\n1,2\\n[0, 1, 255]'");
    let written = std::fs::metadata(call.workspace.join("data/in.csv")).unwrap();
    assert_eq!(written.mode() & 0o777, 0o600);
    // the session's own uid (the manager runs as root in these tests)
    let workspace_owner = std::fs::metadata(&call.workspace).unwrap().uid();
    assert_eq!(written.uid(), workspace_owner);
    assert_eq!(
        std::fs::metadata(call.workspace.join("data"))
            .unwrap()
            .uid(),
        workspace_owner
    );
    let read = m.read_file("acct", "s", "data/in.csv", 1024).await.unwrap();
    assert_eq!(
        read,
        WorkspaceRead {
            bytes: b"a,b\n1,2\n".to_vec(),
            size: 8
        }
    );
    // replacing a file the code wrote
    exec(&m, "s", "open('out.txt', 'w').write('old')", &[]).await;
    let call = exec(
        &m,
        "s",
        "open('out.txt').read()",
        &[file("out.txt", b"new")],
    )
    .await;
    assert_eq!(text(&call), "'new'");
    // an upload without code, as the `upload` capability does it
    let (ten, later) = (limits(10), [file("later.txt", b"for later")]);
    let upload = toolgate_sandbox_manager::Work::Python {
        code: String::new(),
    };
    m.run(RunRequest {
        files: later.to_vec(),
        ..RunRequest::new("acct", Some("s".to_owned()), upload, ten)
    })
    .await
    .unwrap();
    let read = m.read_file("acct", "s", "later.txt", 1024).await.unwrap();
    assert_eq!(read.bytes, b"for later");
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paths_are_refused_before_anything_runs() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    // session "s" exists, so a refused read below is the path's, not "no such session";
    // the refused uploads name session "t", which must never start
    exec(&m, "s", "1", &[]).await;
    let cases: [(&str, FileProblem); 6] = [
        ("../escape", FileProblem::ParentDir),
        ("a/../../b", FileProblem::ParentDir),
        ("/etc/passwd", FileProblem::Absolute),
        ("a\0b", FileProblem::Nul),
        ("./", FileProblem::Empty),
        (&*"a".repeat(5000).leak(), FileProblem::TooLong),
    ];
    for (path, expected) in cases {
        let result = m
            .exec(
                "acct",
                Some("t"),
                "1",
                &limits(10),
                &[file(path, b"x")],
                None,
            )
            .await;
        assert_eq!(problem(result, root.path()), expected, "{path:?}");
        let read = m.read_file("acct", "s", path, 10).await;
        assert_eq!(problem(read, root.path()), expected, "reading {path:?}");
    }
    let many: Vec<WorkspaceFile> = (0..101).map(|i| file(&format!("f{i}"), b"")).collect();
    let result = m
        .exec("acct", Some("t"), "1", &limits(10), &many, None)
        .await;
    assert!(
        matches!(result, Err(ManagerError::TooManyFiles { count: 101 })),
        "{result:?}"
    );
    let mut small = limits(10);
    small.workspace_bytes = 1000;
    let result = m
        .exec(
            "acct",
            Some("t"),
            "1",
            &small,
            &[file("big", &[0; 1001])],
            None,
        )
        .await;
    assert!(
        matches!(
            result,
            Err(ManagerError::UploadTooLarge {
                bytes: 1001,
                max: 1000
            })
        ),
        "{result:?}"
    );
    // nothing was started for any of them: only "s" lives
    assert_eq!(m.live_sessions("acct"), 1);
    assert!(!root.path().join("etc").exists() && !root.path().join("escape").exists());
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_planted_by_the_session_are_never_followed() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("target.txt");
    std::fs::write(&target, "untouched").unwrap();
    let m = manager(root.path(), |_| {}).await;
    let plant = format!(
        "import os\nos.symlink('/etc', 'x')\nos.symlink({:?}, 'f')\nos.symlink({:?}, 'o')\n\
         os.mkdir('d')\nos.symlink('..', 'd/up')",
        target.to_str().unwrap(),
        outside.path().to_str().unwrap()
    );
    exec(&m, "s", &plant, &[]).await;
    for path in ["x/passwd", "x", "f", "d/up/f", "o/target.txt"] {
        let read = m.read_file("acct", "s", path, 1 << 20).await;
        assert_eq!(problem(read, root.path()), FileProblem::Symlink, "{path}");
    }
    for path in ["x/evil", "o/target.txt", "d/up/escaped"] {
        let result = m
            .exec(
                "acct",
                Some("s"),
                "1",
                &limits(10),
                &[file(path, b"evil")],
                None,
            )
            .await;
        assert_eq!(problem(result, root.path()), FileProblem::Symlink, "{path}");
    }
    assert!(!std::path::Path::new("/etc/evil").exists());
    // a link at the target itself is replaced by the upload, not written through
    let call = exec(
        &m,
        "s",
        "import os; (os.path.islink('f'), open('f').read())",
        &[file("f", b"replaced")],
    )
    .await;
    assert_eq!(text(&call), "(False, 'replaced')");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_directories_and_huge_files_are_refused_without_hanging() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    exec(
        &m,
        "s",
        "import os\nos.mkfifo('p')\nos.mkdir('dir')\n\
         with open('huge', 'wb') as f: f.truncate(10 << 20)\n\
         import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('sock')",
        &[],
    )
    .await;
    let fifo = tokio::time::timeout(
        Duration::from_secs(5),
        m.read_file("acct", "s", "p", 1 << 20),
    )
    .await
    .expect("reading a FIFO hung");
    assert_eq!(problem(fifo, root.path()), FileProblem::NotRegular("FIFO"));
    let socket = m.read_file("acct", "s", "sock", 1 << 20).await;
    assert_eq!(
        problem(socket, root.path()),
        FileProblem::NotRegular("socket")
    );
    let dir = m.read_file("acct", "s", "dir", 1 << 20).await;
    assert_eq!(problem(dir, root.path()), FileProblem::IsDirectory);
    let huge = m.read_file("acct", "s", "huge", 1 << 20).await;
    let Err(ManagerError::File(error)) = &huge else {
        panic!("expected too large, got {huge:?}");
    };
    assert_eq!(
        error.problem,
        FileProblem::TooLarge {
            size: 10 << 20,
            max: 1 << 20
        }
    );
    assert!(error.to_string().contains("10485760 bytes"), "{error}");
    let missing = m.read_file("acct", "s", "nope.txt", 10).await;
    assert_eq!(problem(missing, root.path()), FileProblem::NotFound);
    // an upload over the FIFO replaces it rather than blocking on it
    let upload = tokio::time::timeout(
        Duration::from_secs(5),
        m.exec(
            "acct",
            Some("s"),
            "open('p').read()",
            &limits(10),
            &[file("p", b"plain")],
            None,
        ),
    )
    .await
    .expect("uploading over a FIFO hung")
    .unwrap();
    assert_eq!(text(&upload), "'plain'");
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_need_an_existing_session_of_the_same_account() {
    let root = tempfile::tempdir().unwrap();
    let m = Arc::new(manager(root.path(), |_| {}).await);
    exec(&m, "shared-id", "open('mine.txt', 'w').write('a')", &[]).await;
    let other = m.read_file("other-acct", "shared-id", "mine.txt", 10).await;
    assert!(
        matches!(other, Err(ManagerError::NoSuchSession)),
        "{other:?}"
    );
    let never = m.read_file("acct", "never-started", "mine.txt", 10).await;
    let Err(error @ ManagerError::NoSuchSession) = &never else {
        panic!("expected no such session, got {never:?}");
    };
    assert!(error.to_string().contains("no such session"), "{error}");
    assert_eq!(m.live_sessions("other-acct"), 0);
    assert_eq!(
        m.live_sessions("acct"),
        1,
        "a read must not start a session"
    );

    // a read does not wait for a running call: the call runs until the test, having read,
    // lets it go (a read that waited for it would never return)
    let opened = exec(&m, "shared-id", "1", &[]).await;
    let release = opened.workspace.join("release");
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let busy = {
        let m = Arc::clone(&m);
        tokio::spawn(async move {
            let mut started = Some(started);
            let mut on_output = |_: OutputChunk| {
                if let Some(started) = started.take() {
                    let _ = started.send(());
                }
            };
            m.exec(
                "acct",
                Some("shared-id"),
                "import os, time\nprint('running', flush=True)\n\
                 while not os.path.exists('release'):\n    time.sleep(0.01)",
                &limits(30),
                &[],
                Some(&mut on_output),
            )
            .await
        })
    };
    running.await.unwrap();
    let read = tokio::time::timeout(
        Duration::from_secs(20),
        m.read_file("acct", "shared-id", "mine.txt", 10),
    )
    .await
    .expect("the read waited for the running call")
    .unwrap();
    assert_eq!(read.bytes, b"a");
    assert!(!busy.is_finished());
    std::fs::write(&release, "").unwrap();
    busy.await.unwrap().unwrap();
    assert!(m.close_session("acct", "shared-id").await);
    let closed = m.read_file("acct", "shared-id", "mine.txt", 10).await;
    assert!(
        matches!(closed, Err(ManagerError::NoSuchSession)),
        "{closed:?}"
    );
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_uploads_all_arrive() {
    let root = tempfile::tempdir().unwrap();
    let m = Arc::new(manager(root.path(), |c| c.max_sessions_per_account = 20).await);
    let mut tasks = Vec::new();
    // five sessions, four uploads each, all at once (a session's uploads queue on its lock)
    for session in 0..5 {
        for n in 0..4 {
            let m = Arc::clone(&m);
            tasks.push(tokio::spawn(async move {
                let content = format!("{session}-{n}").repeat(1000);
                let files = [
                    file(&format!("dir{n}/f.txt"), content.as_bytes()),
                    file("common.txt", content.as_bytes()),
                ];
                m.exec(
                    "acct",
                    Some(&format!("s{session}")),
                    "1",
                    &limits(30),
                    &files,
                    None,
                )
                .await
                .unwrap();
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    for session in 0..5 {
        let id = format!("s{session}");
        for n in 0..4 {
            let read = m
                .read_file("acct", &id, &format!("dir{n}/f.txt"), 1 << 20)
                .await
                .unwrap();
            assert_eq!(read.bytes, format!("{session}-{n}").repeat(1000).as_bytes());
        }
        // one of the four whole, never a mix
        let common = m
            .read_file("acct", &id, "common.txt", 1 << 20)
            .await
            .unwrap();
        let first = String::from_utf8(common.bytes[..3].to_vec()).unwrap();
        assert_eq!(common.bytes, first.repeat(1000).as_bytes());
        let listing = exec(&m, &id, "sorted(__import__('os').listdir('.'))", &[]).await;
        assert_eq!(
            text(&listing),
            "['common.txt', 'dir0', 'dir1', 'dir2', 'dir3']",
            "no temporary file may be left"
        );
    }
    m.shutdown().await;
}
