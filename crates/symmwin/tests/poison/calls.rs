//! The calls of the poison matrix, each as one round with fresh inputs that every rank
//! can check: a round's values say which round and which ranks they belong to, so a
//! call that returns ok with another round's data (the bug of an out-of-step window)
//! is told from one with its own.

use std::time::{Duration, Instant};

use symmwin::{
    ops::{ElemType, OpOptions, Operand, ReduceOp, Rows, Shape, Tile},
    Error, SignalOptions, Window,
};

/// The calls the matrix runs.
pub const CALLS: [&str; 7] = [
    "barrier",
    "put_signal",
    "wait_signal",
    "all_to_all",
    "all_to_all_vdev",
    "broadcast",
    "tile_reduce",
];

/// The word `src` sends `dst` in `round` (item `k` of it).
pub fn value(round: u64, src: usize, dst: usize, k: usize) -> u64 {
    (round << 40) | ((src as u64) << 24) | ((dst as u64) << 8) | k as u64
}

/// How one round ended on this rank.
#[derive(Debug)]
pub enum Outcome {
    /// Every call returned ok and every value read back was this round's.
    Verified,
    /// Every call returned ok, but a value read back was not this round's.
    Wrong(String),
    /// A call failed (`took`: from that call's start to its return).
    Failed { error: Error, took: Duration },
}

/// One round of `call` on `w`: the ranks' parts, every call limited to `timeout`
/// where given. `fault` makes the round the faulty one: the sender of `put_signal`
/// puts twice into the same slot, the second time into an occupied one.
pub struct Round<'a> {
    pub w: &'a Window,
    pub round: u64,
    pub timeout: Option<Duration>,
    pub fault: bool,
}

/// Run `call`, timing it: its error with how long it took.
fn timed(call: impl FnOnce() -> symmwin::Result<()>) -> Result<(), Outcome> {
    let started = Instant::now();
    call().map_err(|error| Outcome::Failed {
        error,
        took: started.elapsed(),
    })
}

