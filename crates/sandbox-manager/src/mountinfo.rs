//! Reading `/proc/PID/mountinfo` on the server side (cgroup mounts, stale workspace mounts).
//! The confinement library (`crates/sandbox-harden`, which stands on no workspace crate) keeps
//! its own copy of the unescaping for the zygote's own mount namespace (`own_mounts.rs`).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

/// Undoes mountinfo's octal escapes (`\040` for a space; the kernel escapes space, tab, newline
/// and backslash).
pub fn unescape(field: &str) -> OsString {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        match octal {
            Some(digits) => {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_undone() {
        assert_eq!(unescape("/mnt/a\\040b"), OsString::from("/mnt/a b"));
        assert_eq!(unescape("a\\134b\\011"), OsString::from("a\\b\t"));
        assert_eq!(unescape("trailing\\04"), OsString::from("trailing\\04"));
    }
}
