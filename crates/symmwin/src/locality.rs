//! Who can map whom: the ranks of one group whose memory this process can map, and
//! how each handle reaches us.
//!
//! - POSIX fd handles travel over a Unix socket, so two processes can share memory only
//!   when one kernel runs both (the same boot id) and both see the same socket
//!   directory (the same directory object, identified by device and inode, which a
//!   private mount of the socket directory in another mount namespace does not share).
//!   The hostname decides nothing: containers share or differ in it freely.
//! - Both must also share a pid namespace (the inode of `/proc/self/ns/pid`): a peer
//!   proves who it is by the pid the kernel attaches to its datagrams, and the kernel
//!   reports pid 0 for a sender outside our pid namespace, and a pid of its own
//!   namespace to a sender's parent namespace, never the pid the sender published.
//!   Ranks of one kernel in different pid namespaces (one container per rank sharing
//!   a socket volume) are therefore other hosts: unmapped, reached through the process
//!   group, and a warning says so once per process.
//! - Fabric handles are plain bytes: peers in the same NVLink fabric domain (cluster
//!   UUID and clique id) import them from the store; peers of the same kernel and
//!   socket directory still get theirs over the socket.
//! - `SYMMWIN_HOST_ID` splits what would otherwise be one host into several (ranks with
//!   different ids are never mapped), which is how tests put several "hosts" on one
//!   machine. It never joins what the checks above keep apart.
//!
//! The partition is computed from what every rank published, so all ranks reach the
//! same verdict; the probe of each peer's socket then confirms it from here and fails
//! closed (an error naming the peer) when the published identity is not what we see.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::{FabricDomain, HandleType};

/// Where the kernel's boot id lives: random per boot, the same in every namespace.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// This process's pid namespace: the link's target is the namespace's inode.
const PID_NAMESPACE_PATH: &str = "/proc/self/ns/pid";

/// The inode of this process's pid namespace (equal for two processes exactly when
/// they share it).
fn pid_namespace() -> Result<u64> {
    let meta = std::fs::metadata(PID_NAMESPACE_PATH)
        .map_err(|e| Error::os(Phase::Exchange, "stat(/proc/self/ns/pid)", e))?;
    Ok(meta.ino())
}

/// A directory as the kernel identifies it: equal across mount namespaces exactly when
/// it is the same directory object (a bind mount keeps it, a private tmpfs does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DirIdentity {
    /// `st_dev` of the directory.
    pub dev: u64,
    /// `st_ino` of the directory.
    pub ino: u64,
}

