//! The ops kernels (`kernels/ops.cu`, embedded as PTX), loaded once per provider with
//! `cuModuleLoadData`, and the host-mapped record they report split failures into
//! (timed-out waits report into the signal kernels' record, `timeout_record.rs`).

use std::ffi::CStr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use symmwin_device::lock::Recover;

use cudarc::driver::sys;

use super::super::context::PrimaryContext;
use super::super::driver::DriverError;
use super::super::kernel_module::Module;
use super::super::pinned::Pinned;
use super::params::{OpsError, WaitOp, ERR_BAD_SPLIT, ERR_MISMATCH, ERR_OVERFLOW, UNKNOWN_RANK};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

/// The PTX of `kernels/ops.cu`, NUL-terminated for `cuModuleLoadData`.
const OPS_PTX: &str = concat!(include_str!("../../kernels/ops.ptx"), "\0");

/// Bit 31 of the record's word marks a failure; the low bits hold the peer.
const ERROR_FLAG: u32 = 1 << 31;

/// Why loading failed; kept so that every later call reports the same thing.
#[derive(Debug, Clone, Copy)]
pub(super) enum LoadFailure {
    NotBuilt,
    Driver(DriverError),
}

impl LoadFailure {
    pub(super) fn to_error(self) -> Error {
        match self {
            LoadFailure::NotBuilt => Error::new(
                Phase::Argument,
                ErrorKind::Unsupported(
                    "ops kernels not built: kernels/ops.ptx holds no kernels; run \
                     kernels/build_ptx.sh on a machine with nvcc and rebuild symmwin"
                        .into(),
                ),
            ),
            LoadFailure::Driver(e) => e.at(Phase::Signal),
        }
    }
}

impl From<DriverError> for LoadFailure {
    fn from(e: DriverError) -> Self {
        LoadFailure::Driver(e)
    }
}

/// The loaded module, its kernels and the failure record.
#[derive(Debug)]
pub(super) struct OpsKernels {
    pub all_to_all: sys::CUfunction,
    pub a2av: sys::CUfunction,
    pub broadcast: sys::CUfunction,
    pub copy: sys::CUfunction,
    pub set_value: sys::CUfunction,
    pub wait_value: sys::CUfunction,
    pub handshake: sys::CUfunction,
    pub tile_reduce: sys::CUfunction,
    /// Declared before the record its kernels write into: dropped first, it waits for
    /// them before it unloads.
    _module: Module,
    pub record: FailureRecord,
}

// SAFETY: CUfunction handles are immutable driver tokens usable from any thread; the
// module and record they depend on are owned by the same struct.
unsafe impl Send for OpsKernels {}
// SAFETY: as above; launching one function from several threads at once is allowed.
unsafe impl Sync for OpsKernels {}

impl OpsKernels {
    pub(super) fn load(ctx: &Arc<PrimaryContext>) -> std::result::Result<Self, LoadFailure> {
        if !OPS_PTX.contains(".entry") {
            return Err(LoadFailure::NotBuilt);
        }
        let ptx =
            CStr::from_bytes_with_nul(OPS_PTX.as_bytes()).map_err(|_| LoadFailure::NotBuilt)?;
        let _guard = ctx.enter()?;
        let record = FailureRecord::new(ctx)?;
        let module = Module::load(ctx, ptx)?;
        Ok(OpsKernels {
            all_to_all: module.function(c"symmwin_ops_all_to_all")?,
            a2av: module.function(c"symmwin_ops_a2av")?,
            broadcast: module.function(c"symmwin_ops_broadcast")?,
            copy: module.function(c"symmwin_ops_copy")?,
            set_value: module.function(c"symmwin_ops_set_value")?,
            wait_value: module.function(c"symmwin_ops_wait_value")?,
            handshake: module.function(c"symmwin_ops_handshake")?,
            tile_reduce: module.function(c"symmwin_ops_tile_reduce")?,
            record,
            _module: module,
        })
    }
}

/// An [`OpsError`] in pinned host memory that the device writes through its mapping.
/// It survives the trap that follows (the lost context), so the host can still say
/// what happened; once seen, the failure is reported by every later call, because
/// the context never comes back.
#[derive(Debug)]
pub(super) struct FailureRecord {
    pinned: Pinned<OpsError>,
    /// The record's device address, for `OpsParams::err`.
    pub device: u64,
    /// The first failure read from the record.
    seen: OnceLock<(OpsError, usize)>,
    /// Serialises the read of the fields with their publication in `seen`.
    reading: Mutex<()>,
}

impl FailureRecord {
    fn new(ctx: &Arc<PrimaryContext>) -> std::result::Result<Self, DriverError> {
        let what = "freeing the ops failure record";
        let pinned = Pinned::new(ctx, OpsError::default(), what)?;
        Ok(FailureRecord {
            device: pinned.device,
            pinned,
            seen: OnceLock::new(),
            reading: Mutex::new(()),
        })
    }

