//! symmwin-device: the contract a symmwin backend implements, and the math every
//! backend shares.
//!
//! For the authors of a backend (today `symmwin-host` and `symmwin-cuda`) and for the
//! `symmwin` runtime that drives them; a program using symmwin reaches what it needs
//! through `symmwin` and never names this crate.
//!
//! - [`provider`]: the [`Provider`](provider::Provider), [`Memory`](provider::Memory),
//!   [`Span`](provider::Span), [`Signals`](provider::Signals) and
//!   [`DeviceOps`](provider::device_ops::DeviceOps) traits with their protocol notes,
//!   and the ops' request, plan, fingerprint and element types;
//! - [`layout`]: the only address arithmetic (flat windows, signal pads);
//! - [`error`]: the error every layer returns, naming rank, phase and peer;
//! - host waits ([`waiting`], [`interrupt`]), the peers' lives a wait reads
//!   ([`peer_watch`], [`peer_exit`]), what a timed-out device wait leaves
//!   ([`device_timeout`]), poisoned windows ([`poison`]), operating-system limits
//!   ([`limits`]), the use-after-free debug mode ([`debug_free`]), bounded text
//!   ([`text`]) and the one way a lock is taken ([`lock`]).
//!
//! Nothing here depends on CUDA: a backend crate brings its own driver.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod debug_free;
pub mod device_timeout;
pub mod engine;
pub mod error;
pub mod interrupt;
pub mod layout;
pub mod limits;
pub mod lock;
pub mod peer_exit;
pub mod peer_watch;
pub mod poison;
pub mod provider;
pub mod text;
pub mod waiting;

pub use error::{Error, ErrorKind, Phase, Result};
