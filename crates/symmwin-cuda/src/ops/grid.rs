//! Launch geometry, pad channels and the engine choice of the CUDA ops.
//!
//! Everything a kernel pairs across ranks (blocks per peer, channels) is derived only
//! from values every rank shares (world size, the op's sizes, the pad size), never
//! from this device's SM count: ranks on different GPU models still agree.

use symmwin_device::error::{Error, Result};
use symmwin_device::provider::device_ops::{Engine, OpContext};

/// Bytes one block moves per pass (512 threads x 4 x 16-byte vectors).
const TILE_BYTES: usize = 512 * 4 * 16;
/// Most blocks of a push all-to-all: two 512-thread blocks per SM of a 132-SM H200
/// (fewer than the SMs can hold, so every block of the grid is resident at once; the
/// blocks wait for their partners on other ranks and must not wait to be scheduled).
const MAX_PUSH_BLOCKS: usize = 256;
/// Most blocks of the pull kernels (all_to_all_vdev family, broadcast).
const MAX_PULL_BLOCKS: usize = 128;
/// Most blocks of a tile reduce.
const MAX_TILE_BLOCKS: usize = 64;
/// Most blocks of a put / get copy (no partner to wait for).
const MAX_COPY_BLOCKS: usize = 128;

/// Per peer, from how many bytes the copy engine moves a collective (`all_to_all`,
/// `broadcast`) under [`Engine::Auto`]. Provisional until measured on the 2-GPU
/// machine: at 16 and 64 MiB per peer peer copies reached 363-380 GB/s against
/// 354-362 GB/s for the SM push, and below a few MiB the two extra handshake launches
/// of the copy-engine path cost more than the SMs lose.
pub const COPY_ENGINE_MIN_COLLECTIVE: usize = 16 << 20;
/// From how many bytes `put` / `get` (no handshake) go to the copy engine under
/// [`Engine::Auto`]. Provisional until measured.
pub const COPY_ENGINE_MIN_ONE_SIDED: usize = 4 << 20;

/// Whether `bytes` should move on the copy engine.
pub(super) fn use_copy_engine(engine: Engine, bytes: usize, threshold: usize) -> bool {
    match engine {
        Engine::Sm => false,
        Engine::CopyEngine => true,
        Engine::Auto => bytes >= threshold,
    }
}

/// Channels a pad holds at this world size.
pub(super) fn pad_channels(ctx: &OpContext) -> usize {
    ctx.pads.len() / 4 / ctx.world.max(1)
}

/// How many channels an op may use: the upper half of the pad, so the low channels
/// stay for `barrier`, `put_signal` and torch's own kernels (which use `blockIdx.x`).
pub(super) fn channel_budget(ctx: &OpContext) -> usize {
    (pad_channels(ctx) / 2).min(ctx.channel + 1)
}

/// The first of `needed` channels ending at the ops channel (`ctx.channel` is the
/// pad's last channel; an op uses `[ctx.channel + 1 - needed, ctx.channel]`).
pub(super) fn first_channel(ctx: &OpContext, needed: usize) -> Result<u32> {
    if needed == 0 || needed > channel_budget(ctx) || ctx.channel >= pad_channels(ctx) {
        return Err(Error::invalid(format!(
            "an op needs {needed} pad channels at world size {}; the {}-byte signal pad \
             leaves {} (raise the signal pad size)",
            ctx.world,
            ctx.pads.len(),
            channel_budget(ctx)
        )));
    }
    u32::try_from(ctx.channel + 1 - needed).map_err(|_| Error::invalid("pad channel exceeds u32"))
}

fn tiles(bytes: usize) -> usize {
    bytes.div_ceil(TILE_BYTES).max(1)
}

/// Blocks per peer of the push all-to-all (two channels per block).
pub(super) fn push_blocks_per_peer(ctx: &OpContext, bytes_per_peer: usize) -> usize {
    let cap = (MAX_PUSH_BLOCKS / ctx.world.max(1)).max(1);
    tiles(bytes_per_peer)
        .min(cap)
        .min(channel_budget(ctx) / 2)
        .max(1)
}

/// Channels of an all_to_all_vdev launch besides one per block of a source: the ready
/// signals and the "tables read" signals (kernels/ops_vdev.cuh).
pub(super) const VDEV_SHARED_CHANNELS: usize = 2;

/// Blocks per source of the all_to_all_vdev kernel (one channel each, plus
/// [`VDEV_SHARED_CHANNELS`]). Sizes live on the device, so this depends on the world
/// size only.
pub(super) fn pull_blocks_per_peer(ctx: &OpContext) -> usize {
    let cap = (MAX_PULL_BLOCKS / ctx.world.max(1)).max(1);
    cap.min(channel_budget(ctx).saturating_sub(VDEV_SHARED_CHANNELS))
        .max(1)
}

