//! One-sided ops: put and get, put with signal, and the signal waits.

use super::*;

/// One-sided put (`into_peer`) or get of `buf` between this rank and `peer`.
pub fn put_or_get(
    buf: Operand,
    peer: impl Into<Rank>,
    into_peer: bool,
    opts: &OpOptions,
) -> Result<()> {
    let w = buf.window;
    let check = || {
        Ok((
            buf.symm("tensor")?,
            peer.into().in_group(w.world(), "peer")?,
        ))
    };
    let (b, peer) = check().map_err(|e: Error| w.context(e))?;
    let transfer = Transfer {
        buf: &b,
        len: b.len,
        peer,
    };
    let op = if into_peer {
        OpRequest::Put(transfer)
    } else {
        OpRequest::Get(transfer)
    };
    // SAFETY: the operand was checked to lie in its live window.
    unsafe { execute(w, Reach::Peer(peer), opts, &op) }
}

fn signal_word(sig: &Operand) -> Result<SymmBuf> {
    if sig.len < 8 || sig.offset % 8 != 0 {
        return Err(Error::invalid(format!(
            "sigpad must be an 8-byte aligned 64-bit word ({} bytes at offset {})",
            sig.len, sig.offset
        )));
    }
    let mut word = sig.symm("sigpad")?;
    word.len = 8;
    Ok(word)
}

/// Put `buf` to `peer`, then set `peer`'s 64-bit `sig` to `value` (torch's
/// `nvshmem_put_with_signal`). `sig` may live in another window of the same group
/// (a signal pad).
pub fn put_with_signal(
    buf: Operand,
    sig: Operand,
    value: u64,
    peer: impl Into<Rank>,
    opts: &OpOptions,
) -> Result<()> {
    let w = buf.window;
    let check = || {
        same_group(w, sig.window, "sigpad")?;
        let (b, s) = (buf.symm("tensor")?, signal_word(&sig)?);
        refuse_overlap("put_with_signal", ("sigpad", &s), ("tensor", &b))?;
        Ok((b, s, peer.into().in_group(w.world(), "peer")?))
    };
    let (b, s, peer) = check().map_err(|e: Error| w.context(e))?;
    let op = OpRequest::PutWithSignal {
        put: Transfer {
            buf: &b,
            len: b.len,
            peer,
        },
        sig: &s,
        value,
    };
    // SAFETY: both operands were checked to lie in their live windows.
    unsafe { execute(w, Reach::Peer(peer), opts, &op) }
}

/// Wait until this rank's 64-bit `sig` equals `value`, then reset it to zero.
pub fn wait_for_signal(
    sig: Operand,
    value: u64,
    peer: impl Into<Rank>,
    opts: &OpOptions,
) -> Result<()> {
    let w = sig.window;
    // The word is the user's (see docs/ops.md), but the window's poison still holds.
    w.check_poison()?;
    let check = || {
        let word = signal_word(&sig)?.addr(w.rank())?;
        Ok((word, peer.into().in_group(w.world(), "peer")?))
    };
    let (word, peer) = check().map_err(|e: Error| w.context(e))?;
    let wait = SignalWait {
        word,
        value,
        rank: w.rank(),
        peer,
        timeout: w.timeout(opts.timeout),
        stream: opts.stream,
        peers: w.peers(),
    };
    // SAFETY: the word was checked to lie, aligned, in this rank's live window.
    unsafe { w.provider().ops().wait_for_signal(&wait) }.map_err(|e| w.context(e))
}

