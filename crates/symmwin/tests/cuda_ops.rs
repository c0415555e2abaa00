//! The CUDA ops (kernels and copy-engine paths) in real multi-process worlds of 2, 4
//! and 8 ranks on whatever GPUs there are (ranks share them round-robin), against the
//! split arithmetic of `ops::plan`. Every rank rebuilds every rank's tables and rows
//! from the same seed, so it knows what it must receive.
//!
//! Needs a CUDA GPU: `cargo test -p symmwin --test cuda_ops -- --ignored` (or the
//! prebuilt binary with `--ignored`, see scripts/gpu_ops.sh).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{result, Job, Rng};
use symmwin::adapter::testing::plan;
use symmwin::ops::OpOptions;
use symmwin::ops::Shape;
use symmwin::ops::{DType, ElemType, ReduceOp, Rows, Tile};
use symmwin::{adapter::cuda_device_count as device_count, CudaProvider};
use symmwin::{
    ops::{Engine, Operand},
    Allocation, Group, HandlePreference, Provider, SignalOptions, Stream, Window,
};

/// The CUDA kernels' limits (SYMMWIN_OPS_MAX_EXPERTS, SYMMWIN_OPS_MAX_SPLITS in
/// kernels/ops_params.cuh): experts per rank, and world * experts.
const MAX_EXPERTS: usize = 512;
const MAX_SPLITS: usize = 2048;

common::worker! {
    "var" => var_ops,
    "sized" => host_sized_ops,
    "tiles" => tiles,
    "disagree" => disagree,
}

fn join_cuda(rank: usize, world: usize) -> (Group, Arc<dyn Provider>) {
    common::join_cuda("cuda-ops", rank, world)
}

/// A window of `bytes` (rounded up to the granularity) and the allocation behind it.
fn window(group: &Group, provider: &Arc<dyn Provider>, bytes: usize) -> (Allocation, Window) {
    let alloc = Allocation::new(provider.clone(), bytes.max(1)).unwrap();
    let window = group.rendezvous(&alloc).unwrap();
    (alloc, window)
}

