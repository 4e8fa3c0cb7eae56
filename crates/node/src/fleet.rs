//! A front end's view of its execution nodes: a link to each, their leases kept in the
//! database while they answer, and which are live with what load, for placing sessions.
//!
//! Every front end renews every node it knows, about once a second: it asks the node which
//! incarnation it is, renews that incarnation's lease in the database (or registers a node that
//! has none), and only then tells the node how long it may count on it, less what the database
//! write took and a margin. So a node's own deadline always falls before the database's, and a
//! node nobody can reach fences itself before any front end may give its sessions to another.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use toolgate_domain::{Incarnation, Lease, NodeName};
use toolgate_store::{NodeBeat, NodeLoad as StoredLoad, Placement};

use crate::link::{LinkError, NodeLink};
use crate::tls::ClientTls;
use crate::token::NodeToken;
use crate::wire::{LeaseAnswer, LeaseRequest};

/// What a node's own deadline keeps back from the database's lease, for the time a renewal
/// takes to reach it and the clocks' drift: 2 s, or a third of a shorter lease.
fn margin(lease: Lease) -> Duration {
    (lease.duration() / 3).min(Duration::from_secs(2))
}

/// One node as placement sees it.
#[derive(Debug)]
pub(crate) struct LiveNode {
    pub(crate) name: NodeName,
    pub(crate) incarnation: Incarnation,
    pub(crate) link: Arc<NodeLink>,
    load: StoredLoad,
    /// Sessions this front end placed on it since its load was read.
    placed: AtomicU64,
}

/// Why the nodes could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// an address is not `http://HOST:PORT` (`https://` with TLS)
    #[error(transparent)]
    Link(#[from] LinkError),
    /// a node's name, made of its address, is not one placement takes
    #[error("the node at {0} cannot be named from its address")]
    Name(String),
    /// the lease is not one placement takes
    #[error("the node lease must be between 3 s and 1 h")]
    Lease,
}