/// [`wait_for_signal`] on a word given by address, as torch's `wait_for_signal` gives
/// it (a tensor, possibly a view of a signal pad): the 8-byte aligned word must lie in
/// symmetric memory of this process on `group`'s device (a live allocation of
/// `registry` or one of `group`'s signal pads), and `peer` must be a rank of `group`.
/// Anything else is refused at once: a wait on memory no peer can write would only
/// run out its timeout.
///
/// # Safety
/// The word is accessed only atomically until the wait returns (for CUDA: until it
/// completes on its stream, and the memory must stay allocated until then).
pub unsafe fn wait_for_signal_at(
    registry: &Registry,
    group: &Group,
    word: usize,
    value: u64,
    peer: impl Into<Rank>,
    opts: &OpOptions,
) -> Result<()> {
    let go = || {
        let peer = peer.into().in_group(group.world(), "peer")?;
        if word == 0 || word % 8 != 0 {
            return Err(Error::invalid(format!(
                "wait_for_signal: sigpad at {word:#x} is not an 8-byte aligned 64-bit word"
            )));
        }
        let (provider, _keep_alive) = symmetric_word(registry, group, word)?;
        let shared = &group.shared;
        let timeout = opts.timeout.unwrap_or_else(|| {
            (provider.info().kind).wait_limit(shared.timeout, shared.device_timeout)
        });
        let wait = SignalWait {
            word,
            value,
            rank: group.rank(),
            peer,
            timeout,
            stream: opts.stream,
            peers: shared.peer_set(),
        };
        // SAFETY: the word lies, aligned, in live symmetric memory of `provider` held
        // by `_keep_alive` for the call; the caller vouches for stream-ordered waits.
        unsafe { provider.ops().wait_for_signal(&wait) }
    };
    go().map_err(|e| group.shared.context(e))
}

/// What proves `word` is symmetric memory of `group`'s device: the provider to wait
/// with, and the allocation or pad pool that keeps the word mapped meanwhile.
fn symmetric_word(
    registry: &Registry,
    group: &Group,
    word: usize,
) -> Result<(Arc<dyn Provider>, Box<dyn std::any::Any>)> {
    let info = group.provider().info();
    if let Some((alloc, offset)) = registry.find(word) {
        let fits = offset.checked_add(8).is_some_and(|end| end <= alloc.size());
        if fits && alloc.provider().info() == info {
            return Ok((alloc.provider().clone(), Box::new(alloc)));
        }
    }
    if let Some(pool) = group.shared.pads.holding(group.rank(), word, 8) {
        return Ok((group.provider().clone(), Box::new(pool)));
    }
    Err(Error::invalid(format!(
        "wait_for_signal: sigpad at {word:#x} is not symmetric memory of group {:?} on {:?} \
         memory (a symmwin allocation or a signal pad of this rank): no peer can signal it, \
         so the wait could only time out",
        group.name(),
        info.kind
    )))
}

/// Copy `len` bytes from this process's address `src` into `peer`'s `dst`, then signal
/// `peer` on channel 0 of `dst`'s window (torch's `nccl_put_signal`).
///
/// # Safety
/// `src..src+len` must be readable memory of the window's provider (host memory for
/// host windows, device memory of the window's device for CUDA), live until the op
/// completes on its stream.
pub unsafe fn put_signal(
    src: usize,
    len: usize,
    dst: Operand,
    peer: impl Into<Rank>,
    opts: &OpOptions,
) -> Result<()> {
    let w = dst.window;
    let check = || {
        let mut d = dst.symm("hdl")?;
        if len > d.room {
            return Err(Error::invalid(format!(
                "put_signal: {len} bytes do not fit the peer's buffer of {} bytes",
                d.room
            )));
        }
        d.len = len;
        Ok((d, peer.into().in_group(w.world(), "peer")?))
    };
    let (d, peer) = check().map_err(|e: Error| w.context(e))?;
    let op = OpRequest::PutSignal {
        src,
        len,
        dst: &d,
        peer,
    };
    // SAFETY: `dst` was checked against its window; the caller vouches for `src`.
    unsafe { execute(w, Reach::Peer(peer), opts, &op) }
}

/// Wait for `peer`'s [`put_signal`] on `window` (channel 0).
pub fn wait_signal(window: &Window, peer: impl Into<Rank>, opts: &OpOptions) -> Result<()> {
    let peer = (peer.into().in_group(window.world(), "peer")).map_err(|e| window.context(e))?;
    let mut options = SignalOptions::channel(0).stream(Stream::from_raw(opts.stream));
    if let Some(timeout) = opts.timeout {
        options = options.timeout(timeout);
    }
    window.wait_signal(peer, options)
}
