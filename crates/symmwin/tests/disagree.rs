//! Ranks that disagree on an op's operands (another dtype, tile shape, row width,
//! length or root) fail on every rank, naming the ranks that differ, instead of moving
//! reinterpreted bytes; the group stays in step (a following good op works and the
//! pads are back to zero). Host provider, real multi-process worlds of 2 and 3.

mod common;

use common::{field, join, result, Job};
use symmwin::ops::{all_to_all, all_to_all_v, broadcast, tile_reduce};
use symmwin::ops::{DType, ElemType, OpOptions, Operand, ReduceOp, Rows, Shape, Tile};
use symmwin::{Allocation, Window};

common::worker! {
    "disagree" => disagree,
}

/// Environment variable naming the disagreement a job runs.
const CASE: &str = "DISAGREE_CASE";

const CASES: [&str; 10] = [
    "dtype",
    "same_size",
    "row_dtype",
    "broadcast_dtype",
    "count",
    "tile_shape",
    "row_width",
    "longer_view",
    "broadcast_root",
    "tile_root",
];

/// The last rank is the odd one out.
fn odd(rank: usize, world: usize) -> bool {
    rank == world - 1
}

fn tile(side: usize) -> Tile {
    Tile {
        rows: side,
        cols: side,
        row_stride: side,
        elem: ElemType::F32,
    }
}

/// `case`'s op as `rank` calls it: the odd rank passes other operands (`odd`), the
/// others agree with each other.
fn call(w: &Window, case: &str, rank: usize, world: usize, odd: bool) -> symmwin::Result<()> {
    let opts = OpOptions::default();
    let whole = |at, len| Operand::new(w, at, len);
    match case {
        // float32 x 8 per peer against float64 x 4: the same bytes.
        "dtype" => all_to_all(
            whole(0, 32 * world),
            whole(4096, 32 * world),
            if odd { 8 } else { 4 },
            &opts,
        ),
        // float32 against int32 of one size.
        "same_size" => {
            let dtype = if odd { DType::INT32 } else { DType::FLOAT32 };
            all_to_all(
                whole(0, 32 * world).with_dtype(dtype),
                whole(4096, 32 * world).with_dtype(dtype),
                4,
                &opts,
            )
        }
        // Rows of float64 x 2 against float32 x 4: 16 bytes each.
        "row_dtype" => {
            let dtype = if odd { DType::FLOAT32 } else { DType::FLOAT64 };
            var_rows(w, rank, world, 16, dtype)
        }
        "broadcast_dtype" => {
            let dtype = if odd { DType::INT32 } else { DType::FLOAT32 };
            broadcast(whole(0, 16).with_dtype(dtype), 0usize, &opts)
        }
        // 4 float32 elements per peer against 8.
        "count" => {
            let len = if odd { 16 } else { 32 } * world;
            all_to_all(
                whole(0, len).with_dtype(DType::FLOAT32),
                whole(4096, len).with_dtype(DType::FLOAT32),
                4,
                &opts,
            )
        }
        "tile_shape" => {
            let side = if odd { 4 } else { 2 };
            let t = tile(side);
            let bytes = side * side * 4;
            tile_reduce(
                &[whole(0, bytes)],
                &[0usize],
                whole(4096, bytes),
                t,
                ReduceOp::Sum,
                &opts,
            )
        }
        "row_width" => var_rows(
            w,
            rank,
            world,
            if odd { 24 } else { 12 },
            DType::UNSPECIFIED,
        ),
        // A non-root view longer than the root's.
        "longer_view" => broadcast(whole(0, if odd { 64 } else { 16 }), 0usize, &opts),
        "broadcast_root" => broadcast(whole(0, 16), if odd { rank } else { 0 }, &opts),
        "tile_root" => {
            let root = if odd { rank } else { 0 };
            tile_reduce(
                &[whole(0, 16)],
                &[root],
                whole(4096, 16),
                tile(2),
                ReduceOp::Sum,
                &opts,
            )
        }
        other => panic!("unknown case {other}"),
    }
}

/// `all_to_all_vdev` of one row of `row_bytes` bytes of `dtype` to every peer.
fn var_rows(
    w: &Window,
    rank: usize,
    world: usize,
    row_bytes: usize,
    dtype: DType,
) -> symmwin::Result<()> {
    let whole = |at, len| Operand::new(w, at, len);
    let ones: Vec<u8> = (0..world).flat_map(|_| 1i64.to_ne_bytes()).collect();
    w.write(rank, 8192, &ones).unwrap();
    all_to_all_v(
        Shape::Flat,
        whole(0, world * row_bytes).with_dtype(dtype),
        whole(4096, world * row_bytes).with_dtype(dtype),
        whole(8192, world * 8).with_dtype(DType::INT64),
        whole(12288, 2 * world * 8).with_dtype(DType::INT64),
        Rows {
            row_bytes,
            in_rows: world,
            out_rows: world,
        },
        &OpOptions::default(),
    )
}

/// Run the case once with the odd rank out, then once all alike (the group must still
/// be in step), and report what the first call said and whether the pads are zero.
fn disagree(rank: usize, world: usize) -> String {
    let case = std::env::var(CASE).unwrap();
    let (group, provider) = join(rank, world);
    let alloc = Allocation::new(provider, 1 << 16).unwrap();
    let w = group.rendezvous(&alloc).unwrap();
    let filler: Vec<u8> = (0..4096).map(|i| (i % 7) as u8 + 1).collect();
    w.write(rank, 0, &filler).unwrap();
    let outcome = call(&w, &case, rank, world, odd(rank, world));
    call(&w, &case, rank, world, false).expect("the group is in step after a disagreement");
    let pad = w.pad_ptrs()[rank];
    // SAFETY: (test) this rank's pad is mapped for pad_size bytes while `w` lives.
    let words = unsafe { std::slice::from_raw_parts(pad as *const u32, w.pad_size() / 4) };
    let nonzero = words.iter().filter(|&&x| x != 0).count();
    let (peer, message) = match &outcome {
        Ok(()) => (None, String::new()),
        Err(e) => (e.peer(), e.to_string()),
    };
    format!(
        "failed={} peer={peer:?} nonzero={nonzero} message={}",
        outcome.is_err(),
        message.replace(' ', "_")
    )
}

