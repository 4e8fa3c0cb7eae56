//! Many hosts on one machine: `toolgate node` processes (root, each with its own sessions root
//! and uid range, sharing one checkpoint directory), optionally each in a network namespace of
//! the test's own joined to this one by a veth pair (so that it can be cut off, not only
//! killed), and front ends run as `nobody` with no capability.
//!
//! A node in a namespace listens on its own address of a /30 that exists only between this
//! namespace and that one (10.213.X.Y): the one exception to "tests bind to loopback", because a
//! node's loopback is not reachable from outside its namespace.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

/// The unprivileged user front ends run as.
pub const FRONT_END_UID: u32 = 65534;

/// A network namespace of the test's, joined to this one by a veth pair.
pub struct NetNs {
    pub name: String,
    host_if: String,
    /// The namespace's address (the node listens on it).
    pub addr: String,
}

fn ip(args: &[&str]) {
    let status = Command::new("ip")
        .args(args)
        .status()
        .expect("run ip (iproute2)");
    assert!(status.success(), "ip {args:?} failed");
}

/// `ip` for what may already be gone: its complaints are not the test's.
fn quiet(args: &[&str]) {
    let _ = Command::new("ip")
        .args(args)
        .stderr(std::process::Stdio::null())
        .status();
}

impl NetNs {
    /// Namespace `index` of this test process.
    pub fn create(index: u8) -> Self {
        let pid = std::process::id();
        let tag = format!("{}{index}", pid % 100_000);
        let name = format!("tg-ns-{tag}");
        let host_if = format!("tgh{tag}");
        let ns_if = format!("tgn{tag}");
        let subnet = (pid % 250) as u8;
        let host_addr = format!("10.213.{subnet}.{}", u32::from(index) * 4 + 1);
        let addr = format!("10.213.{subnet}.{}", u32::from(index) * 4 + 2);
        // left over from a run of a process with the same pid: gone first
        quiet(&["netns", "del", &name]);
        quiet(&["link", "del", &host_if]);
        ip(&["netns", "add", &name]);
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ]);
        ip(&["link", "set", &ns_if, "netns", &name]);
        ip(&["addr", "add", &format!("{host_addr}/30"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&[
            "netns",
            "exec",
            &name,
            "ip",
            "addr",
            "add",
            &format!("{addr}/30"),
            "dev",
            &ns_if,
        ]);
        ip(&["netns", "exec", &name, "ip", "link", "set", &ns_if, "up"]);
        ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"]);
        Self {
            name,
            host_if,
            addr,
        }
    }

    /// Cuts the namespace off: its link goes down, and nothing crosses either way.
    pub fn cut(&self) {
        ip(&["link", "set", &self.host_if, "down"]);
    }

    /// Joins it again.
    pub fn join(&self) {
        ip(&["link", "set", &self.host_if, "up"]);
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A node token, a vault key file and a shared checkpoint directory, all in `dir`, and the nodes
/// started on them.
pub struct Cluster {
    pub dir: PathBuf,
    pub token: PathBuf,
    pub key: PathBuf,
    pub nodes: Vec<Server>,
    /// Each node's namespace, when they have one.
    pub namespaces: Vec<NetNs>,
    node_args: Vec<String>,
}

impl Drop for Cluster {
    /// Kills the nodes, then detaches the workspace mounts the killed ones left in this host's
    /// mount namespace (a restarted node detaches its own; one killed for good never does, and
    /// each left mount keeps its tmpfs alive and slows every later mount namespace's copy).
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<&str> = table
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|point| Path::new(point).starts_with(&self.dir))
            .collect();
        // the deepest first, so no mount is detached from under another left to detach
        points.sort_by_key(|point| std::cmp::Reverse(point.len()));
        for point in points {
            let _ = Command::new("umount").args(["-l", point]).status();
        }
    }
}

impl Cluster {
    /// `count` nodes on this host's loopback.
    pub async fn start(dir: &Path, count: usize) -> Self {
        Self::start_with(dir, count, false, &[]).await
    }