impl DirIdentity {
    /// Identity of `dir` as this process sees it.
    pub fn of(dir: &Path) -> Result<Self> {
        let meta = std::fs::metadata(dir)
            .map_err(|e| Error::os(Phase::Exchange, "stat(socket dir)", e))?;
        Ok(DirIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

/// What one rank publishes about where it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Locality {
    /// `SYMMWIN_HOST_ID` (empty when unset): ranks with different ids are never mapped.
    pub host_id: String,
    /// The kernel's boot id.
    pub boot_id: String,
    /// Its uid (a socket directory is private to one uid).
    pub uid: u32,
    /// Its socket directory.
    pub socket_dir: DirIdentity,
    /// The inode of its pid namespace: a pid it publishes or sends means the same
    /// process to a peer only within one pid namespace.
    pub pid_namespace: u64,
    /// Its device's fabric domain, when the device reports one.
    pub fabric_domain: Option<FabricDomain>,
}

impl Locality {
    /// This process's locality, with the socket directory `socket_dir`.
    pub fn here(
        host_id: Option<&str>,
        socket_dir: &Path,
        fabric_domain: Option<FabricDomain>,
    ) -> Result<Self> {
        let boot_id = std::fs::read_to_string(BOOT_ID_PATH)
            .map_err(|e| Error::os(Phase::Exchange, "read(boot_id)", e))?
            .trim()
            .to_owned();
        Ok(Locality {
            host_id: host_id.unwrap_or_default().to_owned(),
            boot_id,
            uid: rustix::process::getuid().as_raw(),
            socket_dir: DirIdentity::of(socket_dir)?,
            pid_namespace: pid_namespace()?,
            fabric_domain,
        })
    }

    /// True when fds can pass between the two processes (modulo the socket probe) and
    /// each can tell, from the pid the kernel attaches, that a datagram is the other's.
    pub(crate) fn shares_kernel_and_sockets(&self, other: &Locality) -> bool {
        self.shares_all_but_pid_namespace(other) && self.pid_namespace == other.pid_namespace
    }

    fn shares_all_but_pid_namespace(&self, other: &Locality) -> bool {
        self.host_id == other.host_id
            && self.boot_id == other.boot_id
            && self.uid == other.uid
            && self.socket_dir == other.socket_dir
    }

    /// True when a pid `other` publishes names the same process here (one kernel, one
    /// pid namespace), so that whether it is still alive can be asked of this kernel.
    pub(crate) fn shares_pids(&self, other: &Locality) -> bool {
        self.boot_id == other.boot_id && self.pid_namespace == other.pid_namespace
    }

    /// True when both report the same fabric domain.
    fn shares_fabric(&self, other: &Locality) -> bool {
        self.host_id == other.host_id
            && self.fabric_domain.is_some()
            && self.fabric_domain == other.fabric_domain
    }
}

/// How a peer's memory reaches this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Our own memory.
    Own,
    /// Its handle comes over the exchange socket.
    Socket,
    /// Its fabric handle comes from its request in the store.
    Store,
    /// Not mappable: reached only through the process group's backend.
    Unmapped,
}

impl Reach {
    /// True when the peer's memory is mapped in the window.
    pub fn is_mapped(self) -> bool {
        self != Reach::Unmapped
    }
}

/// How every rank's memory reaches rank `me`, from what all ranks published. Every
/// rank computes the same relation, and it is symmetric (a maps b iff b maps a); the
/// only side effect is the warning of [`warn_pid_namespaces_once`].
pub fn decide(localities: &[&Locality], me: usize, handle_type: HandleType) -> Vec<Reach> {
    let mine = localities[me];
    let reach = reach_of(localities, me, handle_type);
    for (rank, how) in reach.iter().enumerate() {
        let theirs = localities[rank];
        let apart = !matches!(how, Reach::Own | Reach::Socket);
        if apart && mine.shares_all_but_pid_namespace(theirs) {
            warn_pid_namespaces_once(me, rank, mine, theirs);
        }
    }
    reach
}

/// [`decide`] for any rank `me`, without its warning: what every rank computes of
/// every other, e.g. to check that each can reach the ranks it cannot map.
pub(crate) fn reach_of(localities: &[&Locality], me: usize, handle_type: HandleType) -> Vec<Reach> {
    let mine = localities[me];
    localities
        .iter()
        .enumerate()
        .map(|(rank, theirs)| {
            if rank == me {
                Reach::Own
            } else if mine.shares_kernel_and_sockets(theirs) {
                Reach::Socket
            } else if handle_type == HandleType::Fabric && mine.shares_fabric(theirs) {
                Reach::Store
            } else {
                Reach::Unmapped
            }
        })
        .collect()
}

/// Say once per process that a peer would be mapped but for its pid namespace: a
/// one-container-per-rank set-up loses the direct mapping (NVLink on GPUs) between
/// its ranks without a word otherwise.
fn warn_pid_namespaces_once(me: usize, peer: usize, mine: &Locality, theirs: &Locality) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    tracing::warn!("{}", pid_namespace_warning(me, peer, mine, theirs));
}

fn pid_namespace_warning(me: usize, peer: usize, mine: &Locality, theirs: &Locality) -> String {
    format!(
        "symmwin rank {me}: rank {peer} runs on this kernel with this socket directory but \
         in another pid namespace (pid:[{}], ours pid:[{}]), so it is treated as another \
         host: its memory is not mapped here and what reaches it goes through the process \
         group's backend (this is said once per process; ranks that should map each other \
         must share a pid namespace, e.g. containers run with --pid=host)",
        theirs.pid_namespace, mine.pid_namespace
    )
}