/// A front end's nodes.
pub struct Fleet {
    nodes: Vec<(NodeName, Arc<NodeLink>, String)>,
    placement: Arc<dyn Placement>,
    lease: Lease,
    live: RwLock<Vec<Arc<LiveNode>>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// The nodes at `urls`, reached with `token` (and over mutual TLS when `tls` is given),
    /// their leases of `lease` kept in `placement`. Every front end must name a node by the
    /// same `HOST:PORT`: its name in the database is made of it (the scheme is not part of it).
    pub fn new(
        urls: &[String],
        token: &NodeToken,
        tls: Option<&ClientTls>,
        placement: Arc<dyn Placement>,
        lease: Duration,
    ) -> Result<Arc<Self>, FleetError> {
        if lease < Duration::from_secs(3) {
            return Err(FleetError::Lease);
        }
        let lease = Lease::new(lease).map_err(|_| FleetError::Lease)?;
        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            let link = NodeLink::new(url, token.clone(), tls.cloned())?;
            let name = name_of(link.address())
                .ok_or_else(|| FleetError::Name(link.address().to_owned()))?;
            nodes.push((name, Arc::new(link), url.clone()));
        }
        Ok(Arc::new(Self {
            nodes,
            placement,
            lease,
            live: RwLock::new(Vec::new()),
        }))
    }

    /// Renews the nodes' leases now, then about once a second until `shutdown`. Each node is
    /// renewed on its own: one that does not answer (cut off) delays nobody else's lease.
    pub async fn keep(self: Arc<Self>, shutdown: CancellationToken) {
        let every =
            (self.lease.duration() / 5).clamp(Duration::from_millis(200), Duration::from_secs(1));
        for (name, link, url) in &self.nodes {
            let (name, link, url) = (name.clone(), Arc::clone(link), url.clone());
            let placement = Arc::clone(&self.placement);
            let (lease, shutdown) = (self.lease, shutdown.clone());
            tokio::spawn(async move {
                loop {
                    renew(&*placement, &name, &link, &url, lease).await;
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(every) => {}
                    }
                }
            });
        }
        loop {
            self.read_live().await;
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
        }
    }

    /// Every node renewed now (all at once), then the live ones read back: at start, and when
    /// a run found the nodes other than this front end thought.
    pub async fn renew_all(&self) {
        let mut renewals = tokio::task::JoinSet::new();
        for (name, link, url) in &self.nodes {
            let (name, link, url) = (name.clone(), Arc::clone(link), url.clone());
            let placement = Arc::clone(&self.placement);
            let lease = self.lease;
            renewals.spawn(async move { renew(&*placement, &name, &link, &url, lease).await });
        }
        while renewals.join_next().await.is_some() {}
        self.read_live().await;
    }

    /// Renews the node `name` now, then reads the live nodes back: a node answered as another
    /// incarnation than this front end thought (it restarted), and is registered at once.
    pub(crate) async fn renew_one(&self, name: &NodeName) {
        if let Some((name, link, url)) = self.nodes.iter().find(|(n, ..)| n == name) {
            renew(&*self.placement, name, link, url, self.lease).await;
        }
        self.read_live().await;
    }

    /// Reads which nodes are live, with their load.
    pub(crate) async fn read_live(&self) {
        match self.placement.live_nodes().await {
            Ok(records) => {
                let live = records
                    .into_iter()
                    .filter_map(|record| {
                        let (_, link, _) =
                            self.nodes.iter().find(|(name, ..)| *name == record.name)?;
                        Some(Arc::new(LiveNode {
                            name: record.name,
                            incarnation: record.incarnation,
                            link: Arc::clone(link),
                            load: record.load,
                            placed: AtomicU64::new(0),
                        }))
                    })
                    .collect();
                *self
                    .live
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = live;
            }
            Err(error) => tracing::warn!(%error, "the live nodes could not be read"),
        }
    }

    /// The live node `name` in `incarnation`, if it is.
    pub(crate) fn live(&self, name: &NodeName, incarnation: Incarnation) -> Option<Arc<LiveNode>> {
        self.live
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find(|node| node.name == *name && node.incarnation == incarnation)
            .cloned()
    }

    /// Every live node.
    pub(crate) fn all_live(&self) -> Vec<Arc<LiveNode>> {
        self.live
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The least loaded live node that takes new sessions, by [`placement_score`] (counting what
    /// this front end placed since it last read the loads).
    pub(crate) fn least_loaded(&self) -> Option<Arc<LiveNode>> {
        let live = self
            .live
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let loads = live
            .iter()
            .map(|node| (&node.load, node.placed.load(Ordering::Relaxed)));
        let chosen = Arc::clone(live.get(least_loaded_of(loads)?)?);
        chosen.placed.fetch_add(1, Ordering::Relaxed);
        Some(chosen)
    }

    /// How long a node's lease runs.
    pub(crate) fn lease_time(&self) -> Duration {
        self.lease.duration()
    }

    /// The store placement is kept in.
    pub(crate) fn placement(&self) -> &Arc<dyn Placement> {
        &self.placement
    }

    /// Forgets what was read of the live nodes (a node answered as another incarnation), so the
    /// next round reads them again; until then nothing is placed on that node.
    pub(crate) fn forget(&self, name: &NodeName) {
        self.live
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|node| node.name != *name);
    }
}

/// The memory placement counts for each session a node holds, beyond what the node measured:
/// a session starts small (a few MiB) and grows, so raw usage alone would send every new session
/// to whichever node measured a little less, until its sessions grow.
const SESSION_RESERVE_BYTES: u64 = 64 << 20;

/// The position of the node to place a new session on among `loads` (each node's load and the
/// sessions placed there since it was read): the lowest [`placement_score`] of those not
/// draining.
fn least_loaded_of<'a>(loads: impl Iterator<Item = (&'a StoredLoad, u64)>) -> Option<usize> {
    loads
        .enumerate()
        .filter(|(_, (load, _))| !load.draining)
        .min_by_key(|(_, (load, placed))| placement_score(load, *placed))
        .map(|(position, _)| position)
}

/// How loaded a node is for placement, lowest first: the memory its processes use plus
/// [`SESSION_RESERVE_BYTES`] for each session it holds (`placed` of them this front end put
/// there since the load was read), then the sessions.
fn placement_score(load: &StoredLoad, placed: u64) -> (u64, u64) {
    let sessions = u64::from(load.sessions).saturating_add(placed);
    (
        load.memory_bytes
            .saturating_add(sessions.saturating_mul(SESSION_RESERVE_BYTES)),
        sessions,
    )
}

/// A node's name in the database, made of its `HOST:PORT` (`[a-z0-9._-]`).
fn name_of(address: &str) -> Option<NodeName> {
    let name: String = address
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
            _ => '-',
        })
        .collect();
    NodeName::parse(name.trim_matches('-')).ok()
}

