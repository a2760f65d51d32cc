//! Composite cursors for merged listings.
//!
//! A client's cursor names a position in the merged stream: which scheme, the
//! listing snapshot of that scheme's plugin the walk is reading (none before
//! it starts), how many of its entries were already sent, and, should that
//! snapshot be dropped, the plugin's own cursor of the page the walk stands
//! in and how far into it. It is serialised, authenticated with an HMAC under a key made
//! when the server starts, and base64url-encoded, so a client can neither read
//! a plugin's cursor nor forge or splice one. Cursors do not survive a restart.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Bytes of the HMAC kept in a cursor.
const TAG_LENGTH: usize = 16;

/// Which listing a cursor belongs to; a cursor of one is refused by the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Listing {
    #[serde(rename = "r")]
    Resources,
    #[serde(rename = "t")]
    Templates,
}

/// A position in a merged listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    #[serde(rename = "l")]
    pub listing: Listing,
    /// The scheme whose plugin is listed next.
    #[serde(rename = "s")]
    pub scheme: String,
    /// The snapshot of that plugin's listing this walk reads; none before it
    /// starts there.
    #[serde(rename = "n")]
    pub snapshot: Option<u64>,
    /// Entries of that snapshot already sent.
    #[serde(rename = "o")]
    pub offset: usize,
    /// The plugin's cursor of the page the walk stands in (none for its
    /// first), should the snapshot have been dropped since.
    #[serde(rename = "c")]
    pub inner: Option<String>,
    /// Entries of that page already sent.
    #[serde(rename = "k")]
    pub skip: usize,
}

/// Seals and opens cursors with one secret key.
pub struct CursorSeal {
    key: [u8; 32],
}

impl CursorSeal {
    /// A seal with a fresh random key.
    pub fn random() -> Self {
        Self {
            key: rand::random(),
        }
    }

    pub fn seal(&self, position: &Position) -> String {
        let mut bytes = serde_json::to_vec(position).expect("a position always serialises");
        bytes.extend_from_slice(&self.tag(&bytes));
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Opens a cursor of `listing`, or says why it cannot be used.
    pub fn open(&self, cursor: &str, listing: Listing) -> Result<Position, &'static str> {
        let bytes = URL_SAFE_NO_PAD
            .decode(cursor)
            .map_err(|_| "the cursor is not one this server issued")?;
        let split = bytes
            .len()
            .checked_sub(TAG_LENGTH)
            .ok_or("the cursor is not one this server issued")?;
        let (body, tag) = bytes.split_at(split);
        let mut mac = self.mac();
        mac.update(body);
        mac.verify_truncated_left(tag)
            .map_err(|_| "the cursor is forged, damaged, or from before a restart")?;
        let position: Position =
            serde_json::from_slice(body).map_err(|_| "the cursor is not one this server issued")?;
        if position.listing != listing {
            return Err("the cursor belongs to another listing");
        }
        Ok(position)
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes a key of any length")
    }

    fn tag(&self, body: &[u8]) -> [u8; TAG_LENGTH] {
        let mut mac = self.mac();
        mac.update(body);
        let full = mac.finalize().into_bytes();
        full[..TAG_LENGTH]
            .try_into()
            .expect("SHA-256 is longer than the tag")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn position() -> Position {
        Position {
            listing: Listing::Resources,
            scheme: "notes".into(),
            snapshot: Some(2),
            offset: 3,
            inner: Some("page-2".into()),
            skip: 1,
        }
    }

    #[test]
    fn round_trips() {
        let seal = CursorSeal::random();
        let cursor = seal.seal(&position());
        assert_eq!(seal.open(&cursor, Listing::Resources), Ok(position()));
    }

    #[test]
    fn refuses_forged_damaged_foreign_and_misplaced_cursors() {
        let seal = CursorSeal::random();
        let cursor = seal.seal(&position());
        let mut damaged = cursor.clone().into_bytes();
        damaged[5] = if damaged[5] == b'A' { b'B' } else { b'A' };
        assert!(
            seal.open(std::str::from_utf8(&damaged).unwrap(), Listing::Resources)
                .is_err()
        );
        assert!(
            CursorSeal::random()
                .open(&cursor, Listing::Resources)
                .is_err()
        );
        assert!(seal.open(&cursor, Listing::Templates).is_err());
        assert!(seal.open("", Listing::Resources).is_err());
        assert!(seal.open("!!!", Listing::Resources).is_err());
        let unsigned = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&position()).unwrap());
        assert!(seal.open(&unsigned, Listing::Resources).is_err());
    }
}
