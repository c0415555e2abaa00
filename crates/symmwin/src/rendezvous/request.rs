//! What each rank publishes before a rendezvous, and the checks that every rank
//! runs on the full set so that all of them reach the same verdict.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::{HandleType, ProviderKind};

use crate::locality::Locality;

/// One rank's request, stored as JSON under [`crate::store::Namespace::request`] (or,
/// once a group's ranks know each other's sockets, carried in its first datagram to
/// each peer).
#[derive(Clone, Serialize, Deserialize, PartialEq)]
pub struct Request {
    /// Protocol version ([`crate::protocol::PROTOCOL_VERSION`]).
    pub version: u32,
    /// Group name.
    pub group: String,
    /// Rendezvous sequence number within the group.
    pub seq: u64,
    /// Publishing rank.
    pub rank: usize,
    /// Group size.
    pub world: usize,
    /// Host or CUDA.
    pub provider: ProviderKind,
    /// Handle type the memory is exported with.
    pub handle_type: HandleType,
    /// CUDA device ordinal (-1: host).
    pub device: i32,
    /// Bytes the user asked for.
    pub size: usize,
    /// Physical bytes (size rounded up to the granularity): the stride.
    pub alloc_size: usize,
    /// Signal pad bytes per rank (0: no pads, e.g. for the pad pool itself).
    pub pad_size: usize,
    /// Pad pools this rank has for `pad_size`.
    pub pad_pools: usize,
    /// Free-slot bitmap over all pad pools, 64 slots a word.
    pub pad_free: Vec<u64>,
    /// Slots let go here whose pads must be scrubbed before reuse (host pools: a
    /// poisoned window's, or one left holding a signal), 64 slots a word.
    #[serde(default)]
    pub pad_scrub: Vec<u64>,
    /// Rendezvous calls the rank answered "not symmetric" on this group so far
    /// (see [`crate::Group::note_foreign_rendezvous`]); ranks must agree.
    #[serde(default)]
    pub foreign_calls: u64,
    /// Publishing process.
    pub pid: u32,
    // The fields below are new in protocol 6: defaulted, so that a request of an
    // older build decodes and the version check names the difference.
    /// Its start time in clock ticks since boot (0: unknown): with `pid`, the boot
    /// id and the pid namespace in `locality`, what tells it from a later process
    /// given the same pid.
    #[serde(default)]
    pub start_time: u64,
    /// When it wrote this request (milliseconds since the epoch): a request written
    /// before a peer's call began, by a process gone when that peer first looks, is
    /// stale (an earlier job's); one written during the call is a rank that died.
    #[serde(default)]
    pub written_at_ms: u64,
    /// Whether it has a process-group backend for peers it cannot map
    /// ([`crate::Group::set_remote_peers`]): a group spanning hosts needs one on every
    /// rank, which every rank checks from the requests before any handle moves.
    #[serde(default)]
    pub remote_transport: bool,
    /// Its uid.
    pub uid: u32,
    /// Its host name (for messages only: locality decides who maps whom).
    pub host: String,
    /// Where it runs: which peers can map its memory.
    pub locality: Locality,
    /// Its fabric handle (hex), for peers of its fabric domain on other hosts.
    pub fabric_handle: Option<String>,
    /// Its exchange socket.
    pub socket: PathBuf,
    /// Token it requires in messages (hex).
    pub token: String,
}

impl std::fmt::Debug for Request {
    // The token is a secret (see `Token`'s Debug): never print it, even in debug logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("version", &self.version)
            .field("group", &self.group)
            .field("seq", &self.seq)
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("provider", &self.provider)
            .field("handle_type", &self.handle_type)
            .field("device", &self.device)
            .field("size", &self.size)
            .field("alloc_size", &self.alloc_size)
            .field("pad_size", &self.pad_size)
            .field("pad_pools", &self.pad_pools)
            .field("pad_free", &self.pad_free)
            .field("pad_scrub", &self.pad_scrub)
            .field("foreign_calls", &self.foreign_calls)
            .field("pid", &self.pid)
            .field("start_time", &self.start_time)
            .field("written_at_ms", &self.written_at_ms)
            .field("remote_transport", &self.remote_transport)
            .field("uid", &self.uid)
            .field("host", &self.host)
            .field("locality", &self.locality)
            .field(
                "fabric_handle",
                &self.fabric_handle.as_ref().map(|_| "<redacted>"),
            )
            .field("socket", &self.socket)
            .field("token", &"<redacted>")
            .finish()
    }
}

