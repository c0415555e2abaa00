//! The one message on the exchange socket: a rank's word on freed windows and,
//! usually, its handle, with its credentials.
//!
//! Fixed little-endian layout, so decoding is a bounds check and no allocation:
//! `magic "SYMW" | version u16 | kind u8 | flags u8 | group u64 | seq u64 |
//! sender u32 | world u32 | token [16] | physical_size u64 | reuse u64 |
//! freed_count u8 | reserved [7] | freed [u64; 8] | fabric [64] (kind 1 only)`.
//! Kind 0 carries one fd (SCM_RIGHTS), kind 1 a fabric handle inline, kind 2 no
//! handle (a rank that may take a freed window over exports only if it must), kind 3
//! says the sender gave rendezvous `seq` up (see [`Payload::GaveUp`]); there
//! `physical_size` holds the rank the sender's error named plus one (0: none).
//! With flag [`FLAG_REQUEST`] the sender's request (JSON, at most [`MAX_REQUEST`]
//! bytes) follows the fixed part: once a group's ranks know each other's sockets,
//! their requests travel here instead of through the store ([`decode_framed`]).
//! The version is the protocol's ([`PROTOCOL_VERSION`]), the one requests carry.
//!
//! The window-cache words (`reuse`, `freed`) travel here and never through the
//! store: only a process of our uid can reach our socket, and the exchange accepts
//! a message only from the pid that published the sender rank's request, with our
//! token. So nobody who can merely write the store can make a rank hand out memory
//! a peer may still write.

use crate::protocol::PROTOCOL_VERSION;

/// Message magic.
pub const MAGIC: [u8; 4] = *b"SYMW";
/// Freed windows one message can list (a rank announces at most this many per group).
pub const MAX_OFFERED: usize = 8;
/// Where the window-cache section starts, and its length.
const OFFER_AT: usize = 56;
const OFFER_LEN: usize = 16 + 8 * MAX_OFFERED;
/// Length of a message carrying a file descriptor or no handle.
pub const FD_LEN: usize = OFFER_AT + OFFER_LEN;
/// Length of a message carrying a fabric handle.
pub const FABRIC_LEN: usize = FD_LEN + 64;
/// `reuse` when the sender offers no window.
const NO_REUSE: u64 = u64::MAX;
/// Flag: the sender's request follows the fixed part.
pub const FLAG_REQUEST: u8 = 1;
/// Longest request a message carries.
pub const MAX_REQUEST: usize = 60 << 10;

/// What travels with the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// The handle is the one fd attached with SCM_RIGHTS.
    Fd,
    /// The handle is inline.
    Fabric([u8; 64]),
    /// No handle: only the window-cache words.
    NoHandle,
    /// No handle and no offer: the sender gave rendezvous `seq` up (it timed out, was
    /// interrupted, or refused its own arguments), so the group is out of step from
    /// there on and the receiver must fail that call and every later one.
    GaveUp,
}

/// A rank's word on its group's freed windows, for one rendezvous.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offer {
    /// The released window (by rendezvous number) the sender's allocation can take
    /// over whole.
    pub reuse: Option<u64>,
    freed_len: u8,
    freed: [u64; MAX_OFFERED],
}

impl Offer {
    /// An offer of `reuse` listing `freed` (at most [`MAX_OFFERED`] kept, the newest).
    pub fn new(reuse: Option<u64>, freed: &[u64]) -> Self {
        let kept = &freed[freed.len().saturating_sub(MAX_OFFERED)..];
        let mut offer = Offer {
            reuse,
            freed_len: kept.len() as u8,
            freed: [0; MAX_OFFERED],
        };
        offer.freed[..kept.len()].copy_from_slice(kept);
        offer
    }

    /// The windows (by rendezvous number) the sender has freed.
    pub fn freed(&self) -> &[u64] {
        &self.freed[..usize::from(self.freed_len)]
    }
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
    /// The sender's word on freed windows.
    pub offer: Offer,
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
    /// Unknown flags.
    #[error("bad flags {0:#x}")]
    Flags(u8),
    /// More freed windows than a message holds, or a reserved or unused byte set.
    #[error("bad window-cache section")]
    Offer,
}