    /// `count` nodes, each in its own network namespace when `namespaces`, each with its own
    /// sessions root and uid range, sharing the checkpoints, with `extra` flags.
    pub async fn start_with(dir: &Path, count: usize, namespaces: bool, extra: &[&str]) -> Self {
        let token = dir.join("node.token");
        std::fs::write(&token, "0123456789abcdef".repeat(4)).unwrap();
        let key = dir.join("vault.key");
        std::fs::write(&key, "v1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n").unwrap();
        for file in [&token, &key] {
            // the unprivileged front end reads them; mode 600 keeps everyone else out
            std::os::unix::fs::chown(file, Some(FRONT_END_UID), Some(FRONT_END_UID)).unwrap();
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        std::fs::create_dir_all(dir.join("checkpoints")).unwrap();
        let mut cluster = Self {
            dir: dir.to_owned(),
            token,
            key,
            nodes: Vec::new(),
            namespaces: Vec::new(),
            node_args: extra.iter().map(|s| (*s).to_owned()).collect(),
        };
        for n in 0..count {
            if namespaces {
                cluster
                    .namespaces
                    .push(NetNs::create(u8::try_from(n).unwrap()));
            }
            let node = cluster.start_node(n).await;
            cluster.nodes.push(node);
        }
        cluster
    }

    pub fn node_dir(&self, n: usize) -> PathBuf {
        self.dir.join(format!("node-{n}"))
    }

    /// Starts node `n` (again, after it was killed: on the same address).
    pub async fn start_node(&self, n: usize) -> Server {
        let dir = self.node_dir(n);
        std::fs::create_dir_all(&dir).unwrap();
        let mut args = sandbox_flags(&dir);
        // the suite's cap of 3 sessions per account is for one server; here each node has its own
        let cap = args
            .iter()
            .position(|a| a == "--sandbox-max-sessions")
            .unwrap();
        args[cap + 1] = "8".to_owned();
        let first_uid = (1_100_000_000 + n * 100_000).to_string();
        let checkpoints = format!("file://{}", self.dir.join("checkpoints").display());
        args.extend(
            [
                "--data-dir",
                dir.to_str().unwrap(),
                "--node-token-file",
                self.token.to_str().unwrap(),
                "--vault-key-file",
                self.key.to_str().unwrap(),
                "--checkpoint-url",
                &checkpoints,
                "--sandbox-first-uid",
                &first_uid,
            ]
            .map(str::to_owned),
        );
        args.extend(self.node_args.iter().cloned());
        let (wrapper, listen) = match self.namespaces.get(n) {
            Some(ns) => {
                let port = 7100 + n;
                (
                    ["ip", "netns", "exec", &ns.name]
                        .map(str::to_owned)
                        .to_vec(),
                    Some(format!("{}:{port}", ns.addr)),
                )
            }
            None => (Vec::new(), None),
        };
        let launch = Launch {
            role: "node",
            wrapper,
            listen,
        };
        Server::launch(&launch, &dir, &args, &[]).await
    }

    pub fn node_urls(&self) -> String {
        self.nodes
            .iter()
            .map(|node| node.base.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A front end on `storage`, as `nobody`, reaching every node, with `extra` flags.
    pub async fn front_end(&self, storage: &Storage, extra: &[&str]) -> Server {
        std::fs::create_dir_all(&storage.data_dir).unwrap();
        std::os::unix::fs::chown(&storage.data_dir, Some(FRONT_END_UID), Some(FRONT_END_UID))
            .unwrap();
        let uid = FRONT_END_UID.to_string();
        let launch = Launch {
            role: "serve",
            wrapper: [
                "setpriv",
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
            ]
            .map(str::to_owned)
            .to_vec(),
            listen: None,
        };
        let mut args = storage.args();
        args.extend(
            [
                "--sandbox",
                "on",
                "--nodes",
                &self.node_urls(),
                "--node-token-file",
                self.token.to_str().unwrap(),
                "--vault-key-file",
                self.key.to_str().unwrap(),
            ]
            .map(str::to_owned),
        );
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        Server::launch(&launch, &storage.data_dir, &args, &[]).await
    }
}
