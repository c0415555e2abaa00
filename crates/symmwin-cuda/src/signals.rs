//! Device-side barrier / put_signal / wait_signal over signal pads.
//!
//! The kernels (`kernels/signal.cu`) ship as PTX embedded in the crate and are loaded
//! with `cuModuleLoadData`, lazily, once per provider. A wait that times out on the
//! device writes a record into host-mapped pinned memory and traps (`kernels/wait.cuh`),
//! so the stream's next synchronization fails; the host turns that record into
//! [`ErrorKind::ContextLost`] at every later call (see `timeout_record.rs`).

use std::borrow::Cow;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cudarc::driver::sys;

use super::context::PrimaryContext;
use super::driver::{self, DriverError, PhaseExt};
use super::exit_marks::DeviceExitMarks;
use super::kernel_module::Module;
use super::signal_params::SignalParams;
use super::timeout_record::{self, HostRecord, WaitOp, WaitReport};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::peer_watch::PeerSet;
use symmwin_device::provider::{PadLayout, PadSignal, SignalAt, Signals, StreamHandle};

/// The PTX of `kernels/signal.cu`, NUL-terminated for `cuModuleLoadData`.
const SIGNAL_PTX: &str = concat!(include_str!("../kernels/signal.ptx"), "\0");

/// Wait used when a caller passes a zero timeout, unless changed with
/// [`CudaSignals::set_default_timeout`]: the configured device-wait default.
pub const DEFAULT_OP_TIMEOUT: Duration = symmwin_device::device_timeout::DEFAULT_DEVICE_TIMEOUT;

/// Largest world a barrier supports: one thread per peer in a single block.
pub const MAX_WORLD: usize = 1024;

// A waiting kernel reads the exit mark of any rank of its group.
const _: () = assert!(MAX_WORLD <= super::exit_marks::RANKS);

/// True when the embedded PTX holds kernels rather than the placeholder.
#[cfg(test)]
pub(crate) fn kernels_built() -> bool {
    ptx_image().is_ok()
}

fn checked_ptx(text: &str) -> Result<&CStr> {
    if !text.contains(".entry") {
        return Err(not_built());
    }
    CStr::from_bytes_with_nul(text.as_bytes()).map_err(|_| not_built())
}

#[cfg(not(test))]
fn ptx_image() -> Result<Cow<'static, CStr>> {
    checked_ptx(SIGNAL_PTX).map(Cow::Borrowed)
}

/// Tests may load freshly built PTX (`SYMMWIN_TEST_SIGNAL_PTX=path`), so a test binary
/// built before `build_ptx.sh` ran can still exercise the kernels on a GPU machine.
#[cfg(test)]
fn ptx_image() -> Result<Cow<'static, CStr>> {
    let Some(path) = std::env::var_os("SYMMWIN_TEST_SIGNAL_PTX") else {
        return checked_ptx(SIGNAL_PTX).map(Cow::Borrowed);
    };
    let mut text = std::fs::read_to_string(&path)
        .map_err(|e| Error::os(Phase::Signal, "read(SYMMWIN_TEST_SIGNAL_PTX)", e))?;
    text.push('\0');
    Ok(Cow::Owned(checked_ptx(&text)?.to_owned()))
}

fn not_built() -> Error {
    Error::new(
        Phase::Signal,
        ErrorKind::Unsupported(
            "signal kernels not built: kernels/signal.ptx is a placeholder; run \
             kernels/build_ptx.sh on a machine with nvcc and rebuild symmwin"
                .into(),
        ),
    )
}

/// Why loading the kernels failed; kept so later calls report the same thing.
#[derive(Debug, Clone, Copy)]
enum LoadFailure {
    NotBuilt,
    Driver(DriverError),
}

impl LoadFailure {
    fn to_error(self) -> Error {
        match self {
            LoadFailure::NotBuilt => not_built(),
            LoadFailure::Driver(e) => e.at(Phase::Signal),
        }
    }
}

impl From<DriverError> for LoadFailure {
    fn from(e: DriverError) -> Self {
        LoadFailure::Driver(e)
    }
}

