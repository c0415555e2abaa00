//! One small value per op call that every rank of a collective must agree on, so a
//! rank that passes other operands (another dtype, tile shape, row width, length,
//! root or engine) is caught where the op already synchronizes, instead of moving
//! reinterpreted bytes.
//!
//! NOTE [operand fingerprint]
//! The fingerprint covers what every rank must pass alike: the op, the engine, the
//! element size, and per op the bytes per peer (`all_to_all`), the row width, experts
//! per rank and alignment (the `all_to_all_vdev` family), the length and the root
//! (`broadcast`), the tile's rows, columns, row stride, dtype, reduction and roots
//! (tile reduce). It leaves out what may differ: addresses and offsets, row counts
//! and split tables (each rank has its own; the split checks cover those).
//! Providers carry its 32-bit [`Fingerprint::word`] in the signal they already send
//! at the op's entry (the device handshake sends it instead of torch's constant 1;
//! the host ops publish it in their own pad next to the barrier words) and each
//! receiver compares it with its own. One-sided ops have no fingerprint: their word
//! is torch's constant 1.

use std::fmt;

use crate::error::{Error, ErrorKind, Phase};

use super::args::{ElemType, Fingerprint, PLAIN_SIGNAL};
use super::plan::Shape;
use super::request::OpRequest;
use super::Engine;

/// FNV-1a over 64-bit words: a pure function of the words, the same on every rank.
fn fnv1a(words: &[u64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in words {
        for byte in w.to_le_bytes() {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn engine_code(engine: Engine) -> u64 {
    match engine {
        Engine::Auto => 1,
        Engine::Sm => 2,
        Engine::CopyEngine => 3,
    }
}

fn elem_code(elem: ElemType) -> u64 {
    match elem {
        ElemType::F32 => 1,
        ElemType::F64 => 2,
        ElemType::F16 => 3,
        ElemType::BF16 => 4,
    }
}

fn shape_words(shape: Shape) -> [u64; 2] {
    match shape {
        Shape::Flat => [1, 0],
        Shape::Dispatch { major_align } => [2, major_align as u64],
        Shape::Combine => [3, 0],
    }
}

impl Fingerprint {
    /// The fingerprint of `op` as this rank calls it with `engine`; `elem_size` is the
    /// element size the caller named (`all_to_all`), 1 for ops that take bytes.
    pub fn of(op: &OpRequest, engine: Engine, elem_size: usize) -> Fingerprint {
        let head = [engine_code(engine), elem_size as u64];
        let value = match *op {
            OpRequest::AllToAll { chunk, .. } => fnv1a(&[4, head[0], head[1], chunk as u64]),
            OpRequest::AllToAllV { shape, args } => {
                let [kind, align] = shape_words(shape);
                fnv1a(&[
                    5,
                    head[0],
                    head[1],
                    kind,
                    align,
                    args.rows.row_bytes as u64,
                    args.experts_per_rank as u64,
                ])
            }
            OpRequest::Broadcast { len, root, .. } => {
                fnv1a(&[8, head[0], head[1], len as u64, root as u64])
            }
            OpRequest::TileReduce(r) => {
                let t = r.tile;
                let mut words = vec![
                    10,
                    head[0],
                    head[1],
                    t.rows as u64,
                    t.cols as u64,
                    t.row_stride as u64,
                    elem_code(t.elem),
                    r.roots.len() as u64,
                ];
                words.extend(r.roots.iter().map(|&root| root as u64));
                fnv1a(&words)
            }
            OpRequest::Put(_)
            | OpRequest::Get(_)
            | OpRequest::PutWithSignal { .. }
            | OpRequest::PutSignal { .. } => 0,
        };
        Fingerprint::new(value, elem_size)
    }

    /// What this rank passed, in words, for an error: "8 elements of 4 bytes per
    /// peer, engine auto".
    pub fn describe(self, op: &OpRequest, engine: Engine) -> String {
        let what = match *op {
            OpRequest::AllToAll { chunk, .. } => format!(
                "{} elements of {} bytes per peer",
                chunk / self.elem_size().max(1),
                self.elem_size()
            ),
            OpRequest::AllToAllV { shape, args } => {
                let align = match shape {
                    Shape::Dispatch { major_align } => format!(", major_align {major_align}"),
                    _ => String::new(),
                };
                format!(
                    "rows of {} bytes, {} experts per rank{align}",
                    args.rows.row_bytes, args.experts_per_rank
                )
            }
            OpRequest::Broadcast { len, root, .. } => format!("{len} bytes from root {root}"),
            OpRequest::TileReduce(r) => format!(
                "{}x{} tiles of {:?} (row stride {}), roots {:?}",
                r.tile.rows, r.tile.cols, r.tile.elem, r.tile.row_stride, r.roots
            ),
            _ => "a one-sided op".to_owned(),
        };
        format!(
            "{what}, engine {engine} (fingerprint {:#010x})",
            self.word()
        )
    }
}

/// Where ranks' fingerprints disagree: `differ` are the ranks whose word is not this
/// rank's, with the word each sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// The ranks (and their words) that differ from this rank.
    pub differ: Vec<(usize, u32)>,
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (rank, word)) in self.differ.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if *word == PLAIN_SIGNAL {
                write!(f, "rank {rank} runs another op (a plain signal)")?;
            } else {
                write!(f, "rank {rank} has fingerprint {word:#010x}")?;
            }
        }
        Ok(())
    }
}