impl Message {
    /// Encode into `buf`, returning the used prefix.
    pub fn encode<'a>(&self, buf: &'a mut [u8; FABRIC_LEN]) -> &'a [u8] {
        buf.fill(0);
        buf[0..4].copy_from_slice(&MAGIC);
        buf[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        buf[6] = match self.payload {
            Payload::Fd => 0,
            Payload::Fabric(_) => 1,
            Payload::NoHandle => 2,
            Payload::GaveUp => 3,
        };
        buf[8..16].copy_from_slice(&self.group.to_le_bytes());
        buf[16..24].copy_from_slice(&self.seq.to_le_bytes());
        buf[24..28].copy_from_slice(&self.sender.to_le_bytes());
        buf[28..32].copy_from_slice(&self.world.to_le_bytes());
        buf[32..48].copy_from_slice(&self.token);
        buf[48..56].copy_from_slice(&self.physical_size.to_le_bytes());
        let reuse = self.offer.reuse.unwrap_or(NO_REUSE);
        buf[OFFER_AT..OFFER_AT + 8].copy_from_slice(&reuse.to_le_bytes());
        buf[OFFER_AT + 8] = self.offer.freed_len;
        for (i, seq) in self.offer.freed().iter().enumerate() {
            let at = OFFER_AT + 16 + 8 * i;
            buf[at..at + 8].copy_from_slice(&seq.to_le_bytes());
        }
        match self.payload {
            Payload::Fd | Payload::NoHandle | Payload::GaveUp => &buf[..FD_LEN],
            Payload::Fabric(handle) => {
                buf[FD_LEN..].copy_from_slice(&handle);
                &buf[..FABRIC_LEN]
            }
        }
    }

    /// Our message with `request` (the sender's request, JSON) after it, into `out`.
    pub fn encode_with_request(&self, request: &[u8], out: &mut Vec<u8>) {
        let mut buf = [0u8; FABRIC_LEN];
        let fixed = self.encode(&mut buf);
        out.clear();
        out.extend_from_slice(fixed);
        out[7] = FLAG_REQUEST;
        out.extend_from_slice(request);
    }

    /// Decode, rejecting anything that is not exactly a valid message.
    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        if bytes.len() != FD_LEN && bytes.len() != FABRIC_LEN {
            return Err(DecodeError::Length(bytes.len()));
        }
        if bytes[7] != 0 {
            return Err(DecodeError::Flags(bytes[7]));
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
            (2, FD_LEN) => Payload::NoHandle,
            (3, FD_LEN) => Payload::GaveUp,
            (1, FABRIC_LEN) => {
                let mut handle = [0u8; 64];
                handle.copy_from_slice(&bytes[FD_LEN..]);
                Payload::Fabric(handle)
            }
            (kind, _) => return Err(DecodeError::Kind(kind)),
        };
        let offer = decode_offer(bytes, u64_at)?;
        if payload == Payload::GaveUp && offer != Offer::default() {
            return Err(DecodeError::Offer);
        }
        let mut token = [0u8; 16];
        token.copy_from_slice(&bytes[32..48]);
        Ok(Message {
            group: u64_at(8),
            seq: u64_at(16),
            sender: u32_at(24),
            world: u32_at(28),
            token,
            physical_size: u64_at(48),
            offer,
            payload,
        })
    }
}

/// A message and, when its flag says so, the request that follows it.
pub fn decode_framed(bytes: &[u8]) -> Result<(Message, Option<&[u8]>), DecodeError> {
    if bytes.len() < FD_LEN {
        return Err(DecodeError::Length(bytes.len()));
    }
    match bytes[7] {
        0 => Message::decode(bytes).map(|m| (m, None)),
        FLAG_REQUEST => {
            let fixed = if bytes[6] == 1 { FABRIC_LEN } else { FD_LEN };
            let request = bytes.get(fixed..).filter(|r| !r.is_empty());
            let request = request
                .filter(|r| r.len() <= MAX_REQUEST)
                .ok_or(DecodeError::Length(bytes.len()))?;
            let mut head = [0u8; FABRIC_LEN];
            head[..fixed].copy_from_slice(&bytes[..fixed]);
            head[7] = 0;
            Message::decode(&head[..fixed]).map(|m| (m, Some(request)))
        }
        flags => Err(DecodeError::Flags(flags)),
    }
}

