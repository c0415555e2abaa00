//! One small value per op call that every rank of a collective must agree on, so a
//! rank that passes other operands (another dtype, tile shape, row width, length,
//! root or engine) is caught where the op already synchronizes, instead of moving
//! reinterpreted bytes.
//!
//! NOTE [operand fingerprint]
//! The fingerprint covers what every rank must pass alike: the op, the engine, the
//! element size and the dtype (NOTE [dtype code] in `dtype.rs`), and per op the bytes
//! per peer (`all_to_all`: with the element size, the element count per peer), the
//! row width in bytes, experts per rank and alignment (the `all_to_all_vdev`
//! family), the length in bytes and the root (`broadcast`), the tile's rows,
//! columns, row stride, element type and roots (tile reduce). It leaves out what may
//! differ: addresses and offsets, row counts and split tables (each rank has its own;
//! the split checks cover those). Providers carry its 32-bit [`Fingerprint::word`] in
//! the signal they already send at the op's entry (the device handshake sends it
//! instead of torch's constant 1; the host ops publish it in their own pad next to
//! the barrier words) and each receiver compares it with its own. One-sided ops have
//! no fingerprint: their word is torch's constant 1.
//!
//! A receiver that sees another word says what the peer passed where it can: it
//! recomputes the word for its own operands with one thing changed (another known
//! dtype in the same bytes, another element count, another engine or root) and
//! names the variant that matches; else it gives the peer's word.

use std::fmt;

use crate::error::{Error, ErrorKind, Phase};

use super::args::{ElemType, Elements, Fingerprint, Tile, PLAIN_SIGNAL};
use super::dtype::DType;
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

/// The compared operands of one call, without its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Compared {
    AllToAll {
        chunk: usize,
    },
    AllToAllV {
        shape: Shape,
        row_bytes: usize,
        experts: usize,
    },
    Broadcast {
        len: usize,
        root: usize,
    },
    Tile {
        tile: Tile,
        roots: Vec<usize>,
    },
    OneSided,
}

impl Compared {
    fn of(op: &OpRequest) -> Compared {
        match *op {
            OpRequest::AllToAll { chunk, .. } => Compared::AllToAll { chunk },
            OpRequest::AllToAllV { shape, args } => Compared::AllToAllV {
                shape,
                row_bytes: args.rows.row_bytes,
                experts: args.experts_per_rank,
            },
            OpRequest::Broadcast { len, root, .. } => Compared::Broadcast { len, root },
            OpRequest::TileReduce(r) => Compared::Tile {
                tile: *r.tile,
                roots: r.roots.to_vec(),
            },
            OpRequest::Put(_)
            | OpRequest::Get(_)
            | OpRequest::PutWithSignal { .. }
            | OpRequest::PutSignal { .. } => Compared::OneSided,
        }
    }

    fn value(&self, engine: Engine, elems: Elements) -> u64 {
        let head = [engine_code(engine), elems.size as u64, elems.dtype.code()];
        let mut words: Vec<u64> = match self {
            Compared::AllToAll { chunk } => vec![4, *chunk as u64],
            Compared::AllToAllV {
                shape,
                row_bytes,
                experts,
            } => {
                let [kind, align] = shape_words(*shape);
                vec![5, kind, align, *row_bytes as u64, *experts as u64]
            }
            Compared::Broadcast { len, root } => vec![8, *len as u64, *root as u64],
            Compared::Tile { tile, roots } => {
                let mut w = vec![
                    10,
                    tile.rows as u64,
                    tile.cols as u64,
                    tile.row_stride as u64,
                    elem_code(tile.elem),
                    roots.len() as u64,
                ];
                w.extend(roots.iter().map(|&root| root as u64));
                w
            }
            Compared::OneSided => return 0,
        };
        words.splice(1..1, head);
        fnv1a(&words)
    }

    fn describe(&self, engine: Engine, elems: Elements) -> String {
        let size = elems.size.max(1);
        let what = match self {
            Compared::AllToAll { chunk } => {
                format!("{} per peer", elems.count(chunk / size))
            }
            Compared::AllToAllV {
                shape,
                row_bytes,
                experts,
            } => {
                let align = match shape {
                    Shape::Dispatch { major_align } => format!(", major_align {major_align}"),
                    _ => String::new(),
                };
                let typed = match elems.dtype {
                    DType::UNSPECIFIED => String::new(),
                    _ => format!(" ({})", elems.count(row_bytes / size)),
                };
                format!("rows of {row_bytes} bytes{typed}, {experts} experts per rank{align}")
            }
            Compared::Broadcast { len, root } => match elems.dtype {
                DType::UNSPECIFIED => format!("{len} bytes from root {root}"),
                _ => format!("{} from root {root}", elems.count(len / size)),
            },
            Compared::Tile { tile, roots } => format!(
                "{}x{} tiles of {:?} (row stride {}), roots {roots:?}",
                tile.rows, tile.cols, tile.elem, tile.row_stride
            ),
            Compared::OneSided => "a one-sided op".to_owned(),
        };
        format!("{what}, engine {engine}")
    }

