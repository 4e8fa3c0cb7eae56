#![allow(clippy::unwrap_used)]

use toolgate_app::history::{CallOutcome, CallRecord};
use toolgate_domain::{AccountId, Micros};

use super::{FilterQuery, csv, day_start_ms};
use crate::views::iso_time;

fn row(fields: &str) -> CallRecord {
    CallRecord {
        id: "call_1".into(),
        account: AccountId::generate(),
        at_ms: 1_795_000_000_123,
        key_label: "=HYPERLINK(\"x\")".into(),
        key_id: None,
        client: Some("@evil 1.0".into()),
        tool: "svc_write".into(),
        fields: fields.into(),
        outcome: CallOutcome::Refused(-32002),
        duration_ms: 3,
        charge: Some(Micros(8_000)),
        session: None,
        destinations: vec!["a.example:443".into(), "b.example".into()],
        model: None,
    }
}

#[test]
fn csv_cells_are_quoted_and_formulas_defused() {
    let text = csv(&[row(r#"{"code":"print(\"hi\")\nx = 1"}"#)]);
    let mut lines = text.split("\r\n");
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with(r#""id","time_utc","key""#)
    );
    let line = lines.next().unwrap();
    assert!(line.contains(r#""'=HYPERLINK(""x"")""#), "{line}");
    assert!(line.contains(r#""'@evil 1.0""#), "{line}");
    assert!(line.contains(r#""'-32002""#), "{line}");
    assert!(line.contains(r#""0.008""#), "{line}");
    assert!(
        line.contains(r#""{""code"":""print(\""hi\"")\nx = 1""}""#),
        "{line}"
    );
}

#[test]
fn days_are_utc_and_the_last_is_included() {
    assert_eq!(day_start_ms("1970-01-02", false), Some(86_400_000));
    assert_eq!(day_start_ms("1970-01-01", true), Some(86_400_000));
    assert_eq!(day_start_ms("1970-13-01", false), None);
    assert_eq!(day_start_ms("yesterday", false), None);
    assert_eq!(iso_time(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
}

#[test]
fn filters_are_cut_and_checked() {
    let query = FilterQuery {
        q: "%".repeat(500),
        outcome: "ok".into(),
        key: "  ".into(),
        ..FilterQuery::default()
    };
    let filter = query.filter().unwrap();
    assert_eq!(filter.search.unwrap().chars().count(), 200);
    assert_eq!(filter.key, None);
    let bad = FilterQuery {
        outcome: "maybe".into(),
        ..FilterQuery::default()
    };
    assert!(bad.filter().is_err());
    assert_eq!(
        FilterQuery {
            tool: "svc_read".into(),
            q: "a b&c".into(),
            after: "x".into(),
            ..FilterQuery::default()
        }
        .encoded(),
        "tool=svc_read&q=a+b%26c"
    );
}