/// Barrier and signals on CUDA signal pads.
#[derive(Debug)]
pub struct CudaSignals {
    ctx: Arc<PrimaryContext>,
    kernels: OnceLock<std::result::Result<Kernels, LoadFailure>>,
    default_timeout_ns: AtomicU64,
    /// Where the waits of every kernel of this device see which peers have ended.
    exit_marks: DeviceExitMarks,
}

impl CudaSignals {
    pub(super) fn new(ctx: Arc<PrimaryContext>) -> Self {
        CudaSignals {
            ctx,
            kernels: OnceLock::new(),
            default_timeout_ns: AtomicU64::new(duration_ns(DEFAULT_OP_TIMEOUT)),
            exit_marks: DeviceExitMarks::default(),
        }
    }

    /// The device-side wait used when a caller passes a zero timeout (tests shorten it).
    pub fn set_default_timeout(&self, timeout: Duration) {
        self.default_timeout_ns
            .store(duration_ns(timeout).max(1), Ordering::Relaxed);
    }

    /// Fails with [`ErrorKind::ContextLost`] once a device-side wait of this process
    /// has timed out (and trapped), at every call from then on.
    ///
    /// Device waits are asynchronous: the launching call returns before the kernel
    /// times out, and the stream's next synchronization fails with the driver's generic
    /// error; this check is what names the op, channel and peers.
    pub fn check_errors(&self) -> Result<()> {
        match self.kernels.get() {
            Some(Ok(kernels)) => kernels.record.check(),
            _ => timeout_record::check_context(),
        }
    }

    fn kernels(&self) -> Result<&Kernels> {
        match self.kernels.get_or_init(|| Kernels::load(&self.ctx)) {
            Ok(kernels) => Ok(kernels),
            Err(failure) => Err(failure.to_error()),
        }
    }

    fn timeout_ns(&self, timeout: Duration) -> u64 {
        if timeout.is_zero() {
            self.default_timeout_ns.load(Ordering::Relaxed)
        } else {
            duration_ns(timeout)
        }
    }

    /// Launches the kernel of `op` on the checked pads `args` with `peer` (0 for the
    /// barrier); the hot path allocates and formats nothing.
    #[inline]
    fn launch(&self, op: WaitOp, block: u32, launch: Launch) -> Result<()> {
        let Launch {
            mut params,
            timeout,
            stream,
            peers,
        } = launch;
        params.wait = self.wait_report(op, params.wait.rank, timeout, peers)?;
        let kernels = self.kernels()?;
        kernels.record.check()?;
        let _guard = self.ctx.enter().phase(Phase::Signal)?;
        let mut argv = [(&mut params as *mut SignalParams).cast::<c_void>()];
        // SAFETY: every signal kernel takes one `SignalParams` by value, whose layout
        // signal_params.rs mirrors (and tests); the function belongs to a module of this
        // context, which is current; the pad addresses were bounds-checked, and the
        // timeout record lives as long as the module. The stream is the caller's, on this
        // device (0 is the legacy default stream).
        unsafe {
            driver::launch_kernel(
                kernels.function(op),
                1,
                block,
                stream as sys::CUstream,
                &mut argv,
            )
        }
        .phase(Phase::Signal)
    }
}

impl Signals for CudaSignals {
    fn check_errors(&self) -> Result<()> {
        CudaSignals::check_errors(self)
    }

    fn synchronize(&self, stream: StreamHandle) -> Result<()> {
        let synced = self.ctx.enter().phase(Phase::Signal).and_then(|_guard| {
            // SAFETY: the stream is the caller's, live on this device (0: legacy default).
            unsafe { driver::stream_synchronize(stream as sys::CUstream) }.phase(Phase::Signal)
        });
        // After a trap the driver only says "unspecified launch failure": the record
        // says who waited for whom.
        self.check_errors()?;
        synced
    }

