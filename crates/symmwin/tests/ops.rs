//! The ops of `symmwin::ops` on the host provider, in real multi-process worlds,
//! without torch: the window-level API against the split arithmetic of `plan`.

mod common;

use common::{field, join, result, Job};
use symmwin::ops::Operand;
use symmwin::ops::Shape;
use symmwin::ops::{OpOptions, Rows};
use symmwin::{Allocation, Window};

common::worker! {
    "vdev" => vdev,
    "overflow" => overflow,
}

const ROW: usize = 12; // bytes per row: 3 x u32

/// Rows rank `src` sends to rank `dst` in round `round`.
fn split(src: usize, dst: usize, round: usize) -> usize {
    (src * 7 + dst * 3 + round) % 5
}

fn write_u32s(w: &Window, rank: usize, at: usize, values: &[u32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    w.write(rank, at, &bytes).unwrap();
}

/// `n` words of `N` bytes at byte `at` of `rank`'s slot, each decoded by `decode`.
fn read_words<T, const N: usize>(
    w: &Window,
    (rank, at, n): (usize, usize, usize),
    decode: fn([u8; N]) -> T,
) -> Vec<T> {
    let mut bytes = vec![0u8; n * N];
    w.read(rank, at, &mut bytes).unwrap();
    bytes
        .chunks(N)
        .map(|c| decode(c.try_into().unwrap()))
        .collect()
}

fn read_i64s(w: &Window, rank: usize, at: usize, n: usize) -> Vec<i64> {
    read_words(w, (rank, at, n), i64::from_ne_bytes)
}

fn read_u32s(w: &Window, rank: usize, at: usize, n: usize) -> Vec<u32> {
    read_words(w, (rank, at, n), u32::from_ne_bytes)
}

/// Row `i` of rank `src`'s input: three words that say who and where.
fn row(src: usize, i: usize) -> [u32; 3] {
    [src as u32, i as u32, (src * 1000 + i) as u32]
}

/// 50 rounds of all_to_all_vdev with changing splits; every rank checks splits,
/// offsets and every received row.
fn vdev(rank: usize, world: usize) -> String {
    let (group, provider) = join(rank, world);
    let cap = 5 * world; // rows
    let alloc = Allocation::new(provider, 1 << 16).unwrap();
    let w = group.rendezvous(&alloc).unwrap();
    let (inp, out, splits, so) = (0, 4096, 8192, 12288);
    let opts = OpOptions::default();
    for round in 0..50 {
        let mine: Vec<i64> = (0..world).map(|d| split(rank, d, round) as i64).collect();
        let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_ne_bytes()).collect();
        w.write(rank, splits, &bytes).unwrap();
        let rows: Vec<u32> = (0..cap).flat_map(|i| row(rank, i)).collect();
        write_u32s(&w, rank, inp, &rows);
        symmwin::ops::all_to_all_v(
            Shape::Flat,
            Operand::new(&w, inp, cap * ROW),
            Operand::new(&w, out, cap * ROW),
            Operand::new(&w, splits, world * 8),
            Operand::new(&w, so, 2 * world * 8),
            Rows {
                row_bytes: ROW,
                in_rows: cap,
                out_rows: cap,
            },
            &opts,
        )
        .unwrap();
        let got = read_i64s(&w, rank, so, 2 * world);
        let want: Vec<i64> = (0..world).map(|s| split(s, rank, round) as i64).collect();
        assert_eq!(&got[..world], &want[..], "round {round} splits");
        let mut at = 0usize;
        for s in 0..world {
            assert_eq!(got[world + s], at as i64, "round {round} offset of {s}");
            let first: usize = (0..rank).map(|d| split(s, d, round)).sum();
            let n = split(s, rank, round);
            let data = read_u32s(&w, rank, out + at * ROW, n * 3);
            let expect: Vec<u32> = (first..first + n).flat_map(|i| row(s, i)).collect();
            assert_eq!(data, expect, "round {round} rows from {s}");
            at += n;
        }
    }
    let pad = w.pad_ptrs()[rank];
    // SAFETY: (test) this rank's pad is mapped for pad_size bytes while `w` lives.
    let words = unsafe { std::slice::from_raw_parts(pad as *const u32, w.pad_size() / 4) };
    format!("nonzero={}", words.iter().filter(|&&x| x != 0).count())
}

/// Every rank sends 3 rows to rank 0, whose out holds 2: rank 0 fails naming a peer
/// and writes nothing; the others succeed; a following good call works everywhere.
fn overflow(rank: usize, world: usize) -> String {
    let (group, provider) = join(rank, world);
    let alloc = Allocation::new(provider, 1 << 16).unwrap();
    let w = group.rendezvous(&alloc).unwrap();
    let (inp, out, splits, so) = (0, 4096, 8192, 12288);
    let sentinel = vec![0xeeu8; 4096];
    w.write(rank, out, &sentinel).unwrap();
    let mine: Vec<u8> = (0..world)
        .flat_map(|d| i64::from(if d == 0 { 3 } else { 0 }).to_ne_bytes())
        .collect();
    w.write(rank, splits, &mine).unwrap();
    let call = |out_rows| {
        symmwin::ops::all_to_all_v(
            Shape::Flat,
            Operand::new(&w, inp, 8 * ROW),
            Operand::new(&w, out, out_rows * ROW),
            Operand::new(&w, splits, world * 8),
            Operand::new(&w, so, 2 * world * 8),
            Rows {
                row_bytes: ROW,
                in_rows: 8,
                out_rows,
            },
            &OpOptions::default(),
        )
    };
    let outcome = call(2);
    let mut after = vec![0u8; 4096];
    w.read(rank, out, &mut after).unwrap();
    let untouched = after == sentinel;
    let message = outcome
        .as_ref()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    let peer = outcome.as_ref().err().and_then(|e| e.peer());
    // The group is still in step.
    let ones: Vec<u8> = (0..world).flat_map(|_| 1i64.to_ne_bytes()).collect();
    w.write(rank, splits, &ones).unwrap();
    call(world).unwrap();
    format!(
        "failed={} peer={peer:?} untouched={untouched} message={}",
        outcome.is_err(),
        message.replace(' ', "_")
    )
}

#[test]
fn all_to_all_vdev_matches_the_plan_for_world_1_to_4() {
    for world in [1, 2, 3, 4] {
        let job = Job::new("vdev");
        for (rank, out) in job.run(world, "vdev", &[]).iter().enumerate() {
            assert!(
                out.status.success(),
                "world {world} rank {rank}: {}",
                result(out)
            );
            assert_eq!(field(&result(out), "nonzero"), "0", "pads back to zero");
        }
    }
}

#[test]
fn received_splits_larger_than_out_fail_on_the_receiver_only_and_write_nothing() {
    let world = 3;
    let job = Job::new("overflow");
    for (rank, out) in job.run(world, "overflow", &[]).iter().enumerate() {
        assert!(out.status.success(), "rank {rank}: {}", result(out));
        let r = result(out);
        assert_eq!(
            field(&r, "failed"),
            if rank == 0 { "true" } else { "false" }
        );
        if rank == 0 {
            assert_eq!(field(&r, "untouched"), "true", "{r}");
            assert!(field(&r, "peer").starts_with("Some("), "{r}");
            let message = field(&r, "message");
            assert!(
                message.contains("sends_3_rows,_to_out_rows_0..3,")
                    && message.contains("which_do_not_fit_an_out_of_2_rows"),
                "{r}"
            );
        }
    }
}
