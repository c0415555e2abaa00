//! The by-value parameter block of the ops kernels and the failure record they write:
//! the Rust mirror of `kernels/ops_params.cuh`. The tests check every offset the
//! header's static_asserts check, so the two cannot drift apart silently.

pub(super) use super::super::timeout_record::{WaitOp, WaitReport};

/// Which op launched a kernel (`SYMMWIN_OP_*`, numbered as `symmwin::WaitOp` in
/// `wait.cuh`), so a timeout and a split that does not fit name it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(super) enum OpId {
    PutSignal = 2,
    AllToAll = 4,
    AllToAllVdev = 5,
    AllToAllVdev2d = 6,
    AllToAllVdev2dOffset = 7,
    Broadcast = 8,
    WaitForSignal = 9,
    TileReduce = 10,
    MultiRootTileReduce = 11,
    Put = 12,
    Get = 13,
    PutWithSignal = 14,
}
use symmwin_device::error::{Error, Result};
use symmwin_device::provider::device_ops::SymmBuf;

/// Threads per block of the data kernels (`SYMMWIN_OPS_THREADS`).
pub(super) const THREADS: u32 = 512;
/// Split-table entries (world * experts) the all_to_all_vdev kernel plans in shared
/// memory (`SYMMWIN_OPS_MAX_SPLITS`).
pub const MAX_SPLITS: usize = 2048;
/// Experts per rank of the 2-D all-to-all ops (`SYMMWIN_OPS_MAX_EXPERTS`).
pub const MAX_EXPERTS: usize = 512;
/// Largest world a tile reduce's root set can name (`SYMMWIN_OPS_MAX_ROOT_WORLD`).
pub const MAX_ROOT_WORLD: usize = 256;

/// `OpsParams::rank` of a kernel that knows no group (`SYMMWIN_OPS_UNKNOWN_RANK`).
pub(super) const UNKNOWN_RANK: u32 = u32::MAX;

/// `OpsParams::mode` of the all-to-all-v kernels.
pub(super) const A2AV_1D: u32 = 0;
pub(super) const A2AV_2D: u32 = 1;
pub(super) const A2AV_2D_OFFSET: u32 = 2;
/// `OpsParams::mode` of `symmwin_ops_copy`.
pub(super) const COPY_PUT: u32 = 0;
pub(super) const COPY_GET: u32 = 1;
/// `OpsParams::mode` bits of `symmwin_ops_handshake`.
pub(super) const HS_SIGNAL_PEER: u32 = 1;
pub(super) const HS_SIGNAL_ALL: u32 = 2;
pub(super) const HS_WAIT_PEER: u32 = 4;
pub(super) const HS_WAIT_ALL: u32 = 8;
/// With [`HS_WAIT_PEER`]: a mismatch is answered on the next channel, where the peer
/// waits, so that it fails naming this rank instead of waiting out its timeout.
pub(super) const HS_ANSWER_NEXT: u32 = 16;
/// `OpsParams::mode` of the tile reduce kernel: the element type.
pub(super) const DTYPE_F32: u32 = 0;
pub(super) const DTYPE_BF16: u32 = 1;
pub(super) const DTYPE_F16: u32 = 2;
pub(super) const DTYPE_F64: u32 = 3;

/// `OpsError::kind` (timeouts go to the signal kernels' record, `timeout_record.rs`).
pub(super) const ERR_OVERFLOW: u32 = 2;
pub(super) const ERR_BAD_SPLIT: u32 = 3;
/// A peer's signal carried another operand fingerprint (`rows`: the peer's word,
/// `room`: this rank's).
pub(super) const ERR_MISMATCH: u32 = 4;

/// One operand: rank `r`'s copy is `bytes` bytes at `base + r * stride + offset`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Operand {
    pub base: u64,
    pub stride: u64,
    pub offset: u64,
    pub bytes: u64,
}

impl Operand {
    /// The kernel's view of `buf`: this rank's `len` bytes, at the same offset in every
    /// rank's slot.
    pub fn of(buf: &SymmBuf) -> Operand {
        Operand {
            base: buf.layout.base as u64,
            stride: buf.layout.stride as u64,
            offset: buf.offset as u64,
            bytes: buf.len as u64,
        }
    }
}