/// Confirm from here that `peer`'s socket lies in the directory it published: a socket
/// whose directory has the identity `published`. Fails closed naming the peer; a socket
/// that is gone is left to the exchange (the peer exited or died).
pub fn probe_socket(peer: usize, socket: &Path, published: DirIdentity) -> Result<()> {
    let refuse = |why: String| {
        Error::new(
            Phase::Exchange,
            ErrorKind::Mismatch {
                field: "locality",
                detail: format!(
                    "rank {peer} publishes our kernel and socket directory, but its socket {} {why}",
                    symmwin_device::text::clip(&socket.to_string_lossy())
                ),
            },
        )
        .with_peer(peer)
    };
    let meta = match std::fs::symlink_metadata(socket) {
        Ok(meta) => meta,
        // A peer that published our directory and then exited (or died) removed or
        // left its socket there: the exchange reports it, naming the likeliest culprit.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(refuse(format!("is not visible here ({e})"))),
    };
    if !meta.file_type().is_socket() {
        return Err(refuse("is not a socket".into()));
    }
    let dir = socket
        .parent()
        .ok_or_else(|| refuse("has no directory".into()))?;
    let seen =
        DirIdentity::of(dir).map_err(|e| refuse(format!("has an unreadable directory ({e})")))?;
    if seen != published {
        return Err(refuse(format!(
            "lies in another directory here (device {} inode {}, published device {} inode {})",
            seen.dev, seen.ino, published.dev, published.ino
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(host_id: &str, boot: &str, dir: (u64, u64), fabric: Option<(&str, u32)>) -> Locality {
        Locality {
            host_id: host_id.into(),
            boot_id: boot.into(),
            uid: 1000,
            socket_dir: DirIdentity {
                dev: dir.0,
                ino: dir.1,
            },
            pid_namespace: 4026531836,
            fabric_domain: fabric.map(|(uuid, clique)| FabricDomain {
                cluster_uuid: uuid.into(),
                clique_id: clique,
            }),
        }
    }

    fn mapped(localities: &[Locality], handle_type: HandleType) -> Vec<Vec<Reach>> {
        let refs: Vec<&Locality> = localities.iter().collect();
        (0..refs.len())
            .map(|me| decide(&refs, me, handle_type))
            .collect()
    }

    fn assert_symmetric(table: &[Vec<Reach>]) {
        for (a, row) in table.iter().enumerate() {
            for (b, reach) in row.iter().enumerate() {
                assert_eq!(reach.is_mapped(), table[b][a].is_mapped(), "{a} <-> {b}");
            }
        }
    }

    #[test]
    fn one_kernel_and_socket_dir_is_one_host() {
        let l = vec![at("", "boot", (1, 2), None); 3];
        let table = mapped(&l, HandleType::PosixFd);
        assert_eq!(table[1], vec![Reach::Socket, Reach::Own, Reach::Socket]);
        assert_symmetric(&table);
    }

    #[test]
    fn another_boot_id_is_another_host_whatever_the_hostname() {
        let l = [at("", "a", (1, 2), None), at("", "b", (1, 2), None)];
        let table = mapped(&l, HandleType::PosixFd);
        assert_eq!(table[0], vec![Reach::Own, Reach::Unmapped]);
        assert_symmetric(&table);
    }

    #[test]
    fn a_private_socket_dir_splits_one_kernel() {
        // Same kernel, socket directory on a per-namespace tmpfs: fds cannot pass.
        let l = [
            at("", "k", (50, 1), None),
            at("", "k", (50, 1), None),
            at("", "k", (51, 1), None),
            at("", "k", (51, 1), None),
        ];
        let table = mapped(&l, HandleType::PosixFd);
        assert_eq!(
            table[2],
            vec![Reach::Unmapped, Reach::Unmapped, Reach::Own, Reach::Socket]
        );
        assert_symmetric(&table);
    }

    #[test]
    fn host_id_splits_but_never_joins() {
        let split = [at("x", "k", (1, 1), None), at("y", "k", (1, 1), None)];
        assert_eq!(mapped(&split, HandleType::PosixFd)[0][1], Reach::Unmapped);
        let joined = [at("x", "k1", (1, 1), None), at("x", "k2", (1, 1), None)];
        assert_eq!(mapped(&joined, HandleType::PosixFd)[0][1], Reach::Unmapped);
    }

    #[test]
    fn other_uid_is_not_mapped() {
        let mut other = at("", "k", (1, 1), None);
        other.uid = 0;
        let l = [at("", "k", (1, 1), None), other];
        assert_eq!(mapped(&l, HandleType::PosixFd)[0][1], Reach::Unmapped);
    }

    #[test]
    fn fabric_domain_maps_across_hosts_only_with_fabric_handles() {
        let d = Some(("00112233445566778899aabbccddeeff", 7));
        let l = [
            at("", "node0", (1, 1), d),
            at("", "node0", (1, 1), d),
            at("", "node1", (9, 9), d),
            at(
                "",
                "node2",
                (9, 9),
                Some(("00112233445566778899aabbccddeeff", 8)),
            ),
            at("", "node3", (9, 9), None),
        ];
        let fabric = mapped(&l, HandleType::Fabric);
        assert_eq!(
            fabric[0],
            vec![
                Reach::Own,
                Reach::Socket,
                Reach::Store,
                Reach::Unmapped,
                Reach::Unmapped
            ]
        );
        assert_eq!(fabric[2][0], Reach::Store);
        assert_symmetric(&fabric);
        // The same domain means nothing to fd handles.
        let fd = mapped(&l, HandleType::PosixFd);
        assert_eq!(fd[0][2], Reach::Unmapped);
        assert_symmetric(&fd);
    }

    #[test]
    fn host_id_also_splits_a_fabric_domain() {
        let d = Some(("ff", 1));
        let l = [at("a", "n0", (1, 1), d), at("b", "n1", (2, 2), d)];
        assert_eq!(mapped(&l, HandleType::Fabric)[0][1], Reach::Unmapped);
    }

    #[test]
    fn probe_accepts_a_socket_in_the_published_dir_and_names_a_peer_otherwise() {
        let dir = std::env::temp_dir().join(format!("symmwin-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.sock");
        let _ = std::fs::remove_file(&path);
        let _listener = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let id = DirIdentity::of(&dir).unwrap();
        probe_socket(3, &path, id).unwrap();

        let other = DirIdentity {
            dev: id.dev,
            ino: id.ino + 1,
        };
        let err = probe_socket(3, &path, other).unwrap_err();
        assert_eq!(err.peer(), Some(3));
        assert!(err.to_string().contains("another directory"), "{err}");

        // A socket that is gone is the exchange's to report (it names the culprit).
        probe_socket(4, &dir.join("missing.sock"), id).unwrap();
        let not_socket = dir.join("plain");
        std::fs::write(&not_socket, b"").unwrap();
        assert!(probe_socket(5, &not_socket, id).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn another_pid_namespace_on_one_kernel_is_another_host() {
        // One container per rank: the kernel and the socket volume are shared, the
        // pid namespaces are not, so a pid means nothing to the peer.
        let mut l = vec![at("", "k", (1, 1), None); 4];
        l[2].pid_namespace += 1;
        l[3].pid_namespace += 1;
        let table = mapped(&l, HandleType::PosixFd);
        assert_eq!(
            table[0],
            vec![Reach::Own, Reach::Socket, Reach::Unmapped, Reach::Unmapped]
        );
        assert_eq!(
            table[3],
            vec![Reach::Unmapped, Reach::Unmapped, Reach::Socket, Reach::Own]
        );
        assert_symmetric(&table);
        assert!(!l[0].shares_pids(&l[2]));
        assert!(l[0].shares_pids(&l[1]));
        // Fabric handles are bytes: a pid namespace does not stop them.
        let d = Some(("ff", 1));
        let mut f = [at("", "k", (1, 1), d), at("", "k", (1, 1), d)];
        f[1].pid_namespace += 1;
        assert_eq!(mapped(&f, HandleType::Fabric)[0][1], Reach::Store);
        let warning = pid_namespace_warning(0, 2, &l[0], &l[2]);
        assert!(
            warning.contains("another pid namespace") && warning.contains("--pid=host"),
            "{warning}"
        );
    }

    #[test]
    fn a_huge_peer_socket_path_is_clipped_in_the_probe_error() {
        let dir = std::env::temp_dir().join(format!("symmwin-probe-long-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("plain");
        std::fs::write(&plain, b"").unwrap();
        let id = DirIdentity::of(&dir).unwrap();
        // Not a socket: the refusal quotes the path; 100 MB of it must not come back.
        let err = probe_socket(1, &plain, id).unwrap_err().to_string();
        assert!(err.contains("is not a socket"), "{err}");
        let huge = std::path::PathBuf::from(format!("/{}", "d".repeat(100 << 20)));
        let err = probe_socket(1, &huge, id).unwrap_err().to_string();
        assert!(
            err.contains("is not visible here"),
            "{}",
            symmwin_device::text::clip(&err)
        );
        assert!(
            err.contains("more bytes"),
            "{}",
            symmwin_device::text::clip(&err)
        );
        assert!(err.len() < 2000, "{} bytes", err.len());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn here_reads_the_pid_namespace() {
        let here = Locality::here(None, &std::env::temp_dir(), None).unwrap();
        let link = std::fs::read_link("/proc/self/ns/pid").unwrap();
        assert_eq!(
            link.to_string_lossy(),
            format!("pid:[{}]", here.pid_namespace)
        );
    }

    #[test]
    fn here_reads_the_boot_id() {
        let dir = std::env::temp_dir();
        let here = Locality::here(Some("h1"), &dir, None).unwrap();
        assert_eq!(here.host_id, "h1");
        assert_eq!(here.boot_id.len(), 36, "{}", here.boot_id);
        assert_eq!(here.socket_dir, DirIdentity::of(&dir).unwrap());
    }
}