/// The window-cache section of `bytes` (a message of valid length).
fn decode_offer(bytes: &[u8], u64_at: impl Fn(usize) -> u64) -> Result<Offer, DecodeError> {
    let freed_len = bytes[OFFER_AT + 8];
    let reserved = &bytes[OFFER_AT + 9..OFFER_AT + 16];
    if usize::from(freed_len) > MAX_OFFERED || reserved.iter().any(|&b| b != 0) {
        return Err(DecodeError::Offer);
    }
    let mut freed = [0u64; MAX_OFFERED];
    for (i, seq) in freed.iter_mut().enumerate() {
        *seq = u64_at(OFFER_AT + 16 + 8 * i);
    }
    // Unused entries are zero, so that a message decodes only from its one encoding.
    if freed[usize::from(freed_len)..].iter().any(|&seq| seq != 0) {
        return Err(DecodeError::Offer);
    }
    let reuse = u64_at(OFFER_AT);
    Ok(Offer {
        reuse: (reuse != NO_REUSE).then_some(reuse),
        freed_len,
        freed,
    })
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
            offer: Offer::new(Some(40), &[12, 30, 41]),
            payload,
        }
    }

    #[test]
    fn round_trips() {
        let mut buf = [0u8; FABRIC_LEN];
        for m in [
            sample(Payload::Fd),
            sample(Payload::Fabric([5; 64])),
            sample(Payload::NoHandle),
            Message {
                offer: Offer::default(),
                ..sample(Payload::GaveUp)
            },
        ] {
            let bytes = m.encode(&mut buf).to_vec();
            assert_eq!(Message::decode(&bytes), Ok(m));
        }
        let none = Message {
            offer: Offer::default(),
            ..sample(Payload::Fd)
        };
        let decoded = Message::decode(none.encode(&mut buf)).unwrap();
        assert_eq!(decoded.offer.reuse, None);
        assert!(decoded.offer.freed().is_empty());
    }

    #[test]
    fn a_give_up_notice_carries_no_offer() {
        let mut buf = [0u8; FABRIC_LEN];
        let bytes = sample(Payload::GaveUp).encode(&mut buf).to_vec();
        assert_eq!(Message::decode(&bytes), Err(DecodeError::Offer));
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

    #[test]
    fn an_overlong_freed_list_is_refused_and_a_long_one_keeps_the_newest() {
        let mut buf = [0u8; FABRIC_LEN];
        let mut bytes = sample(Payload::Fd).encode(&mut buf).to_vec();
        bytes[OFFER_AT + 8] = MAX_OFFERED as u8 + 1;
        assert_eq!(Message::decode(&bytes), Err(DecodeError::Offer));
        let many: Vec<u64> = (0..20).collect();
        assert_eq!(Offer::new(None, &many).freed(), &many[12..]);
    }

    #[test]
    fn a_request_rides_after_the_fixed_part_and_only_with_its_flag() {
        let mut out = Vec::new();
        for m in [sample(Payload::Fd), sample(Payload::Fabric([5; 64]))] {
            m.encode_with_request(b"{\"seq\":42}", &mut out);
            assert_eq!(decode_framed(&out), Ok((m, Some(&b"{\"seq\":42}"[..]))));
            assert!(Message::decode(&out).is_err());
            let mut buf = [0u8; FABRIC_LEN];
            assert_eq!(decode_framed(m.encode(&mut buf)), Ok((m, None)));
        }
        let mut flagged = sample(Payload::Fd).encode(&mut [0u8; FABRIC_LEN]).to_vec();
        flagged[7] = FLAG_REQUEST;
        assert_eq!(decode_framed(&flagged), Err(DecodeError::Length(FD_LEN)));
        flagged[7] = 4;
        assert_eq!(decode_framed(&flagged), Err(DecodeError::Flags(4)));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..260)) {
            let _ = Message::decode(&bytes);
        }

        #[test]
        fn any_valid_message_round_trips(group: u64, seq: u64, sender: u32, world: u32,
                                         token: [u8; 16], physical_size: u64, fabric: bool,
                                         reuse in proptest::option::of(0..u64::MAX),
                                         freed in proptest::collection::vec(any::<u64>(), 0..=MAX_OFFERED)) {
            let payload = if fabric { Payload::Fabric([sender as u8; 64]) } else { Payload::Fd };
            let offer = Offer::new(reuse, &freed);
            let m = Message { group, seq, sender, world, token, physical_size, offer, payload };
            let mut buf = [0u8; FABRIC_LEN];
            let bytes = m.encode(&mut buf).to_vec();
            prop_assert_eq!(Message::decode(&bytes), Ok(m));
        }
    }
}