/// `struct OpsParams` of `ops_params.cuh`, passed by value to every ops kernel.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OpsParams {
    pub src: Operand,
    pub dst: Operand,
    pub src_splits: Operand,
    pub dst_splits: Operand,
    pub pad_base: u64,
    pub pad_stride: u64,
    pub err: u64,
    pub wait: WaitReport,
    pub row_bytes: u64,
    pub bytes: u64,
    pub rows: u64,
    pub value: u64,
    pub major_align: i64,
    pub rank: u32,
    pub world: u32,
    pub peer: u32,
    pub experts: u32,
    pub blocks_per_peer: u32,
    pub channel: u32,
    pub mode: u32,
    /// The value of every pad signal of the op: the operand fingerprint's word
    /// ([`symmwin_device::provider::device_ops::Fingerprint::word`]), never 0.
    pub fingerprint: u32,
    pub roots: [u64; MAX_ROOT_WORLD / 64],
}

impl OpsParams {
    /// Every field zero but where timed-out waits report and where split failures go.
    pub fn new(wait: WaitReport, err: u64) -> OpsParams {
        OpsParams {
            src: Operand::default(),
            dst: Operand::default(),
            src_splits: Operand::default(),
            dst_splits: Operand::default(),
            pad_base: 0,
            pad_stride: 0,
            err,
            wait,
            row_bytes: 0,
            bytes: 0,
            rows: 0,
            value: 0,
            major_align: 0,
            rank: 0,
            world: 1,
            peer: 0,
            experts: 0,
            blocks_per_peer: 0,
            channel: 0,
            mode: 0,
            fingerprint: symmwin_device::provider::device_ops::Fingerprint::NONE.word(),
            roots: [0; MAX_ROOT_WORLD / 64],
        }
    }

    /// Marks `rank` as a tile-reduce root.
    pub fn add_root(&mut self, rank: usize) -> Result<()> {
        if rank >= MAX_ROOT_WORLD {
            return Err(Error::invalid(format!(
                "tile reduce supports roots below rank {MAX_ROOT_WORLD}, got {rank}"
            )));
        }
        self.roots[rank / 64] |= 1 << (rank % 64);
        Ok(())
    }
}

/// `struct OpsError` of `ops_params.cuh`, in host-mapped memory; `word` is written last.
#[repr(C)]
#[derive(Debug, Default)]
pub(super) struct OpsError {
    pub word: std::sync::atomic::AtomicU32,
    pub kind: u32,
    pub op: u32,
    pub rank: u32,
    pub rows: i64,
    pub room: i64,
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;
    use symmwin_device::layout::FlatLayout;

    #[test]
    fn layout_matches_ops_params_cuh() {
        assert_eq!(size_of::<Operand>(), 32);
        assert_eq!(offset_of!(OpsParams, dst), 32);
        assert_eq!(offset_of!(OpsParams, src_splits), 64);
        assert_eq!(offset_of!(OpsParams, dst_splits), 96);
        assert_eq!(offset_of!(OpsParams, pad_base), 128);
        assert_eq!(offset_of!(OpsParams, err), 144);
        assert_eq!(offset_of!(OpsParams, wait), 152);
        assert_eq!(offset_of!(OpsParams, row_bytes), 184);
        assert_eq!(offset_of!(OpsParams, bytes), 192);
        assert_eq!(offset_of!(OpsParams, rows), 200);
        assert_eq!(offset_of!(OpsParams, value), 208);
        assert_eq!(offset_of!(OpsParams, major_align), 216);
        assert_eq!(offset_of!(OpsParams, rank), 224);
        assert_eq!(offset_of!(OpsParams, blocks_per_peer), 240);
        assert_eq!(offset_of!(OpsParams, mode), 248);
        assert_eq!(offset_of!(OpsParams, fingerprint), 252);
        assert_eq!(offset_of!(OpsParams, roots), 256);
        assert_eq!(size_of::<OpsParams>(), 288);
        assert_eq!(size_of::<OpsError>(), 32);
        assert_eq!(offset_of!(OpsError, rows), 16);
        assert_eq!(offset_of!(OpsError, room), 24);
    }