    fn signal(&self, pads: &PadLayout, op: PadSignal, at: SignalAt) -> Result<()> {
        let mut params = pad_params(pads, at.channel)?;
        let (op, peer, block) = match op {
            PadSignal::Barrier if pads.world() == 1 => return self.check_errors(),
            PadSignal::Barrier => (WaitOp::Barrier, 0, params.world.div_ceil(32) * 32),
            PadSignal::Put(dst) => (WaitOp::PutSignal, check_peer(pads, dst)?, 1),
            PadSignal::Wait(src) => (WaitOp::WaitSignal, check_peer(pads, src)?, 1),
        };
        params.peer = peer;
        let launch = Launch {
            params,
            timeout: at.timeout,
            stream: at.stream,
            peers: at.peers,
        };
        self.launch(op, block, launch)
    }
}

impl CudaSignals {
    /// The kernel argument (`symmwin::WaitReport` of `kernels/wait.cuh`) saying where
    /// and how a timed-out wait of `op` by `rank` reports, and where it sees which of
    /// `peers` have ended; `timeout` zero means the default. Other kernels of this
    /// provider that wait for peers pass it too, so every device timeout lands in the
    /// one record this provider checks.
    pub(super) fn wait_report(
        &self,
        op: WaitOp,
        rank: u32,
        timeout: Duration,
        peers: PeerSet,
    ) -> Result<WaitReport> {
        let record = &self.kernels()?.record;
        let exits = self
            .exit_marks
            .address(&self.ctx, peers)
            .phase(Phase::Signal)?;
        Ok(record.report(op, rank, self.timeout_ns(timeout), exits))
    }
}

/// What one signal kernel launch acts on: the checked pads and peer (the wait report
/// is filled at launch), the wait limit and the stream.
struct Launch {
    params: SignalParams,
    timeout: Duration,
    stream: StreamHandle,
    peers: PeerSet,
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The kernels' parameters for `channel` of `pads`, checked on the host for what the
/// kernels cannot check: every slot of `channel` lies inside every peer's pad, so a bad
/// argument is an error here instead of a device fault that would poison the context.
/// `peer` is 0 and `wait` holds only this rank: the launch fills in the rest.
fn pad_params(pads: &PadLayout, channel: usize) -> Result<SignalParams> {
    let invalid = |what: String| Error::new(Phase::Signal, ErrorKind::InvalidArgument(what));
    if pads.world() > MAX_WORLD {
        return Err(invalid(format!(
            "world size {} is outside 1..={MAX_WORLD}",
            pads.world()
        )));
    }
    if pads.rank() >= pads.world() {
        return Err(invalid(format!(
            "rank {} out of range for world size {}",
            pads.rank(),
            pads.world()
        )));
    }
    if pads.base() == 0 || pads.base() % 4 != 0 || pads.stride() % 4 != 0 {
        return Err(invalid(format!(
            "signal pads at {:#x} with stride {:#x} are not 4-byte aligned",
            pads.base(),
            pads.stride()
        )));
    }
    // The last slot of `channel` fits, so every slot of it does (and every pad
    // fits the address space: `PadLayout` guarantees it).
    pads.slot_offset(channel, pads.world() - 1)?;
    // The conversions cannot fail after the checks above; fail cleanly regardless.
    let narrow = |v: usize| u32::try_from(v).map_err(|_| invalid(format!("{v} exceeds u32")));
    Ok(SignalParams {
        pad_base: pads.base() as u64,
        pad_stride: pads.stride() as u64,
        world: narrow(pads.world())?,
        peer: 0,
        channel: narrow(channel)?,
        _reserved: 0,
        wait: WaitReport {
            record: 0,
            timeout_ns: 0,
            rank: narrow(pads.rank())?,
            op: 0,
            exits: 0,
        },
    })
}

pub(super) fn check_peer(pads: &PadLayout, peer: usize) -> Result<u32> {
    pads.check_peer(peer)?;
    // world <= MAX_WORLD was checked by pad_params.
    Ok(peer as u32)
}

/// The loaded module, its three kernels and the timeout record they report into.
#[derive(Debug)]
struct Kernels {
    barrier: sys::CUfunction,
    put: sys::CUfunction,
    wait: sys::CUfunction,
    /// Declared before the record it writes into: dropped first, it waits for its
    /// kernels before it unloads.
    _module: Module,
    record: HostRecord,
}

// SAFETY: CUfunction handles are immutable driver tokens usable from any thread; the
// module and record they depend on are owned by the same struct.
unsafe impl Send for Kernels {}
// SAFETY: as above; launching a function concurrently from several threads is allowed.
unsafe impl Sync for Kernels {}

impl Kernels {
    fn function(&self, op: WaitOp) -> sys::CUfunction {
        match op {
            WaitOp::Barrier => self.barrier,
            WaitOp::PutSignal => self.put,
            WaitOp::WaitSignal => self.wait,
        }
    }

