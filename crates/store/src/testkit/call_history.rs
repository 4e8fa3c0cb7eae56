//! Call history's part of the story: a batch appended in one go, each filter alone and
//! together, a search whose `%` and `_` are literal, stable cursor paging, one record, the
//! purge by time, the month's model tokens per provider, and another account's rows never seen.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use toolgate_domain::{AccountId, Micros, MonthKey};

use super::new_account;
use crate::{CallOutcome, CallRecord, HistoryCursor, HistoryFilter, ModelUse, Store, month_of};

/// 2026-03-10T00:00:00Z, in Unix milliseconds: rows of a fixed month, far from the purge's now.
const BASE_MS: i64 = 1_773_100_800_000;

fn record(account: &AccountId, n: i64, tool: &str, outcome: CallOutcome) -> CallRecord {
    CallRecord {
        id: format!("call_{n:032x}"),
        account: account.clone(),
        at_ms: BASE_MS + n * 1000,
        key_label: if n % 2 == 0 { "default" } else { "agent-b" }.to_owned(),
        key_id: (n % 2 == 1).then(|| "key_0123456789abcdef0123456789abcdef".to_owned()),
        client: Some("claude-code 2.1.0".to_owned()),
        tool: tool.to_owned(),
        fields: format!(r#"{{"code":"print({n})"}}"#),
        outcome,
        duration_ms: n,
        charge: (n > 5).then_some(Micros(8_000)),
        session: Some(if n < 5 { "sess-a" } else { "sess-b" }.to_owned()),
        destinations: vec!["example.org".to_owned(), "api.example.com".to_owned()],
        model: None,
    }
}

/// The call history's seam.
pub async fn call_history_story(store: &dyn Store, tag: &str) {
    let (alice, _) = new_account(&format!("history-alice-{tag}@example.org"));
    let (bob, _) = new_account(&format!("history-bob-{tag}@example.org"));
    store.create_account(&alice).await.unwrap();
    store.create_account(&bob).await.unwrap();
    let (alice, bob) = (alice.id, bob.id);

    let mut batch: Vec<CallRecord> = (0..10)
        .map(|n| {
            let outcome = match n % 3 {
                0 => CallOutcome::Ok,
                1 => CallOutcome::ToolError(format!("failed {n}")),
                _ => CallOutcome::Refused(-32002),
            };
            record(
                &alice,
                n,
                if n < 6 { "svc_read" } else { "svc_write" },
                outcome,
            )
        })
        .collect();
    batch[3].fields = r#"{"sql":"SELECT '100%_done'"}"#.to_owned();
    batch[4].fields = r#"{"sql":"SELECT '100xxdone'"}"#.to_owned();
    batch[9].model = Some(ModelUse {
        provider: "openai".to_owned(),
        model: "gpt-5".to_owned(),
        input_tokens: 120,
        output_tokens: 30,
    });
    batch[8].model = Some(ModelUse {
        provider: "openai".to_owned(),
        model: "gpt-5".to_owned(),
        input_tokens: 5,
        output_tokens: 7,
    });
    let mut other = record(&bob, 100, "svc_read", CallOutcome::Ok);
    other.fields = r#"{"code":"print(0)"}"#.to_owned();
    other.model = batch[9].model.clone();
    batch.push(other.clone());
    store.append_calls(&batch).await.unwrap();
    store.append_calls(&[]).await.unwrap();

    let all = HistoryFilter::default();
    let page = store.call_page(&alice, &all, None, 100).await.unwrap();
    assert_eq!(page.len(), 10, "alice sees her ten calls, not bob's");
    assert!(
        page.windows(2).all(|w| w[0].at_ms > w[1].at_ms),
        "newest first"
    );
    assert_eq!(page[0], batch[9], "a record reads back as written");

    let ids = |rows: &[CallRecord]| rows.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    let alice_ref = &alice;
    let only = |f: HistoryFilter| async move {
        ids(&store.call_page(alice_ref, &f, None, 100).await.unwrap())
    };
    let named = |ns: &[usize]| ns.iter().map(|&n| batch[n].id.clone()).collect::<Vec<_>>();
    assert_eq!(
        only(HistoryFilter {
            key: Some("agent-b".into()),
            ..all.clone()
        })
        .await,
        named(&[9, 7, 5, 3, 1]),
        "by a key's name"
    );
    assert_eq!(
        only(HistoryFilter {
            key: Some("key_0123456789abcdef0123456789abcdef".into()),
            ..all.clone()
        })
        .await
        .len(),
        5,
        "by a key's id"
    );
    assert_eq!(
        only(HistoryFilter {
            tool: Some("svc_write".into()),
            ..all.clone()
        })
        .await,
        named(&[9, 8, 7, 6])
    );
    assert_eq!(
        only(HistoryFilter {
            outcome: Some("refused".into()),
            ..all.clone()
        })
        .await,
        named(&[8, 5, 2])
    );
    assert_eq!(
        only(HistoryFilter {
            session: Some("sess-a".into()),
            ..all.clone()
        })
        .await,
        named(&[4, 3, 2, 1, 0])
    );
    assert_eq!(
        only(HistoryFilter {
            from_ms: Some(BASE_MS + 2000),
            to_ms: Some(BASE_MS + 4000),
            ..all.clone()
        })
        .await,
        named(&[3, 2]),
        "from is inclusive, to exclusive"
    );
    assert_eq!(
        only(HistoryFilter {
            search: Some("0%_d".into()),
            ..all.clone()
        })
        .await,
        named(&[3]),
        "% and _ are literal in a search"
    );
    assert_eq!(
        only(HistoryFilter {
            search: Some("print(".into()),
            ..all.clone()
        })
        .await
        .len(),
        8
    );
    assert_eq!(
        only(HistoryFilter {
            key: Some("default".into()),
            tool: Some("svc_read".into()),
            outcome: Some("ok".into()),
            session: Some("sess-a".into()),
            search: Some("print".into()),
            ..all.clone()
        })
        .await,
        named(&[0]),
        "filters combine"
    );

    // cursor paging: pages of three, in order, none missed or repeated, with rows arriving
    let mut seen = Vec::new();
    let mut cursor: Option<HistoryCursor> = None;
    loop {
        let page = store
            .call_page(&alice, &all, cursor.as_ref(), 3)
            .await
            .unwrap();
        if seen.is_empty() {
            // a newer call arriving between pages does not shift the next ones
            let mut newer = record(&alice, 50, "svc_read", CallOutcome::Ok);
            newer.session = None;
            store.append_calls(&[newer]).await.unwrap();
        }
        let Some(last) = page.last() else { break };
        cursor = Some(HistoryCursor::decode(&HistoryCursor::after(last).encode()).unwrap());
        seen.extend(ids(&page));
    }
    assert_eq!(seen, named(&[9, 8, 7, 6, 5, 4, 3, 2, 1, 0]));

    assert_eq!(
        store.call_record(&alice, &batch[4].id).await.unwrap(),
        Some(batch[4].clone())
    );
    assert_eq!(
        store.call_record(&alice, &other.id).await.unwrap(),
        None,
        "another account's record is nobody's"
    );
    assert_eq!(
        store.call_record(&bob, &other.id).await.unwrap(),
        Some(other)
    );

    let month = MonthKey::containing(
        toolgate_domain::time_reexport::OffsetDateTime::from_unix_timestamp(BASE_MS / 1000)
            .unwrap(),
    );
    assert_eq!(month.as_str(), month_of(BASE_MS));
    let tokens = store.model_tokens(&alice, &month).await.unwrap();
    assert_eq!(tokens.len(), 1);
    assert_eq!(
        (
            tokens[0].provider.as_str(),
            tokens[0].calls,
            tokens[0].input_tokens,
            tokens[0].output_tokens
        ),
        ("openai", 2, 125, 37)
    );
    store
        .append_calls(&[{
            let mut more = record(&alice, 60, "svc_ai", CallOutcome::Ok);
            more.model = batch[9].model.clone();
            more
        }])
        .await
        .unwrap();
    let tokens = store.model_tokens(&alice, &month).await.unwrap();
    assert_eq!(
        (tokens[0].calls, tokens[0].input_tokens),
        (3, 245),
        "later batches add up"
    );

    // the purge: bounded batches, only rows older than the cut, any account's
    let cut = BASE_MS + 5000;
    let first = store.purge_calls(cut, 3).await.unwrap();
    assert_eq!(first, 3, "one purge deletes at most its limit");
    let rest = store.purge_calls(cut, 100).await.unwrap();
    assert_eq!(rest, 2);
    let left = store.call_page(&alice, &all, None, 100).await.unwrap();
    assert!(left.iter().all(|r| r.at_ms >= cut));
    assert_eq!(left.len(), 7);
    assert_eq!(
        store.model_tokens(&alice, &month).await.unwrap()[0].calls,
        3,
        "the month's tokens outlive the purged history"
    );

    // a batch larger than one statement's worth of rows (the SQLite store writes 256 rows per
    // INSERT): every row lands, each whole
    let (carol, _) = new_account(&format!("history-carol-{tag}@example.org"));
    store.create_account(&carol).await.unwrap();
    let large: Vec<CallRecord> = (0..600)
        .map(|n| record(&carol.id, 1_000 + n, "svc_write", CallOutcome::Ok))
        .collect();
    store.append_calls(&large).await.unwrap();
    let mut landed = store.call_page(&carol.id, &all, None, 1_000).await.unwrap();
    landed.reverse();
    assert_eq!(landed, large, "a large batch lands whole, row by row");
}
