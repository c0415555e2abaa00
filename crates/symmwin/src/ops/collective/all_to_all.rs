//! The all-to-all family: equal splits, and the split-table forms of the MoE
//! dispatch and combine.

use super::*;

/// Equal-split all-to-all (torch's `nvshmem_all_to_all`): `input` and `out` hold the
/// same bytes, a whole number of `elem_size`-byte elements that splits evenly among
/// the world size (a byte count that does would slice elements).
pub fn all_to_all(input: Operand, out: Operand, elem_size: usize, opts: &OpOptions) -> Result<()> {
    let w = input.window;
    let check = || {
        same_group(w, out.window, "out")?;
        let world = w.world();
        if input.len != out.len {
            return Err(Error::invalid(format!(
                "all_to_all: input ({} bytes) and out ({} bytes) must be of the same size",
                input.len, out.len
            )));
        }
        same_dtype("all_to_all", ("input", &input), ("out", &out))?;
        if let Some(size) = input.dtype.size().filter(|&size| size != elem_size) {
            return Err(Error::invalid(format!(
                "all_to_all: elements of {elem_size} bytes, but {} elements are {size} bytes",
                input.dtype
            )));
        }
        let per_peer = equal_chunk(input.len, elem_size, world)?;
        let (i, o) = (input.symm("input")?, out.symm("out")?);
        refuse_overlap("all_to_all", ("out", &o), ("input", &i))?;
        Ok((i, o, per_peer))
    };
    let (i, o, per_peer) = check().map_err(|e| w.context(e))?;
    let op = OpRequest::AllToAll {
        input: &i,
        out: &o,
        chunk: per_peer,
    };
    let elems = Elements {
        dtype: input.dtype,
        size: elem_size,
    };
    // SAFETY: both operands were checked to lie in their live windows of one group.
    unsafe { execute_elems(w, Reach::Everyone, opts, &op, elems) }
}

/// Bytes each rank sends each peer in an equal-split all-to-all of `len` bytes of
/// `elem_size`-byte elements: the element count must split evenly among the world.
fn equal_chunk(len: usize, elem_size: usize, world: usize) -> Result<usize> {
    if elem_size == 0 || len % elem_size != 0 {
        return Err(Error::invalid(format!(
            "all_to_all: {len} bytes are not a whole number of {elem_size}-byte elements"
        )));
    }
    let elems = len / elem_size;
    if elems % world != 0 {
        return Err(Error::invalid(format!(
            "all_to_all: {elems} elements do not split evenly among the {world} ranks: input \
             and out must hold a multiple of {world} elements"
        )));
    }
    Ok(elems / world * elem_size)
}

/// The all-to-all-v family: the shape picks the op; `splits` is `in_splits`
/// (`in_splits_offsets` for [`Shape::Combine`]).
pub fn all_to_all_v(
    shape: Shape,
    input: Operand,
    out: Operand,
    splits: Operand,
    out_splits_offsets: Operand,
    rows: Rows,
    opts: &OpOptions,
) -> Result<()> {
    let w = input.window;
    let operands = [input, out, splits, out_splits_offsets];
    let args = var_args(shape, operands, rows).map_err(|e| w.context(e))?;
    let op = OpRequest::AllToAllV { shape, args: &args };
    // SAFETY: var_args checked every operand against its window, the table lengths
    // against the world size and the row counts against the operands.
    unsafe { execute_elems(w, Reach::Everyone, opts, &op, Elements::of(input.dtype)) }
}

