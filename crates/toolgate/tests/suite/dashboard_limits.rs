//! The spend caps & alerts page and the alerts by mail, through the real binary: hostile form
//! input refused with nothing changed, a monthly cap and a wallet alert set from the page, paid
//! calls that pass 80 % and 100 % of the cap and take the wallet below the amount, each alert
//! in the mail outbox exactly once, and the usage page's spend per key and per tool.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::common::*;
use toolgate_store_postgres::testkit::with_fresh_database;

const EMAIL: &str = "limits@example.org";

/// The alert mails to `EMAIL` in the outbox (subject and body), oldest first; sign-in mails
/// are left out.
fn alert_mails(d: &Dash) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(d.outbox()) else {
        return Vec::new();
    };
    let mut paths: Vec<_> = entries
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "eml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).ok()?;
            let subject = text.lines().find_map(|l| l.strip_prefix("Subject: "))?;
            let to_owner = text
                .lines()
                .any(|l| l.starts_with("To: ") && l.contains(EMAIL));
            (to_owner && text.contains("/dashboard/limits"))
                .then(|| (subject.to_owned(), text.clone()))
        })
        .collect()
}

/// Waits (up to 10 s) for `count` alert mails; returns them all.
async fn wait_alerts(d: &Dash, count: usize) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mails = alert_mails(d);
        if mails.len() >= count {
            return mails;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {count} alert mails arrived: {mails:?}",
            mails.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const FREE_NONE: [(&str, &str); 1] = [("TOOLGATE_FREE_MONTHLY_CALLS", "0")];

#[tokio::test]
async fn caps_and_alerts_are_set_on_the_page_and_each_alert_is_mailed_once() {
    caps_and_alerts_story(Dash::start(&FREE_NONE).await, None).await;
}

/// The same on PostgreSQL, with the calls made through two front ends in turn: each checks the
/// alerts after its own calls, and still each alert is mailed once.
#[tokio::test]
async fn on_postgresql_two_front_ends_mail_each_alert_once() {
    with_fresh_database(|url| async move {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::postgres(dir.path(), &url);
        let d = Dash::start_on(dir, storage, &FREE_NONE).await;
        let second = Server::start_with_env(&d.storage, &["--sandbox", "off"], &FREE_NONE).await;
        caps_and_alerts_story(d, Some(second)).await;
    })
    .await;
}

/// `second`: another front end on the same storage, which takes every other call.
async fn caps_and_alerts_story(d: Dash, second: Option<Server>) {
    let turn = std::sync::atomic::AtomicUsize::new(0);
    let paid_call = async |key: &str| {
        let n = turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let server = match &second {
            Some(other) if n % 2 == 1 => other,
            _ => &d.server,
        };
        let answered = post_personal(&client(), server, key, &billing_call()).await;
        assert_eq!(answered.status, 200, "{answered:?}");
        answered
    };
    let owner = create_account(&d.storage, EMAIL);
    let s = d.sign_in(EMAIL).await;
    credit(&d.storage, EMAIL, "0.09");
    let set = async |month: &str, day: &str, below: &str| {
        d.post(
            "/dashboard/limits/set",
            &s,
            &[
                ("csrf", s.csrf.as_str()),
                ("month", month),
                ("day", day),
                ("alert_below", below),
            ],
        )
        .await
    };

    // hostile input: a clear error, the text as sent, and nothing stored
    let long = "9".repeat(10_000);
    for bad in [
        "abc",
        "-1",
        "0",
        "0.00",
        "0.001",
        "1e3",
        "1,50",
        "1000000.01",
        "<script>alert(1)</script>",
        long.as_str(),
    ] {
        let refused = set("5.00", bad, "").await;
        assert_eq!(refused.status, 400, "{bad:?}: {refused:?}");
        let error = text_of_id(&refused.body, "error").unwrap();
        assert!(error.contains("Daily cap"), "{error}");
        assert!(!refused.body.contains("<script>alert"), "escaped");
    }
    let missing_csrf = d
        .post("/dashboard/limits/set", &s, &[("month", "5.00")])
        .await;
    assert_eq!(missing_csrf.status, 403, "{missing_csrf:?}");
    let page = d.page("/dashboard/limits", &s).await;
    assert!(
        text_of_id(&page, "spent-month").unwrap().contains("no cap"),
        "nothing was stored: {page}"
    );

    let saved = set(" 0.05 ", "", "0.05").await;
    assert_see_other(&saved, "/dashboard/limits?notice=limits-saved");
    let page = d.page("/dashboard/limits?notice=limits-saved", &s).await;
    assert_eq!(
        text_of_id(&page, "spent-month").unwrap(),
        "0.00 USD of 0.05 USD (0 %)"
    );
    assert!(page.contains(r#"value="0.05""#), "{page}");

    // 0.008 a call: four calls are 64 % of the cap, the fifth 80 %
    for _ in 0..5 {
        paid_call(&owner.key).await;
    }
    let mails = wait_alerts(&d, 1).await;
    assert_eq!(mails.len(), 1, "{mails:?}");
    let (subject, text) = &mails[0];
    assert!(subject.contains("80 %"), "{subject}");
    assert!(text.contains(EMAIL) && text.contains("0.05 USD"), "{text}");
    assert!(
        text.contains("0.04 USD paid from the wallet this month"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}/dashboard/limits", d.public)),
        "{text}"
    );
    assert!(!text.contains("svck_"), "no key in a mail: {text}");

    // the sixth: 0.048 spent, the next call would pass the cap; the wallet is 0.042 < 0.05
    paid_call(&owner.key).await;
    let mails = wait_alerts(&d, 3).await;
    assert_eq!(mails.len(), 3, "{mails:?}");
    let subjects: Vec<&str> = mails.iter().map(|(subject, _)| subject.as_str()).collect();
    assert!(subjects.iter().any(|s| s.contains("100 %")), "{subjects:?}");
    assert!(
        subjects.iter().any(|s| s.contains("Wallet below 0.05")),
        "{subjects:?}"
    );

    // more calls: each refused by the cap before it runs (-32002 naming it), no alert repeats;
    // then a new wallet amount is a new alert, mailed after every check before it, so the
    // count is final
    for _ in 0..3 {
        let refused = paid_call(&owner.key).await;
        assert_eq!(refused.error_code(), Some(-32002), "{refused:?}");
        assert!(
            refused
                .body
                .contains("the account's monthly spend cap of 0.05 USD (0.048 USD spent"),
            "{refused:?}"
        );
    }
    assert_see_other(
        &set("0.05", "", "1.00").await,
        "/dashboard/limits?notice=limits-saved",
    );
    paid_call(&owner.key).await;
    let mails = wait_alerts(&d, 4).await;
    let subjects: Vec<&str> = mails.iter().map(|(subject, _)| subject.as_str()).collect();
    assert_eq!(mails.len(), 4, "{subjects:?}");
    assert!(subjects[3].contains("Wallet below 1.00"), "{subjects:?}");
    for level in ["80 %", "100 %"] {
        let count = subjects.iter().filter(|s| s.contains(level)).count();
        assert_eq!(count, 1, "{level}: {subjects:?}");
    }

    // the usage page: this month's calls per key and per tool
    let usage = d.page("/dashboard/usage", &s).await;
    let key_row = row_of(&usage, "spend-by-key", "default");
    let tool_row = row_of(&usage, "spend-by-tool", "svc_read");
    assert_eq!(key_row[1..], tool_row[1..], "one key, one tool: {usage}");
    let paid: i64 = key_row[2].parse().unwrap();
    assert_eq!(paid, 6, "the cap held the paid calls to six: {key_row:?}");
    assert_eq!(key_row[3], usd_price(paid * 8_000), "{key_row:?}");
}

/// The cells of the row `label` of table `id`.
fn row_of(html: &str, id: &str, label: &str) -> Vec<String> {
    let table = html
        .split_once(&format!(r#"id="{id}""#))
        .unwrap_or_else(|| panic!("no table {id}"))
        .1;
    let row = table
        .split_once(&format!(r#"data-label="{label}""#))
        .unwrap_or_else(|| panic!("no row {label} in {id}"))
        .1
        .split_once("</tr>")
        .unwrap()
        .0;
    row.split("<td")
        .skip(1)
        .map(|cell| {
            let inner = cell.split_once('>').unwrap().1;
            inner.split_once("</td>").unwrap().0.to_owned()
        })
        .collect()
}

/// Micro-dollars as the pages show a price: at least two decimals.
fn usd_price(micros: i64) -> String {
    let fraction = format!("{:06}", micros % 1_000_000);
    let trimmed = fraction.trim_end_matches('0');
    let shown = if trimmed.len() < 2 {
        &fraction[..2]
    } else {
        trimmed
    };
    format!("{}.{shown}", micros / 1_000_000)
}
