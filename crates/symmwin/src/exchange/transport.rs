//! The socket transport: binding this rank's datagram socket, sending a handle to a
//! peer's, and receiving datagrams with the credentials and fds the kernel attached.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

use super::auth::check_peer_socket;
use super::diagnosis::shown;
use super::wire::{Message, Payload, FABRIC_LEN, MAX_REQUEST};
use super::{Endpoint, Outgoing, Round};
use crate::error::{Error, ErrorKind, Phase, Result};
use crate::provider::SharedHandle;

/// A datagram as it arrived: its bytes, the fds attached and the sender's
/// credentials (`SO_PASSCRED`), not yet authenticated.
#[derive(Debug)]
pub(super) struct Received {
    pub(super) bytes: Vec<u8>,
    pub(super) truncated: bool,
    pub(super) fds: Vec<OwnedFd>,
    pub(super) uid: Option<u32>,
    pub(super) pid: Option<u32>,
}

/// A nonblocking datagram socket bound at `path`, readable by us only, that
/// receives its senders' credentials. The path is recorded for removal at exit.
pub(super) fn bind_socket(path: &Path) -> Result<OwnedFd> {
    let socket = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(|e| Error::os(Phase::Exchange, "socket", e))?;
    let addr = SocketAddrUnix::new(path).map_err(|e| {
        Error::new(
            Phase::Exchange,
            ErrorKind::InvalidArgument(format!(
                "socket path {} is not usable ({e}); set SYMMWIN_SOCKET_DIR to a shorter directory",
                path.display()
            )),
        )
    })?;
    rustix::net::bind(&socket, &addr).map_err(|e| Error::os(Phase::Exchange, "bind", e))?;
    super::sweep::own_sockets().push(path.to_path_buf());
    // The directory already shuts out other users; the mode is a second lock.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::os(Phase::Exchange, "chmod(socket)", e))?;
    rustix::net::sockopt::set_socket_passcred(&socket, true)
        .map_err(|e| Error::os(Phase::Exchange, "setsockopt(SO_PASSCRED)", e))?;
    Ok(socket)
}

impl Endpoint {
    /// Send our offer and handle (and, in our first message, our request) to `peer`;
    /// `Ok(false)` when its queue is full and we should retry.
    pub(super) fn try_send(
        &self,
        round: &Round<'_>,
        peer: usize,
        ours: &Outgoing<'_>,
        first: bool,
    ) -> Result<bool> {
        let (offer, handle) = (ours.offer, ours.handle);
        let address = &round.peers[peer];
        let message = Message {
            group: round.group,
            seq: round.seq,
            sender: round.rank as u32,
            world: round.peers.len() as u32,
            token: address.token.0,
            physical_size: round.physical_size,
            offer,
            payload: match handle {
                Some(SharedHandle::Fd(_)) => Payload::Fd,
                Some(SharedHandle::Fabric(bytes)) => Payload::Fabric(*bytes),
                None => Payload::NoHandle,
            },
        };
        let mut buf = [0u8; FABRIC_LEN];
        let mut framed = Vec::new();
        let bytes = match ours.request.filter(|_| first) {
            Some(request) => {
                message.encode_with_request(request, &mut framed);
                &framed[..]
            }
            None => message.encode(&mut buf),
        };
        // The path comes from the store, which other users may be able to write (a
        // TCP store is open to the machine). Only send handles to sockets that live in a
        // private directory of ours, so a forged request cannot divert memory elsewhere.
        check_peer_socket(&address.socket, self.uid).map_err(|e| e.with_peer(peer))?;
        let addr = SocketAddrUnix::new(&address.socket)
            .map_err(|e| Error::os(Phase::Exchange, "socket address", e).with_peer(peer))?;
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let fds;
        if let Some(SharedHandle::Fd(fd)) = handle {
            fds = [fd.as_fd()];
            control.push(SendAncillaryMessage::ScmRights(&fds));
        }
        match rustix::net::sendmsg_addr(
            &self.socket,
            &addr,
            &[IoSlice::new(bytes)],
            &mut control,
            SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
        ) {
            Ok(_) => Ok(true),
            Err(Errno::AGAIN) => Ok(false),
            Err(Errno::CONNREFUSED | Errno::NOENT) => Err(Error::new(
                Phase::Exchange,
                ErrorKind::PeerLost(format!(
                    "rank {peer} (pid {}) is not listening on {}",
                    address.pid,
                    shown(&address.socket)
                )),
            )
            .with_peer(peer)),
            Err(e) => Err(Error::os(Phase::Exchange, "sendmsg", e).with_peer(peer)),
        }
    }

    pub(super) fn wait_readable(&self, wait: Duration) -> Result<bool> {
        let ts = rustix::time::Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: wait.subsec_nanos() as i64,
        };
        let mut fds = [PollFd::new(&self.socket, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(n) => Ok(n > 0),
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(Error::os(Phase::Exchange, "poll", e)),
        }
    }

    /// One datagram with its credentials and fds, or `None` when the queue is empty.
    pub(super) fn receive_one(&mut self) -> Result<Option<Received>> {
        // Room for a request after the longest fixed part, and one byte more to see
        // a longer datagram as truncated; allocated once per endpoint.
        self.receive_buffer.resize(FABRIC_LEN + MAX_REQUEST + 1, 0);
        // Room for more fds than a valid message carries, so that extra ones arrive
        // as owned fds we close, instead of truncating the control data.
        let mut space =
            [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8), ScmCredentials(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let msg = match rustix::net::recvmsg(
            &self.socket,
            &mut [IoSliceMut::new(&mut self.receive_buffer)],
            &mut control,
            RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(msg) => msg,
            Err(Errno::AGAIN) => return Ok(None),
            Err(Errno::INTR) => return Ok(None),
            Err(e) => return Err(Error::os(Phase::Exchange, "recvmsg", e)),
        };
        let mut fds = Vec::new();
        let mut cred = None;
        for item in control.drain() {
            match item {
                RecvAncillaryMessage::ScmRights(rights) => fds.extend(rights),
                RecvAncillaryMessage::ScmCredentials(c) => cred = Some(c),
                _ => {}
            }
        }
        let truncated = msg
            .flags
            .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC);
        if msg.flags.contains(ReturnFlags::CTRUNC) {
            // Our control buffer has room for more fds than any sender attaches, so a
            // truncation means the kernel could not install the fds: EMFILE.
            self.fds_dropped += 1;
        }
        let bytes = self.receive_buffer[..msg.bytes.min(self.receive_buffer.len())].to_vec();
        Ok(Some(Received {
            bytes,
            truncated,
            fds,
            uid: cred.map(|c| c.uid.as_raw()),
            pid: cred.map(|c| c.pid.as_raw_nonzero().get() as u32),
        }))
    }
}
