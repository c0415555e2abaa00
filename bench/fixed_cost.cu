// The ops kernels' fixed cost at world 1, without symmwin's host path, beside the
// floors that bound it, and the all_to_all_vdev family checked against a CPU
// reference: one process, one GPU, no pads (at world 1 no kernel touches them).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I crates/symmwin-cuda/kernels -I bench/kernels \
//        -o fixed_cost bench/fixed_cost.cu && ./fixed_cost
//
// It compiles kernels/ops.cu itself (the same source as the committed PTX), the
// two-kernel all_to_all_vdev that the fused kernel replaced (bench/kernels/), and
// probes that each add one thing to an empty kernel with the ops' grid and 288-byte
// params: reading the params, loading 4 KiB, storing 4 KiB, both. Every figure is the
// time per launch of a CUDA graph of 200 launches of that kernel (the launch gap
// included, the same for every kernel), median [min-max] over 5 repeats; eager figures
// are back-to-back launches on one stream. The difference between two rows is the
// difference of their kernels' durations.
//
// `--only REGEX` times only the rows whose names match (`--only 'MoE|4 KiB'`),
// `--check-only` none; `--profile` is for the profilers (below). `--trace`, in a build
// with -DFIXED_COST_TRACE, prints where block 0 of each op spends its SM cycles between
// the kernels' trace points (SYMMWIN_OPS_TRACE_POINT, nothing in other builds).
//
// Correctness: every all_to_all_vdev shape with random splits (zeros included, whole
// tables of zeros, the largest expert count), odd and vector-sized rows and
// alignments 1, 8 and 128, fused and two-kernel, eager and replayed from one CUDA graph
// with new splits before every replay, against the CPU reference below. Exit status 1
// on any mismatch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#ifdef FIXED_COST_TRACE
// The trace build (-DFIXED_COST_TRACE, for --trace): block 0's thread 0 records the SM
// clock at each of the kernels' trace points (SYMMWIN_OPS_TRACE_POINT).
constexpr int kTracePoints = 16;
__device__ long long g_trace[kTracePoints];
#define SYMMWIN_OPS_TRACE_POINT(i)                                  \
  do {                                                              \
    if (blockIdx.x == 0 && threadIdx.x == 0) g_trace[i] = clock64(); \
  } while (0)
#endif

#include "ops.cu"
#include "vdev_two_kernels.cuh"

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t err_ = (x);                                                         \
    if (err_ != cudaSuccess) {                                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_)); \
      exit(2);                                                                      \
    }                                                                               \
  } while (0)

// ---------------------------------------------------------------------------------
// Probes: an empty kernel and what one copy of `p.bytes` adds to it.

extern "C" __global__ void __launch_bounds__(kThreads) probe_empty(const __grid_constant__ OpsParams p) {}

// Reads the params the copy needs (and never stores).
extern "C" __global__ void __launch_bounds__(kThreads) probe_params(const __grid_constant__ OpsParams p) {
  if (p.src.base + p.dst.base + p.bytes == 1) asm volatile("trap;");
}

// Loads 16 bytes per thread; stores only if the data is a magic value (never).
extern "C" __global__ void __launch_bounds__(kThreads) probe_load(const __grid_constant__ OpsParams p) {
  const uint4* s = reinterpret_cast<const uint4*>(p.src.base);
  if (threadIdx.x < (p.bytes >> 4)) {
    const uint4 v = ld_v4(s + threadIdx.x);
    if (v.x == 0x5eed5eedu && v.y == 0x5eed5eedu) asm volatile("trap;");
  }
}

// Stores 16 bytes per thread.
extern "C" __global__ void __launch_bounds__(kThreads) probe_store(const __grid_constant__ OpsParams p) {
  uint4* d = reinterpret_cast<uint4*>(p.dst.base);
  if (threadIdx.x < (p.bytes >> 4)) st_v4(d + threadIdx.x, make_uint4(threadIdx.x, 0, 0, 0));
}

// The least an SM copy of p.bytes (< 8 KiB) does: one 16-byte load and store a thread.
extern "C" __global__ void __launch_bounds__(kThreads) probe_copy(const __grid_constant__ OpsParams p) {
  const uint4* s = reinterpret_cast<const uint4*>(p.src.base);
  uint4* d = reinterpret_cast<uint4*>(p.dst.base);
  if (threadIdx.x < (p.bytes >> 4)) st_v4(d + threadIdx.x, ld_v4(s + threadIdx.x));
}

// The least copy written as copy_part's tail loop (64-bit index, stride kThreads): what
// the loop's form adds to one 16-byte load and store a thread.
extern "C" __global__ void __launch_bounds__(kThreads) probe_copy_loop(const __grid_constant__ OpsParams p) {
  const uint4* s = reinterpret_cast<const uint4*>(p.src.base);
  uint4* d = reinterpret_cast<uint4*>(p.dst.base);
  for (uint64_t i = threadIdx.x; i < (p.bytes >> 4); i += kThreads) st_v4(d + i, ld_v4(s + i));
}

// copy_part as one part of one: the alignment test, the tile count and the tail, with
// no run-time part arithmetic.
extern "C" __global__ void __launch_bounds__(kThreads) probe_copy_part_one(const __grid_constant__ OpsParams p) {
  copy_part(reinterpret_cast<char*>(p.dst.base), reinterpret_cast<const char*>(p.src.base), p.bytes, 0, 1);
}

// copy_part with the whole grid: the SM copy floor of a large copy.
extern "C" __global__ void __launch_bounds__(kThreads) probe_copy_grid(const __grid_constant__ OpsParams p) {
  copy_part(reinterpret_cast<char*>(p.dst.base), reinterpret_cast<const char*>(p.src.base), p.bytes,
            blockIdx.x, gridDim.x);
}