    /// Its element count field as bytes, where it has one, for count variants.
    fn with_bytes(&self, bytes: usize) -> Option<Compared> {
        match self {
            Compared::AllToAll { .. } => Some(Compared::AllToAll { chunk: bytes }),
            Compared::AllToAllV { shape, experts, .. } => Some(Compared::AllToAllV {
                shape: *shape,
                row_bytes: bytes,
                experts: *experts,
            }),
            Compared::Broadcast { root, .. } => Some(Compared::Broadcast {
                len: bytes,
                root: *root,
            }),
            _ => None,
        }
    }
}

/// The element counts a receiver tries when it explains a peer's word.
const COUNTS_TRIED: usize = 1 << 14;
/// The roots a receiver tries when it explains a peer's `broadcast` word.
const ROOTS_TRIED: usize = 1024;
/// The element sizes tried for untyped operands.
const UNTYPED_SIZES: [usize; 5] = [1, 2, 4, 8, 16];

/// What a peer whose fingerprint word is `word` passed, if it differs from `mine` in
/// one thing only: another known dtype in the same bytes, another element count,
/// another engine or another root.
fn explain(mine: &Compared, engine: Engine, elems: Elements, word: u32) -> Option<String> {
    let matches = |c: &Compared, e: Engine, el: Elements| {
        (Fingerprint::new(c.value(e, el), el).word() == word).then(|| c.describe(e, el))
    };
    let typed = DType::all_known().map(Elements::of);
    let untyped = UNTYPED_SIZES.iter().map(|&size| Elements {
        dtype: DType::UNSPECIFIED,
        size,
    });
    if let Some(found) = typed
        .chain(untyped)
        .filter(|el| *el != elems)
        .find_map(|el| matches(mine, engine, el))
    {
        return Some(found);
    }
    let engines = [Engine::Auto, Engine::Sm, Engine::CopyEngine];
    if let Some(found) = engines
        .into_iter()
        .filter(|&e| e != engine)
        .find_map(|e| matches(mine, e, elems))
    {
        return Some(found);
    }
    if let Compared::Broadcast { len, .. } = *mine {
        let root = (0..ROOTS_TRIED)
            .find_map(|root| matches(&Compared::Broadcast { len, root }, engine, elems));
        if root.is_some() {
            return root;
        }
    }
    (0..COUNTS_TRIED).find_map(|n| {
        let other = mine.with_bytes(n * elems.size.max(1))?;
        matches(&other, engine, elems)
    })
}

impl Fingerprint {
    /// The fingerprint of `op` as this rank calls it with `engine`, on operands that
    /// hold `elems`.
    pub fn of(op: &OpRequest, engine: Engine, elems: Elements) -> Fingerprint {
        Fingerprint::new(Compared::of(op).value(engine, elems), elems)
    }

