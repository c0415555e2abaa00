//! The host side of `kernels/wait.cuh`: the record a timed-out device wait writes before
//! it traps, and the kernel argument that tells a kernel where to write it.
//!
//! The record lives in pinned host memory mapped into the device, so it can still be
//! read after the trap has lost the CUDA context. The first record seen is kept for the
//! life of the process (the context never comes back), and every later call that
//! reaches the CUDA provider reports it as [`ErrorKind::ContextLost`].

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::context::PrimaryContext;
use super::driver::DriverError;
use super::pinned::Pinned;
use symmwin_device::device_timeout::DeviceTimeout;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

/// Which operation waited; numbers shared with `WaitOp` in `wait.cuh`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WaitOp {
    Barrier = 1,
    PutSignal = 2,
    WaitSignal = 3,
}

impl WaitOp {
    pub(super) fn name_of(raw: u32) -> &'static str {
        match raw {
            1 => "barrier",
            2 => "put_signal",
            3 => "wait_signal",
            // The device ops (`OpId` in ops/params.rs).
            4 => "all_to_all",
            5 => "all_to_all_vdev",
            6 => "all_to_all_vdev_2d",
            7 => "all_to_all_vdev_2d_offset",
            8 => "broadcast",
            9 => "wait_for_signal",
            10 => "tile_reduce",
            11 => "multi_root_tile_reduce",
            12 => "put",
            13 => "get",
            14 => "put_with_signal",
            _ => "device op",
        }
    }
}

/// Peers a record lists (`kRecordPeers`).
const RECORD_PEERS: usize = 16;

/// `state` once the device has written every other field (`kRecordComplete`, "SYMW").
const RECORD_COMPLETE: u32 = 0x5359_4d57;

/// Layout of `symmwin::TimeoutRecord` in `wait.cuh`.
#[repr(C)]
struct TimeoutRecord {
    state: AtomicU32,
    op: AtomicU32,
    channel: AtomicU32,
    rank: AtomicU32,
    missing: AtomicU32,
    listed: AtomicU32,
    waited_ns: AtomicU64,
    timeout_ns: AtomicU64,
    peers: [AtomicU32; RECORD_PEERS],
    /// 0 for a timeout, else the pid of `peers[0]`, whose end ended the wait.
    exited_pid: AtomicU32,
    _reserved: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<TimeoutRecord>() == 112);

/// Layout of `symmwin::WaitReport` in `wait.cuh`: passed by value to every kernel that
/// waits for a peer.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WaitReport {
    /// Device address of the host-mapped [`TimeoutRecord`].
    pub(super) record: u64,
    /// Limit of each wait of the launch, in nanoseconds (> 0).
    pub(super) timeout_ns: u64,
    /// This rank in the group.
    pub(super) rank: u32,
    /// [`WaitOp`] of the launching operation.
    pub(super) op: u32,
    /// Device address of the exit marks of the group's ranks (`exit_marks.rs`), or 0:
    /// the waits look at no marks.
    pub(super) exits: u64,
}

const _: () = assert!(std::mem::size_of::<WaitReport>() == 32);

/// The first device timeout this process has seen; the context it lost never recovers.
static CONTEXT_LOST: OnceLock<DeviceTimeout> = OnceLock::new();

fn lost_error(timeout: &DeviceTimeout) -> Error {
    let err = Error::new(
        Phase::Signal,
        ErrorKind::ContextLost(Box::new(timeout.clone())),
    )
    .at_rank(timeout.rank);
    match timeout.missing.first() {
        Some(&peer) => err.with_peer(peer),
        None => err,
    }
}

/// Fails with [`ErrorKind::ContextLost`] once any device wait of this process has timed
/// out (and been read from its record).
pub fn check_context() -> Result<()> {
    match CONTEXT_LOST.get() {
        Some(timeout) => Err(lost_error(timeout)),
        None => Ok(()),
    }
}

/// A [`TimeoutRecord`] in pinned host memory that the device writes through its mapping.
#[derive(Debug)]
pub(super) struct HostRecord(Pinned<TimeoutRecord>);

impl HostRecord {
    pub(super) fn new(ctx: &Arc<PrimaryContext>) -> std::result::Result<Self, DriverError> {
        let empty = TimeoutRecord {
            state: AtomicU32::new(0),
            op: AtomicU32::new(0),
            channel: AtomicU32::new(0),
            rank: AtomicU32::new(0),
            missing: AtomicU32::new(0),
            listed: AtomicU32::new(0),
            waited_ns: AtomicU64::new(0),
            timeout_ns: AtomicU64::new(0),
            peers: std::array::from_fn(|_| AtomicU32::new(0)),
            exited_pid: AtomicU32::new(0),
            _reserved: AtomicU32::new(0),
        };
        let what = "freeing the signal timeout record";
        Ok(HostRecord(Pinned::new(ctx, empty, what)?))
    }

    /// The kernel argument for one launch of `op` by `rank`, whose waits look at the
    /// exit marks at device address `exits` (0: none).
    pub(super) fn report(&self, op: WaitOp, rank: u32, timeout_ns: u64, exits: u64) -> WaitReport {
        WaitReport {
            record: self.0.device,
            timeout_ns,
            rank,
            op: op as u32,
            exits,
        }
    }

    fn record(&self) -> &TimeoutRecord {
        self.0.get()
    }

    /// Fails with [`ErrorKind::ContextLost`] once a kernel has written the record (or
    /// any other record of the process was read). The no-error path is two loads.
    #[inline]
    pub(super) fn check(&self) -> Result<()> {
        check_context()?;
        let record = self.record();
        if record.state.load(Ordering::Acquire) != RECORD_COMPLETE {
            return Ok(());
        }
        Err(lost_error(CONTEXT_LOST.get_or_init(|| decode(record))))
    }
}

