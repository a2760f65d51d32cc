//! Composite cursors for merged listings.
//!
//! A client's cursor names a position in the merged stream: which scheme, the
//! listing snapshot of that scheme's plugin the walk is reading (none before
//! it starts), how many of its entries were already sent, and, should that
//! snapshot be dropped, the plugin's own cursor of the page the walk stands
//! in and how far into it. It is serialised, encrypted and authenticated
//! (ChaCha20-Poly1305) under a key made when the server starts, and
//! base64url-encoded, so a client can neither read a cursor (the plugin's
//! cursor in it may name an entry the client may not see, and the counts
//! how many it was not shown) nor forge or splice one. Cursors do not
//! survive a restart.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use serde::{Deserialize, Serialize};

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
    key: LessSafeKey,
}

impl CursorSeal {
    /// A seal with a fresh random key.
    pub fn random() -> Self {
        let key: [u8; 32] = rand::random();
        Self {
            key: LessSafeKey::new(
                UnboundKey::new(&CHACHA20_POLY1305, &key).expect("the key is 32 bytes"),
            ),
        }
    }

    /// The position, encrypted and authenticated under a fresh random nonce
    /// (the nonce leads the cursor).
    pub fn seal(&self, position: &Position) -> String {
        let mut body = serde_json::to_vec(position).expect("a position always serialises");
        let nonce: [u8; NONCE_LEN] = rand::random();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut body)
            .expect("a cursor is far shorter than ChaCha20-Poly1305's limit");
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&body);
        URL_SAFE_NO_PAD.encode(sealed)
    }

    /// Opens a cursor of `listing`, or says why it cannot be used.
    pub fn open(&self, cursor: &str, listing: Listing) -> Result<Position, &'static str> {
        let foreign = "the cursor is not one this server issued";
        let mut bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| foreign)?;
        if bytes.len() < NONCE_LEN {
            return Err(foreign);
        }
        let mut body = bytes.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&bytes).map_err(|_| foreign)?;
        let opened = self
            .key
            .open_in_place(nonce, Aad::empty(), &mut body)
            .map_err(|_| "the cursor is forged, damaged, or from before a restart")?;
        let position: Position = serde_json::from_slice(opened).map_err(|_| foreign)?;
        if position.listing != listing {
            return Err("the cursor belongs to another listing");
        }
        Ok(position)
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
        let unsealed = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&position()).unwrap());
        assert!(seal.open(&unsealed, Listing::Resources).is_err());
    }

    #[test]
    fn a_cursor_shows_nothing_of_its_position() {
        let seal = CursorSeal::random();
        let bytes = URL_SAFE_NO_PAD.decode(seal.seal(&position())).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains("notes") && !text.contains("page-2"),
            "{text}"
        );
        assert_ne!(seal.seal(&position()), seal.seal(&position()));
    }
}
