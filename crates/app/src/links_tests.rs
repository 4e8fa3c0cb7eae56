#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use async_trait::async_trait;
use toolgate_sandbox::{RunOutcome, SandboxSessionInfo, WorkspaceRead};
use toolgate_store_sqlite::{Durability, SqliteStore};
use toolgate_vault::{KeySource, MasterKeys};

/// Signing and checking never reach the sessions: every request is refused here (the real
/// sandbox serves links in the suite's `links` tests).
struct NoSessions;

#[async_trait]
impl SandboxSessions for NoSessions {
    async fn run(&self, _: RunRequest) -> Result<RunOutcome, SandboxSessionsError> {
        Err(SandboxSessionsError::Refused("no sessions here".into()))
    }
    async fn read_file(
        &self,
        _: &str,
        _: &str,
        _: &str,
        _: u64,
    ) -> Result<WorkspaceRead, SandboxSessionsError> {
        Err(SandboxSessionsError::Refused("no sessions here".into()))
    }
    async fn close(&self, _: &str, _: &str) -> bool {
        false
    }
    fn idle_ttl(&self) -> Duration {
        Duration::from_secs(60)
    }
    async fn list(&self, _: &str) -> Vec<SandboxSessionInfo> {
        Vec::new()
    }
}

fn links_under(keys: MasterKeys, store: Arc<SqliteStore>) -> Links {
    Links::new(
        Arc::new(Vault::open_source(KeySource::Given(keys)).unwrap()),
        store,
        Arc::new(NoSessions),
        LimitSettings {
            workspace_bytes: 1024,
            ..LimitSettings::default()
        },
        LinkSettings {
            public_url: "https://tools.example/".into(),
            download_ttl: Duration::from_secs(3600),
            upload_ttl: Duration::from_secs(600),
        },
        crate::turns::Turns::new(
            crate::turns::TurnKind::WorkspaceRead,
            crate::turns::TurnLimits::new(2, 1),
        ),
    )
}

async fn store() -> (tempfile::TempDir, Arc<SqliteStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("t.db"), Durability::Full)
        .await
        .unwrap();
    (dir, Arc::new(store))
}

/// The `<payload>.<signature>` of a link's URL.
fn token_of(url: &str) -> &str {
    url.strip_prefix("https://tools.example/files/")
        .unwrap()
        .split('/')
        .next()
        .unwrap()
}

const NOW: u64 = 1_800_000_000;

#[tokio::test]
async fn a_link_names_its_file_and_holds_only_as_signed() {
    let (_dir, store) = store().await;
    let links = links_under(MasterKeys::generate().unwrap(), store);
    let url = links
        .url(LinkKind::Download, "acct-a", "s1", "out/data file.csv", NOW)
        .unwrap();
    assert!(url.ends_with("/data_file.csv"), "{url}");
    let token = token_of(&url);
    let target = links.verify(token, LinkKind::Download, NOW + 10).unwrap();
    assert_eq!(
        (&*target.account, &*target.session, &*target.path),
        ("acct-a", "s1", "out/data file.csv")
    );
    assert_eq!(target.expires_at, NOW + 3600);
    // expired, or of the other kind: refused alike
    assert_eq!(
        links.verify(token, LinkKind::Download, NOW + 3600),
        Err(LinkRefused)
    );
    assert_eq!(
        links.verify(token, LinkKind::Upload, NOW + 10),
        Err(LinkRefused)
    );
    // two links to the same file differ (their nonces)
    let again = links
        .url(LinkKind::Download, "acct-a", "s1", "out/data file.csv", NOW)
        .unwrap();
    assert_ne!(token_of(&again), token);
}

#[tokio::test]
async fn tampering_with_any_part_of_a_link_is_refused() {
    let (_dir, store) = store().await;
    let links = links_under(MasterKeys::generate().unwrap(), store);
    let url = links
        .url(LinkKind::Download, "acct-a", "s1", "a.txt", NOW)
        .unwrap();
    let token = token_of(&url);
    let (payload, tag) = token.split_once('.').unwrap();
    let raw = URL_SAFE_NO_PAD.decode(payload).unwrap();
    // every byte of the payload (kind, expiry, nonce, account, session, path), flipped
    for at in 0..raw.len() {
        let mut forged = raw.clone();
        forged[at] ^= 0x01;
        let forged = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(&forged));
        assert_eq!(
            links.verify(&forged, LinkKind::Download, NOW),
            Err(LinkRefused),
            "byte {at}"
        );
    }
    // another account's file under this signature
    let other = encode(&LinkTarget {
        account: "acct-b".into(),
        ..links.verify(token, LinkKind::Download, NOW).unwrap()
    });
    let forged = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(&other));
    assert_eq!(
        links.verify(&forged, LinkKind::Download, NOW),
        Err(LinkRefused)
    );
    // a cut, a flipped or a missing signature; garbage
    let mut bad_tag = URL_SAFE_NO_PAD.decode(tag).unwrap();
    bad_tag[0] ^= 0x80;
    for forged in [
        format!("{payload}.{}", &tag[..tag.len() - 2]),
        format!("{payload}.{}", URL_SAFE_NO_PAD.encode(&bad_tag)),
        payload.to_owned(),
        format!("{payload}."),
        "..".to_owned(),
        String::new(),
    ] {
        assert_eq!(
            links.verify(&forged, LinkKind::Download, NOW),
            Err(LinkRefused),
            "{forged}"
        );
    }
}

