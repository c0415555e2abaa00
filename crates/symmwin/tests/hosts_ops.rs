//! The collective ops on groups that span hosts, on the host provider: the ranks of
//! one host move data through the window, the others through the group's
//! process-group backend (an in-process mailbox here). Every op gives exactly what the
//! same op gives on one host, with the same data.

mod common;

use std::sync::Arc;

use common::hosts::{spanning, Mailbox};
use symmwin::ops::Operand;
use symmwin::ops::Shape;
use symmwin::ops::{ElemType, OpOptions, ReduceOp, Rows, Tile};
use symmwin::{Allocation, ErrorKind, Group, Window};

const SIZE: usize = 1 << 16;
const ROW: usize = 12;
const EXPERTS: usize = 2;
/// Regions of the window: input, out, in_splits, out_splits_offsets.
const INP: usize = 0;
const OUT: usize = 16384;
const SPLITS: usize = 40960;
const SO: usize = 49152;

fn bytes_of_i64(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

fn i64s(raw: &[u8]) -> Vec<i64> {
    raw.chunks_exact(8)
        .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// Bytes of this rank's input: every byte says whose and where.
fn pattern(rank: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (rank * 61 + i * 7 % 251) as u8).collect()
}

struct Run<'a> {
    w: &'a Window,
    rank: usize,
    world: usize,
}

impl Run<'_> {
    fn write(&self, at: usize, bytes: &[u8]) {
        self.w.write(self.rank, at, bytes).unwrap();
    }

    fn read(&self, at: usize, len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        self.w.read(self.rank, at, &mut bytes).unwrap();
        bytes
    }

    /// Zero the window, then write this rank's input pattern.
    fn reset(&self) {
        self.write(0, &vec![0u8; SIZE]);
        self.write(INP, &pattern(self.rank, OUT - INP));
    }

    fn op(&self, at: usize, len: usize) -> Operand<'_> {
        Operand::new(self.w, at, len)
    }

    fn all_to_all(&self) -> Vec<u8> {
        self.reset();
        let len = self.world * 96;
        let opts = OpOptions::default();
        symmwin::ops::all_to_all(self.op(INP, len), self.op(OUT, len), 1, &opts).unwrap();
        self.read(OUT, len)
    }

    /// One member of the all-to-all-v family; `table` is this rank's in_splits.
    fn vdev(&self, shape: Shape, table: &[i64], in_rows: usize, out_rows: usize) -> Vec<u8> {
        self.write(SPLITS, &bytes_of_i64(table));
        let so_len = match shape {
            Shape::Flat => 2 * self.world * 8,
            _ => 2 * self.world * EXPERTS * 8,
        };
        symmwin::ops::all_to_all_v(
            shape,
            self.op(INP, in_rows * ROW),
            self.op(OUT, out_rows * ROW),
            self.op(SPLITS, table.len() * 8),
            self.op(SO, so_len),
            Rows {
                row_bytes: ROW,
                in_rows,
                out_rows,
            },
            &OpOptions::default(),
        )
        .unwrap();
        [self.read(OUT, out_rows * ROW), self.read(SO, so_len)].concat()
    }

    fn flat(&self) -> Vec<u8> {
        self.reset();
        let table: Vec<i64> = (0..self.world)
            .map(|d| ((self.rank * 7 + d * 3) % 5) as i64)
            .collect();
        self.vdev(Shape::Flat, &table, 5 * self.world, 5 * self.world)
    }

    /// Dispatch, then combine with dispatch's output splits and offsets (MoE round trip).
    fn dispatch_and_combine(&self) -> Vec<u8> {
        self.reset();
        let table: Vec<i64> = (0..self.world * EXPERTS)
            .map(|i| ((self.rank * 5 + i * 3) % 4) as i64)
            .collect();
        let out_rows = EXPERTS * (3 * self.world + 4);
        let shape = Shape::Dispatch { major_align: 4 };
        let dispatched = self.vdev(shape, &table, 4 * self.world * EXPERTS, out_rows);
        // Combine sends the dispatched rows back: its input is dispatch's out.
        let so = self.read(SO, 2 * self.world * EXPERTS * 8);
        self.write(INP, &self.read(OUT, out_rows * ROW));
        self.write(OUT, &vec![0u8; out_rows * ROW]);
        let combined = self.vdev(
            Shape::Combine,
            &i64s(&so),
            out_rows,
            4 * self.world * EXPERTS,
        );
        [dispatched, combined].concat()
    }

    fn broadcast(&self, root: usize) -> Vec<u8> {
        self.reset();
        symmwin::ops::broadcast(self.op(INP, 1000), root, &OpOptions::default()).unwrap();
        self.read(INP, 1000)
    }

    /// f32 tiles of 3 rows x 4 columns, 6 apart; one tile per root.
    fn tile_reduce(&self, roots: &[usize]) -> Vec<u8> {
        self.write(0, &vec![0u8; SIZE]);
        let tile = Tile {
            rows: 3,
            cols: 4,
            row_stride: 6,
            elem: ElemType::F32,
        };
        let extent = tile.extent_bytes().unwrap();
        let values: Vec<u8> = (0..extent / 4)
            .flat_map(|i| ((self.rank + 1) as f32 * 0.1 + i as f32).to_ne_bytes())
            .collect();
        let ins: Vec<Operand> = (0..roots.len())
            .map(|k| {
                self.write(INP + k * 4096, &values);
                self.op(INP + k * 4096, extent)
            })
            .collect();
        symmwin::ops::tile_reduce(
            &ins,
            roots,
            self.op(OUT, extent),
            tile,
            ReduceOp::Sum,
            &OpOptions::default(),
        )
        .unwrap();
        self.read(OUT, extent)
    }
}