/// The error every rank that sees a disagreement raises: names the op, this rank's
/// operands and the ranks that differ.
pub fn mismatch_error(
    op: &OpRequest,
    mine: Fingerprint,
    engine: Engine,
    rank: usize,
    seen: &Disagreement,
) -> Error {
    let ranks: Vec<usize> = seen.differ.iter().map(|&(r, _)| r).collect();
    let detail = format!(
        "rank {rank} (this rank) has {}; {seen}. Every rank must pass the same dtype, shape, \
         root and engine to a collective op",
        mine.describe(op, engine)
    );
    let err = Error::new(
        Phase::Argument,
        ErrorKind::Mismatch {
            field: operands_of(op.name()),
            detail,
        },
    )
    .at_rank(rank);
    match ranks.first() {
        Some(&peer) => err.with_peer(peer),
        None => err,
    }
}

/// "the operands of all_to_all", as the `'static` field of [`ErrorKind::Mismatch`].
pub fn operands_of(op: &str) -> &'static str {
    match op {
        "all_to_all" => "the operands of all_to_all",
        "all_to_all_vdev" => "the operands of all_to_all_vdev",
        "all_to_all_vdev_2d" => "the operands of all_to_all_vdev_2d",
        "all_to_all_vdev_2d_offset" => "the operands of all_to_all_vdev_2d_offset",
        "broadcast" => "the operands of broadcast",
        "tile_reduce" => "the operands of tile_reduce",
        "multi_root_tile_reduce" => "the operands of multi_root_tile_reduce",
        _ => "the operands of a collective op",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::FlatLayout;
    use crate::provider::device_ops::{ReduceOp, Rows, SymmBuf, Tile, TileReduce, VarArgs};

    fn buf(len: usize) -> SymmBuf {
        SymmBuf {
            layout: FlatLayout::new(1 << 30, 1 << 20, 4).unwrap(),
            offset: 0,
            len,
            room: 1 << 20,
        }
    }

    fn a2a(chunk: usize, elem: usize, engine: Engine) -> Fingerprint {
        let (i, o) = (buf(chunk * 4), buf(chunk * 4));
        let op = OpRequest::AllToAll {
            input: &i,
            out: &o,
            chunk,
        };
        Fingerprint::of(&op, engine, elem)
    }

    #[test]
    fn all_to_all_sees_dtype_count_and_engine_but_not_addresses() {
        let base = a2a(32, 4, Engine::Auto);
        // float32 x 8 against float64 x 4: the same bytes, another element size.
        assert_ne!(base, a2a(32, 8, Engine::Auto));
        assert_ne!(base.word(), a2a(32, 8, Engine::Auto).word());
        assert_ne!(base.word(), a2a(64, 4, Engine::Auto).word());
        assert_ne!(base.word(), a2a(32, 4, Engine::Sm).word());
        let (i, o) = (
            buf(999),
            SymmBuf {
                offset: 64,
                ..buf(128)
            },
        );
        let elsewhere = OpRequest::AllToAll {
            input: &i,
            out: &o,
            chunk: 32,
        };
        assert_eq!(Fingerprint::of(&elsewhere, Engine::Auto, 4), base);
    }

    #[test]
    fn broadcast_sees_length_and_root() {
        let b = buf(64);
        let of = |len, root| {
            Fingerprint::of(
                &OpRequest::Broadcast { buf: &b, len, root },
                Engine::Auto,
                1,
            )
        };
        assert_eq!(of(64, 0), of(64, 0));
        assert_ne!(of(64, 0).word(), of(64, 1).word());
        assert_ne!(of(64, 0).word(), of(128, 0).word());
    }

    #[test]
    fn vdev_sees_row_width_but_not_row_counts() {
        let of = |row_bytes, in_rows, shape| {
            let args = VarArgs {
                input: buf(1024),
                out: buf(1024),
                in_splits: buf(64),
                out_splits_offsets: buf(64),
                rows: Rows {
                    row_bytes,
                    in_rows,
                    out_rows: 7,
                },
                experts_per_rank: 1,
            };
            Fingerprint::of(
                &OpRequest::AllToAllV { shape, args: &args },
                Engine::Auto,
                1,
            )
        };
        assert_eq!(of(16, 3, Shape::Flat), of(16, 9, Shape::Flat));
        assert_ne!(of(16, 3, Shape::Flat).word(), of(32, 3, Shape::Flat).word());
        assert_ne!(
            of(16, 3, Shape::Dispatch { major_align: 1 }).word(),
            of(16, 3, Shape::Dispatch { major_align: 4 }).word()
        );
        assert_ne!(
            of(16, 3, Shape::Flat).word(),
            of(16, 3, Shape::Combine).word()
        );
    }

    #[test]
    fn tile_reduce_sees_shape_dtype_and_roots() {
        let b = [buf(1024), buf(1024)];
        let of = |rows, cols, elem, roots: &[usize]| {
            let tile = Tile {
                rows,
                cols,
                row_stride: cols,
                elem,
            };
            let op = OpRequest::TileReduce(TileReduce {
                ins: &b[..roots.len()],
                roots,
                out: &b[0],
                tile: &tile,
                op: ReduceOp::Sum,
            });
            Fingerprint::of(&op, Engine::Auto, 1).word()
        };
        let base = of(2, 2, ElemType::F32, &[0]);
        assert_eq!(base, of(2, 2, ElemType::F32, &[0]));
        assert_ne!(base, of(4, 4, ElemType::F32, &[0]));
        assert_ne!(base, of(2, 2, ElemType::F64, &[0]));
        assert_ne!(base, of(2, 2, ElemType::F32, &[1]));
        assert_ne!(
            of(2, 2, ElemType::F32, &[0, 1]),
            of(2, 2, ElemType::F32, &[1, 0])
        );
    }

    #[test]
    fn words_are_never_a_resting_pad_or_the_plain_constant() {
        assert_eq!(Fingerprint::NONE.word(), PLAIN_SIGNAL);
        for chunk in 0..2000 {
            let w = a2a(chunk, 4, Engine::Auto).word();
            assert!(w > PLAIN_SIGNAL, "{chunk}");
        }
    }

    #[test]
    fn the_error_names_the_op_this_rank_and_the_ranks_that_differ() {
        let (i, o) = (buf(32), buf(32));
        let op = OpRequest::AllToAll {
            input: &i,
            out: &o,
            chunk: 16,
        };
        let mine = Fingerprint::of(&op, Engine::Auto, 4);
        let seen = Disagreement {
            differ: vec![(1, 0xdead_beef), (2, PLAIN_SIGNAL)],
        };
        let e = mismatch_error(&op, mine, Engine::Auto, 0, &seen);
        assert_eq!((e.rank(), e.peer()), (Some(0), Some(1)));
        let text = e.to_string();
        assert!(text.contains("ranks disagree on the operands of all_to_all: rank 0 (this rank) has 4 elements of 4 bytes per peer, engine"), "{text}");
        assert!(
            text.contains("rank 1 has fingerprint 0xdeadbeef, rank 2 runs another op"),
            "{text}"
        );
    }
}