/// Check the operands (input, out, splits, out_splits_offsets) of an all-to-all-v and
/// the split tables' lengths; the op's arguments.
fn var_args(shape: Shape, operands: [Operand; 4], rows: Rows) -> Result<VarArgs> {
    let [input, out, splits, out_splits_offsets] = operands;
    let w = input.window;
    for (op, what) in [
        (&out, "out"),
        (&splits, "in_splits"),
        (&out_splits_offsets, "out_splits_offsets"),
    ] {
        same_group(w, op.window, what)?;
    }
    let name = symmwin_device::provider::device_ops::var_name(shape);
    same_dtype(name, ("input", &input), ("out", &out))?;
    if let Some(size) = input.dtype.size().filter(|&s| rows.row_bytes % s != 0) {
        return Err(Error::invalid(format!(
            "{name}: rows of {} bytes are not a whole number of {} elements ({size} bytes)",
            rows.row_bytes, input.dtype
        )));
    }
    if let Shape::Dispatch { major_align: 0 } = shape {
        return Err(Error::invalid("major_align must be positive"));
    }
    let world = w.world();
    let experts = experts_per_rank(shape, splits.len, world)?;
    debug_assert_eq!(in_table_len(shape, world, experts) * I64, splits.len);
    let want = 2 * world * experts;
    if out_splits_offsets.len != want * I64 {
        return Err(Error::invalid(format!(
            "out_splits_offsets must have 2 x {} entries (shape [2, {}]), not {}",
            world * experts,
            world * experts,
            entries(out_splits_offsets.len)
        )));
    }
    for (op, what) in [
        (&splits, "in_splits"),
        (&out_splits_offsets, "out_splits_offsets"),
    ] {
        if op.offset % I64 != 0 {
            return Err(Error::invalid(format!("{what} is not 8-byte aligned")));
        }
    }
    check_rows(&rows, input.len, out.len)?;
    let args = VarArgs {
        input: input.symm("input")?,
        out: out.symm("out")?,
        in_splits: splits.symm("in_splits")?,
        out_splits_offsets: out_splits_offsets.symm("out_splits_offsets")?,
        rows,
        experts_per_rank: experts,
    };
    refuse_var_overlap(shape, &args)?;
    Ok(args)
}

/// The all-to-all-v family writes `out` and `out_splits_offsets`: neither may share
/// bytes with any other operand.
fn refuse_var_overlap(shape: Shape, args: &VarArgs) -> Result<()> {
    let name = OpRequest::AllToAllV { shape, args }.name();
    let operands = [
        ("input", &args.input),
        ("in_splits", &args.in_splits),
        ("out", &args.out),
        ("out_splits_offsets", &args.out_splits_offsets),
    ];
    for written in &operands[2..] {
        for other in operands.iter().filter(|o| o.0 != written.0) {
            refuse_overlap(name, *written, *other)?;
        }
    }
    Ok(())
}

/// `len` bytes of an int64 table as a count of entries for a message.
fn entries(len: usize) -> String {
    if len % I64 == 0 {
        (len / I64).to_string()
    } else {
        format!("{len} bytes")
    }
}

/// Experts per rank, from the length of `in_splits` (`in_splits_offsets` for
/// combine), which is checked first: every other table's length follows from it.
fn experts_per_rank(shape: Shape, len: usize, world: usize) -> Result<usize> {
    let n = entries(len);
    match shape {
        Shape::Flat if len == world * I64 => Ok(1),
        Shape::Flat => Err(Error::invalid(format!(
            "in_splits must have {world} entries, the group size, not {n}"
        ))),
        Shape::Dispatch { .. } if len > 0 && len % (world * I64) == 0 => Ok(len / (world * I64)),
        Shape::Dispatch { .. } => Err(Error::invalid(format!(
            "in_splits must have a positive multiple of {world} entries (the group size \
             times the experts per rank), not {n}"
        ))),
        Shape::Combine if len > 0 && len % (2 * world * I64) == 0 => Ok(len / (2 * world * I64)),
        Shape::Combine => Err(Error::invalid(format!(
            "in_splits_offsets must have 2 x a positive multiple of {world} entries (the \
             group size times the experts per rank), not {n}"
        ))),
    }
}

fn check_rows(rows: &Rows, in_len: usize, out_len: usize) -> Result<()> {
    let fits = |n: usize, len: usize| n.checked_mul(rows.row_bytes).is_some_and(|b| b <= len);
    if rows.row_bytes == 0 && (rows.in_rows > 0 || rows.out_rows > 0) {
        return Err(Error::invalid("rows of zero bytes"));
    }
    if !fits(rows.in_rows, in_len) || !fits(rows.out_rows, out_len) {
        return Err(Error::invalid(format!(
            "{} input rows / {} out rows of {} bytes do not fit input ({in_len} bytes) / out \
             ({out_len} bytes)",
            rows.in_rows, rows.out_rows, rows.row_bytes
        )));
    }
    Ok(())
}