/// Blocks of a broadcast (two channels each).
pub(super) fn broadcast_blocks(ctx: &OpContext, bytes: usize) -> usize {
    tiles(bytes)
        .min(MAX_PULL_BLOCKS)
        .min(channel_budget(ctx) / 2)
        .max(1)
}

/// Blocks of a tile reduce (two channels each), at most one per row.
pub(super) fn tile_blocks(ctx: &OpContext, bytes: usize, rows: usize) -> usize {
    bytes
        .div_ceil(512 * 16)
        .clamp(1, MAX_TILE_BLOCKS)
        .min(rows.max(1))
        .min(channel_budget(ctx) / 2)
        .max(1)
}

/// Blocks of a put / get copy.
pub(super) fn copy_blocks(bytes: usize) -> usize {
    tiles(bytes).min(MAX_COPY_BLOCKS)
}

/// Threads of a one-block kernel that gives each peer a thread.
pub(super) fn peer_threads(world: usize) -> u32 {
    // world <= MAX_WORLD (1024) was checked when the context was built.
    (world.div_ceil(32) * 32).clamp(32, 1024) as u32
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use symmwin_device::provider::PadLayout;

    fn ctx(world: usize, pad_len: usize) -> OpContext {
        let pads = PadLayout::from_parts(1 << 40, 1 << 21, pad_len, 0, world).unwrap();
        OpContext {
            rank: 0,
            world,
            pads,
            channel: pad_len / 4 / world - 1,
            timeout: Duration::from_secs(1),
            stream: 0,
            engine: Engine::Auto,
            peers: symmwin_device::peer_watch::PeerSet::NONE,
            fingerprint: symmwin_device::provider::device_ops::Fingerprint::NONE,
        }
    }

    #[test]
    fn channels_come_from_the_top_half_of_the_pad() {
        let c = ctx(8, 9216);
        assert_eq!(pad_channels(&c), 288);
        assert_eq!(channel_budget(&c), 144);
        assert_eq!(first_channel(&c, 1).unwrap(), 287);
        assert_eq!(first_channel(&c, 144).unwrap(), 144);
        assert!(first_channel(&c, 145).is_err());
        assert!(first_channel(&c, 0).is_err());
        let tiny = ctx(8, 64);
        assert!(first_channel(&tiny, 2).is_err());
    }

    #[test]
    fn push_grids_fit_the_pad_and_the_residency_cap() {
        for world in [1, 2, 3, 4, 8, 16, 32, 64, 128] {
            let c = ctx(world, 9216);
            for bytes in [0, 1, 4096, 256 << 10, 64 << 20] {
                let bpp = push_blocks_per_peer(&c, bytes);
                assert!(bpp >= 1);
                assert!(world * bpp <= MAX_PUSH_BLOCKS.max(world), "{world} {bytes}");
                assert!(first_channel(&c, 2 * bpp).is_ok(), "{world} {bytes}");
            }
        }
        // 256 KiB per peer at world 2: 8 tiles of 32 KiB, one block each.
        assert_eq!(push_blocks_per_peer(&ctx(2, 9216), 256 << 10), 8);
    }

    #[test]
    fn pull_grids_depend_on_the_world_only() {
        for world in [1, 2, 4, 8, 32, 128] {
            let c = ctx(world, 9216);
            let bpp = pull_blocks_per_peer(&c);
            assert!(
                first_channel(&c, VDEV_SHARED_CHANNELS + bpp).is_ok(),
                "{world}"
            );
            assert!(world * bpp <= MAX_PULL_BLOCKS.max(world));
        }
    }

    #[test]
    fn other_grids_are_bounded() {
        let c = ctx(4, 9216);
        assert_eq!(broadcast_blocks(&c, 0), 1);
        assert_eq!(broadcast_blocks(&c, 1 << 30), MAX_PULL_BLOCKS);
        assert_eq!(tile_blocks(&c, 1 << 30, 3), 3);
        assert_eq!(tile_blocks(&c, 100, 1000), 1);
        assert_eq!(copy_blocks(1), 1);
        assert_eq!(copy_blocks(1 << 30), MAX_COPY_BLOCKS);
        assert_eq!(peer_threads(1), 32);
        assert_eq!(peer_threads(33), 64);
        assert_eq!(peer_threads(1024), 1024);
    }

    #[test]
    fn engines_follow_the_choice_and_the_threshold() {
        assert!(!use_copy_engine(Engine::Sm, usize::MAX, 1));
        assert!(use_copy_engine(Engine::CopyEngine, 0, 1));
        assert!(!use_copy_engine(
            Engine::Auto,
            COPY_ENGINE_MIN_COLLECTIVE - 1,
            COPY_ENGINE_MIN_COLLECTIVE
        ));
        assert!(use_copy_engine(
            Engine::Auto,
            COPY_ENGINE_MIN_COLLECTIVE,
            COPY_ENGINE_MIN_COLLECTIVE
        ));
    }
}