// copy_part of p.bytes as the vdev kernel copies one source's rows: every block its own
// contiguous share, not tiles dealt round the grid. With equal shares, blocks stream
// from addresses a power of two apart.
extern "C" __global__ void __launch_bounds__(kThreads) probe_copy_contiguous(const __grid_constant__ OpsParams p) {
  const uint64_t vecs = p.bytes >> 4;
  const uint64_t lo = vecs * blockIdx.x / gridDim.x, hi = vecs * (blockIdx.x + 1) / gridDim.x;
  copy_part(reinterpret_cast<char*>(p.dst.base) + (lo << 4),
            reinterpret_cast<const char*>(p.src.base) + (lo << 4), (hi - lo) << 4, 0, 1);
}

#if !__has_include("ops_team.cuh")
// Kernels from before ops_team.cuh (for bench/kernel_ab.py against older commits): the
// block plans every table, and the plan's steps are plain functions.
namespace symmwin_ops {
struct BlockTeam {};
template <typename Plan>
__device__ int64_t plan_in_team(const OpsParams&, Plan plan) {
  return plan(BlockTeam{});
}
template <typename Team>
__device__ int64_t gather_plan(const OpsParams& p, uint32_t s, bool check) {
  return gather_plan(p, s, check);
}
template <typename Team>
__device__ void plan_offsets(const OpsParams& p) { plan_offsets(p); }
template <typename Team>
__device__ void write_out_splits_offsets(const OpsParams& p) { write_out_splits_offsets(p); }
template <typename Team>
__device__ int64_t segments_of(const OpsParams& p, uint32_t s, int64_t base) {
  return segments_of(p, s, base);
}
}  // namespace symmwin_ops
#endif

// The fused all_to_all_vdev kernel at world 1 (every block serves this rank's own rows),
// stopped after stage `kStages` of 5: 1 gather and check the split tables, 2 plan where
// every split lands, 3 write out_splits_offsets, 4 this block's segments, 5 copy. Each
// row's difference from the one above is what that stage costs. The plan runs in the
// team the kernel picks (plan_in_team).
template <typename Team, int kStages>
__device__ int64_t probe_plan(const OpsParams& p, uint32_t s) {
  using namespace symmwin_ops;
  const int64_t base = gather_plan<Team>(p, s, true);
  if (kStages < 2) return 0;
  plan_offsets<Team>(p);
  if (kStages < 3) return 0;
  if (blockIdx.x == 0) write_out_splits_offsets<Team>(p);
  if (kStages < 4) return 0;
  return segments_of<Team>(p, s, base);
}

template <int kStages>
__global__ void __launch_bounds__(kThreads) probe_a2av_stages(const __grid_constant__ OpsParams p) {
  using namespace symmwin_ops;
  const uint32_t s = p.rank;
  const uint32_t part = blockIdx.x % p.blocks_per_peer;
  const int64_t total =
      plan_in_team(p, [&](auto team) { return probe_plan<decltype(team), kStages>(p, s); });
  if (kStages < 5) return;
  int64_t lo, hi;
  share(total, part, p.blocks_per_peer, &lo, &hi);
  copy_rows(p, s, total, lo, hi);
}

// The fused kernel's body (symmwin_ops_a2av, copied) with its peer-and-share arithmetic
// (kProbeShare) or its plan (kProbePlan) swapped for stage 5 probe's, which does the
// same work at world 1: what the fused kernel spends above the probe, part by part.
template <bool kProbeShare, bool kProbePlan>
__global__ void __launch_bounds__(kThreads) probe_fused_parts(const __grid_constant__ OpsParams p) {
  using namespace symmwin_ops;
  const uint32_t bpp = p.blocks_per_peer;
  uint32_t s, part;
  if constexpr (kProbeShare) {
    s = p.rank;
    part = blockIdx.x % bpp;
  } else {
    peer_and_share(p, &s, &part);
  }
  const int64_t total = plan_in_team(p, [&](auto team) {
    if constexpr (kProbePlan) {
      return probe_plan<decltype(team), 5>(p, s);
    } else {
      return plan_the_op<decltype(team)>(p, s, part);
    }
  });
  int64_t lo, hi;
  share(total, part, bpp, &lo, &hi);
  copy_rows(p, s, total, lo, hi);
  // symmwin_ops_a2av's finish, spelled out so the harness builds against older kernels.
  if (s != p.rank) {
    block_signal(p, s, p.channel + 2 + part);
    if (threadIdx.x == 0) {
      wait_peer(p, s, p.channel + 2 + part);
      if (part == 0) wait_peer(p, s, p.channel + 1);
    }
  }
}

// Whether a kernel's cost grows with the code it runs rather than with its memory
// traffic: the same mixing rounds (p.experts of them) straight-line (unrolled, every
// round its own instructions) and in a loop (one round's instructions run again). If
// instructions are fetched cold at every launch, only the straight-line copy pays it.
template <bool kStraight>
__global__ void __launch_bounds__(kThreads) probe_code(const __grid_constant__ OpsParams p) {
  uint32_t a = p.rank + threadIdx.x, b = p.world + 5, c = p.experts + 7, d = p.mode + 3;
  auto round = [&](uint32_t i) {
    a = __funnelshift_l(a, b, i) ^ d;
    b = __funnelshift_r(b, c, i + 3) + a;
    c = c * 0x9E3779B1u ^ b;
    d = __byte_perm(d, c, 0x0123 + i);
  };
  if constexpr (kStraight) {
#pragma unroll
    for (uint32_t i = 0; i < 256; ++i) round(i);
  } else {
#pragma unroll 1
    for (uint32_t i = 0; i < p.experts; ++i) round(i);
  }
  if ((a ^ b ^ c ^ d) == 0x5eed5eedu) asm volatile("trap;");
}

// Eight block barriers in a row, nothing else.
extern "C" __global__ void __launch_bounds__(kThreads) probe_barriers(const __grid_constant__ OpsParams p) {
#pragma unroll 1
  for (uint32_t i = 0; i < 8; ++i) __syncthreads();
}