impl Round<'_> {
    fn rank(&self) -> usize {
        self.w.rank()
    }

    fn world(&self) -> usize {
        self.w.world()
    }

    fn signal_options(&self) -> SignalOptions {
        let options = SignalOptions::default();
        match self.timeout {
            Some(t) => options.timeout(t),
            None => options,
        }
    }

    fn op_options(&self) -> OpOptions {
        OpOptions {
            timeout: self.timeout,
            ..OpOptions::default()
        }
    }

    fn write_words(&self, owner: usize, at: usize, words: &[u64]) {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        self.w.write(owner, at, &bytes).unwrap();
    }

    fn read_words(&self, at: usize, n: usize) -> Vec<u64> {
        let mut bytes = vec![0u8; n * 8];
        self.w.read(self.rank(), at, &mut bytes).unwrap();
        bytes
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// Ok(()) when `got` is `want`, else the round's [`Outcome::Wrong`].
    fn expect(&self, what: &str, got: Vec<u64>, want: Vec<u64>) -> Result<(), Outcome> {
        if got == want {
            return Ok(());
        }
        Err(Outcome::Wrong(format!(
            "round {} rank {}: {what}: got {got:x?}, want {want:x?}",
            self.round,
            self.rank()
        )))
    }

    /// Play this rank's part of one round of `call`.
    pub fn play(&self, call: &str) -> Outcome {
        let played = match call {
            "barrier" => self.barrier(),
            "put_signal" => self.point_to_point(0, self.world() - 1),
            "wait_signal" => self.point_to_point(self.world() - 1, 0),
            "all_to_all" => self.all_to_all(),
            "all_to_all_vdev" => self.all_to_all_vdev(),
            "broadcast" => self.broadcast(),
            "tile_reduce" => self.tile_reduce(),
            other => panic!("unknown call {other}"),
        };
        played.err().unwrap_or(Outcome::Verified)
    }

    /// Every rank writes its word into every peer's slot, barrier, reads what every
    /// peer wrote into its own, barrier (so no peer writes the next round's meanwhile).
    fn barrier(&self) -> Result<(), Outcome> {
        let (rank, world, round) = (self.rank(), self.world(), self.round);
        for peer in (0..world).filter(|&p| p != rank) {
            self.write_words(peer, 8 * rank, &[value(round, rank, peer, 0)]);
        }
        timed(|| self.w.barrier(self.signal_options()))?;
        for src in (0..world).filter(|&p| p != rank) {
            let got = self.read_words(8 * src, 1);
            self.expect("barrier", got, vec![value(round, src, rank, 0)])?;
        }
        timed(|| self.w.barrier(self.signal_options()))
    }

    /// `sender` writes into `receiver`'s slot and signals it; the receiver waits, reads
    /// and signals back; the sender waits for that. Other ranks take a barrier, which
    /// only a poisoned window answers at once (a live one would wait for every rank):
    /// they take part only in rounds that must fail.
    fn point_to_point(&self, sender: usize, receiver: usize) -> Result<(), Outcome> {
        let (rank, round) = (self.rank(), self.round);
        let options = self.signal_options();
        if rank == sender {
            self.write_words(receiver, 0, &[value(round, sender, receiver, 0)]);
            timed(|| self.w.put_signal(receiver, options))?;
            if self.fault {
                // The receiver has not taken the first signal: this put finds its slot
                // occupied and waits for the receiver, who is late.
                self.write_words(receiver, 0, &[value(round, sender, receiver, 1)]);
                timed(|| self.w.put_signal(receiver, options))?;
            }
            return timed(|| self.w.wait_signal(receiver, options));
        }
        if rank == receiver {
            timed(|| self.w.wait_signal(sender, options))?;
            let got = self.read_words(0, 1);
            self.expect("signalled word", got, vec![value(round, sender, rank, 0)])?;
            return timed(|| self.w.put_signal(sender, options));
        }
        if (2..8).contains(&round) {
            return timed(|| self.w.barrier(options));
        }
        Ok(())
    }

    /// Four words for every peer; every rank checks the four it got from each.
    fn all_to_all(&self) -> Result<(), Outcome> {
        let (rank, world, round) = (self.rank(), self.world(), self.round);
        let input: Vec<u64> = (0..world)
            .flat_map(|d| (0..4).map(move |k| value(round, rank, d, k)))
            .collect();
        self.write_words(rank, 0, &input);
        let len = world * 32;
        timed(|| {
            symmwin::ops::all_to_all(
                Operand::new(self.w, 0, len),
                Operand::new(self.w, 4096, len),
                8,
                &self.op_options(),
            )
        })?;
        let want: Vec<u64> = (0..world)
            .flat_map(|s| (0..4).map(move |k| value(round, s, rank, k)))
            .collect();
        self.expect("all_to_all out", self.read_words(4096, 4 * world), want)
    }

    /// Two rows (of two words) for every peer; every rank checks splits, offsets and
    /// rows.
    fn all_to_all_vdev(&self) -> Result<(), Outcome> {
        let (rank, world, round) = (self.rank(), self.world(), self.round);
        let (inp, out, splits, so) = (0, 4096, 8192, 12288);
        let rows = 2 * world;
        let input: Vec<u64> = (0..world)
            .flat_map(|d| (0..2).flat_map(move |i| [value(round, rank, d, i), i as u64]))
            .collect();
        self.write_words(rank, inp, &input);
        self.write_words(rank, splits, &vec![2; world]);
        timed(|| {
            symmwin::ops::all_to_all_v(
                Shape::Flat,
                Operand::new(self.w, inp, rows * 16),
                Operand::new(self.w, out, rows * 16),
                Operand::new(self.w, splits, world * 8),
                Operand::new(self.w, so, 2 * world * 8),
                Rows {
                    row_bytes: 16,
                    in_rows: rows,
                    out_rows: rows,
                },
                &self.op_options(),
            )
        })?;
        let tables: Vec<u64> = (0..world)
            .map(|_| 2)
            .chain((0..world).map(|s| 2 * s as u64))
            .collect();
        self.expect("splits and offsets", self.read_words(so, 2 * world), tables)?;
        let want: Vec<u64> = (0..world)
            .flat_map(|s| (0..2).flat_map(move |i| [value(round, s, rank, i), i as u64]))
            .collect();
        self.expect("rows", self.read_words(out, 2 * rows), want)
    }

    /// Rank 0's four words to every rank (the others write their own first, which the
    /// broadcast must replace).
    fn broadcast(&self) -> Result<(), Outcome> {
        let (rank, round) = (self.rank(), self.round);
        let mine: Vec<u64> = (0..4).map(|k| value(round, rank, 0, k)).collect();
        self.write_words(rank, 0, &mine);
        timed(|| symmwin::ops::broadcast(Operand::new(self.w, 0, 32), 0, &self.op_options()))?;
        let want: Vec<u64> = (0..4).map(|k| value(round, 0, 0, k)).collect();
        self.expect("broadcast", self.read_words(0, 4), want)
    }

    /// A 2x4 f32 tile of `round * 10 + rank` on every rank, summed on rank 0.
    fn tile_reduce(&self) -> Result<(), Outcome> {
        let (rank, world, round) = (self.rank(), self.world(), self.round);
        let mine = (round * 10 + rank as u64) as f32;
        let bytes: Vec<u8> = (0..8).flat_map(|_| mine.to_ne_bytes()).collect();
        self.w.write(rank, 0, &bytes).unwrap();
        let tile = Tile {
            rows: 2,
            cols: 4,
            row_stride: 4,
            elem: ElemType::F32,
        };
        timed(|| {
            symmwin::ops::tile_reduce(
                &[Operand::new(self.w, 0, 32)],
                &[0],
                Operand::new(self.w, 4096, 32),
                tile,
                ReduceOp::Sum,
                &self.op_options(),
            )
        })?;
        if rank != 0 {
            return Ok(());
        }
        let sum: f32 = (0..world).map(|r| (round * 10 + r as u64) as f32).sum();
        let mut got = vec![0u8; 32];
        self.w.read(rank, 4096, &mut got).unwrap();
        let got: Vec<u64> = got
            .chunks(4)
            .map(|c| f32::from_ne_bytes(c.try_into().unwrap()) as u64)
            .collect();
        self.expect("tile sum", got, vec![sum as u64; 8])
    }
}
