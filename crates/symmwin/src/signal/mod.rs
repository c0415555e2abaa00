//! Signal pads and the pool they come from. The barrier and signal operations
//! themselves belong to each provider ([`symmwin_device::provider::Signals`]).

mod options;
pub(crate) mod pad_pool;
pub mod process_group;
pub mod remote;

pub use options::{SignalOptions, Stream};

/// torch's default pad size: 32 channels x 72 ranks x 4 bytes.
pub const DEFAULT_PAD_SIZE: usize = 32 * 72 * 4;