// Two strong system-scope loads, the second at the address the first returned (a
// dependent chain, as the plan's table reads are), thread 0 of each block.
extern "C" __global__ void __launch_bounds__(kThreads) probe_two_loads(const __grid_constant__ OpsParams p) {
  if (threadIdx.x != 0) return;
  const char* t = reinterpret_cast<const char*>(p.src_splits.base);
  const int64_t first = symmwin_ops::load_i64(t);
  if (symmwin_ops::load_i64(t + (first & 8)) == -7) asm volatile("trap;");
}

// An empty kernel that holds the plan's static shared memory (44 KiB a block).
extern "C" __global__ void __launch_bounds__(kThreads) probe_empty_plan_smem(const __grid_constant__ OpsParams p) {
  if (threadIdx.x == 0 && p.bytes == 1) symmwin_ops::vdev_splits[0] = 1;
}

// One acquire load of a split table at system scope per block (thread 0), as the plan
// reads every table, beside the volatile load (load_i64) the own-table check uses.
extern "C" __global__ void __launch_bounds__(kThreads) probe_acquire_sys(const __grid_constant__ OpsParams p) {
  if (threadIdx.x == 0 && symmwin_ops::load_acquire_i64(reinterpret_cast<const char*>(p.src_splits.base)) == -7)
    asm volatile("trap;");
}
extern "C" __global__ void __launch_bounds__(kThreads) probe_load_plain(const __grid_constant__ OpsParams p) {
  if (threadIdx.x == 0 && symmwin_ops::load_i64(reinterpret_cast<const char*>(p.src_splits.base)) == -7)
    asm volatile("trap;");
}

// ---------------------------------------------------------------------------------
// Host side

struct Dev {
  void* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t bytes) : n(bytes) { CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  // A copy would free the buffer again: a lambda that captured a Dev by value freed it
  // under the rows still timing it (the "illegal memory access" of the first 64 MiB row).
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(p); }
};

static symmwin::TimeoutRecord* g_record;
static OpsError* g_error;

static OpsParams base_params(uint32_t op) {
  OpsParams p;
  memset(&p, 0, sizeof(p));
  void* dev = nullptr;
  CHECK(cudaHostGetDevicePointer(&dev, g_record, 0));
  p.wait.record = reinterpret_cast<uint64_t>(dev);
  p.wait.timeout_ns = 2000000000ull;
  p.wait.rank = 0;
  p.wait.op = op;
  CHECK(cudaHostGetDevicePointer(&dev, g_error, 0));
  p.err = reinterpret_cast<uint64_t>(dev);
  p.rank = 0;
  p.world = 1;
  p.fingerprint = 1;
  return p;
}

static Operand operand(const Dev& d, size_t bytes) { return Operand{d.addr(), 0, 0, bytes}; }

using Launch = std::function<void(cudaStream_t)>;

// A CUDA graph of `calls` launches of `launch`, captured on `s` and instantiated.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Graph(const Launch& launch, cudaStream_t s, int calls) {
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; ++i) launch(s);
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  void replay(cudaStream_t s) const { CHECK(cudaGraphLaunch(exec, s)); }
};

static void kernel(const void* fn, uint32_t grid, const OpsParams& p, cudaStream_t s) {
  OpsParams copy = p;
  void* args[] = {&copy};
  CHECK(cudaLaunchKernel(fn, dim3(grid), dim3(kThreads), args, 0, s));
}

struct Figure {
  double med, lo, hi;
};

static Figure summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// us per launch: a graph of `calls` launches replayed `replays` times, 5 repeats.
static Figure time_graph(const Launch& launch, cudaStream_t s, int calls = 200, int replays = 10) {
  const Graph graph(launch, s, calls);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) graph.replay(s);
  std::vector<double> us;
  for (int r = 0; r < 5; ++r) {
    CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < replays; ++i) graph.replay(s);
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1000.0 / (calls * replays));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return summarize(us);
}

static Figure time_eager(const Launch& launch, cudaStream_t s, int calls = 200) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 20; ++i) launch(s);
  std::vector<double> us;
  for (int r = 0; r < 5; ++r) {
    CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < calls; ++i) launch(s);
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1000.0 / calls);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return summarize(us);
}

// --only REGEX: the rows whose names match it are timed, the others skipped.
static std::optional<std::regex> g_only;

static void row(const char* what, const Launch& launch, cudaStream_t s, bool eager = true) {
  if (g_only && !std::regex_search(what, *g_only)) return;
  const Figure g = time_graph(launch, s);
  printf("| %s | %.2f [%.2f-%.2f] |", what, g.med, g.lo, g.hi);
  if (eager) {
    const Figure e = time_eager(launch, s);
    printf(" %.2f [%.2f-%.2f] |\n", e.med, e.lo, e.hi);
  } else {
    printf(" - |\n");
  }
  fflush(stdout);
}

// ---------------------------------------------------------------------------------
// all_to_all_vdev at world 1: the CPU reference and the cases

enum Mode { kFlat = SYMMWIN_A2AV_1D, kDispatch = SYMMWIN_A2AV_2D, kCombine = SYMMWIN_A2AV_2D_OFFSET };

struct VdevCase {
  Mode mode;
  uint32_t experts;
  int64_t align;
  size_t row_bytes;
  std::vector<int64_t> table;  // in_splits (combine: splits then offsets)
  size_t in_rows, out_rows;
};

// What rank 0 of world 1 receives: out_splits_offsets, and for every received row
// the input row it comes from (-1: not written).
static void reference(const VdevCase& c, std::vector<int64_t>* so, std::vector<int64_t>* from) {
  const uint32_t n = c.experts;
  so->assign(2 * n, 0);
  from->assign(c.out_rows, -1);
  int64_t out_at = 0, in_at = 0;
  for (uint32_t e = 0; e < n; ++e) {
    const int64_t rows = c.table[e];
    const int64_t in_start = c.mode == kCombine ? c.table[n + e] : in_at;
    (*so)[e] = rows;
    (*so)[n + e] = out_at;
    for (int64_t r = 0; r < rows; ++r) (*from)[out_at + r] = in_start + r;
    in_at += rows;
    int64_t len = rows;
    if (c.mode == kDispatch) len = std::max(c.align, (rows + c.align - 1) / c.align * c.align);
    out_at += len;
  }
}

