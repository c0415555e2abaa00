//! The argument of the signal kernels: the Rust mirror of `kernels/signal_params.cuh`.
//! The tests read the header's `static_assert`s, so the two cannot drift apart.

use super::timeout_record::WaitReport;

/// `struct SignalParams` of `signal_params.cuh`, passed by value to each signal kernel.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SignalParams {
    /// Rank r's pad is at `pad_base + r * pad_stride`.
    pub(super) pad_base: u64,
    pub(super) pad_stride: u64,
    pub(super) world: u32,
    /// put_signal: the destination; wait_signal: the source; barrier: 0.
    pub(super) peer: u32,
    pub(super) channel: u32,
    pub(super) _reserved: u32,
    /// Where and how a timed-out wait reports; `wait.rank` is this rank.
    pub(super) wait: WaitReport,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// `(field, offset)` of every `offsetof(SignalParams, field) == offset` the header
    /// asserts, and the size it asserts.
    fn header_layout() -> (Vec<(String, usize)>, usize) {
        let header = include_str!("../kernels/signal_params.cuh");
        let number = |s: &str| s.trim().parse::<usize>().unwrap();
        let mut fields = Vec::new();
        let mut size = None;
        for line in header.lines() {
            let Some(assert) = line.strip_prefix("static_assert(") else {
                continue;
            };
            let condition = assert.split(',').take(2).collect::<Vec<_>>();
            if let Some(field) = assert.strip_prefix("offsetof(SignalParams, ") {
                let (name, rest) = field.split_once(')').unwrap();
                let value = rest.split_once("==").unwrap().1.split_once(',').unwrap().0;
                fields.push((name.to_string(), number(value)));
            } else if assert.starts_with("sizeof(SignalParams)") {
                size = Some(number(condition[0].split_once("==").unwrap().1));
            }
        }
        (
            fields,
            size.expect("sizeof(SignalParams) asserted in the header"),
        )
    }

    #[test]
    fn layout_matches_signal_params_cuh() {
        let ours = [
            ("pad_base", offset_of!(SignalParams, pad_base)),
            ("pad_stride", offset_of!(SignalParams, pad_stride)),
            ("world", offset_of!(SignalParams, world)),
            ("peer", offset_of!(SignalParams, peer)),
            ("channel", offset_of!(SignalParams, channel)),
            ("wait", offset_of!(SignalParams, wait)),
        ];
        let (fields, size) = header_layout();
        assert_eq!(fields.len(), ours.len(), "{fields:?}");
        for ((name, offset), (header_name, header_offset)) in ours.iter().zip(&fields) {
            assert_eq!((*name, *offset), (header_name.as_str(), *header_offset));
        }
        assert_eq!(size_of::<SignalParams>(), size);
        assert_eq!(size, 64);
    }
}