fn check_case(case: &str, world: usize) {
    let job = Job::new("disagree");
    let outs = job.run(world, "disagree", &[(CASE, case.to_owned())]);
    let odd_rank = world - 1;
    for (rank, out) in outs.iter().enumerate() {
        let r = result(out);
        let what = format!("{case} at world {world}, rank {rank}: {r}");
        assert!(out.status.success(), "{what}");
        assert_eq!(field(&r, "failed"), "true", "{what}");
        assert_eq!(field(&r, "nonzero"), "0", "pads back to zero: {what}");
        let message = field(&r, "message");
        assert!(
            message.contains("ranks_disagree_on_the_operands_of_")
                && message.contains(&format!("rank_{rank}_(this_rank)_has_")),
            "{what}"
        );
        // Every rank names the ranks whose operands differ from its own.
        let differ: Vec<usize> = if rank == odd_rank {
            (0..odd_rank).collect()
        } else {
            vec![odd_rank]
        };
        assert_eq!(field(&r, "peer"), format!("Some({})", differ[0]), "{what}");
        let named = 1 + differ.len();
        for d in differ {
            assert!(message.contains(&format!("rank_{d}_has_")), "{what}");
        }
        assert_eq!(message.matches("fingerprint_0x").count(), named, "{what}");
        assert!(!message.contains("_1_elements"), "{what}");
    }
}

#[test]
fn ranks_that_disagree_on_operands_fail_naming_each_other_at_world_2() {
    for case in CASES {
        check_case(case, 2);
    }
}

#[test]
fn ranks_that_disagree_on_operands_fail_naming_each_other_at_world_3() {
    for case in CASES {
        check_case(case, 3);
    }
}

/// What rank 0 and rank 1 (the odd one) pass in a case at world 2, as the message
/// words it.
const SAID: [(&str, &str, &str); 5] = [
    (
        "dtype",
        "8 elements of 4 bytes per peer",
        "4 elements of 8 bytes per peer",
    ),
    (
        "same_size",
        "8 float32 elements per peer",
        "8 int32 elements per peer",
    ),
    (
        "row_dtype",
        "rows of 16 bytes (2 float64 elements)",
        "rows of 16 bytes (4 float32 elements)",
    ),
    (
        "broadcast_dtype",
        "4 float32 elements from root 0",
        "4 int32 elements from root 0",
    ),
    (
        "count",
        "8 float32 elements per peer",
        "4 float32 elements per peer",
    ),
];

#[test]
fn the_message_says_what_this_rank_and_the_other_passed() {
    for (case, zero, one) in SAID {
        let job = Job::new("disagree");
        let outs = job.run(2, "disagree", &[(CASE, case.to_owned())]);
        let texts: Vec<String> = outs
            .iter()
            .map(|o| field(&result(o), "message").replace('_', " "))
            .collect();
        for (rank, (mine, theirs)) in [(zero, one), (one, zero)].into_iter().enumerate() {
            let text = &texts[rank];
            let peer = 1 - rank;
            assert!(
                text.contains(&format!("rank {rank} (this rank) has {mine}")),
                "{case}: {text}"
            );
            assert!(
                text.contains(&format!("rank {peer} has {theirs}")),
                "{case}: {text}"
            );
        }
    }
}

/// On a group that spans hosts the ranks of one host compare their fingerprints
/// through the pads: rank 1's longer view of a broadcast from rank 0 (both on host
/// "a") fails on both, naming each other; rank 2 (host "b", reached by message) is not
/// compared and keeps the root's bytes; a following good op works everywhere.
#[test]
fn the_ranks_of_one_host_compare_on_a_group_that_spans_hosts() {
    let mailbox = std::sync::Arc::new(common::hosts::Mailbox::default());
    let hosts = ["a", "a", "b"];
    let results =
        common::hosts::spanning("disagree-hosts", &hosts, Some(&mailbox), |rank, group| {
            let alloc = Allocation::new(group.provider().clone(), 1 << 16).unwrap();
            let w = group.rendezvous(&alloc).unwrap();
            w.write(rank, 0, &[rank as u8 + 1; 64]).unwrap();
            let len = if rank == 1 { 64 } else { 16 };
            let opts = OpOptions::default();
            let outcome = broadcast(Operand::new(&w, 0, len), 0usize, &opts);
            broadcast(Operand::new(&w, 0, 16), 0usize, &opts).unwrap();
            let mut got = [0u8; 16];
            w.read(rank, 0, &mut got).unwrap();
            (outcome.err().map(|e| (e.peer(), e.to_string())), got)
        });
    for (rank, (failure, got)) in results.iter().enumerate() {
        assert_eq!(got, &[1u8; 16], "rank {rank} has the root's bytes");
        match rank {
            2 => assert!(failure.is_none(), "{failure:?}"),
            _ => {
                let (peer, text) = failure.as_ref().expect("a local rank sees the other");
                assert_eq!(*peer, Some(1 - rank), "{text}");
                assert!(
                    text.contains("ranks disagree on the operands of broadcast")
                        && text.contains(&format!(
                            "rank {} has {} bytes from root 0",
                            1 - rank,
                            if rank == 0 { 64 } else { 16 }
                        )),
                    "{text}"
                );
            }
        }
    }
}