    /// What this rank passed, in words, for an error: "8 float32 elements per peer,
    /// engine auto".
    pub fn describe(self, op: &OpRequest, engine: Engine) -> String {
        Compared::of(op).describe(engine, self.elems())
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

/// The error every rank that sees a disagreement raises: names the op (once), this
/// rank's operands and, for each rank that differs, what it passed where that can be
/// told (see `explain`) or its word.
pub fn mismatch_error(
    op: &OpRequest,
    mine: Fingerprint,
    engine: Engine,
    rank: usize,
    seen: &Disagreement,
) -> Error {
    let compared = Compared::of(op);
    let theirs: Vec<String> = seen
        .differ
        .iter()
        .map(|&(peer, word)| {
            if word == PLAIN_SIGNAL {
                return format!("rank {peer} runs another op (a plain signal)");
            }
            match explain(&compared, engine, mine.elems(), word) {
                Some(what) => format!("rank {peer} has {what} (fingerprint {word:#010x})"),
                None => format!(
                    "rank {peer} has fingerprint {word:#010x} (operands that differ in more \
                     than one of dtype, element count, root and engine, or another op)"
                ),
            }
        })
        .collect();
    let detail = format!(
        "rank {rank} (this rank) has {} (fingerprint {:#010x}); {}. Every rank must pass \
         the same dtype, element count, root and engine",
        mine.describe(op, engine),
        mine.word(),
        theirs.join(", ")
    );
    let err = Error::new(
        Phase::Argument,
        ErrorKind::Mismatch {
            field: operands_of(op.name()),
            detail,
        },
    )
    .at_rank(rank);
    match seen.differ.first() {
        Some(&(peer, _)) => err.with_peer(peer),
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
    use crate::provider::device_ops::{ReduceOp, Rows, SymmBuf, TileReduce, VarArgs};

    fn buf(len: usize) -> SymmBuf {
        SymmBuf {
            layout: FlatLayout::new(1 << 30, 1 << 20, 4).unwrap(),
            offset: 0,
            len,
            room: 1 << 20,
        }
    }

    fn untyped(size: usize) -> Elements {
        Elements {
            dtype: DType::UNSPECIFIED,
            size,
        }
    }

    fn a2a(chunk: usize, elem: usize, engine: Engine) -> Fingerprint {
        let (i, o) = (buf(chunk * 4), buf(chunk * 4));
        let op = OpRequest::AllToAll {
            input: &i,
            out: &o,
            chunk,
        };
        Fingerprint::of(&op, engine, untyped(elem))
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
        assert_eq!(Fingerprint::of(&elsewhere, Engine::Auto, untyped(4)), base);
    }

    #[test]
    fn broadcast_sees_length_and_root() {
        let b = buf(64);
        let of = |len, root| {
            Fingerprint::of(
                &OpRequest::Broadcast { buf: &b, len, root },
                Engine::Auto,
                Elements::BYTES,
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
                Elements::BYTES,
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
            Fingerprint::of(&op, Engine::Auto, Elements::BYTES).word()
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
        let mine = Fingerprint::of(&op, Engine::Auto, untyped(4));
        let seen = Disagreement {
            differ: vec![(1, 0xdead_beef), (2, PLAIN_SIGNAL)],
        };
        let e = mismatch_error(&op, mine, Engine::Auto, 0, &seen);
        assert_eq!((e.rank(), e.peer()), (Some(0), Some(1)));
        let text = e.to_string();
        assert!(
            text.contains(
                "ranks disagree on the operands of all_to_all: rank 0 (this rank) has 4 \
                 elements of 4 bytes per peer, engine"
            ),
            "{text}"
        );
        assert!(
            text.contains("rank 1 has fingerprint 0xdeadbeef (operands that differ"),
            "{text}"
        );
        assert!(text.contains("rank 2 runs another op"), "{text}");
        assert_eq!(text.matches("all_to_all").count(), 1, "{text}");
    }

    fn typed_a2a(chunk: usize, dtype: DType) -> (OpRequest<'static>, Fingerprint) {
        let bufs: &'static [SymmBuf; 2] = Box::leak(Box::new([buf(chunk * 4), buf(chunk * 4)]));
        let op = OpRequest::AllToAll {
            input: &bufs[0],
            out: &bufs[1],
            chunk,
        };
        let fp = Fingerprint::of(&op, Engine::Auto, Elements::of(dtype));
        (op, fp)
    }

    fn error_of(mine: (OpRequest, Fingerprint), theirs: Fingerprint) -> String {
        let seen = Disagreement {
            differ: vec![(1, theirs.word())],
        };
        mismatch_error(&mine.0, mine.1, Engine::Auto, 0, &seen).to_string()
    }

    #[test]
    fn dtypes_of_one_size_differ() {
        let (_, f32s) = typed_a2a(32, DType::FLOAT32);
        let (_, i32s) = typed_a2a(32, DType::INT32);
        assert_ne!(f32s.word(), i32s.word());
        let unknown = |name| typed_a2a(32, DType::named(name)).1.word();
        assert_ne!(unknown("float6_e3m2"), unknown("float6_e2m3"));
    }

    /// Asserts that `text` says each of `parts`.
    fn says(text: &str, parts: &[&str]) {
        for part in parts {
            assert!(text.contains(part), "{part:?} not in: {text}");
        }
    }

    #[test]
    fn the_error_names_the_peers_dtype_or_count() {
        let text = error_of(typed_a2a(32, DType::FLOAT32), typed_a2a(32, DType::INT32).1);
        says(
            &text,
            &[
                "rank 0 (this rank) has 8 float32 elements per peer",
                "rank 1 has 8 int32 elements per peer",
            ],
        );
        let text = error_of(typed_a2a(4, DType::FLOAT32), typed_a2a(8, DType::FLOAT32).1);
        says(
            &text,
            &[
                "rank 0 (this rank) has 1 float32 element per peer",
                "rank 1 has 2 float32 elements per peer",
            ],
        );
        assert!(!text.contains("1 elements"), "{text}");
    }
}
