//! The split arithmetic of the all-to-all-v family, in one place: which rows of which
//! sender land where in a receiver's output, and the output splits and offsets torch
//! defines. Pure functions over the split tables, shared by the host implementation
//! and the tests, and the reference a device implementation must agree with.

use crate::error::{Error, Result};

/// Which member of the family a plan is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `all_to_all_vdev`: one split per rank.
    Flat,
    /// `all_to_all_vdev_2d`: rank-major in, expert-major out, `major_align` >= 1.
    Dispatch {
        /// Alignment (rows) of each local expert's block.
        major_align: usize,
    },
    /// `all_to_all_vdev_2d_offset`: expert-major in with explicit offsets, rank-major out.
    Combine,
}

/// One contiguous run of rows moved from a sender to this rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// The sending rank.
    pub src: usize,
    /// First row in the sender's input.
    pub src_row: usize,
    /// First row in this rank's output.
    pub out_row: usize,
    /// Number of rows.
    pub rows: usize,
}

impl Chunk {
    /// The error for a chunk that overruns an out of `out_rows` rows (every
    /// implementation's wording), naming its sender.
    pub fn overruns_out(&self, out_rows: usize) -> crate::error::Error {
        crate::error::Error::invalid(format!(
            "received splits do not fit out: rank {} sends {} rows, to out rows {}..{}, \
             which do not fit an out of {out_rows} rows",
            self.src,
            self.rows,
            self.out_row,
            self.out_row.saturating_add(self.rows)
        ))
        .with_peer(self.src)
    }
}

/// What one receiver does: its chunks, and the two rows of `out_splits_offsets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Chunks in output order.
    pub chunks: Vec<Chunk>,
    /// Row 0 of `out_splits_offsets`.
    pub out_splits: Vec<i64>,
    /// Row 1 of `out_splits_offsets`.
    pub out_offsets: Vec<i64>,
    /// Rows of output the plan needs (the end of the last block, padding included).
    pub out_rows_needed: usize,
}

/// Exclusive prefix sum.
pub fn exclusive_prefix(values: &[usize]) -> Vec<usize> {
    values
        .iter()
        .scan(0usize, |acc, &v| {
            let start = *acc;
            *acc = acc.saturating_add(v);
            Some(start)
        })
        .collect()
}

/// Length of an expert's output block under `major_align` (torch: rounded up to a
/// multiple, and never empty, because grouped GEMMs reject empty groups).
pub fn aligned_block(rows: usize, major_align: usize) -> usize {
    rows.div_ceil(major_align)
        .saturating_mul(major_align)
        .max(major_align)
}

fn split_value(table: &[i64], index: usize, src: usize, what: &str) -> Result<usize> {
    let v = table[index];
    usize::try_from(v).map_err(|_| {
        Error::invalid(format!("rank {src}'s {what}[{index}] is negative ({v})")).with_peer(src)
    })
}

/// Number of `int64` values of one rank's input split table for `shape`.
pub fn in_table_len(shape: Shape, world: usize, experts: usize) -> usize {
    match shape {
        Shape::Flat => world,
        Shape::Dispatch { .. } => world * experts,
        Shape::Combine => 2 * world * experts,
    }
}

/// The plan of receiver `me`, from every rank's input split table (`tables[s]`, of
/// [`in_table_len`] values). Negative splits or offsets are errors naming the sender.
pub fn plan(shape: Shape, tables: &[Vec<i64>], me: usize, experts: usize) -> Result<Plan> {
    Planner::new(shape, tables, experts)?.plan(me)
}

/// The plans of several receivers from the same tables: what every receiver shares
/// (where each sender's chunks start) is worked out once.
#[derive(Debug)]
pub struct Planner<'a> {
    shape: Shape,
    tables: &'a [Vec<i64>],
    experts: usize,
    /// `starts[s][i]`: first row of entry `i` of sender `s`'s table in its input.
    starts: Vec<Vec<usize>>,
}