static VdevCase random_case(std::mt19937_64& rng, Mode mode, uint32_t experts, int64_t align,
                            size_t row_bytes, bool all_zero) {
  VdevCase c{mode, experts, align, row_bytes, {}, 0, 0};
  const int64_t choices[] = {0, 0, 1, 2, 3, 5, 9, 17};
  std::vector<int64_t> splits(experts);
  for (auto& s : splits) s = all_zero ? 0 : choices[rng() % 8];
  c.table = splits;
  int64_t in_rows = 0;
  if (mode == kCombine) {
    for (uint32_t e = 0; e < experts; ++e) {
      in_rows += 1;  // a one-row gap before every chunk
      c.table.push_back(in_rows);
      in_rows += splits[e];
    }
  } else {
    for (auto s : splits) in_rows += s;
  }
  c.in_rows = static_cast<size_t>(in_rows) + 1;
  c.out_rows = static_cast<size_t>(in_rows) + experts * static_cast<size_t>(align) + 1;
  return c;
}

static uint8_t byte_of(size_t row, size_t b) { return static_cast<uint8_t>(row * 13 + b * 7 + 1); }

struct VdevBuffers {
  Dev in, out, table, so;
  VdevBuffers(size_t in_bytes, size_t out_bytes, size_t table_n, size_t so_n)
      : in(in_bytes), out(out_bytes), table(table_n * 8), so(so_n * 8) {}
};

static OpsParams vdev_params(const VdevCase& c, const VdevBuffers& b) {
  const uint32_t op = c.mode == kFlat ? SYMMWIN_OP_ALL_TO_ALL_VDEV
                      : c.mode == kDispatch ? SYMMWIN_OP_ALL_TO_ALL_VDEV_2D
                                            : SYMMWIN_OP_ALL_TO_ALL_VDEV_2D_OFFSET;
  OpsParams p = base_params(op);
  p.src = operand(b.in, c.in_rows * c.row_bytes);
  p.dst = operand(b.out, c.out_rows * c.row_bytes);
  p.src_splits = operand(b.table, b.table.n);
  p.dst_splits = operand(b.so, b.so.n);
  p.row_bytes = c.row_bytes;
  p.experts = c.experts;
  p.major_align = c.mode == kDispatch ? c.align : 0;
  p.mode = c.mode;
  p.blocks_per_peer = 128;  // what grid.rs gives world 1
  p.channel = 0;
  return p;
}

static void launch_vdev(bool fused, const OpsParams& p, cudaStream_t s) {
  if (fused) {
    kernel(reinterpret_cast<const void*>(symmwin_ops_a2av), p.blocks_per_peer, p, s);
  } else {
    kernel(reinterpret_cast<const void*>(bench_a2av_plan), 1, p, s);
    kernel(reinterpret_cast<const void*>(bench_a2av_data), p.blocks_per_peer, p, s);
  }
}

// The fused kernel's five stages at `v`'s grid, each row named after `label`.
static void stage_rows(const std::string& label, const OpsParams& v, cudaStream_t s) {
  const char* names[] = {"stage 1: gather and check the tables", "stage 2: + plan the offsets",
                         "stage 3: + write out_splits_offsets", "stage 4: + this block's segments",
                         "stage 5: + copy (the whole op at world 1)"};
  const void* stages[] = {reinterpret_cast<const void*>(probe_a2av_stages<1>),
                          reinterpret_cast<const void*>(probe_a2av_stages<2>),
                          reinterpret_cast<const void*>(probe_a2av_stages<3>),
                          reinterpret_cast<const void*>(probe_a2av_stages<4>),
                          reinterpret_cast<const void*>(probe_a2av_stages<5>)};
  for (int i = 0; i < 5; ++i) {
    const void* fn = stages[i];
    row((label + names[i]).c_str(), [=](cudaStream_t st) { kernel(fn, v.blocks_per_peer, v, st); }, s);
  }
  const char* parts[] = {"fused body, built here", "fused body, the probe's peer and share",
                         "fused body, the probe's plan", "fused body, the probe's share and plan"};
  const void* variants[] = {reinterpret_cast<const void*>(probe_fused_parts<false, false>),
                            reinterpret_cast<const void*>(probe_fused_parts<true, false>),
                            reinterpret_cast<const void*>(probe_fused_parts<false, true>),
                            reinterpret_cast<const void*>(probe_fused_parts<true, true>)};
  for (int i = 0; i < 4; ++i) {
    const void* fn = variants[i];
    row((label + parts[i]).c_str(), [=](cudaStream_t st) { kernel(fn, v.blocks_per_peer, v, st); }, s);
  }
}