fn i64_bytes(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

fn read_i64s(w: &Window, rank: usize, n: usize) -> Vec<i64> {
    let mut bytes = vec![0u8; n * 8];
    w.read(rank, 0, &mut bytes).unwrap();
    bytes
        .chunks_exact(8)
        .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// Row `r` of sender `s` in case `seed`: distinct bytes everywhere.
fn row(seed: u64, s: usize, r: usize, row_bytes: usize) -> Vec<u8> {
    (0..row_bytes)
        .map(|b| (seed as usize * 131 + s * 71 + r * 13 + b * 7) as u8)
        .collect()
}

/// Every rank's input split table for `shape` (with explicit offsets for combine,
/// leaving a one-row gap before every chunk).
fn tables(shape: Shape, seed: u64, world: usize, experts: usize) -> Vec<Vec<i64>> {
    let n = world * experts;
    (0..world)
        .map(|s| {
            let mut rng = Rng::new(seed * 1000 + s as u64);
            let splits: Vec<i64> = (0..n)
                .map(|_| [0, 0, 1, 2, 3, 5, 9][rng.below(7)])
                .collect();
            match shape {
                Shape::Combine => {
                    let mut offsets = Vec::with_capacity(n);
                    let mut at = 0;
                    for &rows in &splits {
                        at += 1;
                        offsets.push(at);
                        at += rows;
                    }
                    [splits, offsets].concat()
                }
                _ => splits,
            }
        })
        .collect()
}

/// One all_to_all_vdev-family call checked against `plan`; `None` when it matches.
fn check_var(
    group: &Group,
    provider: &Arc<dyn Provider>,
    shape: Shape,
    experts: usize,
    row_bytes: usize,
    seed: u64,
) -> Option<String> {
    let (rank, world) = (group.rank(), group.world());
    let mut all = tables(shape, seed, world, experts);
    let n = world * experts;
    // Every fourth case, one rank sends nothing at all.
    if seed % 4 == 0 {
        all[seed as usize % world][..n].fill(0);
    }
    // Room for every sender's rows and the gaps before its chunks (combine).
    let in_rows = 1
        + n
        + all
            .iter()
            .map(|t| t[..n].iter().sum::<i64>() as usize)
            .max()
            .unwrap();
    // Room for the largest receive and the alignment of every expert block.
    let out_rows = n * 9 + experts * 128;
    let (_a, input) = window(group, provider, in_rows * row_bytes);
    let (_b, out) = window(group, provider, out_rows * row_bytes);
    let (_c, splits) = window(group, provider, all[rank].len() * 8);
    let (_d, out_so) = window(group, provider, 2 * world * experts * 8);
    splits.write(rank, 0, &i64_bytes(&all[rank])).unwrap();
    let mut data = vec![0u8; in_rows * row_bytes];
    for r in 0..in_rows {
        data[r * row_bytes..(r + 1) * row_bytes].copy_from_slice(&row(seed, rank, r, row_bytes));
    }
    input.write(rank, 0, &data).unwrap();
    let opts = OpOptions::default();
    let rows = Rows {
        row_bytes,
        in_rows,
        out_rows,
    };
    symmwin::ops::all_to_all_v(
        shape,
        Operand::new(&input, 0, in_rows * row_bytes),
        Operand::new(&out, 0, out_rows * row_bytes),
        Operand::new(&splits, 0, all[rank].len() * 8),
        Operand::new(&out_so, 0, 2 * world * experts * 8),
        rows,
        &opts,
    )
    .unwrap();
    out.synchronize(Stream::DEFAULT).unwrap();
    let want = plan::plan(shape, &all, rank, experts).unwrap();
    let got = read_i64s(&out_so, rank, 2 * world * experts);
    if got != [want.out_splits.clone(), want.out_offsets.clone()].concat() {
        return Some(format!(
            "{shape:?} seed {seed}: out_splits_offsets {got:?} != {want:?}"
        ));
    }
    let mut received = vec![0u8; out_rows * row_bytes];
    out.read(rank, 0, &mut received).unwrap();
    for c in &want.chunks {
        for r in 0..c.rows {
            let at = (c.out_row + r) * row_bytes;
            if received[at..at + row_bytes] != row(seed, c.src, c.src_row + r, row_bytes)[..] {
                return Some(format!(
                    "{shape:?} seed {seed}: row {} from rank {}",
                    c.out_row + r,
                    c.src
                ));
            }
        }
    }
    None
}

/// The all_to_all_vdev family: random splits with zeros (and ranks that send nothing),
/// odd and vector-sized rows, alignment 1, 8 and 128, the largest expert count the
/// kernel holds, then 200 calls in a row next to barriers.
fn var_ops(rank: usize, world: usize) -> String {
    let (group, provider) = join_cuda(rank, world);
    let mut failures = Vec::new();
    let mut seed = 1;
    let most_experts = MAX_EXPERTS.min(MAX_SPLITS / world);
    for shape in [
        Shape::Dispatch { major_align: 1 },
        Shape::Dispatch { major_align: 128 },
        Shape::Combine,
    ] {
        for row_bytes in [16, 28] {
            failures.extend(check_var(
                &group,
                &provider,
                shape,
                most_experts,
                row_bytes,
                seed,
            ));
            seed += 1;
        }
    }
    for row_bytes in [16, 28, 7168 * 2] {
        for shape in [
            Shape::Flat,
            Shape::Dispatch { major_align: 1 },
            Shape::Dispatch { major_align: 8 },
            Shape::Dispatch { major_align: 128 },
            Shape::Combine,
        ] {
            let experts = if shape == Shape::Flat { 1 } else { 3 };
            failures.extend(check_var(
                &group, &provider, shape, experts, row_bytes, seed,
            ));
            seed += 1;
        }
    }
    let (_p, pads) = window(&group, &provider, 4096);
    for i in 0..200 {
        failures.extend(check_var(
            &group,
            &provider,
            Shape::Dispatch { major_align: 8 },
            2,
            32,
            100 + i,
        ));
        if i % 3 == 0 {
            pads.barrier(SignalOptions::channel(i as usize % 4))
                .unwrap();
        }
    }
    pads.synchronize(Stream::DEFAULT).unwrap();
    format!("failures={}", failures.first().cloned().unwrap_or_default())
}

/// all_to_all, broadcast, put and get on each engine.
fn host_sized_ops(rank: usize, world: usize) -> String {
    let (group, provider) = join_cuda(rank, world);
    let mut failures = Vec::new();
    for engine in [Engine::Sm, Engine::CopyEngine, Engine::Auto] {
        let opts = OpOptions {
            engine: Some(engine),
            ..OpOptions::default()
        };
        for per_peer in [16, 4096 + 3, 1 << 20] {
            let len = world * per_peer;
            let (_a, input) = window(&group, &provider, len);
            let (_b, out) = window(&group, &provider, len);
            let send: Vec<u8> = (0..len).map(|i| (i * 3 + rank * 17) as u8).collect();
            input.write(rank, 0, &send).unwrap();
            symmwin::ops::all_to_all(
                Operand::new(&input, 0, len),
                Operand::new(&out, 0, len),
                1,
                &opts,
            )
            .unwrap();
            out.synchronize(Stream::DEFAULT).unwrap();
            let mut got = vec![0u8; len];
            out.read(rank, 0, &mut got).unwrap();
            for s in 0..world {
                let want: Vec<u8> = (rank * per_peer..(rank + 1) * per_peer)
                    .map(|i| (i * 3 + s * 17) as u8)
                    .collect();
                if got[s * per_peer..(s + 1) * per_peer] != want[..] {
                    failures.push(format!("all_to_all {engine} {per_peer} from {s}"));
                }
            }
            for root in 0..world {
                input.write(rank, 0, &vec![rank as u8 + 1; len]).unwrap();
                symmwin::ops::broadcast(Operand::new(&input, 0, len), root, &opts).unwrap();
                input.synchronize(Stream::DEFAULT).unwrap();
                input.read(rank, 0, &mut got).unwrap();
                if got.iter().any(|&b| b != root as u8 + 1) {
                    failures.push(format!("broadcast {engine} {per_peer} root {root}"));
                }
            }
            for peer in 0..world {
                out.write(rank, 0, &vec![rank as u8; len]).unwrap();
                out.barrier(SignalOptions::default()).unwrap();
                out.synchronize(Stream::DEFAULT).unwrap();
                symmwin::ops::put_or_get(Operand::new(&out, 0, len), peer, false, &opts).unwrap();
                out.synchronize(Stream::DEFAULT).unwrap();
                out.read(rank, 0, &mut got).unwrap();
                if got.iter().any(|&b| b != peer as u8) {
                    failures.push(format!("get {engine} {per_peer} from {peer}"));
                }
                // Nobody overwrites its buffer while a peer may still be reading it.
                out.barrier(SignalOptions::default()).unwrap();
                out.synchronize(Stream::DEFAULT).unwrap();
            }
        }
    }
    format!("failures={}", failures.first().cloned().unwrap_or_default())
}

/// tile_reduce to every root and multi_root_tile_reduce, f32 and f64 (exact sums).
fn tiles(rank: usize, world: usize) -> String {
    let (group, provider) = join_cuda(rank, world);
    let (rows, cols, stride) = (5, 7, 9);
    let mut failures = Vec::new();
    for elem in [ElemType::F32, ElemType::F64] {
        let size = elem.size();
        let bytes = rows * stride * size;
        let (_a, input) = window(&group, &provider, bytes * world);
        let (_b, out) = window(&group, &provider, bytes);
        let value = |r: usize, i: usize, tile: usize| (r * 1000 + i + tile * 7) as f64;
        let encode = |v: f64| -> Vec<u8> {
            match elem {
                ElemType::F64 => v.to_ne_bytes().to_vec(),
                _ => (v as f32).to_ne_bytes().to_vec(),
            }
        };
        for tile_index in 0..world {
            let image: Vec<u8> = (0..rows * stride)
                .flat_map(|i| encode(value(rank, i, tile_index)))
                .collect();
            input.write(rank, tile_index * bytes, &image).unwrap();
        }
        let tile = Tile {
            rows,
            cols,
            row_stride: stride,
            elem,
        };
        let ins: Vec<Operand> = (0..world)
            .map(|i| Operand::new(&input, i * bytes, bytes))
            .collect();
        let roots: Vec<usize> = (0..world).rev().collect();
        symmwin::ops::tile_reduce(
            &ins,
            &roots,
            Operand::new(&out, 0, bytes),
            tile,
            ReduceOp::Sum,
            &OpOptions::default(),
        )
        .unwrap();
        out.synchronize(Stream::DEFAULT).unwrap();
        let mut got = vec![0u8; bytes];
        out.read(rank, 0, &mut got).unwrap();
        let mine = roots.iter().position(|&r| r == rank).unwrap();
        for r in 0..rows {
            for c in 0..cols {
                let i = r * stride + c;
                let want: f64 = (0..world).map(|s| value(s, i, mine)).sum();
                let at = i * size;
                let v = match elem {
                    ElemType::F64 => f64::from_ne_bytes(got[at..at + 8].try_into().unwrap()),
                    _ => f32::from_ne_bytes(got[at..at + 4].try_into().unwrap()) as f64,
                };
                if v != want {
                    failures.push(format!(
                        "{elem:?} tile {mine} [{r}][{c}] = {v}, want {want}"
                    ));
                }
            }
        }
    }
    format!("failures={}", failures.first().cloned().unwrap_or_default())
}

/// The cases of `disagree`, each with the op it names: rank 1 passes other operands
/// than rank 0 in the same bytes (or, "count", fewer elements).
const DISAGREE_CASES: [(&str, &str); 5] = [
    // float32 x 8 per peer against float64 x 4 (untyped, element sizes 4 and 8).
    ("elem_size", "all_to_all"),
    // float32 against int32 of one size.
    ("same_size", "all_to_all"),
    // Rows of float64 x 2 against float32 x 4.
    ("row_dtype", "all_to_all_vdev"),
    // float32 against int32 in broadcast.
    ("broadcast_dtype", "broadcast"),
    // 8 float32 elements per peer against 4.
    ("count", "all_to_all"),
];

/// `b` for the odd rank, `a` for the others.
fn pick<T>(odd: bool, a: T, b: T) -> T {
    if odd {
        b
    } else {
        a
    }
}

/// `DISAGREE_CASE` as rank `rank` calls it (rank 1 is the odd one).
fn disagree_call(
    case: &str,
    rank: usize,
    world: usize,
    input: &Window,
    out: &Window,
    opts: &OpOptions,
) -> symmwin::Result<()> {
    let len = 32 * world;
    let odd = rank == 1;
    let typed = |w, len, dtype| Operand::new(w, 0, len).with_dtype(dtype);
    match case {
        "elem_size" => symmwin::ops::all_to_all(
            Operand::new(input, 0, len),
            Operand::new(out, 0, len),
            pick(odd, 4, 8),
            opts,
        ),
        "same_size" => {
            let dtype = pick(odd, DType::FLOAT32, DType::INT32);
            symmwin::ops::all_to_all(typed(input, len, dtype), typed(out, len, dtype), 4, opts)
        }
        "row_dtype" => {
            let dtype = pick(odd, DType::FLOAT64, DType::FLOAT32);
            input
                .write(rank, 4096, &i64_bytes(&vec![1; world]))
                .unwrap();
            symmwin::ops::all_to_all_v(
                Shape::Flat,
                typed(input, 16 * world, dtype),
                typed(out, 16 * world, dtype),
                Operand::new(input, 4096, 8 * world).with_dtype(DType::INT64),
                Operand::new(out, 4096, 16 * world).with_dtype(DType::INT64),
                Rows {
                    row_bytes: 16,
                    in_rows: world,
                    out_rows: world,
                },
                opts,
            )
        }
        "broadcast_dtype" => {
            let dtype = pick(odd, DType::FLOAT32, DType::INT32);
            symmwin::ops::broadcast(typed(out, 16, dtype), 0, opts)
        }
        "count" => {
            let len = pick(odd, len, len / 2);
            let f32s = DType::FLOAT32;
            symmwin::ops::all_to_all(typed(input, len, f32s), typed(out, len, f32s), 4, opts)
        }
        other => panic!("unknown case {other}"),
    }
}

/// Rank 1 passes other operands than rank 0 (`DISAGREE_CASE`): the device handshake
/// sees the other rank's fingerprint, records it and traps; the next symmwin call on
/// each rank says which rank disagrees on the operands of which op.
fn disagree(rank: usize, world: usize) -> String {
    let engine: Engine = std::env::var("DISAGREE_ENGINE").unwrap().parse().unwrap();
    let case = std::env::var("DISAGREE_CASE").unwrap();
    let op = DISAGREE_CASES.iter().find(|c| c.0 == case).unwrap().1;
    let (group, provider) = join_cuda(rank, world);
    let len = 32 * world;
    let (_a, input) = window(&group, &provider, 8192.max(len));
    let (_b, out) = window(&group, &provider, 8192.max(len));
    let opts = OpOptions {
        engine: Some(engine),
        ..OpOptions::default()
    };
    let launched = disagree_call(&case, rank, world, &input, &out, &opts);
    // The trap makes the stream's synchronization fail; the next op reads the record
    // and names the peer.
    let errors: Vec<symmwin::Error> = [
        launched.err(),
        out.synchronize(Stream::DEFAULT).err(),
        symmwin::ops::broadcast(Operand::new(&out, 0, len), 0, &opts).err(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let want = format!("ranks disagree on the operands of {op}: rank ");
    let named = errors.iter().find(|e| e.to_string().contains(&want));
    format!(
        "named={} peer={:?} errors={}",
        named.is_some(),
        named.and_then(|e| e.peer()),
        errors.len()
    )
}

fn run_everywhere(scenario: &str) {
    run_at(scenario, &[2, 4, 8]);
}

fn run_at(scenario: &str, worlds: &[usize]) {
    for &world in worlds {
        let job = Job::new(scenario);
        let ranks = job.spawn(world, scenario, &[]);
        for (rank, out) in ranks.wait(Duration::from_secs(300)).iter().enumerate() {
            common::assert_success(out, &format!("world {world} rank {rank}"));
            assert_eq!(result(out), "failures=", "world {world} rank {rank}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn all_to_all_v_family_matches_the_plan_at_world_1_2_4_8() {
    run_at("var", &[1, 2, 4, 8]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn host_sized_ops_match_on_both_engines_at_world_2_4_8() {
    run_everywhere("sized");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tile_reduce_sums_exactly_at_every_root_at_world_2_4_8() {
    run_everywhere("tiles");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ranks_that_disagree_on_the_dtype_trap_and_name_each_other_on_both_engines() {
    // Each case and engine in processes of its own: a trap loses the context.
    for (case, _) in DISAGREE_CASES {
        for engine in ["sm", "copy_engine"] {
            let job = Job::new("disagree");
            let env = [
                ("DISAGREE_ENGINE", engine.to_owned()),
                ("DISAGREE_CASE", case.to_owned()),
            ];
            let ranks = job.spawn(2, "disagree", &env);
            for (rank, out) in ranks.wait(Duration::from_secs(120)).iter().enumerate() {
                let r = result(out);
                let what = format!("{case} on {engine}, rank {rank}: {r}");
                assert_eq!(common::field(&r, "named"), "true", "{what}");
                let other = 1 - rank;
                assert_eq!(
                    common::field(&r, "peer"),
                    format!("Some({other})"),
                    "{what}"
                );
            }
        }
    }
}

/// The NVLink fabric domain of every device, from NVML: NVML loads and finds each
/// device by the PCI address the driver gives, and the provider publishes exactly what
/// NVML reports when it shares fabric handles, nothing when it shares POSIX fds.
#[test]
#[ignore = "needs a CUDA GPU"]
fn fabric_domain_is_read_from_nvml_on_every_device() {
    use symmwin::adapter::HandleType;
    use symmwin::adapter::{read_fabric_domain, NoFabricDomain};
    for device in 0..device_count().unwrap() {
        let read = read_fabric_domain(device);
        match &read {
            Ok(domain) => {
                println!(
                    "cuda:{device}: fabric domain: cluster {} clique {}",
                    domain.cluster_uuid, domain.clique_id
                );
                assert_eq!(domain.cluster_uuid.len(), 32, "{domain:?}");
                assert!(domain.cluster_uuid.bytes().all(|b| b.is_ascii_hexdigit()));
                assert!(domain.cluster_uuid.bytes().any(|b| b != b'0'), "{domain:?}");
            }
            Err(why) => println!("cuda:{device}: fabric domain: none: {why}"),
        }
        let unreached = match &read {
            Err(NoFabricDomain::NvmlMissing(_))
            | Err(NoFabricDomain::SymbolMissing(_))
            | Err(NoFabricDomain::PciAddress(_)) => true,
            Err(NoFabricDomain::Nvml { call, .. }) => !call.contains("FabricInfo"),
            _ => false,
        };
        assert!(!unreached, "cuda:{device}: NVML did not reach the device");
        let provider = CudaProvider::new(device, HandlePreference::Auto).unwrap();
        let expected = match provider.info().handle_type {
            HandleType::Fabric => read.ok(),
            HandleType::PosixFd => None,
        };
        for _ in 0..2 {
            assert_eq!(provider.fabric_domain(), expected, "cuda:{device}");
        }
    }
}
