//! How a peer's process ended, as the peer watcher (`peer_watch.rs`) saw it and as the
//! errors of the waits for it (host and device) name it.

/// How a watched process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerExit {
    /// The process.
    pub pid: u32,
    /// "exited", or, for a child of this process, its status or signal.
    pub how: String,
}

impl PeerExit {
    /// A process that ended in a way this process cannot know (it is not our child).
    pub fn exited(pid: u32) -> Self {
        PeerExit {
            pid,
            how: "exited".to_owned(),
        }
    }
}