    fn load(ctx: &Arc<PrimaryContext>) -> std::result::Result<Self, LoadFailure> {
        let ptx = ptx_image().map_err(|_| LoadFailure::NotBuilt)?;
        let _guard = ctx.enter()?;
        let record = HostRecord::new(ctx)?;
        let module = Module::load(ctx, &ptx)?;
        Ok(Kernels {
            barrier: module.function(c"symmwin_barrier")?,
            put: module.function(c"symmwin_put_signal")?,
            wait: module.function(c"symmwin_wait_signal")?,
            record,
            _module: module,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: usize = 0x7f00_0000_0000;

    fn pads(rank: usize, world: usize, len: usize) -> PadLayout {
        PadLayout::from_parts(BASE, 1 << 21, len, rank, world).unwrap()
    }

    /// `pad_params` of pads that may not even form a layout.
    fn check(
        base: usize,
        stride: usize,
        rank: usize,
        world: usize,
        channel: usize,
    ) -> Result<SignalParams> {
        PadLayout::from_parts(base, stride, 64, rank, world).and_then(|p| pad_params(&p, channel))
    }

    #[test]
    fn placeholder_ptx_is_reported_as_not_built() {
        let placeholder = "// generated by kernels/build_ptx.sh; run it on a machine with nvcc\n\0";
        let err = checked_ptx(placeholder).unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::Unsupported(m) if m.starts_with("signal kernels not built")),
            "{err}"
        );
        let ptx = ".version 9.0\n.target sm_90\n.visible .entry symmwin_barrier(\n)\n{\n}\n\0";
        assert!(checked_ptx(ptx).is_ok());
        // The embedded file is consistent with what the loader will decide.
        if std::env::var_os("SYMMWIN_TEST_SIGNAL_PTX").is_none() {
            assert_eq!(kernels_built(), SIGNAL_PTX.contains(".entry"));
        }
    }

    #[test]
    fn pad_arguments_are_checked() {
        let ok = pad_params(&pads(1, 4, 64), 3).unwrap();
        assert_eq!((ok.wait.rank, ok.world, ok.channel), (1, 4, 3));
        // channel 4 needs slots up to 4*4+3 = 19, i.e. 80 bytes.
        assert!(pad_params(&pads(1, 4, 64), 4).is_err());
        assert!(pad_params(&pads(4, 4, 64), 0).is_err());
        assert!(check(BASE, 1 << 21, 0, 0, 0).is_err());
        assert!(pad_params(&pads(0, MAX_WORLD + 1, 1 << 20), 0).is_err());
        assert!(pad_params(&pads(0, 2, 64), usize::MAX).is_err());
        assert!(check(BASE + 2, 1 << 21, 0, 2, 0).is_err());
        assert!(check(usize::MAX / 2, usize::MAX / 2, 0, 2, 0).is_err());
        let err = pad_params(&pads(0, 4, 64), 99).unwrap_err();
        assert_eq!(err.phase(), Phase::Signal);
        assert!(matches!(err.kind(), ErrorKind::InvalidArgument(_)));
    }

    #[test]
    fn peers_are_checked() {
        assert_eq!(check_peer(&pads(0, 4, 64), 3).unwrap(), 3);
        assert!(check_peer(&pads(0, 4, 64), 4).is_err());
    }

    #[test]
    fn durations_saturate() {
        assert_eq!(duration_ns(Duration::from_millis(3)), 3_000_000);
        assert_eq!(duration_ns(Duration::MAX), u64::MAX);
    }
}
