//! Element access for host reductions: every type accumulates in `f64` and rounds
//! back to nearest-even on store (half and bfloat16 through `f32`).

use super::args::ElemType;

/// `f32` value of IEEE binary16 bits.
pub fn f16_to_f32(h: u16) -> f32 {
    let negative = h & 0x8000 != 0;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let magnitude = match exp {
        // Subnormal (or zero): man * 2^-24, exact in f32.
        0 => man as f32 / 16_777_216.0,
        31 => f32::from_bits(0x7f80_0000 | (man << 13)),
        _ => f32::from_bits(((exp + 112) << 23) | (man << 13)),
    };
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// IEEE binary16 bits nearest to `x` (ties to even; overflow to infinity).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let a = x.abs();
    if a.is_nan() {
        return sign | 0x7e00;
    }
    // Half of the way from the largest half (65504) to 65536 rounds up to infinity.
    if a >= 65520.0 {
        return sign | 0x7c00;
    }
    if a < 6.103_515_6e-5 {
        // Below the smallest normal (2^-14): count units of 2^-24. 1024 units is the
        // smallest normal's encoding, so rounding up across the boundary is right.
        return sign | (a * 16_777_216.0).round_ties_even() as u16;
    }
    // At or above 2^-14 the f32 exponent field is at least 113, so this cannot wrap.
    let exp = ((bits >> 23) & 0xff) + 15 - 127;
    let man = bits & 0x7f_ffff;
    let mut h = (exp << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
        h += 1; // A carry out of the mantissa correctly bumps the exponent.
    }
    sign | h as u16
}

/// `f32` value of bfloat16 bits.
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// bfloat16 bits nearest to `x` (ties to even).
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x40;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// Read element `i` of type `elem` at `base` as `f64`.
///
/// # Safety
/// `base + i * elem.size()` must be readable for `elem.size()` bytes.
pub unsafe fn load(elem: ElemType, base: usize, i: usize) -> f64 {
    let p = base + i * elem.size();
    // SAFETY: the caller guarantees the element is readable; reads are unaligned-safe.
    unsafe {
        match elem {
            ElemType::F32 => f64::from((p as *const f32).read_unaligned()),
            ElemType::F64 => (p as *const f64).read_unaligned(),
            ElemType::F16 => f64::from(f16_to_f32((p as *const u16).read_unaligned())),
            ElemType::BF16 => f64::from(bf16_to_f32((p as *const u16).read_unaligned())),
        }
    }
}

/// Store `v` as element `i` of type `elem` at `base` (narrow types round through f32).
///
/// # Safety
/// `base + i * elem.size()` must be writable for `elem.size()` bytes.
pub unsafe fn store(elem: ElemType, base: usize, i: usize, v: f64) {
    let p = base + i * elem.size();
    // SAFETY: the caller guarantees the element is writable.
    unsafe {
        match elem {
            ElemType::F32 => (p as *mut f32).write_unaligned(v as f32),
            ElemType::F64 => (p as *mut f64).write_unaligned(v),
            ElemType::F16 => (p as *mut u16).write_unaligned(f32_to_f16(v as f32)),
            ElemType::BF16 => (p as *mut u16).write_unaligned(f32_to_bf16(v as f32)),
        }
    }
}

/// Add the `acc.len()` elements of type `elem` at `base` to `acc`, element by element:
/// one row of a host reduction.
///
/// # Safety
/// `base` must be readable for `acc.len() * elem.size()` bytes.
pub unsafe fn accumulate_row(elem: ElemType, acc: &mut [f64], base: usize) {
    for (i, a) in acc.iter_mut().enumerate() {
        // SAFETY: element i lies in the caller's readable row.
        *a += unsafe { load(elem, base, i) };
    }
}

/// Store `acc` as `acc.len()` elements of type `elem` at `base`.
///
/// # Safety
/// `base` must be writable for `acc.len() * elem.size()` bytes.
pub unsafe fn store_row(elem: ElemType, acc: &[f64], base: usize) {
    for (i, &a) in acc.iter().enumerate() {
        // SAFETY: element i lies in the caller's writable row.
        unsafe { store(elem, base, i, a) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_half_round_trips_through_f32() {
        for h in 0..=u16::MAX {
            let x = f16_to_f32(h);
            if x.is_nan() {
                assert!(f16_to_f32(f32_to_f16(x)).is_nan());
            } else {
                assert_eq!(f32_to_f16(x), h, "bits {h:#06x} -> {x}");
            }
        }
    }

    #[test]
    fn halves_round_to_nearest_even() {
        // 1 + 2^-11 is halfway between 1 and the next half: ties to 1 (even).
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(f32_to_f16(65519.0), 0x7bff);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0); // halfway to the first subnormal
    }

    #[test]
    fn every_bfloat16_round_trips_and_ties_go_to_even() {
        for b in 0..=u16::MAX {
            let x = bf16_to_f32(b);
            if !x.is_nan() {
                assert_eq!(f32_to_bf16(x), b);
            }
        }
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
    }
}