// The fused kernel's world-1 stages at `v`'s grid, and what its parts cost alone.
static void vdev_stages(const OpsParams& v, cudaStream_t s) {
  auto k = [&](const void* fn, uint32_t grid) {
    return [=](cudaStream_t st) { kernel(fn, grid, v, st); };
  };
  const uint32_t grid = v.blocks_per_peer;
  row("  empty kernel, vdev grid", k(reinterpret_cast<const void*>(probe_empty), grid), s);
  row("  empty kernel, vdev grid, + the plan's 44 KiB static shared memory",
      k(reinterpret_cast<const void*>(probe_empty_plan_smem), grid), s);
  row("  + one system-scope acquire load a block", k(reinterpret_cast<const void*>(probe_acquire_sys), grid), s);
  row("  + one plain load a block instead", k(reinterpret_cast<const void*>(probe_load_plain), grid), s);
  row("  + two dependent strong loads, thread 0", k(reinterpret_cast<const void*>(probe_two_loads), grid), s);
  row("  + eight block barriers", k(reinterpret_cast<const void*>(probe_barriers), grid), s);
  {
    OpsParams c = v;
    c.experts = 256;
    auto code = [&](const void* fn) { return [=](cudaStream_t st) { kernel(fn, grid, c, st); }; };
    row("  256 mixing rounds, looped (small code)", code(reinterpret_cast<const void*>(probe_code<false>)), s);
    row("  256 mixing rounds, straight-line (~1000 instructions)",
        code(reinterpret_cast<const void*>(probe_code<true>)), s);
  }
  stage_rows("  ", v, s);
  // One block of the op's grid alone: it plans, and its share of the one row is empty
  // (the row is the last block's), so these rows are the plan without the copy.
  row("  the fused kernel, its first block alone (plans, copies nothing)",
      k(reinterpret_cast<const void*>(symmwin_ops_a2av), 1), s);
  row("  stage 5 probe, its first block alone (plans, copies nothing)",
      k(reinterpret_cast<const void*>(probe_a2av_stages<5>), 1), s);
}

// Checks out_splits_offsets and every received row of `c` after the op ran.
static bool check_vdev(const VdevCase& c, const VdevBuffers& b, const char* what) {
  std::vector<int64_t> want_so, from;
  reference(c, &want_so, &from);
  std::vector<int64_t> so(2 * c.experts);
  CHECK(cudaMemcpy(so.data(), b.so.p, so.size() * 8, cudaMemcpyDeviceToHost));
  if (so != want_so) {
    printf("MISMATCH %s: out_splits_offsets (mode %d, experts %u, row %zu)\n", what, c.mode, c.experts,
           c.row_bytes);
    return false;
  }
  std::vector<uint8_t> out(c.out_rows * c.row_bytes);
  CHECK(cudaMemcpy(out.data(), b.out.p, out.size(), cudaMemcpyDeviceToHost));
  for (size_t r = 0; r < c.out_rows; ++r) {
    for (size_t x = 0; x < c.row_bytes; ++x) {
      const uint8_t want = from[r] < 0 ? 0xee : byte_of(static_cast<size_t>(from[r]), x);
      if (out[r * c.row_bytes + x] != want) {
        printf("MISMATCH %s: out row %zu byte %zu: %u != %u (mode %d, experts %u, row %zu)\n", what, r, x,
               out[r * c.row_bytes + x], want, c.mode, c.experts, c.row_bytes);
        return false;
      }
    }
  }
  return true;
}

