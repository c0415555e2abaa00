//! The version of the rendezvous protocol: the requests ranks publish in the store
//! and the messages their exchange sockets carry. One number for both, so that two
//! builds either speak all of it alike or are told apart at the gather.

/// Bumped whenever the request format, the message layout or the protocol changes.
pub const PROTOCOL_VERSION: u16 = 6;
