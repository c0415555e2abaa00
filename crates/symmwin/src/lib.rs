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
//! The crate root holds the API a program calls, each name at one path: groups,
//! allocations and windows, their configuration, providers and stores, signals, errors
//! and interruption; the ops are in [`ops`]. What the C ABI, the CLI and the test
//! suites need beyond that (the process-group link, the provider choice, the probe,
//! test helpers) is in [`adapter`]. The modules behind them are private; their layers
//! are drawn in docs/design.md and checked by `tests/layers.rs`, and the crates below
//! (`symmwin-device`, `symmwin-host`, `symmwin-cuda`) by Cargo.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

// The device contract's modules whose types the root hands on (the runtime's own
// modules name them as `symmwin_device::...`).
use symmwin_device::{device_timeout, error, interrupt, layout, peer_exit, poison, provider};

pub mod adapter;
mod allocation;
mod config;
mod device_provider;
mod exchange;
mod export_ahead;
mod group;
mod locality;
mod logging;
pub mod ops;
mod private_dir;
mod probe;
mod process_start;
mod protocol;
mod registry;
mod rendezvous;
mod signal;
mod store;
mod token;
mod window;
mod window_cache;
mod worker;

pub use allocation::Allocation;
pub use config::{Config, HandlePreference, DEFAULT_DEVICE_TIMEOUT, DEFAULT_TIMEOUT};
pub use device_timeout::DeviceTimeout;
pub use error::{Error, ErrorKind, Phase, Result};
pub use group::{Group, GroupSpec, MAX_WORLD};
pub use interrupt::{
    clear as clear_interrupt, request as request_interrupt, requested as interrupt_requested,
};
pub use layout::FlatLayout;
pub use peer_exit::PeerExit;
pub use poison::{Poison, PoisonCause};
pub use provider::Provider;
pub use signal::{SignalOptions, Stream, DEFAULT_PAD_SIZE};
pub use store::{FileStore, MemoryStore, Store};
#[cfg(feature = "cuda")]
pub use symmwin_cuda::CudaProvider;
pub use symmwin_host::HostProvider;
pub use window::Window;

/// This build's version and the git commit it was built from, e.g.
/// `"0.1.0+g1a2b3c4d5e6f"` (`.dirty` for uncommitted changes; the bare version when
/// built outside a git checkout). Results measured with a prebuilt library say what ran.
pub const BUILD_VERSION: &str = env!("SYMMWIN_BUILD_VERSION");

/// The guide in `docs/rust.md`, compiled as doc tests so its examples stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/rust.md")]
pub struct RustGuide;