/// Every collective op once, in order; the outputs of this rank by op.
fn every_op(rank: usize, group: Group) -> Vec<(&'static str, Vec<u8>)> {
    let alloc = Allocation::new(group.provider().clone(), SIZE).unwrap();
    let w = group.rendezvous(&alloc).unwrap();
    let run = Run {
        w: &w,
        rank,
        world: group.world(),
    };
    let last = run.world - 1;
    vec![
        ("all_to_all", run.all_to_all()),
        ("all_to_all_vdev", run.flat()),
        ("vdev_2d and vdev_2d_offset", run.dispatch_and_combine()),
        ("broadcast from 1", run.broadcast(1)),
        ("broadcast from the last rank", run.broadcast(last)),
        ("tile_reduce", run.tile_reduce(&[0])),
        ("multi_root_tile_reduce", run.tile_reduce(&[last, 0])),
    ]
}

fn same_as_one_host(tag: &str, hosts: &[&str]) {
    let one_host = vec!["one"; hosts.len()];
    let want = spanning(&format!("{tag}-1"), &one_host, None, every_op);
    let mailbox = Arc::new(Mailbox::default());
    let got = spanning(tag, hosts, Some(&mailbox), every_op);
    for (i, (op, _)) in want[0].iter().enumerate() {
        let moved = want.iter().any(|ops| ops[i].1.iter().any(|&b| b != 0));
        assert!(moved, "{op} moved nothing on any rank");
    }
    for (rank, (got, want)) in got.iter().zip(&want).enumerate() {
        for ((op, g), (_, w)) in got.iter().zip(want) {
            assert!(
                g == w,
                "rank {rank}: {op} across hosts {hosts:?} differs from one host"
            );
        }
    }
    assert_eq!(mailbox.in_flight(), 0, "every message was received");
    assert!(
        mailbox.data_sent() >= hosts.len() * 7,
        "ops sent data between hosts"
    );
}

#[test]
fn ops_across_two_hosts_match_one_host() {
    same_as_one_host("ops2", &["a", "a", "b", "b"]);
}

#[test]
fn ops_across_four_hosts_match_one_host() {
    same_as_one_host("ops4", &["a", "b", "a", "c", "d", "c", "b", "d"]);
}

#[test]
fn ops_with_every_rank_on_its_own_host_match_one_host() {
    same_as_one_host("ops-alone", &["w", "x", "y"]);
}

