//! Which ranges of a span are mapped, so that a zero or a device memset of an
//! unmapped address is an error instead of a fault (SIGSEGV on the host, a lost
//! context on the device).

/// `(offset, len)` of each mapping of one span, sorted by offset.
#[derive(Debug, Default, Clone)]
pub struct MappedRanges(Vec<(usize, usize)>);

impl MappedRanges {
    /// Record a mapping of `len` bytes at `offset`.
    pub fn insert(&mut self, offset: usize, len: usize) {
        let at = self.0.partition_point(|&(start, _)| start < offset);
        self.0.insert(at, (offset, len));
    }

    /// Whether `[offset, offset + len)` overlaps a recorded mapping.
    pub fn overlaps(&self, offset: usize, len: usize) -> bool {
        self.0
            .iter()
            .any(|&(start, size)| start < offset.saturating_add(len) && offset < start + size)
    }

    /// Whether `[offset, offset + len)` is entirely mapped.
    pub fn covers(&self, offset: usize, len: usize) -> bool {
        let mut at = offset;
        let end = offset.saturating_add(len);
        for &(start, size) in &self.0 {
            if at >= end || start > at {
                break;
            }
            at = at.max(start + size);
        }
        at >= end
    }

    /// Every mapping, in offset order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.0.iter().copied()
    }

    /// Forget every mapping (after they were all unmapped).
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_spans_adjacent_mappings_and_stops_at_holes() {
        let g = 4096;
        let mut mapped = MappedRanges::default();
        for (offset, len) in [(5 * g, g), (0, 2 * g), (2 * g, g)] {
            mapped.insert(offset, len);
        }
        assert_eq!(
            mapped.iter().collect::<Vec<_>>(),
            [(0, 2 * g), (2 * g, g), (5 * g, g)]
        );
        assert!(mapped.covers(0, 3 * g));
        assert!(mapped.covers(g, 2 * g));
        assert!(!mapped.covers(0, 4 * g));
        assert!(mapped.covers(5 * g, g));
        assert!(!mapped.covers(4 * g, 2 * g));
        assert!(!mapped.covers(6 * g, 1));
        assert!(mapped.covers(3 * g, 0));
        assert!(mapped.overlaps(g, g));
        assert!(mapped.overlaps(2 * g + 1, 4 * g));
        assert!(!mapped.overlaps(3 * g, 2 * g));
        assert!(!mapped.overlaps(usize::MAX - 1, 4));
        mapped.clear();
        assert!(!mapped.covers(0, 1));
    }
}
