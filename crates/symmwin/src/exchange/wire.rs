//! The one message on the exchange socket: a handle with its credentials.
//!
//! Fixed little-endian layout, so decoding is a bounds check and no allocation:
//! `magic "SYMW" | version u16 | kind u8 | reserved u8 | group u64 | seq u64 |
//! sender u32 | world u32 | token [16] | physical_size u64 | fabric [64] (kind 1 only)`.
//! The version is the protocol's ([`PROTOCOL_VERSION`]), the one requests carry.

use crate::protocol::PROTOCOL_VERSION;

/// Message magic.
pub const MAGIC: [u8; 4] = *b"SYMW";
/// Length of a message carrying a file descriptor.
pub const FD_LEN: usize = 56;
/// Length of a message carrying a fabric handle.
pub const FABRIC_LEN: usize = FD_LEN + 64;

/// What travels with the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// The handle is the one fd attached with SCM_RIGHTS.
    Fd,
    /// The handle is inline.
    Fabric([u8; 64]),
}

/// A decoded message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// Id of the group's name.
    pub group: u64,
    /// Rendezvous sequence number within the group.
    pub seq: u64,
    /// Sender's rank.
    pub sender: u32,
    /// Sender's world size.
    pub world: u32,
    /// The receiver's token, as the sender read it from the store.
    pub token: [u8; 16],
    /// Physical size of the memory the handle refers to (rounded up to the
    /// granularity), as the sender mapped it.
    pub physical_size: u64,
    /// The handle, or where to find it.
    pub payload: Payload,
}

/// Why bytes are not a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not one of the two valid lengths.
    #[error("bad length {0}")]
    Length(usize),
    /// Wrong magic.
    #[error("bad magic")]
    Magic,
    /// Unknown version.
    #[error("unsupported version {0}")]
    Version(u16),
    /// Unknown payload kind or a kind that disagrees with the length.
    #[error("bad payload kind {0}")]
    Kind(u8),
}

impl Message {
    /// Encode into `buf`, returning the used prefix.
    pub fn encode<'a>(&self, buf: &'a mut [u8; FABRIC_LEN]) -> &'a [u8] {
        buf[0..4].copy_from_slice(&MAGIC);
        buf[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        buf[6] = match self.payload {
            Payload::Fd => 0,
            Payload::Fabric(_) => 1,
        };
        buf[7] = 0;
        buf[8..16].copy_from_slice(&self.group.to_le_bytes());
        buf[16..24].copy_from_slice(&self.seq.to_le_bytes());
        buf[24..28].copy_from_slice(&self.sender.to_le_bytes());
        buf[28..32].copy_from_slice(&self.world.to_le_bytes());
        buf[32..48].copy_from_slice(&self.token);
        buf[48..56].copy_from_slice(&self.physical_size.to_le_bytes());
        match self.payload {
            Payload::Fd => &buf[..FD_LEN],
            Payload::Fabric(handle) => {
                buf[FD_LEN..].copy_from_slice(&handle);
                &buf[..FABRIC_LEN]
            }
        }
    }

    /// Decode, rejecting anything that is not exactly a valid message.
    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        if bytes.len() != FD_LEN && bytes.len() != FABRIC_LEN {
            return Err(DecodeError::Length(bytes.len()));
        }
        if bytes[0..4] != MAGIC {
            return Err(DecodeError::Magic);
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != PROTOCOL_VERSION {
            return Err(DecodeError::Version(version));
        }
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let u32_at = |at: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[at..at + 4]);
            u32::from_le_bytes(b)
        };
        let payload = match (bytes[6], bytes.len()) {
            (0, FD_LEN) => Payload::Fd,
            (1, FABRIC_LEN) => {
                let mut handle = [0u8; 64];
                handle.copy_from_slice(&bytes[FD_LEN..]);
                Payload::Fabric(handle)
            }
            (kind, _) => return Err(DecodeError::Kind(kind)),
        };
        let mut token = [0u8; 16];
        token.copy_from_slice(&bytes[32..48]);
        Ok(Message {
            group: u64_at(8),
            seq: u64_at(16),
            sender: u32_at(24),
            world: u32_at(28),
            token,
            physical_size: u64_at(48),
            payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(payload: Payload) -> Message {
        Message {
            group: 7,
            seq: 42,
            sender: 3,
            world: 8,
            token: [9; 16],
            physical_size: 1 << 21,
            payload,
        }
    }

    #[test]
    fn round_trips() {
        let mut buf = [0u8; FABRIC_LEN];
        for m in [sample(Payload::Fd), sample(Payload::Fabric([5; 64]))] {
            let bytes = m.encode(&mut buf).to_vec();
            assert_eq!(Message::decode(&bytes), Ok(m));
        }
    }

    #[test]
    fn rejects_kind_length_disagreement() {
        let mut buf = [0u8; FABRIC_LEN];
        let mut bytes = sample(Payload::Fd).encode(&mut buf).to_vec();
        bytes[6] = 1;
        assert_eq!(Message::decode(&bytes), Err(DecodeError::Kind(1)));
        bytes[6] = 0;
        bytes[4] = 9;
        assert_eq!(Message::decode(&bytes), Err(DecodeError::Version(9)));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Message::decode(&bytes);
        }

        #[test]
        fn any_valid_message_round_trips(group: u64, seq: u64, sender: u32, world: u32,
                                         token: [u8; 16], physical_size: u64, fabric: bool) {
            let payload = if fabric { Payload::Fabric([sender as u8; 64]) } else { Payload::Fd };
            let m = Message { group, seq, sender, world, token, physical_size, payload };
            let mut buf = [0u8; FABRIC_LEN];
            let bytes = m.encode(&mut buf).to_vec();
            prop_assert_eq!(Message::decode(&bytes), Ok(m));
        }
    }
}