    fn record(&self) -> &OpsError {
        // The device writes the plain fields before it sets `word` with a system fence
        // in between.
        self.pinned.get()
    }

    /// Fails once a kernel has recorded a split that does not fit, at every call from
    /// then on. The no-failure path is one atomic load.
    #[inline]
    pub(super) fn check(&self) -> Result<()> {
        if let Some((fields, peer)) = self.seen.get() {
            return Err(describe(fields, *peer));
        }
        let word = self.record().word.load(Ordering::Acquire);
        if word & ERROR_FLAG == 0 {
            return Ok(());
        }
        let _one_reader = self.reading.lock().recover();
        let (fields, peer) = self.seen.get_or_init(|| {
            // SAFETY: the fields were written before `word` (acquire above) and are
            // never written again: the kernel trapped.
            let raw = unsafe { std::ptr::read_volatile(self.pinned.as_ptr()) };
            (raw, (word & !ERROR_FLAG) as usize)
        });
        Err(describe(fields, *peer))
    }
}

/// The error a device failure record stands for.
fn describe(fields: &OpsError, peer: usize) -> Error {
    let op = WaitOp::name_of(fields.op);
    let lost = "the device trapped, the CUDA context is lost and the process must exit";
    let error = match fields.kind {
        ERR_OVERFLOW => Error::invalid(format!(
            "{op}: {} rows from rank {peer} do not fit out (room for {} rows); nothing was \
             copied; {lost}",
            fields.rows, fields.room
        )),
        ERR_BAD_SPLIT => Error::invalid(format!(
            "{op}: a split of {} rows for rank {peer} is negative or reaches past the input \
             ({} rows); nothing was sent; {lost}",
            fields.rows, fields.room
        )),
        ERR_MISMATCH => Error::new(
            Phase::Argument,
            ErrorKind::Mismatch {
                field: symmwin_device::provider::device_ops::fingerprint::operands_of(op),
                detail: format!(
                    "rank {peer} has fingerprint {:#010x}, rank {} (this rank) {:#010x}; every \
                     rank must pass the same dtype, element count, root and engine; \
                     nothing moved past the signal; {lost}",
                    fields.rows as u32, fields.rank, fields.room as u32
                ),
            },
        ),
        other => Error::invalid(format!(
            "{op}: device failure of unknown kind {other}; {lost}"
        )),
    };
    let error = error.with_peer(peer);
    if fields.rank == UNKNOWN_RANK {
        return error;
    }
    error.at_rank(fields.rank as usize)
}

#[cfg(test)]
mod tests {
    use super::super::params::OpId;
    use super::*;

    #[test]
    fn the_embedded_ptx_has_every_kernel() {
        for entry in [
            "symmwin_ops_all_to_all",
            "symmwin_ops_a2av",
            "symmwin_ops_broadcast",
            "symmwin_ops_copy",
            "symmwin_ops_set_value",
            "symmwin_ops_wait_value",
            "symmwin_ops_handshake",
            "symmwin_ops_tile_reduce",
        ] {
            assert!(OPS_PTX.contains(&format!(".entry {entry}(")), "{entry}");
        }
    }

    /// The record a kernel writes when `op` fails with `kind` on `rank`.
    fn written(kind: u32, op: OpId, rank: u32, rows: i64, room: i64) -> OpsError {
        OpsError {
            kind,
            op: op as u32,
            rank,
            rows,
            room,
            ..OpsError::default()
        }
    }

    #[test]
    fn failures_name_the_peer_rows_and_room() {
        let fields = written(ERR_OVERFLOW, OpId::AllToAllVdev2d, 3, 17, 5);
        let e = describe(&fields, 1);
        assert_eq!((e.rank(), e.peer()), (Some(3), Some(1)));
        let text = e.to_string();
        assert!(
            text.contains("all_to_all_vdev_2d: 17 rows from rank 1"),
            "{text}"
        );
        assert!(text.contains("room for 5 rows"), "{text}");
        assert!(text.contains("process must exit"), "{text}");
        let bad = describe(
            &written(ERR_BAD_SPLIT, OpId::AllToAllVdev, UNKNOWN_RANK, -1, 0),
            2,
        );
        assert_eq!((bad.rank(), bad.peer()), (None, Some(2)));
        let mismatch = describe(
            &written(ERR_MISMATCH, OpId::AllToAll, 0, 0xdead_beef, 0x1234_5678),
            1,
        );
        assert_eq!((mismatch.rank(), mismatch.peer()), (Some(0), Some(1)));
        let text = mismatch.to_string();
        assert!(
            text.contains(
                "ranks disagree on the operands of all_to_all: rank 1 has fingerprint \
                 0xdeadbeef, rank 0 (this rank) 0x12345678"
            ),
            "{text}"
        );
        assert!(text.contains("process must exit"), "{text}");
        assert!(bad
            .to_string()
            .contains("all_to_all_vdev: a split of -1 rows"));
    }
}
