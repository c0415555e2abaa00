//! [`DeviceOps`] for CUDA windows: SM kernels (`kernels/ops.cu`) and copy-engine
//! paths, all enqueued on the caller's stream.
//!
//! Nothing on the launch path synchronises with the host or allocates: split tables
//! stay on the device and are read by the kernels, parameters travel by value, and
//! failures are recorded on the device (host-mapped record, printed line, trap) and
//! reported here by [`DeviceOps::check_errors`] and the next launch. Every launch is
//! capturable in a CUDA graph; split values may change between replays. The kernels
//! are loaded on the first op (so warm up before capturing, as for any lazy module).

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cudarc::driver::sys;

use super::context::PrimaryContext;
use super::driver::{self, PhaseExt};
use super::signals::{CudaSignals, MAX_WORLD};
use symmwin_device::error::{Error, Phase, Result};
use symmwin_device::peer_watch::PeerSet;
use symmwin_device::provider::device_ops::{DeviceOps, OpContext, OpRequest, SignalWait};
use symmwin_device::provider::StreamHandle;

mod collective;
mod grid;
mod module;
mod one_sided;
mod params;

use module::{LoadFailure, OpsKernels};
use one_sided::Direction::{Get, Put};
use params::{OpId, OpsParams, WaitOp};

/// The ops of one CUDA device.
#[derive(Debug)]
pub struct CudaOps {
    ctx: Arc<PrimaryContext>,
    /// Where timed-out waits report: the provider's one timeout record, which every
    /// symmwin call of the provider checks.
    signals: Arc<CudaSignals>,
    kernels: OnceLock<std::result::Result<OpsKernels, LoadFailure>>,
}

/// Picks one kernel of the loaded module.
type Pick = fn(&OpsKernels) -> sys::CUfunction;

impl CudaOps {
    pub(super) fn new(ctx: Arc<PrimaryContext>, signals: Arc<CudaSignals>) -> Self {
        CudaOps {
            ctx,
            signals,
            kernels: OnceLock::new(),
        }
    }

    fn kernels(&self) -> Result<&OpsKernels> {
        match self.kernels.get_or_init(|| OpsKernels::load(&self.ctx)) {
            Ok(kernels) => Ok(kernels),
            Err(failure) => Err(failure.to_error()),
        }
    }

    /// Parameters every kernel of an op shares: who we are, the pads, the failure
    /// record and the wait limit.
    fn base_params(&self, ctx: &OpContext, op: OpId) -> Result<OpsParams> {
        check_context(ctx)?;
        let mut p = self.params_for(op, ctx.rank as u32, ctx.timeout, ctx.peers)?;
        p.pad_base = ctx.pads.base() as u64;
        p.pad_stride = ctx.pads.stride() as u64;
        p.world = ctx.world as u32;
        p.fingerprint = ctx.fingerprint.word();
        Ok(p)
    }

    /// Parameters of a kernel that knows no pads (a local wait) run by `rank`: where
    /// failures report, the wait limit and the marks of `peers` that end.
    fn local_params(
        &self,
        op: OpId,
        rank: usize,
        timeout: Duration,
        peers: PeerSet,
    ) -> Result<OpsParams> {
        let rank = u32::try_from(rank)
            .ok()
            .filter(|r| *r != params::UNKNOWN_RANK)
            .ok_or_else(|| Error::invalid(format!("rank {rank} exceeds the kernels' range")))?;
        self.params_for(op, rank, timeout, peers)
    }

    fn params_for(
        &self,
        op: OpId,
        rank: u32,
        timeout: Duration,
        peers: PeerSet,
    ) -> Result<OpsParams> {
        // The signal kernels' report (zero timeout: the configured device-wait limit),
        // naming this op instead of theirs: wait.cuh numbers both alike.
        let mut wait = self
            .signals
            .wait_report(WaitOp::Barrier, rank, timeout, peers)?;
        wait.op = op as u32;
        let mut p = OpsParams::new(wait, self.kernels()?.record.device);
        p.rank = rank;
        Ok(p)
    }