impl Request {
    /// JSON bytes for the store.
    pub fn encode(&self) -> Vec<u8> {
        // Serializing plain data into a Vec cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decode what `rank` published under `key`.
    pub fn decode(key: &str, rank: usize, bytes: &[u8]) -> Result<Self> {
        let corrupt = |detail: String| {
            Error::new(
                Phase::Gather,
                ErrorKind::Corrupt {
                    key: key.to_owned(),
                    detail,
                },
            )
            .with_peer(rank)
        };
        let request: Request =
            serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not a request: {e}")))?;
        if request.rank != rank {
            return Err(corrupt(format!(
                "claims rank {} under rank {rank}'s key",
                request.rank
            )));
        }
        Ok(request)
    }
}

/// Check that all requests agree; the error names the field and who holds what.
pub fn validate(requests: &[Request]) -> Result<()> {
    if requests.is_empty() {
        return Err(Error::invalid("no requests to validate"));
    }
    agree(requests, "version", |r| r.version).map_err(|e| {
        with_hint(
            e,
            "the ranks run symmwin builds that speak different rendezvous protocols: \
             install the same symmwin release on every rank",
        )
    })?;
    agree(requests, "group", |r| r.group.as_str())?;
    agree(requests, "seq", |r| r.seq)?;
    agree(requests, "world", |r| r.world)?;
    agree(requests, "provider", |r| r.provider)?;
    agree(requests, "handle_type", |r| r.handle_type)?;
    agree(requests, "size", |r| r.size)?;
    agree(requests, "alloc_size", |r| r.alloc_size)?;
    agree(requests, "pad_size", |r| r.pad_size)?;
    agree(requests, "pad_pools", |r| r.pad_pools)?;
    agree(requests, "foreign_calls", |r| r.foreign_calls).map_err(|e| {
        with_hint(
            e,
            "rendezvous calls answered None because the memory is not symmwin's: \
             the rank(s) with the higher count skipped a rendezvous the others took \
             part in; allocate that tensor with symm_mem.empty on every rank",
        )
    })?;
    if requests.len() != requests[0].world {
        return Err(Error::new(
            Phase::Gather,
            ErrorKind::Mismatch {
                field: "world",
                detail: format!(
                    "{} requests for world size {}",
                    requests.len(),
                    requests[0].world
                ),
            },
        ));
    }
    check_reachable(requests)
}

/// Every request's `field` (read by `get`) is the same; otherwise a mismatch that
/// lists each value with the ranks that hold it.
fn agree<'a, T: PartialEq + std::fmt::Debug>(
    requests: &'a [Request],
    field: &'static str,
    get: impl Fn(&'a Request) -> T,
) -> Result<()> {
    let first = get(&requests[0]);
    if requests.iter().all(|r| get(r) == first) {
        return Ok(());
    }
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for r in requests {
        // Values come from peers (a host name may be anything): echo a bounded part.
        groups
            .entry(symmwin_device::text::debug_clipped(&get(r)))
            .or_default()
            .push(r.rank);
    }
    let listed = groups.len().min(symmwin_device::text::MAX_RANKS_LISTED);
    let mut detail = groups
        .iter()
        .take(listed)
        .map(|(value, ranks)| format!("{value} on rank(s) {}", symmwin_device::text::ranks(ranks)))
        .collect::<Vec<_>>()
        .join("; ");
    if groups.len() > listed {
        detail.push_str(&format!("; ... {} more values", groups.len() - listed));
    }
    Err(Error::new(
        Phase::Gather,
        ErrorKind::Mismatch { field, detail },
    ))
}

/// `e` with `hint` after its mismatch detail, in parentheses: what to do about it.
fn with_hint(mut e: Error, hint: &str) -> Error {
    if let ErrorKind::Mismatch { detail, .. } = e.kind_mut() {
        detail.push_str(&format!(" ({hint})"));
    }
    e
}

/// Check that every rank reaches the ranks it cannot map (other hosts): each rank with
/// such a peer, and that peer, needs a process-group backend. Every rank reaches the
/// same verdict from the same requests, before any handle moves, so that a group
/// spanning hosts without one fails its first rendezvous on every rank instead of its
/// first barrier.
fn check_reachable(requests: &[Request]) -> Result<()> {
    let lacking: Vec<usize> = (0..requests.len())
        .filter(|&r| !requests[r].remote_transport)
        .collect();
    let localities: Vec<&Locality> = requests.iter().map(|r| &r.locality).collect();
    let one_host = localities
        .iter()
        .all(|l| localities[0].shares_kernel_and_sockets(l));
    if lacking.is_empty() || one_host {
        return Ok(());
    }
    let handle_type = requests[0].handle_type;
    let mut cut_off: Vec<(usize, Vec<usize>)> = Vec::new();
    for &rank in &lacking {
        let reach = crate::locality::reach_of(&localities, rank, handle_type);
        let far: Vec<usize> = (0..reach.len())
            .filter(|&r| !reach[r].is_mapped())
            .collect();
        if !far.is_empty() {
            cut_off.push((rank, far));
        }
    }
    if cut_off.is_empty() {
        return Ok(());
    }
    const LISTED: usize = 4;
    let without: Vec<usize> = cut_off.iter().map(|(rank, _)| *rank).collect();
    let mut pairs: Vec<String> = cut_off
        .iter()
        .take(LISTED)
        .map(|(rank, far)| {
            format!(
                "rank {rank} cannot map {}",
                symmwin_device::text::ranks(far)
            )
        })
        .collect();
    if cut_off.len() > LISTED {
        pairs.push(format!("... {} more", cut_off.len() - LISTED));
    }
    Err(Error::new(
        Phase::Gather,
        ErrorKind::Unsupported(format!(
            "group {} spans hosts and rank(s) {} have no process-group backend to reach the \
             ranks they cannot map ({}: another host, kernel, socket directory, pid \
             namespace or SYMMWIN_HOST_ID), so no window of it could signal across its \
             hosts; give every rank one before its first rendezvous (torch's adapter does; \
             with the Rust API call Group::set_remote_peers, with the C ABI \
             symmwin_group_set_remote), or run the ranks where they can map each other",
            symmwin_device::text::debug_clipped(&requests[0].group),
            symmwin_device::text::ranks(&without),
            pairs.join("; "),
        )),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::PROTOCOL_VERSION;

    fn request(rank: usize, size: usize) -> Request {
        Request {
            version: PROTOCOL_VERSION.into(),
            group: "g".into(),
            seq: 3,
            rank,
            world: 3,
            provider: ProviderKind::Host,
            handle_type: HandleType::PosixFd,
            device: -1,
            size,
            alloc_size: 4096,
            pad_size: 0,
            pad_pools: 0,
            pad_free: vec![],
            pad_scrub: vec![],
            foreign_calls: 0,
            pid: 1,
            start_time: 0,
            written_at_ms: 0,
            remote_transport: false,
            uid: 0,
            host: "h".into(),
            locality: Locality {
                host_id: String::new(),
                boot_id: "b".into(),
                uid: 0,
                socket_dir: crate::locality::DirIdentity { dev: 1, ino: 2 },
                pid_namespace: 1,
                fabric_domain: None,
            },
            fabric_handle: None,
            socket: "/tmp/x".into(),
            token: "00".repeat(16),
        }
    }

    #[test]
    fn mismatch_names_field_and_ranks() {
        let reqs = vec![request(0, 100), request(1, 200), request(2, 100)];
        let err = validate(&reqs).unwrap_err().to_string();
        assert!(err.contains("size"), "{err}");
        assert!(err.contains("100 on rank(s) [0, 2]"), "{err}");
        assert!(err.contains("200 on rank(s) [1]"), "{err}");
    }

    #[test]
    fn a_rank_that_skipped_a_rendezvous_is_named() {
        let mut reqs: Vec<_> = (0..3).map(|r| request(r, 100)).collect();
        reqs[1].foreign_calls = 1;
        let err = validate(&reqs).unwrap_err().to_string();
        assert!(
            err.contains("foreign_calls: 0 on rank(s) [0, 2]; 1 on rank(s) [1]"),
            "{err}"
        );
        assert!(err.contains("not symmwin's"), "{err}");
    }

    #[test]
    fn huge_peer_fields_give_a_small_error() {
        let mut reqs: Vec<_> = (0..3).map(|r| request(r, 100)).collect();
        reqs[2].group = "g".repeat(10 << 20);
        let err = validate(&reqs).unwrap_err().to_string();
        assert!(err.contains("ranks disagree on group"), "{err}");
        assert!(err.len() < 1000, "{} bytes", err.len());
        let many: Vec<_> = (0..5000)
            .map(|r| {
                let mut q = request(r, r);
                q.world = 5000;
                q
            })
            .collect();
        let err = validate(&many).unwrap_err().to_string();
        assert!(err.len() < 4000, "{} bytes", err.len());
    }

    #[test]
    fn agreement_passes_and_rank_spoofing_is_caught() {
        let reqs: Vec<_> = (0..3).map(|r| request(r, 100)).collect();
        validate(&reqs).unwrap();
        let bytes = reqs[1].encode();
        assert_eq!(Request::decode("k", 1, &bytes).unwrap(), reqs[1]);
        assert!(Request::decode("k", 2, &bytes).is_err());
        assert!(Request::decode("k", 2, b"{garbage").is_err());
    }

    #[test]
    fn ranks_that_cannot_reach_the_ranks_they_cannot_map_are_refused_alike() {
        let mut reqs: Vec<_> = (0..3).map(|r| request(r, 100)).collect();
        validate(&reqs).unwrap();
        reqs[2].locality.host_id = "b".into();
        let err = validate(&reqs).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Unsupported(_)), "{err}");
        assert_eq!(err.phase(), Phase::Gather);
        let text = err.to_string();
        assert!(
            text.contains("rank(s) [0, 1, 2] have no process-group backend"),
            "{text}"
        );
        assert!(
            text.contains("rank 0 cannot map [2]; rank 1 cannot map [2]; rank 2 cannot map [0, 1]"),
            "{text}"
        );
        // A backend on one side only: the other side still cannot reach it.
        reqs[2].remote_transport = true;
        let text = validate(&reqs).unwrap_err().to_string();
        assert!(text.contains("rank(s) [0, 1] have no"), "{text}");
        assert!(
            text.contains("rank 0 cannot map [2]; rank 1 cannot map [2]: "),
            "{text}"
        );
        for r in &mut reqs {
            r.remote_transport = true;
        }
        validate(&reqs).unwrap();
    }
}
