//! The moves of one rank in one op across hosts: copies through the window and
//! messages through the process-group backend, run together.

use std::collections::HashMap;

use crate::signal::remote::{data_tag, failure, Direction, Transfer};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::{Provider, ProviderKind, Table};

use super::SpanningOps;
use symmwin_device::provider::device_ops::{OpContext, SymmBuf};

/// A copy between two mapped addresses of this process.
#[derive(Debug, Clone, Copy)]
struct LocalCopy {
    dst: usize,
    src: usize,
    len: usize,
}

/// What one rank does in one op. Empty moves are left out on both sides of a pair
/// alike (both know every length), so the message counts of a pair always agree.
#[derive(Debug, Default)]
pub(super) struct Moves {
    copies: Vec<LocalCopy>,
    transfers: Vec<Transfer>,
    /// Messages so far by (peer, direction): the index that tags the next one.
    counts: HashMap<(usize, bool), usize>,
}

impl Moves {
    /// Copy `len` bytes from mapped `src` to mapped `dst` (checked ranges).
    pub(super) fn copy(&mut self, dst: usize, src: usize, len: usize) {
        if len > 0 {
            self.copies.push(LocalCopy { dst, src, len });
        }
    }

    /// Send `len` bytes at `ptr` (this rank's memory) to `peer`.
    pub(super) fn send(&mut self, peer: usize, ptr: usize, len: usize) -> Result<()> {
        self.message(peer, Direction::Send, ptr, len)
    }

    /// Receive `len` bytes from `peer` into `ptr` (this rank's memory or scratch).
    pub(super) fn recv(&mut self, peer: usize, ptr: usize, len: usize) -> Result<()> {
        self.message(peer, Direction::Recv, ptr, len)
    }

    fn message(&mut self, peer: usize, direction: Direction, ptr: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let index = self
            .counts
            .entry((peer, direction == Direction::Send))
            .or_insert(0);
        let tag = data_tag(*index)?;
        *index += 1;
        self.transfers.push(Transfer {
            peer,
            direction,
            ptr,
            len,
            tag,
        });
        Ok(())
    }
}

impl SpanningOps<'_> {
    /// Run `moves`: the messages in one batch, the copies meanwhile. On device memory
    /// the messages are ordered on the caller's stream (and proceed on the device) while
    /// the copies run on the provider's own stream; on host memory the backend blocks,
    /// so the copies run on a second thread.
    pub(super) fn execute(&self, ctx: &OpContext, moves: &Moves) -> Result<()> {
        let copy_all = || self.copy_all(&moves.copies);
        if moves.transfers.is_empty() {
            return copy_all();
        }
        let post = || {
            self.remote
                .transfer(&moves.transfers, ctx.timeout, ctx.stream)
                .map_err(|f| failure(f, ctx.timeout))
        };
        if self.scope.stream_ordered || moves.copies.is_empty() {
            let posted = post();
            return posted.and(copy_all());
        }
        std::thread::scope(|s| {
            let local = s.spawn(copy_all);
            let posted = post();
            let copied = local.join().unwrap_or_else(|_| {
                Err(Error::new(
                    Phase::Signal,
                    ErrorKind::Internal("the copy thread of an op panicked".into()),
                ))
            });
            posted.and(copied)
        })
    }

    /// The first `bytes` bytes of `buf` on every rank, in rank order, once `moves`
    /// received remote rank `remote[k]`'s into byte `k * bytes` of `scratch`: those
    /// are read from the scratch after the stream, a mapped rank's through the window.
    pub(super) fn collect(
        &self,
        ctx: &OpContext,
        buf: &SymmBuf,
        bytes: usize,
        remote: &[usize],
        scratch: &mut Scratch,
    ) -> Result<Vec<Vec<u8>>> {
        self.provider.signals().synchronize(ctx.stream)?;
        (0..ctx.world)
            .map(|rank| {
                let mut out = vec![0u8; bytes];
                match remote.iter().position(|&p| p == rank) {
                    Some(k) => scratch.read(self.provider, k * bytes, &mut out)?,
                    None => {
                        let src = buf.range(rank, 0, bytes).map_err(|e| e.with_peer(rank))?;
                        // SAFETY: a mapped rank's operand, checked against the room.
                        unsafe { self.provider.read(src, &mut out)? }
                    }
                }
                Ok(out)
            })
            .collect()
    }

    fn copy_all(&self, copies: &[LocalCopy]) -> Result<()> {
        for c in copies {
            // SAFETY: every copy was built from ranges checked against their operands'
            // room, in slots of ranks mapped here, live for the op.
            unsafe { self.provider.copy(c.dst, c.src, c.len)? };
        }
        Ok(())
    }
}

/// Memory the backend receives into when the bytes have no place in an output (split
/// tables, tiles to reduce, rows of a split that does not fit): host memory for host
/// windows, device memory for device windows (NCCL receives only into device memory).
pub(super) enum Scratch {
    Host(Vec<u64>),
    Device(Box<dyn Table>),
}

impl Scratch {
    /// At least `bytes` bytes, zeroed.
    pub(super) fn new(provider: &dyn Provider, bytes: usize) -> Result<Scratch> {
        let words = vec![0u64; bytes.div_ceil(8).max(1)];
        Ok(match provider.info().kind {
            ProviderKind::Host => Scratch::Host(words),
            _ => Scratch::Device(provider.upload(&words)?),
        })
    }

    /// Address of byte `at`.
    pub(super) fn ptr(&mut self, at: usize) -> usize {
        at + match self {
            Scratch::Host(words) => words.as_mut_ptr() as usize,
            Scratch::Device(table) => table.ptr(),
        }
    }

    /// Copy `out.len()` bytes from byte `at` to the host; the receives into it have
    /// completed (the caller waited for the stream).
    pub(super) fn read(
        &mut self,
        provider: &dyn Provider,
        at: usize,
        out: &mut [u8],
    ) -> Result<()> {
        let src = self.ptr(at);
        // SAFETY: the caller reads inside the scratch it sized; device scratch is a
        // live allocation of `provider`, host scratch our own vector.
        unsafe { provider.read(src, out) }
    }
}

/// `int64` values of native-endian bytes.
pub(super) fn i64s(raw: &[u8]) -> Vec<i64> {
    raw.chunks_exact(8)
        .map(|b| {
            let mut word = [0u8; 8];
            word.copy_from_slice(b);
            i64::from_ne_bytes(word)
        })
        .collect()
}