impl<'a> Planner<'a> {
    /// Checks every table (a negative split or offset is an error naming its sender)
    /// and computes where each sender's chunks start: its explicit offsets (combine),
    /// else the exclusive prefix sum of all its splits in its own table order.
    pub fn new(shape: Shape, tables: &'a [Vec<i64>], experts: usize) -> Result<Self> {
        let n = tables.len() * experts;
        let (what, base) = match shape {
            Shape::Combine => ("in_offsets", n),
            _ => ("in_splits", 0),
        };
        let starts = tables
            .iter()
            .enumerate()
            .map(|(src, table)| {
                let values = (0..n)
                    .map(|i| split_value(table, base + i, src, what))
                    .collect::<Result<Vec<_>>>()?;
                Ok(match shape {
                    Shape::Combine => values,
                    _ => exclusive_prefix(&values),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Planner {
            shape,
            tables,
            experts,
            starts,
        })
    }

    /// The plan of receiver `me`.
    pub fn plan(&self, me: usize) -> Result<Plan> {
        let (shape, tables, experts) = (self.shape, self.tables, self.experts);
        let world = tables.len();
        // For each output index (torch's order): (sender, index in its table).
        let order: Vec<(usize, usize)> = match shape {
            Shape::Flat => (0..world).map(|s| (s, me)).collect(),
            Shape::Dispatch { .. } => (0..experts)
                .flat_map(|e| (0..world).map(move |s| (s, me * experts + e)))
                .collect(),
            Shape::Combine => (0..world)
                .flat_map(|s| (0..experts).map(move |e| (s, e * world + me)))
                .collect(),
        };
        let mut rows = Vec::with_capacity(order.len());
        let mut src_rows = Vec::with_capacity(order.len());
        for &(src, index) in &order {
            rows.push(split_value(&tables[src], index, src, "in_splits")?);
            src_rows.push(self.starts[src][index]);
        }
        let (out_offsets, needed) = output_offsets(shape, &rows, world);
        let chunks = order
            .iter()
            .enumerate()
            .map(|(i, &(src, _))| Chunk {
                src,
                src_row: src_rows[i],
                out_row: out_offsets[i],
                rows: rows[i],
            })
            .collect();
        Ok(Plan {
            chunks,
            out_splits: rows.iter().map(|&r| r as i64).collect(),
            out_offsets: out_offsets.iter().map(|&o| o as i64).collect(),
            out_rows_needed: needed,
        })
    }
}

/// Output offsets in output order, and the rows of output needed.
fn output_offsets(shape: Shape, rows: &[usize], world: usize) -> (Vec<usize>, usize) {
    let Shape::Dispatch { major_align } = shape else {
        let offsets = exclusive_prefix(rows);
        let needed = rows.iter().fold(0usize, |a, &r| a.saturating_add(r));
        return (offsets, needed);
    };
    let mut offsets = Vec::with_capacity(rows.len());
    let mut start = 0usize;
    for block in rows.chunks(world) {
        offsets.extend(
            exclusive_prefix(block)
                .iter()
                .map(|o| o.saturating_add(start)),
        );
        let total = block.iter().fold(0usize, |a, &r| a.saturating_add(r));
        start = start.saturating_add(aligned_block(total, major_align));
    }
    (offsets, start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_plan_is_all_to_all_single() {
        // Rank s sends s+j+1 rows to rank j.
        let tables: Vec<Vec<i64>> = (0..3)
            .map(|s| (0..3).map(|j| s + j + 1).collect())
            .collect();
        let p = plan(Shape::Flat, &tables, 1, 1).unwrap();
        assert_eq!(p.out_splits, vec![2, 3, 4]);
        assert_eq!(p.out_offsets, vec![0, 2, 5]);
        assert_eq!(p.out_rows_needed, 9);
        // Rank 2 sends to rank 1 after its 3 rows for rank 0.
        assert_eq!(
            p.chunks[2],
            Chunk {
                src: 2,
                src_row: 3,
                out_row: 5,
                rows: 4
            }
        );
    }

    #[test]
    fn dispatch_aligns_each_expert_block_and_never_leaves_it_empty() {
        // world 2, 2 experts per rank; torch's example: c0 = 5 rows, d0 = 7 rows.
        let tables = vec![vec![5, 1, 0, 0], vec![7, 0, 0, 0]];
        let p = plan(Shape::Dispatch { major_align: 16 }, &tables, 0, 2).unwrap();
        assert_eq!(p.out_splits, vec![5, 7, 1, 0]);
        assert_eq!(p.out_offsets, vec![0, 5, 16, 17]);
        assert_eq!(p.out_rows_needed, 32);
        // Rank 1 receives nothing: each expert still gets one aligned block.
        let p = plan(Shape::Dispatch { major_align: 1 }, &tables, 1, 2).unwrap();
        assert_eq!(p.out_splits, vec![0, 0, 0, 0]);
        assert_eq!(p.out_offsets, vec![0, 0, 1, 1]);
        assert_eq!(p.out_rows_needed, 2);
    }

    #[test]
    fn combine_inverts_dispatch() {
        let world = 2;
        let experts = 2;
        let sent = vec![vec![3i64, 1, 0, 2], vec![2, 2, 4, 1]];
        let dispatched: Vec<Plan> = (0..world)
            .map(|me| plan(Shape::Dispatch { major_align: 8 }, &sent, me, experts).unwrap())
            .collect();
        // Each rank combines with its dispatch output's splits and offsets.
        let tables: Vec<Vec<i64>> = dispatched
            .iter()
            .map(|p| [p.out_splits.clone(), p.out_offsets.clone()].concat())
            .collect();
        for (me, want) in sent.iter().enumerate() {
            let back = plan(Shape::Combine, &tables, me, experts).unwrap();
            let want = want.clone();
            assert_eq!(back.out_splits, want, "rank {me}");
            let starts: Vec<i64> =
                exclusive_prefix(&want.iter().map(|&v| v as usize).collect::<Vec<_>>())
                    .into_iter()
                    .map(|v| v as i64)
                    .collect();
            assert_eq!(back.out_offsets, starts);
        }
    }

    #[test]
    fn negative_splits_name_the_sender() {
        let tables = vec![vec![1, 1], vec![1, -3]];
        let e = plan(Shape::Flat, &tables, 1, 1).unwrap_err();
        assert_eq!(e.peer(), Some(1));
        assert!(e.to_string().contains("-3"), "{e}");
    }
}