fn decode(record: &TimeoutRecord) -> DeviceTimeout {
    let load = |word: &AtomicU32| word.load(Ordering::Relaxed);
    let listed = (load(&record.listed) as usize).min(RECORD_PEERS);
    let missing: Vec<usize> = record.peers[..listed]
        .iter()
        .map(|p| load(p) as usize)
        .collect();
    let exited = match (load(&record.exited_pid), missing.first()) {
        (0, _) | (_, None) => None,
        (pid, Some(_)) => Some(
            symmwin_device::peer_watch::exit_of(pid)
                .unwrap_or_else(|| symmwin_device::peer_exit::PeerExit::exited(pid)),
        ),
    };
    DeviceTimeout {
        exited,
        op: WaitOp::name_of(load(&record.op)),
        channel: load(&record.channel),
        rank: load(&record.rank) as usize,
        unlisted: (load(&record.missing) as usize).saturating_sub(missing.len()),
        missing,
        waited: Duration::from_nanos(record.waited_ns.load(Ordering::Relaxed)),
        limit: Duration::from_nanos(record.timeout_ns.load(Ordering::Relaxed)),
    }
}

impl Drop for HostRecord {
    fn drop(&mut self) {
        // Keep what the device wrote before the memory goes.
        if self.check().is_err() {
            tracing::debug!("freeing a signal timeout record after a device timeout");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(listed: u32, missing: u32) -> TimeoutRecord {
        TimeoutRecord {
            state: AtomicU32::new(RECORD_COMPLETE),
            op: AtomicU32::new(WaitOp::Barrier as u32),
            channel: AtomicU32::new(7),
            rank: AtomicU32::new(2),
            missing: AtomicU32::new(missing),
            listed: AtomicU32::new(listed),
            waited_ns: AtomicU64::new(1_500_000_000),
            timeout_ns: AtomicU64::new(1_000_000_000),
            peers: std::array::from_fn(|i| AtomicU32::new(i as u32 + 10)),
            exited_pid: AtomicU32::new(0),
            _reserved: AtomicU32::new(0),
        }
    }

    #[test]
    fn record_decodes_every_field() {
        let t = decode(&filled(2, 5));
        assert_eq!(t.op, "barrier");
        assert_eq!((t.channel, t.rank), (7, 2));
        assert_eq!(t.missing, vec![10, 11]);
        assert_eq!(t.unlisted, 3);
        assert_eq!(t.waited, Duration::from_millis(1500));
        assert_eq!(t.limit, Duration::from_secs(1));
        let err = lost_error(&t);
        assert_eq!(
            (err.rank(), err.peer(), err.phase()),
            (Some(2), Some(10), Phase::Signal)
        );
        assert!(err.is_context_lost() && !err.is_timeout());
        let text = err.to_string();
        assert!(
            text.starts_with("symmwin rank 2 [signal] peer 10: device barrier on channel 7"),
            "{text}"
        );
    }

    #[test]
    fn a_record_of_an_ended_peer_names_it_and_its_pid() {
        let record = filled(1, 1);
        record.exited_pid.store(4242, Ordering::Relaxed);
        let t = decode(&record);
        let exit = t.exited.clone().expect("an ended peer");
        assert_eq!((exit.pid, exit.how.as_str()), (4242, "exited"));
        let err = lost_error(&t);
        assert_eq!((err.rank(), err.peer()), (Some(2), Some(10)));
        let text = err.to_string();
        assert!(
            text.contains("rank 10 (pid 4242) exited while rank 2 waited for it on channel 7"),
            "{text}"
        );
        assert!(!text.contains("timed out"), "{text}");
    }

    #[test]
    fn a_corrupt_count_never_reads_past_the_peers() {
        let t = decode(&filled(u32::MAX, 3));
        assert_eq!(t.missing.len(), RECORD_PEERS);
        assert_eq!(t.unlisted, 0);
        assert_eq!(WaitOp::name_of(99), "device op");
        for op in [WaitOp::Barrier, WaitOp::PutSignal, WaitOp::WaitSignal] {
            assert_ne!(WaitOp::name_of(op as u32), "device op");
        }
    }

    #[test]
    fn layouts_match_wait_cuh() {
        assert_eq!(std::mem::offset_of!(TimeoutRecord, waited_ns), 24);
        assert_eq!(std::mem::offset_of!(TimeoutRecord, timeout_ns), 32);
        assert_eq!(std::mem::offset_of!(TimeoutRecord, peers), 40);
        assert_eq!(std::mem::offset_of!(TimeoutRecord, exited_pid), 104);
        assert_eq!(std::mem::offset_of!(WaitReport, exits), 24);
        assert_eq!(std::mem::offset_of!(WaitReport, rank), 16);
        assert_eq!(std::mem::offset_of!(WaitReport, op), 20);
        assert_eq!(std::mem::align_of::<WaitReport>(), 8);
        let text = include_str!("../kernels/wait.cuh");
        assert!(
            text.contains(&format!("kRecordComplete = {RECORD_COMPLETE:#x}u")),
            "state value"
        );
        assert!(text.contains(&format!("kRecordPeers = {RECORD_PEERS};")));
        for (name, op) in [
            ("kOpBarrier", WaitOp::Barrier),
            ("kOpPutSignal", WaitOp::PutSignal),
            ("kOpWaitSignal", WaitOp::WaitSignal),
        ] {
            assert!(text.contains(&format!("{name} = {},", op as u32)), "{name}");
        }
    }
}
