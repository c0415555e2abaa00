//! Authentication: a datagram is accepted only from the process that published the
//! sender rank's request, under our uid, carrying our token; a handle is sent only to
//! a socket of ours in a private directory.

#[cfg(test)]
use super::transport::check_peer_socket;
use super::transport::Received;
use super::wire::{decode_framed, Message, Payload};
use super::{Endpoint, Round};
use symmwin_device::provider::SharedHandle;

impl Endpoint {
    /// Check a datagram's credentials, token and attachments; the reason when
    /// it is dropped.
    pub(super) fn authenticate(
        &self,
        round: &Round<'_>,
        mut raw: Received,
    ) -> std::result::Result<Authenticated, String> {
        if raw.truncated {
            return Err("truncated datagram".into());
        }
        let uid = raw.uid.ok_or("no sender credentials")?;
        if uid != self.uid {
            return Err(format!("sender uid {uid} is not ours ({})", self.uid));
        }
        let (message, request) =
            decode_framed(&raw.bytes).map_err(|e| format!("undecodable: {e}"))?;
        let request = request.map(<[u8]>::to_vec);
        if !self.token.matches(&message.token) {
            return Err(format!("wrong token from pid {:?}", raw.pid));
        }
        let sender = message.sender as usize;
        // A rank is one process for the whole life of its group, so the pid its
        // current request names is the only one that may send for this or a later
        // rendezvous (a token holder that is not a rank cannot plant an early handle).
        if message.group == round.group && message.seq >= round.seq {
            let expected = round
                .peers
                .get(sender)
                .filter(|_| round.targets.contains(&sender))
                .ok_or_else(|| format!("sender rank {sender} is not a peer"))?;
            let Some(pid) = raw.pid else {
                return Err(format!(
                    "rank {sender} message from a process outside our pid namespace (the \
                     kernel reports pid 0), its request names pid {}: ranks in different \
                     pid namespaces cannot exchange handles",
                    expected.pid
                ));
            };
            if pid != expected.pid {
                return Err(format!(
                    "rank {sender} message from pid {pid}, its request names pid {}",
                    expected.pid
                ));
            }
        }
        let handle = match message.payload {
            Payload::Fd if raw.fds.len() == 1 => Some(SharedHandle::Fd(raw.fds.remove(0))),
            Payload::Fabric(bytes) if raw.fds.is_empty() => Some(SharedHandle::Fabric(bytes)),
            Payload::NoHandle | Payload::GaveUp if raw.fds.is_empty() => None,
            _ => {
                return Err(format!(
                    "{} fds attached to a {:?} message",
                    raw.fds.len(),
                    message.payload
                ))
            }
        };
        Ok(Authenticated {
            message,
            handle,
            request,
        })
    }
}

/// A datagram that passed [`Endpoint::authenticate`].
pub(super) struct Authenticated {
    pub(super) message: Message,
    pub(super) handle: Option<SharedHandle>,
    /// The sender's request, when it came with the message.
    pub(super) request: Option<Vec<u8>>,
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn an_overlong_peer_socket_path_is_named_as_such() {
        let long = PathBuf::from(format!("/tmp/{}", "d".repeat(1 << 20)));
        let err = check_peer_socket(&long, 0).unwrap_err().to_string();
        assert!(
            err.contains("longer than a Unix socket address holds"),
            "{err}"
        );
        assert!(err.len() < 1000, "{} bytes", err.len());
    }
}
