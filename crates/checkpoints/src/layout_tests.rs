#![allow(clippy::unwrap_used)]

use object_store::path::Path;

use super::{Layout, Place, account_dir};

#[test]
fn names_read_back_as_the_place_they_were_made_for() {
    for prefix in ["", "tenants/ckpt", "/a/"] {
        let layout = Layout::new(prefix);
        for (account, session) in [
            ("0b4e-uuid_like", "s"),
            ("weird/../account", "sess"),
            ("a", &"x".repeat(256)),
            ("a", "é\0/.."),
        ] {
            let place = Place::new(account, session, 0x0123_4567_89ab_cdef);
            let path = layout.object(&place);
            let back = layout.place(&path).unwrap();
            assert_eq!(back, place);
            assert!(back.is_of(account, session));
            assert_eq!(back.session_id().unwrap(), session);
            // every level fits a file name, and the session's directory holds the object
            assert!(
                path.parts().all(|part| part.as_ref().len() <= 255),
                "{path}"
            );
            assert!(path.prefix_matches(&layout.session(account, session)));
            assert!(path.prefix_matches(&layout.account(account)));
            assert!(path.prefix_matches(&layout.root()));
        }
    }
}

#[test]
fn only_version_objects_are_places() {
    let layout = Layout::new("p");
    let good = "p/acct/73/00000000000000ff.ckpt";
    assert_eq!(
        layout.place(&Path::parse(good).unwrap()).unwrap().version,
        255
    );
    for other in [
        "q/acct/73/00000000000000ff.ckpt",
        "p/acct/00000000000000ff.ckpt",
        "p/acct/7/00000000000000ff.ckpt",
        "p/acct/7G/00000000000000ff.ckpt",
        "p/acct/73/00000000000000FF.ckpt",
        "p/acct/73/ff.ckpt",
        "p/acct/73/00000000000000ff.tmp",
        "p/acct/73/00000000000000ff.ckpt#1",
        // a long id cut other than at full levels
        "p/acct/7373/73/00000000000000ff.ckpt",
    ] {
        assert_eq!(layout.place(&Path::parse(other).unwrap()), None, "{other}");
    }
    assert_eq!(layout.place(&layout.probe("abc")), None);
}

#[test]
fn plain_account_ids_name_their_directory_and_others_are_hashed() {
    assert_eq!(account_dir("9f1c-AB_z"), "9f1c-AB_z");
    for odd in ["", "..", "a/b", "a.b", &"a".repeat(129)] {
        let dir = account_dir(odd);
        assert!(dir.starts_with("h.") && dir.len() == 66, "{odd}: {dir}");
    }
    assert_ne!(account_dir("a/b"), account_dir("a/c"));
}