    #[test]
    fn header_constants_match() {
        let header = include_str!("../../kernels/ops_params.cuh");
        let define = |name: &str| -> u64 {
            let line = header
                .lines()
                .find(|l| l.starts_with(&format!("#define {name} ")))
                .unwrap_or_else(|| panic!("{name} missing from ops_params.cuh"));
            line.split_whitespace().nth(2).unwrap().parse().unwrap()
        };
        assert_eq!(define("SYMMWIN_OPS_THREADS"), THREADS as u64);
        assert_eq!(define("SYMMWIN_OPS_UNKNOWN_RANK"), UNKNOWN_RANK as u64);
        assert_eq!(define("SYMMWIN_OPS_MAX_SPLITS"), MAX_SPLITS as u64);
        assert_eq!(define("SYMMWIN_OPS_MAX_EXPERTS"), MAX_EXPERTS as u64);
        assert_eq!(define("SYMMWIN_OPS_MAX_ROOT_WORLD"), MAX_ROOT_WORLD as u64);
        let ops = [
            ("SYMMWIN_OP_PUT_SIGNAL", OpId::PutSignal),
            ("SYMMWIN_OP_ALL_TO_ALL", OpId::AllToAll),
            ("SYMMWIN_OP_ALL_TO_ALL_VDEV", OpId::AllToAllVdev),
            ("SYMMWIN_OP_ALL_TO_ALL_VDEV_2D", OpId::AllToAllVdev2d),
            (
                "SYMMWIN_OP_ALL_TO_ALL_VDEV_2D_OFFSET",
                OpId::AllToAllVdev2dOffset,
            ),
            ("SYMMWIN_OP_BROADCAST", OpId::Broadcast),
            ("SYMMWIN_OP_WAIT_FOR_SIGNAL", OpId::WaitForSignal),
            ("SYMMWIN_OP_TILE_REDUCE", OpId::TileReduce),
            (
                "SYMMWIN_OP_MULTI_ROOT_TILE_REDUCE",
                OpId::MultiRootTileReduce,
            ),
            ("SYMMWIN_OP_PUT", OpId::Put),
            ("SYMMWIN_OP_GET", OpId::Get),
            ("SYMMWIN_OP_PUT_WITH_SIGNAL", OpId::PutWithSignal),
        ];
        let wait_cuh = include_str!("../../kernels/wait.cuh");
        for (name, op) in ops {
            assert_eq!(define(name), op as u64, "{name}");
            // wait.cuh names the same number the same way.
            let op_name = WaitOp::name_of(op as u32);
            assert!(
                wait_cuh.contains(&format!("return \"{op_name}\";")),
                "{op_name}"
            );
        }
        assert_eq!(define("SYMMWIN_A2AV_2D_OFFSET"), A2AV_2D_OFFSET as u64);
        assert_eq!(define("SYMMWIN_A2AV_2D"), A2AV_2D as u64);
        assert_eq!(define("SYMMWIN_A2AV_1D"), A2AV_1D as u64);
        assert_eq!(define("SYMMWIN_COPY_GET"), COPY_GET as u64);
        assert_eq!(define("SYMMWIN_COPY_PUT"), COPY_PUT as u64);
        assert_eq!(define("SYMMWIN_HS_WAIT_ALL"), HS_WAIT_ALL as u64);
        assert_eq!(define("SYMMWIN_HS_ANSWER_NEXT"), HS_ANSWER_NEXT as u64);
        assert_eq!(define("SYMMWIN_HS_WAIT_PEER"), HS_WAIT_PEER as u64);
        assert_eq!(define("SYMMWIN_HS_SIGNAL_ALL"), HS_SIGNAL_ALL as u64);
        assert_eq!(define("SYMMWIN_HS_SIGNAL_PEER"), HS_SIGNAL_PEER as u64);
        assert_eq!(define("SYMMWIN_DTYPE_F64"), DTYPE_F64 as u64);
        assert_eq!(define("SYMMWIN_DTYPE_F16"), DTYPE_F16 as u64);
        assert_eq!(define("SYMMWIN_DTYPE_BF16"), DTYPE_BF16 as u64);
        assert_eq!(define("SYMMWIN_DTYPE_F32"), DTYPE_F32 as u64);
        assert_eq!(define("SYMMWIN_OPS_ERR_BAD_SPLIT"), ERR_BAD_SPLIT as u64);
        assert_eq!(define("SYMMWIN_OPS_ERR_OVERFLOW"), ERR_OVERFLOW as u64);
        assert_eq!(define("SYMMWIN_OPS_ERR_MISMATCH"), ERR_MISMATCH as u64);
    }

    #[test]
    fn operands_address_every_rank_from_the_layout() {
        let buf = SymmBuf {
            layout: FlatLayout::new(1 << 40, 1 << 21, 4).unwrap(),
            offset: 4096,
            len: 1000,
            room: 8192,
        };
        let o = Operand::of(&buf);
        assert_eq!(
            o.base + 3 * o.stride + o.offset,
            buf.addr(3).unwrap() as u64
        );
        assert_eq!(o.bytes, 1000);
    }

    #[test]
    fn roots_are_bits() {
        let wait = WaitReport {
            record: 0,
            timeout_ns: 1,
            rank: 0,
            op: OpId::TileReduce as u32,
            exits: 0,
        };
        let mut p = OpsParams::new(wait, 0);
        p.add_root(0).unwrap();
        p.add_root(65).unwrap();
        p.add_root(255).unwrap();
        assert_eq!(p.roots, [1, 2, 0, 1 << 63]);
        assert!(p.add_root(256).is_err());
    }
}