/// One node's renewal: which incarnation it is, that incarnation's lease in the database (a
/// new one registered for a node without one), then the node told.
async fn renew(
    placement: &dyn Placement,
    name: &NodeName,
    link: &NodeLink,
    url: &str,
    lease: Lease,
) {
    let asked = LeaseRequest {
        incarnation: None,
        valid_for_ms: 0,
        revoke: false,
    };
    let Ok(now) = link.lease(&asked).await else {
        // unreachable: its lease runs out in the database, and it fences itself
        return;
    };
    if now.draining {
        // a drained node's sessions are in their checkpoints: given up at once, so that the
        // next call of each restores it elsewhere; a draining one is renewed but gets no more
        if now.drained {
            if let Some(incarnation) = now.incarnation
                && let Ok(true) = placement.remove_node(name, Incarnation(incarnation)).await
            {
                tracing::info!(
                    node = name.as_str(),
                    "a drained node's sessions were given up"
                );
            }
            return;
        }
        if now.incarnation.is_none() {
            return;
        }
    }
    let started = Instant::now();
    let incarnation = match now.incarnation {
        Some(incarnation) => {
            let beat = NodeBeat {
                name: name.clone(),
                incarnation: Incarnation(incarnation),
                lease,
                load: stored_load(&now),
            };
            match placement.heartbeat_node(&beat).await {
                Ok(true) => incarnation,
                Ok(false) => {
                    // lapsed or replaced in the database: the node must drop what it holds
                    let revoke = LeaseRequest {
                        incarnation: Some(incarnation),
                        valid_for_ms: 0,
                        revoke: true,
                    };
                    let _ = link.lease(&revoke).await;
                    return;
                }
                Err(error) => {
                    tracing::warn!(node = name.as_str(), %error, "a node's lease could not be renewed");
                    return;
                }
            }
        }
        None => match placement.register_node(name, url, lease).await {
            Ok(incarnation) => {
                tracing::info!(
                    node = name.as_str(),
                    incarnation = incarnation.0,
                    "registered a node"
                );
                incarnation.0
            }
            Err(error) => {
                tracing::warn!(node = name.as_str(), %error, "a node could not be registered");
                return;
            }
        },
    };
    let valid_for = lease
        .duration()
        .saturating_sub(started.elapsed())
        .saturating_sub(margin(lease));
    let grant = LeaseRequest {
        incarnation: Some(incarnation),
        valid_for_ms: u64::try_from(valid_for.as_millis()).unwrap_or(u64::MAX),
        revoke: false,
    };
    let _ = link.lease(&grant).await;
}

fn stored_load(answer: &LeaseAnswer) -> StoredLoad {
    StoredLoad {
        sessions: u32::try_from(answer.load.sessions).unwrap_or(u32::MAX),
        memory_bytes: answer.load.memory_bytes,
        draining: answer.draining,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Places `count` sessions one by one over nodes of these loads, with `least_loaded`'s
    /// choice between two reads of the loads; returns how many each node got.
    fn place(loads: &[StoredLoad], count: usize) -> Vec<u64> {
        let mut placed = vec![0u64; loads.len()];
        for _ in 0..count {
            let chosen = least_loaded_of(loads.iter().zip(placed.iter().copied())).unwrap();
            placed[chosen] += 1;
        }
        placed
    }

    fn load(sessions: u32, memory_mib: u64) -> StoredLoad {
        StoredLoad {
            sessions,
            memory_bytes: memory_mib << 20,
            draining: false,
        }
    }

    #[test]
    fn new_sessions_spread_over_nodes_that_measure_a_little_apart() {
        // measured usage differs by the warm pools, page cache and a few small sessions
        let placed = place(&[load(0, 20), load(0, 130), load(0, 150)], 6);
        assert!(placed.iter().all(|n| *n >= 1), "{placed:?}");
        // the sessions a node already holds count, not only those placed since the last read
        let placed = place(&[load(4, 40), load(0, 60)], 4);
        assert_eq!(placed, vec![0, 4]);
    }

    #[test]
    fn a_node_using_much_more_memory_gets_new_sessions_last() {
        let placed = place(&[load(1, 2048), load(1, 100), load(0, 0)], 20);
        assert_eq!(placed[0], 0, "{placed:?}");
        let mut draining = load(0, 0);
        draining.draining = true;
        assert_eq!(place(&[draining, load(9, 900)], 3), vec![0, 3]);
    }

    #[test]
    fn a_node_is_named_by_its_address() {
        assert_eq!(name_of("10.0.0.2:7070").unwrap().as_str(), "10.0.0.2-7070");
        assert_eq!(name_of("[::1]:7070").unwrap().as_str(), "1--7070");
        assert_eq!(
            name_of("Node-A.example:7070").unwrap().as_str(),
            "node-a.example-7070"
        );
    }
}
