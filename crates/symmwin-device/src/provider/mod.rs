//! Physical memory that can be exported, imported and mapped into a reserved span.
//!
//! A provider hands out three kinds of RAII objects: [`Memory`] (physical memory,
//! released on drop), [`Span`] (a reserved virtual range; dropping it unmaps everything
//! mapped into it and frees the range) and [`Table`] (a small device-visible array of
//! words, for `buffer_ptrs_dev` and friends). A mapping keeps its physical memory alive
//! on both providers, so a [`Memory`] may be dropped as soon as it is mapped.

use std::any::Any;
use std::fmt;
use std::os::fd::OwnedFd;
use std::time::Duration;

use crate::error::Result;

pub mod device_ops;
mod fabric;
pub mod mapped;

pub use fabric::FabricDomain;

/// Which provider a window lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ProviderKind {
    /// Host shared memory (memfd).
    Host,
    /// CUDA VMM device memory.
    Cuda,
}

impl ProviderKind {
    /// The default limit of a wait on this kind of memory: the device-wait limit
    /// (`device`) for CUDA memory, where an expired wait traps the context, and the
    /// host-side timeout (`host`) for host memory.
    pub fn wait_limit(self, host: Duration, device: Duration) -> Duration {
        match self {
            ProviderKind::Cuda => device,
            ProviderKind::Host => host,
        }
    }
}

/// How memory is shared between processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum HandleType {
    /// A file descriptor passed over a Unix socket with SCM_RIGHTS.
    PosixFd,
    /// A 64-byte CUDA fabric handle (needs IMEX).
    Fabric,
}

impl fmt::Display for HandleType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HandleType::PosixFd => "posix_fd",
            HandleType::Fabric => "fabric",
        })
    }
}

/// Which CUDA shareable-handle type to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlePreference {
    /// Probe: fabric where a real create + export works, POSIX fd otherwise.
    Auto,
    /// POSIX file descriptors passed over Unix sockets.
    Fd,
    /// Fabric handles (needs an IMEX channel).
    Fabric,
}

impl std::str::FromStr for HandlePreference {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> Result<Self> {
        use crate::error::Error;
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(HandlePreference::Auto),
            "fd" | "posix" | "posix_fd" => Ok(HandlePreference::Fd),
            "fabric" => Ok(HandlePreference::Fabric),
            _ => Err(Error::invalid(format!(
                "SYMMWIN_HANDLE_TYPE={s:?} is not a handle type; allowed: auto, fd or fabric"
            ))),
        }
    }
}

/// A shareable handle to physical memory, as exported or as received from a peer.
#[derive(Debug)]
pub enum SharedHandle {
    /// A file descriptor (memfd or CUDA POSIX fd).
    Fd(OwnedFd),
    /// A CUDA fabric handle.
    Fabric([u8; 64]),
}

impl SharedHandle {
    /// The handle type this value carries.
    pub fn handle_type(&self) -> HandleType {
        match self {
            SharedHandle::Fd(_) => HandleType::PosixFd,
            SharedHandle::Fabric(_) => HandleType::Fabric,
        }
    }
}

/// What a provider is, as every rank must agree on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderInfo {
    /// Host or CUDA.
    pub kind: ProviderKind,
    /// CUDA device ordinal; `-1` for host memory.
    pub device: i32,
    /// Handle type used for export.
    pub handle_type: HandleType,
    /// Sizes and addresses are multiples of this.
    pub granularity: usize,
    /// `create` returns zero-filled memory; otherwise the caller zeroes it once mapped.
    pub zero_on_create: bool,
}

/// Physical memory owned by this process. Released on drop.
pub trait Memory: Any + Send + Sync + fmt::Debug {
    /// Size in bytes (a multiple of the provider's granularity).
    fn len(&self) -> usize;
    /// True for zero-length memory (never produced by a provider).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A new shareable handle to this memory.
    fn export(&self) -> Result<SharedHandle>;
}

/// A reserved virtual address range. Dropping it unmaps everything and frees the range.
pub trait Span: Send + Sync + fmt::Debug {
    /// First address.
    fn base(&self) -> usize;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True for a zero-length span.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Map all of `memory` at `base() + offset` with read/write access for this process.
    fn map(&mut self, offset: usize, memory: &dyn Memory) -> Result<()>;
    /// Map each `(offset, memory)` pair as [`Span::map`] does. On failure, the index
    /// of the pair that failed and the error; the pairs mapped by this call are
    /// unmapped again where the provider can do so. The CUDA provider grants access
    /// once per contiguous run of the new mappings instead of once per mapping.
    fn map_all(
        &mut self,
        items: &[(usize, &dyn Memory)],
    ) -> std::result::Result<(), (usize, crate::error::Error)> {
        for (i, &(offset, memory)) in items.iter().enumerate() {
            self.map(offset, memory).map_err(|e| (i, e))?;
        }
        Ok(())
    }
    /// Set `len` bytes at `base() + offset` (mapped) to zero, complete on return.
    fn zero(&self, offset: usize, len: usize) -> Result<()>;
}

/// A device-visible copy of a small array of words. Freed on drop.
pub trait Table: Send + Sync + fmt::Debug {
    /// Address to hand to kernels (a host address for the host provider).
    fn ptr(&self) -> usize;
}

