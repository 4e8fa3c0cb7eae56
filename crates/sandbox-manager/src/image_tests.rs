#![allow(clippy::unwrap_used)]

use std::os::unix::fs::{PermissionsExt, symlink};

use super::*;

fn meta() -> ImageMeta {
    ImageMeta {
        format: 1,
        state_error: None,
        env_names: vec!["API_KEY".to_owned()],
    }
}

#[test]
fn a_workspace_comes_back_with_its_modes_and_links() {
    let from = tempfile::tempdir().unwrap();
    let ws = from.path();
    std::fs::write(ws.join("a.txt"), b"alpha").unwrap();
    std::fs::create_dir_all(ws.join("sub/deeper")).unwrap();
    std::fs::write(ws.join("sub/deeper/run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(
        ws.join("sub/deeper/run.sh"),
        PermissionsExt::from_mode(0o4755),
    )
    .unwrap();
    std::fs::set_permissions(ws.join("sub"), PermissionsExt::from_mode(0o750)).unwrap();
    symlink("/etc/passwd", ws.join("sub/passwd")).unwrap();
    let long = "n".repeat(200);
    std::fs::write(ws.join(&long), b"").unwrap();
    let image = pack(ws, &meta(), 1 << 20).unwrap();

    let to = tempfile::tempdir().unwrap();
    let back = unpack(&image, to.path(), None, None).unwrap();
    assert_eq!(back, meta());
    let ws = to.path();
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"alpha");
    let script = std::fs::metadata(ws.join("sub/deeper/run.sh")).unwrap();
    // the set-uid bit is dropped, the rest kept
    assert_eq!(script.permissions().mode() & 0o7777, 0o755);
    assert_eq!(
        std::fs::metadata(ws.join("sub"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o750
    );
    assert_eq!(
        std::fs::read_link(ws.join("sub/passwd")).unwrap(),
        Path::new("/etc/passwd")
    );
    assert!(ws.join(&long).is_file());
}

#[test]
fn links_are_archived_never_followed() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"host secret").unwrap();
    let from = tempfile::tempdir().unwrap();
    symlink(outside.path(), from.path().join("escape")).unwrap();
    symlink(outside.path().join("secret"), from.path().join("file-link")).unwrap();
    let image = pack(from.path(), &meta(), 1 << 20).unwrap();
    let found = image.windows(11).any(|w| w == b"host secret");
    assert!(!found, "a link was followed");
}

#[test]
fn a_deep_tree_is_walked_without_recursion() {
    let from = tempfile::tempdir().unwrap();
    // 1,500 levels: a recursive walk would need far more than the 64 KiB stack below
    let deep = from.path().join(["d"; 1500].join("/"));
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("leaf"), b"leaf").unwrap();
    let root = from.path().to_path_buf();
    let image = std::thread::Builder::new()
        .stack_size(64 << 10)
        .spawn(move || pack(&root, &meta(), 1 << 20).map_err(|e| e.to_string()))
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    let to = tempfile::tempdir().unwrap();
    unpack(&image, to.path(), None, None).unwrap();
    let back = to.path().join(["d"; 1500].join("/")).join("leaf");
    assert_eq!(std::fs::read(back).unwrap(), b"leaf");
}

#[test]
fn bounds_hold() {
    let from = tempfile::tempdir().unwrap();
    std::fs::write(from.path().join("big"), vec![7u8; 4096]).unwrap();
    assert!(matches!(
        pack(from.path(), &meta(), 4095),
        Err(ImageError::TooLarge { max: 4095 })
    ));
    assert!(pack(from.path(), &meta(), 4096).is_ok());
}

/// An archive that tries to climb out, or to write through a link it made, is refused.
#[test]
fn hostile_archives_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    let mut evil = tar::Builder::new(Vec::new());
    let m = serde_json::to_vec(&meta()).unwrap();
    let mut h = entry_header(tar::EntryType::Regular, 0o600, m.len() as u64);
    evil.append_data(&mut h, META, m.as_slice()).unwrap();
    let mut link = entry_header(tar::EntryType::Symlink, 0o777, 0);
    evil.append_link(&mut link, "w/out", outside.path())
        .unwrap();
    let mut file = entry_header(tar::EntryType::Regular, 0o644, 4);
    evil.append_data(&mut file, "w/out/pwned", &b"evil"[..])
        .unwrap();
    let image = evil.into_inner().unwrap();
    let to = tempfile::tempdir().unwrap();
    assert!(unpack(&image, to.path(), None, None).is_err());
    assert!(!outside.path().join("pwned").exists());
    assert!(split(b"../x").is_err());
    assert!(split(b"a/../x").is_err());
    assert!(split(b"/x").is_err());
    assert!(split(b"a//x").is_err());
    assert_eq!(split(b"a/b").unwrap(), (Some(&b"a"[..]), &b"b"[..]));
    // not an archive at all
    assert!(unpack(b"not a tar", to.path(), None, None).is_err());
}