/// Rank 2 (on the other host) sends more rows to rank 0 than its out holds: rank 0
/// fails naming it and receives nothing into out; the others succeed; a good call
/// afterwards works on every rank (no message is left over).
#[test]
fn a_split_too_large_for_a_receiver_on_another_host_fails_there_only() {
    let mailbox = Arc::new(Mailbox::default());
    let hosts = ["a", "a", "b", "b"];
    let results = spanning("ops-overflow", &hosts, Some(&mailbox), |rank, group| {
        let alloc = Allocation::new(group.provider().clone(), SIZE).unwrap();
        let w = group.rendezvous(&alloc).unwrap();
        let run = Run {
            w: &w,
            rank,
            world: 4,
        };
        run.reset();
        let sentinel = vec![0xeeu8; 4 * ROW];
        run.write(OUT, &sentinel);
        let table: Vec<i64> = (0..4)
            .map(|d| if rank == 2 && d == 0 { 3 } else { 1 })
            .collect();
        run.write(SPLITS, &bytes_of_i64(&table));
        let call = |out_rows: usize| {
            symmwin::ops::all_to_all_v(
                Shape::Flat,
                run.op(INP, 8 * ROW),
                run.op(OUT, out_rows * ROW),
                run.op(SPLITS, 32),
                run.op(SO, 64),
                Rows {
                    row_bytes: ROW,
                    in_rows: 8,
                    out_rows,
                },
                &OpOptions::default(),
            )
        };
        let outcome = call(4).err();
        let untouched_tail = run.read(OUT + 2 * ROW, 2 * ROW) == sentinel[..2 * ROW];
        let again = call(8).map(|()| i64s(&run.read(SO, 64)));
        (outcome, untouched_tail, again)
    });
    for (rank, (outcome, untouched_tail, again)) in results.into_iter().enumerate() {
        if rank == 0 {
            let e = outcome.expect("rank 0's out is too small");
            assert!(matches!(e.kind(), ErrorKind::InvalidArgument(_)), "{e}");
            assert_eq!(e.peer(), Some(2), "{e}");
            assert!(untouched_tail, "nothing past rank 1's rows was written");
        } else {
            assert!(outcome.is_none(), "rank {rank}: {outcome:?}");
        }
        let got = again.unwrap();
        let splits: Vec<i64> = (0..4)
            .map(|s| if rank == 0 && s == 2 { 3 } else { 1 })
            .collect();
        assert_eq!(got[..4], splits[..], "rank {rank}");
    }
    assert_eq!(mailbox.in_flight(), 0);
}

/// One-sided ops move data by load/store: to a peer on another host they are refused
/// before anything runs, naming it; to a peer on this host they work.
#[test]
fn one_sided_ops_reach_only_mapped_peers() {
    let mailbox = Arc::new(Mailbox::default());
    let hosts = ["a", "a", "b", "b"];
    let results = spanning("ops-one-sided", &hosts, Some(&mailbox), |rank, group| {
        let alloc = Allocation::new(group.provider().clone(), 4096).unwrap();
        let w = group.rendezvous(&alloc).unwrap();
        w.write(rank, 0, &vec![rank as u8 + 1; 4096]).unwrap();
        w.barrier(Default::default()).unwrap();
        let opts = OpOptions::default();
        let far = (rank + 2) % 4;
        let refused =
            symmwin::ops::put_or_get(Operand::new(&w, 0, 4096), far, true, &opts).unwrap_err();
        // Partners get disjoint halves, so neither overwrites what the other reads.
        let half = (rank % 2) * 2048;
        symmwin::ops::put_or_get(Operand::new(&w, half, 2048), rank ^ 1, false, &opts).unwrap();
        let mut first = [0u8; 1];
        w.read(rank, half, &mut first).unwrap();
        (refused, first[0])
    });
    for (rank, (refused, first)) in results.into_iter().enumerate() {
        assert!(
            matches!(refused.kind(), ErrorKind::Unsupported(_)),
            "{refused}"
        );
        assert_eq!(refused.peer(), Some((rank + 2) % 4), "{refused}");
        let text = refused.to_string();
        assert!(
            text.contains("another host") && text.contains("one-sided"),
            "{text}"
        );
        assert_eq!(
            first,
            (rank ^ 1) as u8 + 1,
            "rank {rank} got its partner's bytes"
        );
    }
}
