#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use super::Location;

#[test]
fn store_urls_are_read_or_refused_without_being_echoed() {
    assert_eq!(
        Location::parse("file:///var/lib/toolgate/checkpoints").unwrap(),
        Location::File(PathBuf::from("/var/lib/toolgate/checkpoints"))
    );
    assert_eq!(
        Location::parse("s3://bucket/a/b/").unwrap(),
        Location::S3 {
            bucket: "bucket".to_owned(),
            prefix: "a/b".to_owned()
        }
    );
    assert_eq!(
        Location::parse("s3://bucket").unwrap(),
        Location::S3 {
            bucket: "bucket".to_owned(),
            prefix: String::new()
        }
    );
    for bad in [
        "file://relative",
        "s3://",
        "s3:///prefix",
        "s3://key:hunter2@bucket/p",
        "s3://bucket/p?x=hunter2",
        "s3://bucket/../p",
        "https://hunter2.example/",
        "",
    ] {
        let err = Location::parse(bad).unwrap_err().to_string();
        assert!(!err.contains("hunter2"), "{bad}: {err}");
        assert!(
            err.starts_with("the checkpoint store is unavailable: checkpoint store URL"),
            "{err}"
        );
    }
}
