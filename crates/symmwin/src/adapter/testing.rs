//! The internals the integration tests forge requests and exchange messages with
//! (`tests/security.rs`, `hostile.rs`, `fuzz.rs`, `bad_input.rs`, `multiprocess.rs`,
//! `forged_offers.rs`), the check that memory is handed out zeroed, shared with the
//! unit tests, and the check that a message says what it must, shared with the CLI's
//! tests. Not part of the API: hidden from the documentation, with no stability
//! promise.

pub use crate::exchange::wire::{Message, Offer, Payload, FABRIC_LEN, FD_LEN, MAX_OFFERED};
pub use crate::exchange::{Endpoint, PeerAddress, Round};
pub use crate::locality::{DirIdentity, Locality};
pub use crate::protocol::PROTOCOL_VERSION;
pub use crate::rendezvous::request::{validate, Request};
pub use crate::store::{poll_all, Namespace};
pub use crate::token::{random_u64, stable_id, Token};
pub use symmwin_device::provider::device_ops::plan;
pub use symmwin_host::page_size;

/// Fails the calling test unless `text` contains every one of `parts`, naming the
/// ones it lacks and showing `text`.
#[track_caller]
pub fn assert_mentions(text: &str, parts: &[&str]) {
    let missing: Vec<&str> = parts
        .iter()
        .copied()
        .filter(|part| !text.contains(part))
        .collect();
    assert!(missing.is_empty(), "{missing:?} not in:\n{text}");
}

/// The secret bytes of `token`, for tests that forge a message carrying it.
pub fn token_bytes(token: &Token) -> [u8; 16] {
    token.bytes()
}

/// The process-wide cache of released windows, for tests that count mappings.
pub mod window_cache {
    pub use crate::window_cache::{counts, flush};
}

/// The runtime's worker pool, for tests that count threads and mappings: started at
/// the size the test needs before its baseline, it starts no thread later.
pub mod worker {
    pub use crate::worker::keep_idle;
}

/// Bytes of `alloc`'s own view that are not zero, for tests that check memory is
/// handed out zeroed.
///
/// # Safety
/// `alloc` is host memory (the host provider's), so its view is readable here.
pub unsafe fn nonzero_bytes(alloc: &crate::allocation::Allocation) -> usize {
    // SAFETY: the caller guarantees a host mapping; it is alive while `alloc` is.
    let bytes = unsafe { std::slice::from_raw_parts(alloc.ptr() as *const u8, alloc.size()) };
    bytes.iter().filter(|&&b| b != 0).count()
}