static void load_case(const VdevCase& c, VdevBuffers& b, cudaStream_t s) {
  std::vector<uint8_t> in(c.in_rows * c.row_bytes);
  for (size_t r = 0; r < c.in_rows; ++r)
    for (size_t x = 0; x < c.row_bytes; ++x) in[r * c.row_bytes + x] = byte_of(r, x);
  CHECK(cudaMemcpyAsync(b.in.p, in.data(), in.size(), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemsetAsync(b.out.p, 0xee, b.out.n, s));
  CHECK(cudaMemsetAsync(b.so.p, 0xcd, b.so.n, s));
  CHECK(cudaMemcpyAsync(b.table.p, c.table.data(), c.table.size() * 8, cudaMemcpyHostToDevice, s));
  CHECK(cudaStreamSynchronize(s));
}

// Eager: many random cases per shape, both kernels.
static int check_eager(cudaStream_t s) {
  std::mt19937_64 rng(35);
  int failures = 0, cases = 0;
  const Mode modes[] = {kFlat, kDispatch, kCombine};
  for (Mode mode : modes) {
    for (uint32_t experts : {1u, 3u, 16u, 512u}) {
      if (mode == kFlat && experts != 1) continue;
      for (int64_t align : {1, 8, 128}) {
        if (mode != kDispatch && align != 1) continue;
        for (size_t row_bytes : {16ul, 28ul, 14336ul}) {
          for (int k = 0; k < 3; ++k) {
            const VdevCase c = random_case(rng, mode, experts, align, row_bytes, k == 2);
            VdevBuffers b(c.in_rows * row_bytes, c.out_rows * row_bytes, c.table.size(), 2 * experts);
            for (bool fused : {true, false}) {
              load_case(c, b, s);
              launch_vdev(fused, vdev_params(c, b), s);
              CHECK(cudaStreamSynchronize(s));
              ++cases;
              failures += check_vdev(c, b, fused ? "fused eager" : "two-kernel eager") ? 0 : 1;
            }
          }
        }
      }
    }
  }
  printf("vdev eager: %d cases, %d failures\n", cases, failures);
  return failures;
}

// One graph per shape, captured once, replayed with new splits each time.
static int check_graph(cudaStream_t s) {
  std::mt19937_64 rng(36);
  int failures = 0, replays = 0;
  struct Shape {
    Mode mode;
    uint32_t experts;
    int64_t align;
    size_t row_bytes;
  };
  const Shape shapes[] = {{kFlat, 1, 1, 28}, {kDispatch, 16, 8, 14336}, {kDispatch, 512, 128, 16},
                          {kCombine, 16, 1, 14336}, {kCombine, 512, 1, 28}};
  for (const Shape& sh : shapes) {
    // Room for the largest case any seed can make (17 rows per split, gaps, alignment).
    const size_t in_rows = sh.experts * 18 + 2;
    const size_t out_rows = sh.experts * (18 + sh.align) + 2;
    VdevBuffers b(in_rows * sh.row_bytes, out_rows * sh.row_bytes, 2 * sh.experts, 2 * sh.experts);
    VdevCase first = random_case(rng, sh.mode, sh.experts, sh.align, sh.row_bytes, false);
    first.in_rows = in_rows;
    first.out_rows = out_rows;
    const OpsParams p = vdev_params(first, b);
    const Graph graph([&](cudaStream_t st) { launch_vdev(true, p, st); }, s, 1);
    for (int k = 0; k < 6; ++k) {
      VdevCase c = random_case(rng, sh.mode, sh.experts, sh.align, sh.row_bytes, k == 3);
      c.in_rows = in_rows;
      c.out_rows = out_rows;
      load_case(c, b, s);
      graph.replay(s);
      CHECK(cudaStreamSynchronize(s));
      ++replays;
      failures += check_vdev(c, b, "fused graph replay") ? 0 : 1;
    }
  }
  printf("vdev graph replay: %d replays, %d failures\n", replays, failures);
  return failures;
}

// ---------------------------------------------------------------------------------
// Timings

// all_to_all_vdev 1-D at world 1, one split of `bytes` in rows of up to 4 KiB (the
// shape bench/ops.py times): writes the split into `table`; `so` gets
// out_splits_offsets.
static OpsParams vdev_1d_params(const Dev& in, const Dev& out, const Dev& table, const Dev& so,
                                size_t bytes) {
  const size_t row_bytes = std::min<size_t>(bytes, 4096);
  const int64_t rows = static_cast<int64_t>(bytes / row_bytes);
  CHECK(cudaMemcpy(table.p, &rows, 8, cudaMemcpyHostToDevice));
  OpsParams v = base_params(SYMMWIN_OP_ALL_TO_ALL_VDEV);
  v.src = operand(in, bytes);
  v.dst = operand(out, bytes);
  v.src_splits = operand(table, 8);
  v.dst_splits = operand(so, 16);
  v.row_bytes = row_bytes;
  v.experts = 1;
  v.mode = SYMMWIN_A2AV_1D;
  v.blocks_per_peer = 128;  // what grid.rs gives world 1
  return v;
}

// MoE dispatch and combine as bench/ops.py times them: 256 tokens x 7168 bf16, top-8,
// 16 experts, align 16, world 1; combine sends dispatch's output back.
struct Moe {
  static constexpr uint32_t kExperts = 16, kTokens = 256, kTopk = 8;
  static constexpr int64_t kAlign = 16;
  const size_t row_bytes = 7168 * 2;
  const size_t sent = kTokens * kTopk;
  const size_t out_rows = sent + kExperts * kAlign;
  Dev in{sent * row_bytes}, out{out_rows * row_bytes}, back{sent * row_bytes};
  Dev splits{kExperts * 8}, so{2 * kExperts * 8}, back_so{2 * kExperts * 8};
  OpsParams dispatch, combine;

  Moe() {
    std::mt19937_64 rng(1234);
    std::vector<int64_t> counts(kExperts, 0);
    std::vector<uint32_t> e(kExperts);
    for (uint32_t t = 0; t < kTokens; ++t) {
      for (uint32_t i = 0; i < kExperts; ++i) e[i] = i;
      std::shuffle(e.begin(), e.end(), rng);
      for (uint32_t k = 0; k < kTopk; ++k) counts[e[k]] += 1;
    }
    CHECK(cudaMemcpy(splits.p, counts.data(), kExperts * 8, cudaMemcpyHostToDevice));
    OpsParams& d = dispatch;
    d = base_params(SYMMWIN_OP_ALL_TO_ALL_VDEV_2D);
    d.src = operand(in, sent * row_bytes);
    d.dst = operand(out, out_rows * row_bytes);
    d.src_splits = operand(splits, kExperts * 8);
    d.dst_splits = operand(so, 2 * kExperts * 8);
    d.row_bytes = row_bytes;
    d.experts = kExperts;
    d.major_align = kAlign;
    d.mode = SYMMWIN_A2AV_2D;
    d.blocks_per_peer = 128;  // what grid.rs gives world 1
    OpsParams& c = combine;
    c = d;
    c.wait.op = SYMMWIN_OP_ALL_TO_ALL_VDEV_2D_OFFSET;
    c.src = operand(out, out_rows * row_bytes);
    c.dst = operand(back, sent * row_bytes);
    c.src_splits = operand(so, 2 * kExperts * 8);
    c.dst_splits = operand(back_so, 2 * kExperts * 8);
    c.major_align = 0;
    c.mode = SYMMWIN_A2AV_2D_OFFSET;
  }
};

static void probes(cudaStream_t s) {
  const size_t kib4 = 4096;
  Dev a(64 << 20), b(64 << 20);
  CHECK(cudaMemset(a.p, 1, a.n));
  OpsParams p = base_params(SYMMWIN_OP_ALL_TO_ALL);
  p.src = operand(a, kib4);
  p.dst = operand(b, kib4);
  p.bytes = kib4;
  p.blocks_per_peer = 1;
  auto k = [&](auto fn, uint32_t grid) {
    return [=](cudaStream_t st) { kernel(reinterpret_cast<const void*>(fn), grid, p, st); };
  };
  printf("\n| world 1, 4 KiB | graph, us per launch | eager |\n| --- | --- | --- |\n");
  row("empty kernel, 1 x 512 threads, 288-byte params", k(probe_empty, 1), s);
  row("empty kernel, 128 x 512 threads (the vdev grid)", k(probe_empty, 128), s);
  row("+ reads the params", k(probe_params, 1), s);
  row("+ loads 4 KiB", k(probe_load, 1), s);
  row("+ stores 4 KiB", k(probe_store, 1), s);
  row("+ loads and stores 4 KiB (least SM copy)", k(probe_copy, 1), s);
  row("+ the least copy as a 64-bit strided loop", k(probe_copy_loop, 1), s);
  row("+ copy_part of 4 KiB, part 0 of 1 (constants)", k(probe_copy_part_one, 1), s);
  row("+ copy_part of 4 KiB (the ops' copy loop, 1 block)", k(probe_copy_grid, 1), s);
  row("symmwin_ops_all_to_all, 4 KiB", k(symmwin_ops_all_to_all, 1), s);
  row("cudaMemcpyAsync 4 KiB (memcpy node)",
      [&](cudaStream_t st) { CHECK(cudaMemcpyAsync(b.p, a.p, kib4, cudaMemcpyDeviceToDevice, st)); }, s);

  // The vdev family, equal splits as bench/ops.py: rows of 4 KiB.
  for (size_t bytes : {kib4, static_cast<size_t>(64) << 20}) {
    Dev table(8), so(16);
    const OpsParams v = vdev_1d_params(a, b, table, so, bytes);
    OpsParams eq = p;
    eq.src = operand(a, bytes);
    eq.dst = operand(b, bytes);
    eq.bytes = bytes;
    eq.blocks_per_peer = static_cast<uint32_t>(std::min<size_t>(256, (bytes + 32767) / 32768));
    const std::string size = bytes == kib4 ? "4 KiB" : "64 MiB";
    row(("all_to_all_vdev fused (one launch), " + size).c_str(), [=](cudaStream_t st) { launch_vdev(true, v, st); }, s);
    // The grid: grid.rs gives the pull kernels 128 blocks at world 1, the push
    // all_to_all up to 256; at 4 KiB one block has all the rows.
    for (uint32_t blocks : {1u, 8u, 256u}) {
      OpsParams w = v;
      w.blocks_per_peer = blocks;
      row(("all_to_all_vdev fused, " + std::to_string(blocks) + " blocks, " + size).c_str(),
          [=](cudaStream_t st) { launch_vdev(true, w, st); }, s);
    }
    if (bytes == kib4) vdev_stages(v, s);
    row(("all_to_all_vdev plan + data (two launches), " + size).c_str(),
        [=](cudaStream_t st) { launch_vdev(false, v, st); }, s);
    row(("symmwin_ops_all_to_all, " + size).c_str(),
        [=](cudaStream_t st) { kernel(reinterpret_cast<const void*>(symmwin_ops_all_to_all), eq.blocks_per_peer, eq, st); },
        s);
    row(("cudaMemcpyAsync, " + size).c_str(),
        [dst = b.p, src = a.p, bytes](cudaStream_t st) { CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st)); }, s);
    if (bytes != kib4) {
      // The vdev copy's shape against copy_part's own, at the vdev grid.
      row(("SM copy: copy_part of " + size + ", 128 blocks, tiles dealt round the grid").c_str(),
          [=](cudaStream_t st) { kernel(reinterpret_cast<const void*>(probe_copy_grid), 128, eq, st); }, s);
      row(("SM copy: copy_part of " + size + ", 128 blocks, each its contiguous 1/128").c_str(),
          [=](cudaStream_t st) { kernel(reinterpret_cast<const void*>(probe_copy_contiguous), 128, eq, st); }, s);
    }
  }

  // MoE dispatch / combine, 256 tokens x 7168 bf16, top-8, 16 experts, align 16 (bench/ops.py).
  {
    const Moe moe;
    const OpsParams d = moe.dispatch, c = moe.combine;
    const size_t sent = moe.sent, row_bytes = moe.row_bytes;
    const Dev &in = moe.in, &back = moe.back;
    launch_vdev(true, d, s);
    CHECK(cudaStreamSynchronize(s));
    row("MoE dispatch 256 tokens, fused", [=](cudaStream_t st) { launch_vdev(true, d, st); }, s);
    row("MoE dispatch 256 tokens, plan + data", [=](cudaStream_t st) { launch_vdev(false, d, st); }, s);
    row("MoE combine 256 tokens, fused", [=](cudaStream_t st) { launch_vdev(true, c, st); }, s);
    row("MoE combine 256 tokens, plan + data", [=](cudaStream_t st) { launch_vdev(false, c, st); }, s);
    // The grid: grid.rs gives the pull kernels 128 blocks at world 1; whether 256 (two
    // blocks an SM where the kernel's registers allow it) would copy faster.
    OpsParams d2 = d, c2 = c;
    d2.blocks_per_peer = c2.blocks_per_peer = 256;
    row("MoE dispatch 256 tokens, fused, 256 blocks", [=](cudaStream_t st) { launch_vdev(true, d2, st); }, s);
    row("MoE combine 256 tokens, fused, 256 blocks", [=](cudaStream_t st) { launch_vdev(true, c2, st); }, s);
    stage_rows("MoE dispatch ", d, s);
    stage_rows("MoE combine ", c, s);
    const size_t bytes = sent * row_bytes;
    row("copy floor: cudaMemcpyAsync of the same 28 MiB",
        [dst = back.p, src = in.p, bytes](cudaStream_t st) {
          CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
        }, s);
    OpsParams g = p;
    g.src = operand(in, bytes);
    g.dst = operand(back, bytes);
    g.bytes = bytes;
    row("SM copy floor: copy_part of the same 28 MiB, 128 blocks",
        [=](cudaStream_t st) { kernel(reinterpret_cast<const void*>(probe_copy_grid), 128, g, st); }, s);
    row("SM copy floor: copy_part of the same 28 MiB, 256 blocks",
        [=](cudaStream_t st) { kernel(reinterpret_cast<const void*>(probe_copy_grid), 256, g, st); }, s);
  }
}

