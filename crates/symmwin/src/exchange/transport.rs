//! The socket transport: binding this rank's datagram socket, sending a handle to a
//! peer's, and receiving datagrams with the credentials and fds the kernel attached.

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix,
    SocketFlags, SocketType,
};

use super::diagnosis::shown;
use super::wire::{Message, Payload, FABRIC_LEN, MAX_REQUEST};
use super::{Endpoint, Outgoing, PeerAddress, Round};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::SharedHandle;

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
            token: address.token.bytes(),
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
        let fd = match handle {
            Some(SharedHandle::Fd(fd)) => Some(fd.as_fd()),
            _ => None,
        };
        self.send_to(address, peer, bytes, fd)
    }

    /// Send `bytes` (with `fd` attached, if any) to `peer` at `address`: `Ok(false)`
    /// when its queue is full and we should retry.
    pub(super) fn send_to(
        &self,
        address: &PeerAddress,
        peer: usize,
        bytes: &[u8],
        fd: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> Result<bool> {
        // The path comes from the store, which other users may be able to write (a
        // TCP store is open to the machine). Only send to sockets that live in a
        // private directory of ours, so a forged request cannot divert memory elsewhere.
        check_peer_socket(&address.socket, self.uid).map_err(|e| e.with_peer(peer))?;
        let addr = SocketAddrUnix::new(&address.socket)
            .map_err(|e| Error::os(Phase::Exchange, "socket address", e).with_peer(peer))?;
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let fds;
        if let Some(fd) = fd {
            fds = [fd];
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
        let mut control = [0u64; CONTROL_WORDS];
        let mut iov = libc::iovec {
            iov_base: self.receive_buffer.as_mut_ptr().cast(),
            iov_len: self.receive_buffer.len(),
        };
        // SAFETY: every field of `msghdr` is an integer or a pointer, for which zero
        // (null) is a valid value; this also zeroes the padding some libcs declare.
        let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
        header.msg_iov = &mut iov;
        header.msg_iovlen = 1;
        header.msg_control = control.as_mut_ptr().cast();
        header.msg_controllen = std::mem::size_of_val(&control) as _;
        // Not rustix's `recvmsg`: its ancillary parser builds a `UCred`, whose pid is
        // non-zero by type, from credentials in which the kernel writes pid 0 for a
        // sender outside our pid namespace (undefined behaviour). We read the control
        // bytes ourselves ([`parse_control`]).
        // SAFETY: `header` points at `iov` (our receive buffer, `iov_len` writable
        // bytes) and at `control` (`msg_controllen` writable bytes, aligned for
        // `cmsghdr`), all of which outlive the call; the socket fd is open.
        let received = unsafe {
            libc::recvmsg(
                self.socket.as_raw_fd(),
                &mut header,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        let Ok(len) = usize::try_from(received) else {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => Ok(None),
                _ => Err(Error::os(Phase::Exchange, "recvmsg", e)),
            };
        };
        let control_bytes: Vec<u8> = control.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let used = (header.msg_controllen as usize).min(control_bytes.len());
        let (raw_fds, cred) = parse_control(&control_bytes[..used]);
        let fds = raw_fds
            .into_iter()
            // SAFETY: the kernel installed these descriptors in this process for this
            // message (SCM_RIGHTS, close-on-exec); nothing else knows or owns them.
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
            .collect();
        let truncated = header.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
        if header.msg_flags & libc::MSG_CTRUNC != 0 {
            // Our control buffer has room for more fds than any sender attaches, so a
            // truncation means the kernel could not install the fds: EMFILE.
            self.fds_dropped += 1;
        }
        let bytes = self.receive_buffer[..len.min(self.receive_buffer.len())].to_vec();
        Ok(Some(Received {
            bytes,
            truncated,
            fds,
            uid: cred.map(|c| c.uid),
            pid: cred.and_then(Credentials::pid),
        }))
    }
}

/// Control space of a receive: room for more fds than a valid message carries, so
/// that extra ones arrive as owned fds we close instead of truncating the control
/// data, and for the sender's credentials; in `u64`s, for `cmsghdr` alignment.
const CONTROL_WORDS: usize = rustix::cmsg_space!(ScmRights(8), ScmCredentials(1)).div_ceil(8);

/// `struct ucred` as the kernel writes it into an `SCM_CREDENTIALS` message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Credentials {
    /// The sender's pid as our pid namespace sees it: 0 when the sender's process is
    /// not visible in it (another pid namespace that is not a descendant of ours).
    pub(super) raw_pid: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
}

impl Credentials {
    /// The sender's pid, unless the kernel could not name it to us (pid 0).
    pub(super) fn pid(self) -> Option<u32> {
        (self.raw_pid != 0).then_some(self.raw_pid)
    }
}

/// Read the fds and credentials out of the control bytes of a received message,
/// whatever they contain: a message cut short, or one of a kind we do not expect, is
/// skipped, never read past its end.
pub(super) fn parse_control(control: &[u8]) -> (Vec<RawFd>, Option<Credentials>) {
    const HEADER: usize = std::mem::size_of::<libc::cmsghdr>();
    const LEVEL: usize = std::mem::offset_of!(libc::cmsghdr, cmsg_level);
    const KIND: usize = std::mem::offset_of!(libc::cmsghdr, cmsg_type);
    let align = |n: usize| n.div_ceil(std::mem::size_of::<usize>()) * std::mem::size_of::<usize>();
    let word = |at: usize| -> Option<[u8; 4]> { control.get(at..at + 4)?.try_into().ok() };
    let mut fds = Vec::new();
    let mut cred = None;
    let mut at = 0;
    while at + HEADER <= control.len() {
        // `cmsg_len` is the first field, a `size_t` on Linux (`socklen_t` elsewhere).
        let len_bytes = &control[at..at + std::mem::size_of::<usize>()];
        let len = usize::from_ne_bytes(len_bytes.try_into().unwrap_or_default());
        let (Some(level), Some(kind)) = (word(at + LEVEL), word(at + KIND)) else {
            break;
        };
        if len < HEADER {
            break;
        }
        let end = (at + len).min(control.len());
        let data = &control[at + align(HEADER).min(end - at)..end];
        match (i32::from_ne_bytes(level), i32::from_ne_bytes(kind)) {
            (libc::SOL_SOCKET, libc::SCM_RIGHTS) => fds.extend(
                data.chunks_exact(4)
                    .map(|c| RawFd::from_ne_bytes([c[0], c[1], c[2], c[3]])),
            ),
            (libc::SOL_SOCKET, libc::SCM_CREDENTIALS) if data.len() >= 12 => {
                let field =
                    |i: usize| u32::from_ne_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
                cred = Some(Credentials {
                    raw_pid: field(0),
                    uid: field(4),
                    gid: field(8),
                });
            }
            _ => {}
        }
        at += align(len);
    }
    (fds, cred)
}

/// Longest path a Unix socket address holds (`sun_path` less its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// A peer socket must be a socket owned by `uid` (ours) inside a directory that only
/// we can enter.
pub(super) fn check_peer_socket(path: &Path, uid: u32) -> Result<()> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let refuse = |why: &str| {
        Error::new(
            Phase::Exchange,
            ErrorKind::Rejected(format!("peer socket {}: {why}", shown(path))),
        )
    };
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(refuse(&format!(
            "the path is {len} bytes, longer than a Unix socket address holds \
             ({MAX_SOCKET_PATH}); the peer's request is corrupt or forged"
        )));
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| {
        Error::new(
            Phase::Exchange,
            ErrorKind::PeerLost(format!("socket {} is gone ({e})", shown(path))),
        )
    })?;
    if !meta.file_type().is_socket() || meta.uid() != uid {
        return Err(refuse("is not a socket owned by us"));
    }
    let dir = path.parent().ok_or_else(|| refuse("has no directory"))?;
    crate::private_dir::verify(dir, "peer socket directory", "the sockets", Phase::Exchange)
        .map_err(|_| refuse("is not in a private directory of ours"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One control message as the kernel lays it out: header, data, padding.
    fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        let header = std::mem::size_of::<libc::cmsghdr>();
        let mut out = vec![0u8; header];
        out[..std::mem::size_of::<usize>()].copy_from_slice(&(header + data.len()).to_ne_bytes());
        let level_at = std::mem::offset_of!(libc::cmsghdr, cmsg_level);
        let kind_at = std::mem::offset_of!(libc::cmsghdr, cmsg_type);
        out[level_at..level_at + 4].copy_from_slice(&level.to_ne_bytes());
        out[kind_at..kind_at + 4].copy_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(8) * 8, 0);
        out
    }

    fn ucred(pid: u32, uid: u32, gid: u32) -> Vec<u8> {
        [pid, uid, gid]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect()
    }

    #[test]
    fn credentials_with_pid_0_parse_as_a_sender_we_cannot_name() {
        // A sender in another pid namespace: the kernel writes pid 0.
        let control = cmsg(
            libc::SOL_SOCKET,
            libc::SCM_CREDENTIALS,
            &ucred(0, 1000, 1000),
        );
        let (fds, cred) = parse_control(&control);
        assert!(fds.is_empty());
        let cred = cred.expect("credentials");
        assert_eq!((cred.raw_pid, cred.uid, cred.gid), (0, 1000, 1000));
        assert_eq!(cred.pid(), None);
        let (_, cred) = parse_control(&cmsg(
            libc::SOL_SOCKET,
            libc::SCM_CREDENTIALS,
            &ucred(4242, 0, 0),
        ));
        assert_eq!(cred.and_then(Credentials::pid), Some(4242));
    }

    #[test]
    fn fds_and_credentials_are_read_and_cut_messages_are_not_read_past_their_end() {
        let mut control = cmsg(
            libc::SOL_SOCKET,
            libc::SCM_RIGHTS,
            &[7i32, 9]
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect::<Vec<u8>>(),
        );
        control.extend(cmsg(
            libc::SOL_SOCKET,
            libc::SCM_CREDENTIALS,
            &ucred(5, 6, 7),
        ));
        let (fds, cred) = parse_control(&control);
        assert_eq!(fds, vec![7, 9]);
        assert_eq!(cred.map(|c| c.raw_pid), Some(5));
        // Every cut of the buffer parses without reading out of bounds.
        for cut in 0..control.len() {
            let (fds, _) = parse_control(&control[..cut]);
            assert!(fds.len() <= 2);
        }
        // Credentials too short to hold a ucred, and a kind we do not read, are skipped.
        let short = cmsg(libc::SOL_SOCKET, libc::SCM_CREDENTIALS, &[1, 2, 3]);
        assert_eq!(parse_control(&short), (vec![], None));
        let other = cmsg(libc::IPPROTO_IP, libc::SCM_RIGHTS, &7i32.to_ne_bytes());
        assert_eq!(parse_control(&other), (vec![], None));
        // A header claiming less than itself stops the walk.
        let mut bogus = control.clone();
        bogus[..8].copy_from_slice(&3usize.to_ne_bytes());
        assert_eq!(parse_control(&bogus), (vec![], None));
    }

    #[test]
    fn a_real_datagram_brings_our_own_credentials_and_its_fd() {
        let dir = std::env::temp_dir().join(format!("symmwin-cred-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let mut endpoint = Endpoint::bind(&dir, 1).unwrap();
        let sender = rustix::net::socket(AddressFamily::UNIX, SocketType::DGRAM, None).unwrap();
        let addr = SocketAddrUnix::new(endpoint.path()).unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let fds = [file.as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
        rustix::net::sendmsg_addr(
            &sender,
            &addr,
            &[IoSlice::new(b"hello")],
            &mut control,
            SendFlags::empty(),
        )
        .unwrap();
        let got = endpoint.receive_one().unwrap().expect("a datagram");
        assert_eq!(got.bytes, b"hello");
        assert!(!got.truncated);
        assert_eq!(got.fds.len(), 1);
        assert_eq!(got.pid, Some(std::process::id()));
        assert_eq!(got.uid, Some(rustix::process::getuid().as_raw()));
        assert!(endpoint.receive_one().unwrap().is_none());
        drop(endpoint);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
