//! symmwin: symmetric memory windows for groups of processes.
//!
//! Every allocation is its own piece of shareable physical memory (CUDA VMM or a
//! host memfd). A *rendezvous* on a [`Group`] exchanges handles between the ranks and
//! maps every rank's memory into one flat span per process, so rank `r`'s memory is
//! at `base + r * stride`. Freeing is local: each rank drops its window whenever it
//! likes, in any order relative to the others.
//!
//! ```
//! use std::sync::Arc;
//! use symmwin::{Allocation, Config, Group, GroupSpec, HostProvider, MemoryStore, SignalOptions};
//!
//! # fn main() -> symmwin::Result<()> {
//! // One rank here; a real job runs one process per rank and a shared store
//! // (`FileStore`, or torch's c10d Store through the C ABI).
//! let provider = Arc::new(HostProvider::new());
//! let store = Arc::new(MemoryStore::new());
//! let group = Group::new(GroupSpec::new("doc", 0, 1), store, provider.clone(), &Config::from_env()?)?;
//!
//! let alloc = Allocation::new(provider, 1 << 20)?;
//! let window = group.rendezvous(&alloc)?;
//! let peer = window.ptr(0)?; // rank 0's memory, here our own
//! // SAFETY (example): the window maps `size()` writable bytes at every rank's slot.
//! unsafe { (peer as *mut u64).write_volatile(42) };
//! window.barrier(SignalOptions::default())?; // channel 0, the group's timeout
//! assert_eq!(unsafe { (alloc.ptr() as *const u64).read_volatile() }, 42);
//! # Ok(())
//! # }
//! ```
//!
//! Every public type, trait, function and constant has one path: the crate root. The
//! modules are private; their layers are drawn in docs/design.md and checked by
//! `tests/layers.rs`.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

// The device contract's modules, under the paths they had when they lived here.
use symmwin_device::{
    debug_free, device_timeout, engine, error, interrupt, layout, limits, peer_exit, peer_watch,
    poison, text, waiting,
};

mod allocation;
mod config;
mod device_provider;
mod exchange;
mod export_ahead;
mod group;
mod logging;
mod ops;
mod private_dir;
mod probe;
mod provider {
    //! The backends, over the device contract.
    #[cfg(feature = "cuda")]
    pub use symmwin_cuda as cuda;
    pub use symmwin_device::provider::*;
    pub use symmwin_host as host;
}
mod protocol;
mod registry;
mod rendezvous;
mod signal;
mod store;
#[doc(hidden)]
pub mod testing;
mod token;
mod window;
mod window_cache;

pub use allocation::Allocation;
pub use config::{
    Config, HandlePreference, Setting, DEFAULT_DEVICE_TIMEOUT, DEFAULT_TIMEOUT, SETTINGS,
};
pub use device_provider::provider_for_device;
pub use device_timeout::DeviceTimeout;
pub use engine::{Engine, ENGINE_ENV};
pub use error::{Error, ErrorKind, Phase, Result};
pub use exchange::{remove_own_sockets, remove_sockets_of, ExchangeCounts};
pub use group::{Group, GroupSpec, MAX_WORLD};
pub use interrupt::{
    clear as clear_interrupt, request as request_interrupt, requested as interrupt_requested,
    set_check as set_interrupt_check,
};
pub use layout::{FlatLayout, PadLayout};
pub use logging::{init as init_logging, requested as logging_requested};
pub use ops::collective::{
    all_to_all, all_to_all_v, broadcast, put_or_get, put_signal, put_with_signal, tile_reduce,
    wait_for_signal, wait_for_signal_at, wait_signal,
};
pub use ops::plan::Shape;
pub use ops::{DType, ElemType, Elements, OpOptions, Operand, Rank, ReduceOp, Rows, Tile};
pub use peer_exit::PeerExit;
pub use peer_watch::PeerSet;
pub use poison::{Poison, PoisonCause};
pub use probe::{
    machine as probe_machine, machine_json as probe_machine_json, DeviceReport, MachineReport,
};
#[cfg(feature = "cuda")]
pub use provider::cuda::{
    check_context as check_cuda_context, device_count as cuda_device_count, peer_access,
    probe_device, read_fabric_domain, CudaProvider, CudaSignals, FabricDomainProbe, HandleSupport,
    NoFabricDomain, NvmlStatus,
};
pub use provider::host::HostProvider;
pub use provider::{
    FabricDomain, HandleType, Memory, PadSignal, Provider, ProviderInfo, ProviderKind,
    SharedHandle, SignalAt, Signals, Span, StreamHandle, Table,
};
pub use registry::Registry;
pub use rendezvous::PhaseTimes;
pub use signal::process_group::{
    LinkFailure, Message, MessageMemory, ProcessGroupLink, ProcessGroupPeers,
};
pub use signal::remote::{Direction, Flag, RemoteFailure, RemotePeers, Transfer};
pub use signal::{SignalOptions, Stream, DEFAULT_PAD_SIZE};
pub use store::{FileStore, MemoryStore, Store};
pub use window::Window;

/// This build's version and the git commit it was built from, e.g.
/// `"0.1.0+g1a2b3c4d5e6f"` (`.dirty` for uncommitted changes; the bare version when
/// built outside a git checkout). Results measured with a prebuilt library say what ran.
pub const BUILD_VERSION: &str = env!("SYMMWIN_BUILD_VERSION");

/// The guide in `docs/rust.md`, compiled as doc tests so its examples stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/rust.md")]
pub struct RustGuide;