// For a profiler (ncu, nsys): the fused kernel, its stages and an empty kernel at the
// op's grid, 20 eager launches each, 1-D 4 KiB, then MoE dispatch and combine; the fused
// kernel once at 64 MiB; then all_to_all and the least SM copy of 4 KiB, 20 each.
static void profile_kernels(cudaStream_t s) {
  Dev a(64 << 20), b(64 << 20), table(8), so(16);
  const OpsParams v = vdev_1d_params(a, b, table, so, 4096);
  const void* kernels[] = {
      reinterpret_cast<const void*>(probe_empty),
      reinterpret_cast<const void*>(probe_a2av_stages<1>),
      reinterpret_cast<const void*>(probe_a2av_stages<2>),
      reinterpret_cast<const void*>(probe_a2av_stages<4>),
      reinterpret_cast<const void*>(probe_a2av_stages<5>),
      reinterpret_cast<const void*>(symmwin_ops_a2av),
  };
  for (const void* fn : kernels) {
    for (int i = 0; i < 20; ++i) kernel(fn, v.blocks_per_peer, v, s);
    CHECK(cudaStreamSynchronize(s));
  }
  // MoE: dispatch first (combine reads its out_splits_offsets), then the stages of each.
  const Moe moe;
  for (const OpsParams* m : {&moe.dispatch, &moe.combine}) {
    for (const void* fn : kernels) {
      for (int i = 0; i < 20; ++i) kernel(fn, m->blocks_per_peer, *m, s);
      CHECK(cudaStreamSynchronize(s));
    }
  }
  const OpsParams big = vdev_1d_params(a, b, table, so, a.n);
  kernel(reinterpret_cast<const void*>(symmwin_ops_a2av), big.blocks_per_peer, big, s);
  CHECK(cudaStreamSynchronize(s));
  OpsParams e = base_params(SYMMWIN_OP_ALL_TO_ALL);
  e.src = operand(a, 4096);
  e.dst = operand(b, 4096);
  e.bytes = 4096;
  e.blocks_per_peer = 1;
  for (int i = 0; i < 20; ++i) kernel(reinterpret_cast<const void*>(symmwin_ops_all_to_all), 1, e, s);
  for (int i = 0; i < 20; ++i) kernel(reinterpret_cast<const void*>(probe_copy), 1, e, s);
  CHECK(cudaStreamSynchronize(s));
  printf("profiled kernels ran\n");
}