/// The CUDA stream a device-side signal operation is ordered on (0: legacy default).
pub type StreamHandle = usize;

pub use crate::layout::PadLayout;

/// Barrier and point-to-point signals over signal pads, with torch's protocol:
/// the slot for (`channel`, `src`) in the receiver's pad is `channel * world + src`;
/// put is a CAS 0 -> 1 with release, wait a CAS 1 -> 0 with acquire.
///
/// Host implementations wait before returning and report a timeout from the call.
/// Device implementations enqueue a kernel on `stream` and return; a kernel whose wait
/// times out records who waited for whom and traps, so the stream's next
/// synchronization fails, and every later operation of the provider (and
/// [`Signals::check_errors`]) reports [`crate::error::ErrorKind::ContextLost`].
pub trait Signals: Send + Sync {
    /// Report a timeout recorded by an earlier device-side operation.
    fn check_errors(&self) -> Result<()> {
        Ok(())
    }
    /// Wait until everything enqueued on `stream` has finished, then report any
    /// device-side timeout (host implementations have nothing to wait for).
    fn synchronize(&self, _stream: StreamHandle) -> Result<()> {
        self.check_errors()
    }
    /// Run one signal operation on `pads`, on the channel, within the limit and on the
    /// stream `at` gives.
    fn signal(&self, pads: &PadLayout, op: PadSignal, at: SignalAt) -> Result<()>;
}

/// Where, how long and in which order one signal operation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalAt {
    /// The pad channel.
    pub channel: usize,
    /// How long a wait may take.
    pub timeout: Duration,
    /// The stream the operation is ordered on (device providers; 0: legacy default).
    pub stream: StreamHandle,
    /// The watched peers: a host wait for one that has ended fails within a second.
    pub peers: crate::peer_watch::PeerSet,
}

impl SignalAt {
    /// Channel `channel`, waiting up to `timeout`, ordered on `stream`.
    pub fn new(channel: usize, timeout: Duration, stream: StreamHandle) -> Self {
        SignalAt {
            channel,
            timeout,
            stream,
            peers: crate::peer_watch::PeerSet::NONE,
        }
    }

    /// The same, failing early for a peer of `peers` that has ended.
    pub fn watching(self, peers: crate::peer_watch::PeerSet) -> Self {
        SignalAt { peers, ..self }
    }
}

/// One operation of [`Signals::signal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadSignal {
    /// Signal every peer, then wait for every peer's signal.
    Barrier,
    /// Signal this rank.
    Put(usize),
    /// Wait for this rank's signal.
    Wait(usize),
}

/// A source of shareable physical memory.
pub trait Provider: Send + Sync + fmt::Debug {
    /// Kind, device, handle type and granularity.
    fn info(&self) -> ProviderInfo;
    /// New physical memory of `size` bytes (a positive multiple of the granularity);
    /// zero-filled when [`ProviderInfo::zero_on_create`] says so.
    fn create(&self, size: usize) -> Result<Box<dyn Memory>>;
    /// Memory a peer exported, `size` bytes long.
    fn import(&self, handle: SharedHandle, size: usize) -> Result<Box<dyn Memory>>;
    /// A reserved, unmapped virtual range of `len` bytes.
    fn reserve(&self, len: usize) -> Result<Box<dyn Span>>;
    /// A device-visible array holding `words`.
    fn upload(&self, words: &[u64]) -> Result<Box<dyn Table>>;
    /// Barrier and signal operations on this provider's memory.
    fn signals(&self) -> &dyn Signals;
    /// The NVLink fabric domain of the device, where it reports one: peers of the
    /// same domain on other hosts import fabric handles through the store.
    fn fabric_domain(&self) -> Option<crate::provider::FabricDomain> {
        None
    }

    /// Collective and one-sided ops on this provider's memory (the device-ops contract); a
    /// provider without them refuses every op with a clear error.
    fn ops(&self) -> &dyn crate::provider::device_ops::DeviceOps {
        &crate::provider::device_ops::UnsupportedOps {
            provider: "this provider's",
        }
    }

    /// Copy `len` bytes between mapped addresses, complete on return. Not ordered
    /// with any stream's work: the caller makes sure both ranges are idle.
    ///
    /// # Safety
    /// `src..src+len` and `dst..dst+len` must lie in live mappings of this provider.
    unsafe fn copy(&self, dst: usize, src: usize, len: usize) -> Result<()>;
    /// Copy host bytes to a mapped address, complete on return.
    ///
    /// # Safety
    /// `dst..dst+bytes.len()` must lie in a live mapping of this provider.
    unsafe fn write(&self, dst: usize, bytes: &[u8]) -> Result<()>;
    /// Copy from a mapped address into host bytes, complete on return.
    ///
    /// # Safety
    /// `src..src+bytes.len()` must lie in a live mapping of this provider.
    unsafe fn read(&self, src: usize, bytes: &mut [u8]) -> Result<()>;
}

/// Downcast helper for the provider that created `memory`.
pub fn downcast<T: Memory>(memory: &dyn Memory) -> Option<&T> {
    (memory as &dyn Any).downcast_ref::<T>()
}
