//! What adapters need beyond the user API at the crate root: the C ABI
//! (`symmwin-capi`), the CLI (`symmwin-cli`), the torch adapter behind the C ABI, and
//! the test suites. A program that only allocates, rendezvouses and runs ops never
//! names anything here.
//!
//! - the provider choice ([`provider_for_device`]) and the provider contract's parts
//!   ([`Memory`], [`Span`], [`Signals`], ...), for code that drives a provider directly;
//! - the process-group link a group spanning hosts talks through
//!   ([`ProcessGroupLink`], [`Message`], the remote signals);
//! - the [`Registry`] of allocations the C ABI hands out as handles;
//! - the machine probe, logging set-up, the settings table, socket clean-up, the
//!   interrupt check a host language installs;
//! - [`Recover`], the one way a lock whose holder panicked is taken;
//! - `testing`: internals the test suites forge messages with (no stability promise).

#[doc(hidden)]
pub mod testing;

pub use crate::config::{Setting, SETTINGS};
pub use crate::device_provider::provider_for_device;
pub use crate::exchange::{remove_own_sockets, remove_sockets_of, ExchangeCounts};
pub use crate::logging::{init as init_logging, requested as logging_requested};
pub use crate::probe::{
    machine as probe_machine, machine_json as probe_machine_json, DeviceReport, MachineReport,
};
pub use crate::registry::Registry;
pub use crate::rendezvous::PhaseTimes;
pub use crate::signal::process_group::{
    LinkFailure, Message, MessageMemory, ProcessGroupLink, ProcessGroupPeers,
};
pub use crate::signal::remote::{Direction, Flag, RemoteFailure, RemotePeers, Transfer};
#[cfg(feature = "cuda")]
pub use symmwin_cuda::{
    check_context as check_cuda_context, device_count as cuda_device_count, peer_access,
    probe_device, read_fabric_domain, CudaSignals, FabricDomainProbe, HandleSupport,
    NoFabricDomain, NvmlStatus,
};
pub use symmwin_device::interrupt::set_check as set_interrupt_check;
pub use symmwin_device::layout::PadLayout;
pub use symmwin_device::lock::Recover;
pub use symmwin_device::peer_watch::PeerSet;
pub use symmwin_device::provider::{
    FabricDomain, HandleType, Memory, PadSignal, ProviderInfo, ProviderKind, SharedHandle,
    SignalAt, Signals, Span, StreamHandle, Table,
};
