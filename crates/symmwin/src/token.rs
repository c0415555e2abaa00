//! Random tokens and stable ids.

use std::fmt;

/// A random 128-bit secret that a peer must echo to have a message accepted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Token([u8; 16]);

impl Token {
    /// A fresh token from the OS random source.
    pub fn random() -> symmwin_device::error::Result<Self> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| {
            symmwin_device::error::Error::os(
                symmwin_device::error::Phase::Publish,
                "getrandom",
                std::io::Error::other(e.to_string()),
            )
        })?;
        Ok(Token(bytes))
    }

    /// Hex form, for the store.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parse the hex form.
    pub fn from_hex(s: &str) -> Option<Self> {
        // `from_str_radix` alone would also take a sign ("+0").
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Token(bytes))
    }

    /// The secret's bytes, for the wire (never for a log).
    pub(crate) fn bytes(&self) -> [u8; 16] {
        self.0
    }

    /// Constant-time comparison, so timing does not reveal how much of a guess matched.
    pub fn matches(&self, other: &[u8; 16]) -> bool {
        self.0
            .iter()
            .zip(other)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl fmt::Debug for Token {
    // Tokens are secrets: never print them, even in debug logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// A random 64-bit number (not secret).
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // Only uniqueness matters here; fall back to time and pid.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        return nanos ^ (u64::from(std::process::id()) << 32);
    }
    u64::from_le_bytes(bytes)
}

/// FNV-1a: a stable 64-bit id for a group name (identification, not security).
pub fn stable_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_debug_redacts() {
        let t = Token::random().unwrap();
        assert_eq!(Token::from_hex(&t.to_hex()), Some(t));
        assert!(!format!("{t:?}").contains(&t.to_hex()));
        assert_eq!(Token::from_hex("zz"), None);
        assert_eq!(Token::from_hex(&"+0".repeat(16)), None);
        assert_eq!(Token::from_hex(&"-1".repeat(16)), None);
        assert!(t.matches(&t.0));
        let mut other = t.0;
        other[15] ^= 1;
        assert!(!t.matches(&other));
    }
}
