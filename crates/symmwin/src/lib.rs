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
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod allocation;
pub mod config;
pub mod debug_free;
mod device_provider;
pub mod device_timeout;
mod engine;
pub mod error;
pub(crate) mod exchange;
mod export_ahead;
pub mod group;
pub mod layout;
mod limits;
pub mod logging;
pub mod ops;
pub mod peer_watch;
mod private_dir;
pub mod probe;
mod protocol;
pub mod provider;
pub mod registry;
pub(crate) mod rendezvous;
pub mod signal;
pub mod store;
#[doc(hidden)]
pub mod testing;
mod text;
pub mod token;
pub mod window;
pub(crate) mod window_cache;

pub use allocation::Allocation;
pub use config::{Config, HandlePreference};
pub use device_provider::provider_for_device;
pub use device_timeout::DeviceTimeout;
pub use error::{Error, ErrorKind, Phase, Result};
pub use exchange::{remove_own_sockets, ExchangeCounts};
pub use group::{Group, GroupSpec};
pub use layout::FlatLayout;
pub use ops::{Engine, OpOptions, Operand};
pub use provider::host::HostProvider;
pub use provider::FabricDomain;
pub use provider::{HandleType, Provider, ProviderInfo, ProviderKind};
pub use registry::Registry;
pub use rendezvous::PhaseTimes;
pub use signal::{SignalOptions, Stream};
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