    /// Launches `pick` with `params` on `stream`; the path allocates nothing.
    fn launch(
        &self,
        pick: Pick,
        grid: usize,
        block: u32,
        stream: StreamHandle,
        params: &OpsParams,
    ) -> Result<()> {
        let kernels = self.kernels()?;
        self.check_errors()?;
        let grid = u32::try_from(grid).map_err(|_| Error::invalid("grid exceeds u32"))?;
        let mut value = *params;
        let mut args = [(&mut value as *mut OpsParams).cast::<c_void>()];
        let _guard = self.ctx.enter().phase(Phase::Signal)?;
        // SAFETY: every ops kernel takes one `OpsParams` by value, whose layout the
        // params tests pin to ops_params.cuh; the function belongs to a module of this
        // context, which is current; every address in `value` was checked by the ops
        // layer to lie in live mappings (the trait's contract) and the failure record
        // lives as long as the module. The driver copies the argument before returning.
        unsafe {
            driver::launch_kernel(
                pick(kernels),
                grid,
                block,
                stream as sys::CUstream,
                &mut args,
            )
        }
        .phase(Phase::Signal)
    }

    /// A stream-ordered copy of `len` bytes on the copy engine (a peer copy when one
    /// end is a peer's mapping).
    fn copy_engine(&self, ctx: &OpContext, dst: usize, src: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let _guard = self.ctx.enter().phase(Phase::Signal)?;
        // SAFETY: both ranges were checked by the ops layer to lie in live mappings of
        // this provider that outlive the op on `ctx.stream`.
        unsafe {
            driver::memcpy_dtod_async(dst as u64, src as u64, len, ctx.stream as sys::CUstream)
        }
        .phase(Phase::Signal)
    }
}

/// The context must describe the pads of this rank of this world.
fn check_context(ctx: &OpContext) -> Result<()> {
    let pads = &ctx.pads;
    if ctx.world == 0 || ctx.world > MAX_WORLD || ctx.rank >= ctx.world {
        return Err(Error::invalid(format!(
            "rank {} of world {} is outside what the ops support (world 1..={MAX_WORLD})",
            ctx.rank, ctx.world
        )));
    }
    if pads.world() != ctx.world || pads.rank() != ctx.rank {
        return Err(Error::invalid(format!(
            "signal pads of rank {} / world {} used for rank {} / world {}",
            pads.rank(),
            pads.world(),
            ctx.rank,
            ctx.world
        )));
    }
    if pads.base() == 0 || pads.base() % 4 != 0 || pads.stride() % 4 != 0 {
        return Err(Error::invalid("signal pads are not 4-byte aligned"));
    }
    // The last slot of the highest channel fits, so every slot an op uses does.
    pads.slot_offset(ctx.channel, ctx.world - 1).map(drop)
}

impl DeviceOps for CudaOps {
    fn check_errors(&self) -> Result<()> {
        self.signals.check_errors()?;
        match self.kernels.get() {
            Some(Ok(kernels)) => kernels.record.check(),
            _ => Ok(()),
        }
    }

    unsafe fn execute(&self, ctx: &OpContext, op: &OpRequest) -> Result<()> {
        match *op {
            OpRequest::AllToAll { input, out, chunk } => {
                self.equal_all_to_all(ctx, input, out, chunk)
            }
            OpRequest::AllToAllV { shape, args } => self.vdev(ctx, args, shape),
            OpRequest::Broadcast { buf, len, root } => self.broadcast_from(ctx, buf, len, root),
            OpRequest::Put(t) => self.transfer(ctx, &t, Put),
            OpRequest::Get(t) => self.transfer(ctx, &t, Get),
            OpRequest::PutWithSignal { put, sig, value } => {
                self.transfer(ctx, &put, Put)?;
                self.set_value(ctx, sig, value, put.peer)
            }
            OpRequest::PutSignal {
                src,
                len,
                dst,
                peer,
            } => self.copy_and_signal(ctx, src, len, dst, peer),
            OpRequest::TileReduce(r) => self.reduce_tiles(ctx, &r),
        }
    }

    unsafe fn wait_for_signal(&self, wait: &SignalWait) -> Result<()> {
        self.wait_value(wait)
    }
}