#ifdef FIXED_COST_TRACE
// One kernel's trace: launched 10 times back to back, 21 times over; for each step
// between two trace points the last launch reached, the median SM cycles.
static void trace_row(const char* what, const void* fn, uint32_t grid, const OpsParams& p,
                      cudaStream_t s, int clock_khz) {
  std::vector<std::vector<long long>> steps(kTracePoints);
  for (int r = 0; r < 21; ++r) {
    std::vector<long long> t(kTracePoints, -1);
    CHECK(cudaMemcpyToSymbol(g_trace, t.data(), sizeof(long long) * kTracePoints));
    for (int i = 0; i < 10; ++i) kernel(fn, grid, p, s);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpyFromSymbol(t.data(), g_trace, sizeof(long long) * kTracePoints));
    int prev = -1;
    for (int i = 0; i < kTracePoints; ++i) {
      if (t[i] < 0) continue;
      if (prev >= 0) steps[i].push_back(t[i] - t[prev]);
      prev = i;
    }
  }
  printf("| %s |", what);
  long long total = 0;
  for (int i = 0; i < kTracePoints; ++i) {
    if (steps[i].empty()) continue;
    std::sort(steps[i].begin(), steps[i].end());
    const long long med = steps[i][steps[i].size() / 2];
    total += med;
    printf(" ->%d %lld [%lld-%lld] |", i, med, steps[i].front(), steps[i].back());
  }
  printf(" total %lld cycles, %.2f us at %d MHz |\n", total, total * 1e3 / clock_khz, clock_khz / 1000);
}

// --trace: where block 0 of each op spends its cycles, trace point to trace point
// (ops_vdev.cuh and ops_collectives.cuh number them), at world 1.
static void trace_kernels(cudaStream_t s) {
  int khz = 0;
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  Dev a(64 << 20), b(64 << 20), table(8), so(16);
  const OpsParams v = vdev_1d_params(a, b, table, so, 4096);
  const void* fused = reinterpret_cast<const void*>(symmwin_ops_a2av);
  trace_row("all_to_all_vdev 4 KiB", fused, v.blocks_per_peer, v, s, khz);
  const Moe moe;
  trace_row("MoE dispatch 256 tokens", fused, moe.dispatch.blocks_per_peer, moe.dispatch, s, khz);
  trace_row("MoE combine 256 tokens", fused, moe.combine.blocks_per_peer, moe.combine, s, khz);
  OpsParams e = base_params(SYMMWIN_OP_ALL_TO_ALL);
  e.src = operand(a, 4096);
  e.dst = operand(b, 4096);
  e.bytes = 4096;
  e.blocks_per_peer = 1;
  trace_row("all_to_all 4 KiB", reinterpret_cast<const void*>(symmwin_ops_all_to_all), 1, e, s, khz);
}
#endif

int main(int argc, char** argv) {
  CHECK(cudaSetDevice(0));
  CHECK(cudaHostAlloc(&g_record, sizeof(symmwin::TimeoutRecord), cudaHostAllocMapped));
  CHECK(cudaHostAlloc(&g_error, sizeof(OpsError), cudaHostAllocMapped));
  memset(g_record, 0, sizeof(*g_record));
  memset(g_error, 0, sizeof(*g_error));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0;
  CHECK(cudaDriverGetVersion(&driver));
  printf("%s, driver API %d\n", prop.name, driver);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (argc > 1 && strcmp(argv[1], "--profile") == 0) {
    profile_kernels(s);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "--trace") == 0) {
#ifdef FIXED_COST_TRACE
    trace_kernels(s);
    return 0;
#else
    fprintf(stderr, "--trace needs the trace build: nvcc -DFIXED_COST_TRACE ...\n");
    return 2;
#endif
  }
  if (argc > 2 && strcmp(argv[1], "--only") == 0) g_only.emplace(argv[2]);
  int failures = check_eager(s) + check_graph(s);
  if (argc < 2 || strcmp(argv[1], "--check-only") != 0) probes(s);
  CHECK(cudaDeviceSynchronize());
  if (g_error->word != 0 || g_record->state != 0) {
    printf("a kernel recorded a failure: error word %#x, timeout state %#x\n", g_error->word, g_record->state);
    failures += 1;
  }
  printf("%s\n", failures == 0 ? "all checks passed" : "CHECKS FAILED");
  return failures == 0 ? 0 : 1;
}
