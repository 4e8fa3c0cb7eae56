//! The replay and rotation rule, case by case.

use super::*;

const EXPIRES: i64 = 1_000;

fn state(credential: Credential, used: bool, revoked: bool) -> CredentialState {
    CredentialState {
        credential,
        stage: Stage { used, revoked },
        expires_at: EXPIRES,
    }
}

fn present(state: CredentialState, now: i64) -> (Outcome, Stage, bool) {
    let t = step(state, Event::Present { now });
    (t.outcome, t.next, t.revoke_family)
}

const FRESH: Stage = Stage {
    used: false,
    revoked: false,
};
const USED: Stage = Stage {
    used: true,
    revoked: false,
};
const USED_REVOKED: Stage = Stage {
    used: true,
    revoked: true,
};
const REVOKED: Stage = Stage {
    used: false,
    revoked: true,
};

#[test]
fn a_live_credential_is_spent_once() {
    for credential in [Credential::Code, Credential::Refresh] {
        let fresh = state(credential, false, false);
        assert_eq!(present(fresh, EXPIRES - 1), (Outcome::Spent, USED, false));
        let used = state(credential, true, false);
        assert_eq!(
            present(used, EXPIRES - 1),
            (Outcome::Replayed, USED_REVOKED, true),
            "{credential:?}: presented again it revokes its family"
        );
    }
}

#[test]
fn a_replayed_code_revokes_its_family_whenever_it_comes() {
    for (used, revoked) in [(true, false), (true, true)] {
        for now in [0, EXPIRES, EXPIRES * 5] {
            let code = state(Credential::Code, used, revoked);
            assert_eq!(
                present(code, now),
                (Outcome::Replayed, USED_REVOKED, true),
                "revoked {revoked}, at {now}"
            );
        }
    }
}

#[test]
fn an_expired_or_revoked_refresh_token_is_refused_used_or_not() {
    for (used, revoked, now) in [
        (false, false, EXPIRES),
        (true, false, EXPIRES),
        (false, true, 0),
        (true, true, 0),
    ] {
        let token = state(Credential::Refresh, used, revoked);
        assert_eq!(
            present(token, now),
            (Outcome::Refused, token.stage, false),
            "used {used}, revoked {revoked}, at {now}"
        );
        assert!(!step(token, Event::Present { now }).writes());
    }
}

#[test]
fn an_unused_code_is_refused_from_its_expiry_or_once_revoked() {
    let expired = state(Credential::Code, false, false);
    assert_eq!(present(expired, EXPIRES), (Outcome::Refused, FRESH, false));
    let revoked = state(Credential::Code, false, true);
    assert_eq!(present(revoked, 0), (Outcome::Refused, REVOKED, false));
}

#[test]
fn a_revocation_always_takes_the_family() {
    for credential in [Credential::Code, Credential::Refresh] {
        for (used, revoked) in [(false, false), (true, false), (false, true), (true, true)] {
            let t = step(state(credential, used, revoked), Event::Revoke);
            assert_eq!(t.outcome, Outcome::Revoked);
            assert_eq!(
                t.next,
                Stage {
                    used,
                    revoked: true
                }
            );
            assert!(t.revoke_family && t.writes());
        }
    }
}
