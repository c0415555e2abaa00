//! An operand's element type as a code every rank computes alike from torch's name of
//! it, so ranks that pass `float32` and `int32` (the same element size) disagree in
//! the op's fingerprint instead of moving reinterpreted bits.
//!
//! NOTE [dtype code]
//! The code is the 64-bit FNV-1a hash of torch's Python name of the dtype without its
//! `torch.` prefix (`"float32"`, `"int32"`, `"bfloat16"`). A name torch's C++ side
//! spells otherwise (`c10::toString`: `"Float"`, `"Int"`, `"BFloat16"`) or with the
//! prefix (`str(torch.float32)`) maps to the same code through `KNOWN`; a name
//! symmwin does not know is hashed as it is given (prefix stripped), so two dtypes
//! unknown to symmwin never share a code by falling into one "unknown" bucket. Code 0
//! is an operand whose caller named no dtype (the Rust API's default, bytes).

use std::fmt;

/// One dtype symmwin knows by name: torch's Python name, its `c10::toString` name and
/// its element size in bytes.
struct Known {
    name: &'static str,
    c10: &'static str,
    size: usize,
}

const fn known(name: &'static str, c10: &'static str, size: usize) -> Known {
    Known { name, c10, size }
}

/// torch 2.11's dtypes (`c10::ScalarType`), for canonical codes and messages.
const KNOWN: &[Known] = &[
    known("uint8", "Byte", 1),
    known("int8", "Char", 1),
    known("int16", "Short", 2),
    known("int32", "Int", 4),
    known("int64", "Long", 8),
    known("float16", "Half", 2),
    known("float32", "Float", 4),
    known("float64", "Double", 8),
    known("complex32", "ComplexHalf", 4),
    known("complex64", "ComplexFloat", 8),
    known("complex128", "ComplexDouble", 16),
    known("bool", "Bool", 1),
    known("qint8", "QInt8", 1),
    known("quint8", "QUInt8", 1),
    known("qint32", "QInt32", 4),
    known("bfloat16", "BFloat16", 2),
    known("quint4x2", "QUInt4x2", 1),
    known("quint2x4", "QUInt2x4", 1),
    known("bits1x8", "Bits1x8", 1),
    known("bits2x4", "Bits2x4", 1),
    known("bits4x2", "Bits4x2", 1),
    known("bits8", "Bits8", 1),
    known("bits16", "Bits16", 2),
    known("float8_e5m2", "Float8_e5m2", 1),
    known("float8_e4m3fn", "Float8_e4m3fn", 1),
    known("float8_e5m2fnuz", "Float8_e5m2fnuz", 1),
    known("float8_e4m3fnuz", "Float8_e4m3fnuz", 1),
    known("uint16", "UInt16", 2),
    known("uint32", "UInt32", 4),
    known("uint64", "UInt64", 8),
    known("float8_e8m0fnu", "Float8_e8m0fnu", 1),
    known("float4_e2m1fn_x2", "Float4_e2m1fn_x2", 1),
];

/// 64-bit FNV-1a of `bytes`.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

/// An operand's element type, by its code (NOTE [dtype code]).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DType(u64);

impl DType {
    /// No dtype named: the operand is bytes (the Rust API's default).
    pub const UNSPECIFIED: DType = DType(0);
    /// `torch.float32`.
    pub const FLOAT32: DType = DType(fnv1a(b"float32"));
    /// `torch.float64`.
    pub const FLOAT64: DType = DType(fnv1a(b"float64"));
    /// `torch.float16`.
    pub const FLOAT16: DType = DType(fnv1a(b"float16"));
    /// `torch.bfloat16`.
    pub const BFLOAT16: DType = DType(fnv1a(b"bfloat16"));
    /// `torch.int32`.
    pub const INT32: DType = DType(fnv1a(b"int32"));
    /// `torch.int64`.
    pub const INT64: DType = DType(fnv1a(b"int64"));
    /// `torch.uint8`.
    pub const UINT8: DType = DType(fnv1a(b"uint8"));

    /// The dtype torch names `name` (`"float32"`, `"torch.float32"` or `"Float"` alike;
    /// an unknown name gets a code of its own).
    pub fn named(name: &str) -> DType {
        DType::from_name_bytes(name.as_bytes())
    }

    /// [`DType::named`] of raw bytes (a C string that need not be UTF-8).
    pub fn from_name_bytes(name: &[u8]) -> DType {
        let bare = name.strip_prefix(b"torch.").unwrap_or(name);
        let canonical = KNOWN
            .iter()
            .find(|k| k.name.as_bytes() == bare || k.c10.as_bytes() == bare)
            .map_or(bare, |k| k.name.as_bytes());
        DType(fnv1a(canonical))
    }

    /// The dtype of `code` (as [`DType::code`] gave it, on any rank).
    pub const fn from_code(code: u64) -> DType {
        DType(code)
    }

    /// The code every rank computes alike for this dtype.
    pub const fn code(self) -> u64 {
        self.0
    }

    fn known(self) -> Option<&'static Known> {
        KNOWN.iter().find(|k| fnv1a(k.name.as_bytes()) == self.0)
    }

    /// torch's name, for a dtype symmwin knows.
    pub fn name(self) -> Option<&'static str> {
        self.known().map(|k| k.name)
    }

    /// Bytes per element, for a dtype symmwin knows.
    pub fn size(self) -> Option<usize> {
        self.known().map(|k| k.size)
    }

    /// Every dtype symmwin knows, for a receiver to say which one a peer passed.
    pub fn all_known() -> impl Iterator<Item = DType> {
        KNOWN.iter().map(|k| DType(fnv1a(k.name.as_bytes())))
    }
}

impl Default for DType {
    fn default() -> Self {
        DType::UNSPECIFIED
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.name(), *self) {
            (Some(name), _) => f.write_str(name),
            (None, DType::UNSPECIFIED) => f.write_str("untyped"),
            (None, DType(code)) => write!(f, "dtype {code:#018x}"),
        }
    }
}

impl fmt::Debug for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DType({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_known_dtype_has_one_code() {
        for k in KNOWN {
            let code = DType::named(k.name);
            assert_eq!(DType::named(k.c10), code, "{}", k.c10);
            assert_eq!(DType::named(&format!("torch.{}", k.name)), code);
            assert_eq!(code.name(), Some(k.name));
            assert_eq!(code.size(), Some(k.size));
        }
        assert_eq!(DType::named("Float"), DType::FLOAT32);
        assert_eq!(DType::named("torch.int32"), DType::INT32);
    }

    #[test]
    fn every_dtype_is_distinct_and_none_is_unspecified() {
        let codes: std::collections::HashSet<u64> = DType::all_known().map(DType::code).collect();
        assert_eq!(codes.len(), KNOWN.len());
        assert!(!codes.contains(&0));
        assert_ne!(DType::FLOAT32, DType::INT32);
    }

    #[test]
    fn two_unknown_dtypes_never_share_a_code() {
        let a = DType::named("float6_e3m2");
        let b = DType::named("float6_e2m3");
        assert_ne!(a, b);
        assert_eq!(a, DType::named("torch.float6_e3m2"));
        assert!(a.name().is_none() && a.size().is_none());
        assert!(a.to_string().starts_with("dtype 0x"), "{a}");
        assert_eq!(DType::UNSPECIFIED.to_string(), "untyped");
        assert_eq!(DType::INT32.to_string(), "int32");
    }
}
