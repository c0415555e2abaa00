//! The parts of a rendezvous that differ for a group spanning hosts: who reaches whom
//! (see [`crate::locality`]) and fabric handles carried in the store.

use super::request::Request;
use crate::locality::{self, Locality, Reach};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::{HandleType, SharedHandle};

/// How every rank's memory reaches us: the published partition, confirmed by probing
/// the socket of every peer it says we share a kernel and socket directory with.
pub(crate) fn reach(
    requests: &[Request],
    me: usize,
    handle_type: HandleType,
) -> Result<Vec<Reach>> {
    let localities: Vec<&Locality> = requests.iter().map(|r| &r.locality).collect();
    let reach = locality::decide(&localities, me, handle_type);
    for (peer, how) in reach.iter().enumerate() {
        if *how == Reach::Socket {
            locality::probe_socket(
                peer,
                &requests[peer].socket,
                requests[peer].locality.socket_dir,
            )?;
        }
    }
    Ok(reach)
}

/// The fabric handle to publish: only fabric handles of a device in a fabric domain,
/// for peers of that domain on other hosts (an fd means nothing off this kernel).
pub(crate) fn store_handle(handle: &SharedHandle, here: &Locality) -> Option<String> {
    match handle {
        SharedHandle::Fabric(bytes) if here.fabric_domain.is_some() => {
            Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
        }
        _ => None,
    }
}

/// A peer's fabric handle from its request.
pub(crate) fn handle_from_store(request: &Request, key: &str) -> Result<SharedHandle> {
    let corrupt = |detail: &str| {
        Error::new(
            Phase::Gather,
            ErrorKind::Corrupt {
                key: key.to_owned(),
                detail: detail.to_owned(),
            },
        )
        .with_peer(request.rank)
    };
    let hex = request
        .fabric_handle
        .as_deref()
        .ok_or_else(|| corrupt("a peer of our fabric domain published no fabric handle"))?;
    if hex.len() != 128 || !hex.is_ascii() {
        return Err(corrupt("fabric handle is not 128 hex digits"));
    }
    let mut bytes = [0u8; 64];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| corrupt("fabric handle is not 128 hex digits"))?;
    }
    Ok(SharedHandle::Fabric(bytes))
}

/// True when every rank shares rank 0's kernel and socket directory, so that every
/// pair of ranks exchanges handles over the socket: the groups whose windows the
/// window cache may keep (every rank reaches the same verdict from the same requests).
pub(crate) fn one_host(requests: &[Request]) -> bool {
    let Some((first, rest)) = requests.split_first() else {
        return true;
    };
    rest.iter()
        .all(|r| first.locality.shares_kernel_and_sockets(&r.locality))
}
