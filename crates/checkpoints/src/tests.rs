#![allow(clippy::unwrap_used)]

use super::next_version;

#[test]
fn versions_rise_past_the_newest_and_every_one_given_out() {
    let far = u64::MAX / 2;
    let first = next_version(Some(far));
    assert_eq!(first, far + 1);
    // the clock is far below: each next one still rises
    let mut last = first;
    for _ in 0..1000 {
        let next = next_version(None);
        assert!(next > last);
        last = next;
    }
    assert!(next_version(Some(7)) > last);
}
