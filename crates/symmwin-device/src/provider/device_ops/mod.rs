//! The provider-facing interface of the ops (the device-ops contract): one
//! implementation per provider, over flat-layout addresses. [`plan`] holds the split
//! arithmetic every implementation must agree with.
//!
//! NOTE [ops protocol]
//! Every op is collective over the ranks of its windows' group except `put`, `get`,
//! `put_with_signal`, `wait_for_signal`, `put_signal` and `wait_signal`, which are
//! one-sided. A collective op is complete on every rank when it returns on the
//! stream: the outputs are readable, the inputs may be reused, and the signal pads
//! are back to zero. Collective ops synchronize only on [`OpContext::channel`] of
//! [`OpContext::pads`], with torch's pad protocol (slot `channel * world + src` of
//! the receiver's pad, CAS 0 -> 1 with release to signal, CAS 1 -> 0 with acquire to
//! wait). The ranks compare [`OpContext::fingerprint`] where they synchronize: the
//! CUDA kernels send its word in place of the constant 1, the host ops publish it in
//! their own pad (see NOTE [operand fingerprint] in `fingerprint.rs`).
//!
//! Split tables are read where they are (host memory, or device memory on the
//! device): a device implementation never copies them to the host. A split that would
//! move rows past an operand's room is never executed: the op moves nothing for it
//! and reports which peer, how many rows and how much room, when it returns (host)
//! or at the next [`DeviceOps::check_errors`] / synchronization (device).

mod args;
pub mod dtype;
pub mod elem;
pub mod fingerprint;
pub mod plan;
mod request;

pub use crate::engine::Engine;
pub use args::{
    ElemType, Elements, Fingerprint, OpContext, ReduceOp, Rows, SignalWait, SymmBuf, Tile, VarArgs,
};
pub use dtype::DType;
pub use request::{var_name, OpRequest, TileReduce, Transfer};

use crate::error::{Error, ErrorKind, Phase, Result};

/// The ops of one provider, over flat-layout addresses.
///
/// Every method is `unsafe`: the caller (the ops layer's `collective` module) guarantees that each
/// [`SymmBuf`] of a request describes memory mapped in this process at `addr(r)` for
/// every rank `r` with at least `room` bytes (and `len` bytes for this rank), that the
/// mapping lives until the op has completed on its stream, and that `ctx.pads` are the
/// live pads of the group the operands belong to. Implementations must not access a
/// byte outside those ranges whatever the split tables say.
pub trait DeviceOps: Send + Sync {
    /// Report an error recorded by an earlier asynchronous op (a split larger than its
    /// output, a peer that never signalled), once. Host implementations report
    /// errors on return and have nothing here.
    fn check_errors(&self) -> Result<()> {
        Ok(())
    }

    /// Run one op of this rank of `ctx`'s group (see [`OpRequest`] for each op).
    ///
    /// # Safety
    /// See the trait documentation; for [`OpRequest::PutSignal`] the caller also
    /// vouches that `src..src+len` is readable and live.
    unsafe fn execute(&self, ctx: &OpContext, op: &OpRequest) -> Result<()>;

    /// Wait until the `u64` at this process's address `wait.word` equals `wait.value`
    /// (acquire), then reset it to zero so a pad is zero at rest and the same value can
    /// be sent again. A local wait: the word need not be in a window this rank knows
    /// (torch passes a view of a signal pad).
    ///
    /// # Safety
    /// `wait.word` is an 8-byte aligned, live `u64` of this provider's memory, accessed
    /// only atomically while the op runs.
    unsafe fn wait_for_signal(&self, wait: &SignalWait) -> Result<()>;
}

/// The ops of a provider that does not implement them (yet): every call is a clear
/// [`ErrorKind::Unsupported`] error naming the provider and the op.
#[derive(Debug, Clone, Copy)]
pub struct UnsupportedOps {
    /// The provider's name, for the message.
    pub provider: &'static str,
}

impl UnsupportedOps {
    fn refuse(&self, op: &str) -> Result<()> {
        Err(Error::new(
            Phase::Argument,
            ErrorKind::Unsupported(format!(
                "{op} is not implemented for {} memory in this build",
                self.provider
            )),
        ))
    }
}

impl DeviceOps for UnsupportedOps {
    unsafe fn execute(&self, _: &OpContext, op: &OpRequest) -> Result<()> {
        self.refuse(op.name())
    }

    unsafe fn wait_for_signal(&self, _: &SignalWait) -> Result<()> {
        self.refuse("wait_for_signal")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::FlatLayout;

    #[test]
    fn a_provider_without_ops_refuses_each_by_name() {
        let buf = SymmBuf {
            layout: FlatLayout::new(1 << 30, 4096, 2).unwrap(),
            offset: 0,
            len: 8,
            room: 4096,
        };
        let ops = UnsupportedOps { provider: "test" };
        let put = Transfer {
            buf: &buf,
            len: 8,
            peer: 1,
        };
        let requests = [
            (OpRequest::Put(put), "put"),
            (OpRequest::Get(put), "get"),
            (
                OpRequest::PutWithSignal {
                    put,
                    sig: &buf,
                    value: 1,
                },
                "put_with_signal",
            ),
        ];
        for (request, name) in requests {
            let pads = crate::provider::PadLayout::from_parts(1 << 20, 4096, 4096, 0, 2).unwrap();
            let ctx = OpContext {
                rank: 0,
                world: 2,
                channel: 0,
                pads,
                timeout: std::time::Duration::from_secs(1),
                stream: 0,
                engine: Engine::Auto,
                peers: crate::peer_watch::PeerSet::NONE,
                fingerprint: Fingerprint::NONE,
            };
            // SAFETY: the refusing implementation touches no memory.
            let err = unsafe { ops.execute(&ctx, &request) }.unwrap_err();
            assert!(
                matches!(err.kind(), ErrorKind::Unsupported(m) if m.starts_with(&format!("{name} is not implemented for test memory"))),
                "{err}"
            );
        }
    }
}
