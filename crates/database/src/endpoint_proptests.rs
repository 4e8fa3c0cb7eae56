//! Property tests of connection strings: any string is read without a panic; what is accepted
//! carries only the allowed parameters and names one network host; the host, port, user,
//! password and database come back exactly as written (percent-encoded or, where a URL allows
//! it, raw); and no refusal repeats the password.
#![allow(clippy::unwrap_used)]

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use proptest::prelude::*;
use url::Url;

use super::*;

/// Everything but the unreserved characters is escaped.
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Escapes what a URL's user information cannot hold raw; the sub-delimiters (`!$&'()*+,;=`)
/// but `=` and `,` stay as written, as people write them.
const USERINFO: &AsciiSet = &ESCAPED
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b';');

/// A name, password or database of any characters, special ones often.
fn text(min: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::char::range('a', 'z'),
            2 => prop::sample::select(
                "&=@:/?#%+ !$'()*,;[]\\^`{|}\"<>~-._".chars().collect::<Vec<_>>()
            ),
            1 => any::<char>().prop_filter("no NUL", |c| *c != '\0'),
        ],
        min..12,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

/// A host: a DNS name, an IPv4 or an IPv6 address.
fn host() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,10}(\\.[a-z][a-z0-9]{0,5}){0,2}".prop_map(|h| (h.clone(), h)),
        any::<[u8; 4]>().prop_map(|o| {
            let ip = std::net::Ipv4Addr::from(o).to_string();
            (ip.clone(), ip)
        }),
        any::<[u16; 8]>().prop_map(|s| {
            let ip = std::net::Ipv6Addr::from(s).to_string();
            (format!("[{ip}]"), ip)
        }),
    ]
}

proptest! {
    #[test]
    fn any_string_is_read_without_a_panic(raw in "\\PC{0,80}") {
        let _ = Endpoint::parse(&raw);
        let _ = Endpoint::parse(&format!("postgres://{raw}"));
        let _ = Endpoint::parse(&format!("mysql://u:p@h/{raw}"));
    }

    #[test]
    fn what_is_accepted_has_only_the_allowed_parameters(
        params in prop::collection::vec(
            (
                prop::sample::select(vec![
                    "sslmode", "ssl-mode", "application_name", "host", "hostaddr",
                    "sslrootcert", "sslkey", "options", "passfile", "SSLMODE", "sslmode ",
                ]),
                prop::sample::select(vec![
                    "disable", "prefer", "require", "verify-full", "REQUIRED", "DISABLED",
                    "/tmp/x", "", "x",
                ]),
            ),
            0..4,
        ),
        raw_key in "[a-z_&=%0-9]{0,8}",
    ) {
        let mut query: Vec<String> =
            params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if !raw_key.is_empty() {
            query.push(raw_key);
        }
        let connection = format!("postgres://u:pw@db.example/d?{}", query.join("&"));
        if let Ok(endpoint) = Endpoint::parse(&connection) {
            let url = Url::parse(&connection).unwrap();
            for (key, _) in url.query_pairs() {
                prop_assert!(
                    ["sslmode", "ssl-mode", "application_name"].contains(&key.as_ref()),
                    "{} accepted {:?}", connection, key
                );
            }
            prop_assert!(!endpoint.host.starts_with('/') && !endpoint.host.contains(','));
        }
    }

    #[test]
    fn host_port_user_password_and_database_come_back_as_written(
        scheme in prop::sample::select(vec!["postgres", "postgresql", "mysql", "mariadb"]),
        user in text(1),
        password in text(0),
        (host_written, host) in host(),
        port in proptest::option::of(1u16..),
        // `.` and `..` are dot segments of the path, gone before anyone reads it
        database in text(1).prop_filter("a dot segment", |d| d != "." && d != ".."),
        raw_userinfo in any::<bool>(),
    ) {
        let set = if raw_userinfo { USERINFO } else { ESCAPED };
        let connection = format!(
            "{scheme}://{}:{}@{host_written}{}/{}",
            utf8_percent_encode(&user, set),
            utf8_percent_encode(&password, set),
            port.map(|p| format!(":{p}")).unwrap_or_default(),
            utf8_percent_encode(&database, ESCAPED),
        );
        let endpoint = Endpoint::parse(&connection);
        prop_assert!(endpoint.is_ok(), "{}: {:?}", connection, endpoint.err());
        let endpoint = endpoint.unwrap();
        let default_port = if scheme.starts_with("postgres") { 5432 } else { 3306 };
        prop_assert_eq!(&endpoint.host, &host);
        prop_assert_eq!(endpoint.port, port.unwrap_or(default_port));
        prop_assert_eq!(&endpoint.user, &user);
        prop_assert_eq!(endpoint.password.as_str(), password.as_str());
        prop_assert_eq!(&endpoint.database, &database);
    }

    #[test]
    fn no_refusal_repeats_the_password(
        password in "[A-Za-z0-9]{12,20}",
        tail in prop::sample::select(vec![
            "/d?sslrootcert=/etc/x", "/d?sslmode=verify-full", "/d?x=1", "/%00", "/d?host=/tmp",
        ]),
        scheme in prop::sample::select(vec!["postgres", "redis", "mysql"]),
    ) {
        let connection = format!("{scheme}://u:{password}@db.example{tail}");
        if let Err(refusal) = Endpoint::parse(&connection) {
            prop_assert!(!refusal.to_string().contains(&password), "{}", refusal);
        }
    }
}

/// The case the properties found: a password written with a raw `&` (which a URL's user
/// information may hold) was cut there, and `+` or `=` in a database name were misread.
#[test]
fn sub_delimiters_written_raw_are_themselves() {
    let e = Endpoint::parse("postgres://al&ice:p&ss=w+rd@db.example/a+b&c").unwrap();
    assert_eq!(
        (e.user.as_str(), e.password.as_str(), e.database.as_str()),
        ("al&ice", "p&ss=w+rd", "a+b&c")
    );
    assert!(Endpoint::parse("postgres://u:%FF@db.example/d").is_err());
}
