#![allow(clippy::unwrap_used)]

use toolgate_domain::{Email, KeyId, Micros, SpendCaps};
use toolgate_store::{KeySpend, SpendLimits, SpendOverview};

use super::cap_alerts;

fn overview(month: i64, day: i64) -> SpendOverview {
    SpendOverview {
        email: Email::parse("owner@example.org").unwrap(),
        limits: SpendLimits {
            caps: SpendCaps {
                month: Some(Micros(100_000)),
                day: None,
            },
            alert_below: None,
        },
        balance: Micros(0),
        month: Micros(month),
        day: Micros(day),
        keys: Vec::new(),
    }
}

#[test]
fn a_cap_alerts_at_eighty_percent_then_when_the_next_call_would_pass_it() {
    let price = Micros(8_000);
    assert!(cap_alerts(&overview(79_999, 0), price).is_empty());
    let eighty = cap_alerts(&overview(80_000, 0), price);
    assert_eq!(eighty.len(), 1);
    assert!(!eighty[0].used_up);
    assert_eq!(eighty[0].kind(), "cap:account:monthly:80");
    // 92 000 + 8 000 stays within: still 80 %
    assert!(!cap_alerts(&overview(92_000, 0), price)[0].used_up);
    let full = cap_alerts(&overview(92_001, 0), price);
    assert!(full[0].used_up);
    assert_eq!(full[0].kind(), "cap:account:monthly:100");
}

#[test]
fn a_keys_caps_alert_under_its_own_kind() {
    let mut seen = overview(0, 0);
    let id = KeyId::generate();
    seen.keys.push(KeySpend {
        id: id.clone(),
        name: "agent".into(),
        caps: SpendCaps {
            month: None,
            day: Some(Micros(10_000)),
        },
        month: Micros(9_001),
        day: Micros(9_001),
    });
    let alerts = cap_alerts(&seen, Micros(1_000));
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].kind(), format!("cap:{id}:daily:100"));
    assert!(alerts[0].subject().contains("\"agent\""));
}