#[tokio::test]
async fn the_same_master_keys_make_the_same_links_on_every_front_end() {
    let (_dir, store) = store().await;
    let keys = MasterKeys::generate().unwrap();
    let one = links_under(keys.clone(), store.clone());
    let other = links_under(keys, store.clone());
    let stranger = links_under(MasterKeys::generate().unwrap(), store);
    let url = one
        .url(LinkKind::Upload, "acct-a", "s1", "in.csv", NOW)
        .unwrap();
    assert!(other.verify(token_of(&url), LinkKind::Upload, NOW).is_ok());
    assert_eq!(
        stranger.verify(token_of(&url), LinkKind::Upload, NOW),
        Err(LinkRefused)
    );
}

#[tokio::test]
async fn hostile_paths_make_no_link() {
    let (_dir, store) = store().await;
    let links = links_under(MasterKeys::generate().unwrap(), store);
    for (path, problem) in [
        ("../etc/passwd", "'..'"),
        ("a/../../b", "'..'"),
        ("/etc/passwd", "relative"),
        ("a\0b", "NUL"),
        ("", "names no file"),
        ("./", "names no file"),
    ] {
        let error = links
            .upload_url("acct-a", "s1", path)
            .unwrap_err()
            .to_string();
        assert!(error.contains(problem), "{path:?}: {error}");
    }
}

#[tokio::test]
async fn an_upload_link_is_used_once() {
    let (_dir, store) = store().await;
    let links = links_under(MasterKeys::generate().unwrap(), store.clone());
    let url = links.upload_url("acct-a", "s1", "in.csv").unwrap();
    let target = links.check_upload(token_of(&url)).unwrap();
    // the first use is recorded (the write itself is refused by this test's sessions) ...
    assert!(matches!(
        links.upload(&target, b"a,b\n".to_vec()).await,
        Err(UploadError::NotWritten(_))
    ));
    // ... so a second is refused, by any front end of the database
    let again = links_under(MasterKeys::generate().unwrap(), store);
    assert!(matches!(
        again.upload(&target, b"a,b\n".to_vec()).await,
        Err(UploadError::Used)
    ));
    let limit = links.upload_limit();
    let other = links
        .check_upload(token_of(&links.upload_url("acct-a", "s1", "big").unwrap()))
        .unwrap();
    assert!(matches!(
        links
            .upload(&other, vec![0; usize::try_from(limit).unwrap() + 1])
            .await,
        Err(UploadError::TooLarge { .. })
    ));
}

#[tokio::test]
async fn downloads_take_turns_with_reads_back() {
    let (_dir, store) = store().await;
    let turns = crate::turns::Turns::new(
        crate::turns::TurnKind::WorkspaceRead,
        crate::turns::TurnLimits {
            wait: Duration::from_millis(50),
            ..crate::turns::TurnLimits::new(1, 1)
        },
    );
    let links = Links {
        turns: turns.clone(),
        ..links_under(MasterKeys::generate().unwrap(), store)
    };
    let url = links.download_url("acct-a", "s1", "a.txt").unwrap();
    // the only turn is held (a read back, another download): this one is told to try again
    let held = turns.turn("acct-a").await.unwrap();
    assert_eq!(
        links.download(token_of(&url)).await.unwrap_err(),
        DownloadError::Busy
    );
    drop(held);
    // with the turn free it reaches the sessions (which have no such file here)
    assert_eq!(
        links.download(token_of(&url)).await.unwrap_err(),
        DownloadError::NoSuchFile
    );
    // a bad link is told apart before any turn is taken
    assert_eq!(
        links.download("nonsense").await.unwrap_err(),
        DownloadError::NoSuchFile
    );
}
