//! Composite cursors for merged listings.
//!
//! A client's cursor names a position in the merged stream: which scheme, the
//! listing snapshot of that scheme's plugin the walk is reading (none before
//! it starts), how many of its entries were already sent, and, should that
//! snapshot be dropped (or belong to another replica), the plugin's own
//! cursor of the page the walk stands in and how far into it. It is
//! serialised, encrypted and authenticated (ChaCha20-Poly1305) and
//! base64url-encoded, so a client can neither read a cursor (the plugin's
//! cursor in it may name an entry the client may not see, and the counts
//! how many it was not shown) nor forge or splice one.
//!
//! The key is derived from a secret and the current rotation period, so it
//! changes every period; a cursor opens in the period it was sealed in and
//! the next one (and in the one before, for a replica whose clock runs
//! behind the sealer's). Every replica must rotate at the same interval.
//! The secret is random per process unless the operator shares one between
//! replicas ([`CursorSeal::shared`]), several of them while one replaces
//! another: the first seals, every one opens.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// How often the key that seals cursors changes unless the operator says.
pub const DEFAULT_ROTATION: Duration = Duration::from_secs(3600);

/// The shortest secret accepted from an operator, in bytes.
const MIN_SECRET_BYTES: usize = 32;

/// Bytes of the rotation period a cursor was sealed in, ahead of its nonce.
const PERIOD_LEN: usize = 8;

/// Seals cursors with the first secret's key of the current period, and
/// opens them with any secret's key of the period they name.
pub struct CursorSeal {
    secrets: Vec<[u8; 32]>,
    rotation_secs: u64,
}

impl CursorSeal {
    /// A seal with a fresh random secret, rotating every `rotation` (a
    /// second at least): its cursors open in this process only.
    pub fn random(rotation: Duration) -> Self {
        Self {
            secrets: vec![rand::random()],
            rotation_secs: rotation.as_secs().max(1),
        }
    }

    /// A seal with the secrets in `text`, one a line (at least 32 bytes
    /// each; blank lines are skipped): the first seals, each opens. Replicas
    /// given the same text open each other's cursors.
    pub fn shared(text: &str, rotation: Duration) -> Result<Self, String> {
        let secrets: Vec<[u8; 32]> = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(|line| {
                if line.len() < MIN_SECRET_BYTES {
                    return Err(format!(
                        "a cursor secret is {} bytes long; give at least {MIN_SECRET_BYTES} \
                         (for example `openssl rand -base64 32`)",
                        line.len()
                    ));
                }
                Ok(blake3::derive_key("resmux cursor secret", line.as_bytes()))
            })
            .collect::<Result<_, _>>()?;
        if secrets.is_empty() {
            return Err("no cursor secret is given: the text is empty".into());
        }
        if rotation.as_secs() == 0 {
            return Err("the cursor key must rotate after a second or more".into());
        }
        Ok(Self {
            secrets,
            rotation_secs: rotation.as_secs(),
        })
    }

    /// The position, encrypted and authenticated under the current period's
    /// key and a fresh random nonce; the period and the nonce lead the
    /// cursor.
    pub fn seal(&self, position: &Position) -> String {
        self.seal_in(self.period_now(), position)
    }

    fn seal_in(&self, period: u64, position: &Position) -> String {
        let period = period.to_le_bytes();
        let mut body = serde_json::to_vec(position).expect("a position always serialises");
        let nonce: [u8; NONCE_LEN] = rand::random();
        period_key(&self.secrets[0], period)
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(period),
                &mut body,
            )
            .expect("a cursor is far shorter than ChaCha20-Poly1305's limit");
        let mut sealed = period.to_vec();
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&body);
        URL_SAFE_NO_PAD.encode(sealed)
    }

    /// Opens a cursor of `listing`, or says why it cannot be used.
    pub fn open(&self, cursor: &str, listing: Listing) -> Result<Position, &'static str> {
        let foreign = "the cursor is not one this server issued";
        let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| foreign)?;
        if bytes.len() < PERIOD_LEN + NONCE_LEN {
            return Err(foreign);
        }
        let (period, rest) = bytes.split_at(PERIOD_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let period: [u8; PERIOD_LEN] = period.try_into().map_err(|_| foreign)?;
        let now = self.period_now();
        // The next period too: another replica's clock may run ahead.
        if !(now.saturating_sub(1)..=now + 1).contains(&u64::from_le_bytes(period)) {
            return Err("the cursor has expired: start the listing again");
        }
        let opened = self
            .secrets
            .iter()
            .find_map(|secret| {
                let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
                let mut body = sealed.to_vec();
                let opened = period_key(secret, period)
                    .open_in_place(nonce, Aad::from(period), &mut body)
                    .ok()?;
                serde_json::from_slice::<Position>(opened).ok()
            })
            .ok_or(
                "the cursor is forged, damaged, or sealed with a secret this server does not hold \
                 (from before a restart, or from a replica with another cursor secret)",
            )?;
        if opened.listing != listing {
            return Err("the cursor belongs to another listing");
        }
        Ok(opened)
    }

    /// How long a cursor sealed now surely opens: to the end of the period
    /// after this one, so at least one rotation.
    pub fn sure_life(&self) -> Duration {
        Duration::from_secs(self.rotation_secs)
    }

    fn period_now(&self) -> u64 {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        since_epoch.as_secs() / self.rotation_secs
    }
}

/// The key of `secret` in the rotation period `period`.
fn period_key(secret: &[u8; 32], period: [u8; PERIOD_LEN]) -> LessSafeKey {
    let key = blake3::keyed_hash(secret, &period);
    LessSafeKey::new(
        UnboundKey::new(&CHACHA20_POLY1305, key.as_bytes()).expect("the key is 32 bytes"),
    )
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
        let seal = CursorSeal::random(DEFAULT_ROTATION);
        let cursor = seal.seal(&position());
        assert_eq!(seal.open(&cursor, Listing::Resources), Ok(position()));
    }

    #[test]
    fn refuses_forged_damaged_foreign_and_misplaced_cursors() {
        let seal = CursorSeal::random(DEFAULT_ROTATION);
        let cursor = seal.seal(&position());
        let mut damaged = cursor.clone().into_bytes();
        damaged[5] = if damaged[5] == b'A' { b'B' } else { b'A' };
        assert!(
            seal.open(std::str::from_utf8(&damaged).unwrap(), Listing::Resources)
                .is_err()
        );
        assert!(
            CursorSeal::random(DEFAULT_ROTATION)
                .open(&cursor, Listing::Resources)
                .is_err()
        );
        assert!(seal.open(&cursor, Listing::Templates).is_err());
        assert!(seal.open("", Listing::Resources).is_err());
        assert!(seal.open("!!!", Listing::Resources).is_err());
        let unsealed = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&position()).unwrap());
        assert!(seal.open(&unsealed, Listing::Resources).is_err());
    }

    const SECRET: &str = "the first secret, shared by every replica";
    const NEXT_SECRET: &str = "the next secret, which replaces the first one";

    fn shared(text: &str) -> CursorSeal {
        CursorSeal::shared(text, DEFAULT_ROTATION).unwrap()
    }

    #[test]
    fn replicas_with_one_secret_open_each_others_cursors() {
        let cursor = shared(SECRET).seal(&position());
        assert_eq!(
            shared(SECRET).open(&cursor, Listing::Resources),
            Ok(position())
        );
        let refused = shared(NEXT_SECRET).open(&cursor, Listing::Resources);
        assert!(
            refused
                .unwrap_err()
                .contains("a secret this server does not hold"),
            "another secret refuses it"
        );
    }

    #[test]
    fn while_a_secret_replaces_another_both_open_and_the_first_seals() {
        let rotating = shared(&format!("{NEXT_SECRET}\n\n{SECRET}\n"));
        let old = shared(SECRET).seal(&position());
        assert_eq!(rotating.open(&old, Listing::Resources), Ok(position()));
        let new = rotating.seal(&position());
        assert_eq!(
            shared(NEXT_SECRET).open(&new, Listing::Resources),
            Ok(position())
        );
        assert!(shared(SECRET).open(&new, Listing::Resources).is_err());
    }

    #[test]
    fn a_cursor_opens_in_its_period_and_the_next_only() {
        let seal = shared(SECRET);
        let now = seal.period_now();
        for period in [now - 1, now, now + 1] {
            let cursor = seal.seal_in(period, &position());
            assert_eq!(seal.open(&cursor, Listing::Resources), Ok(position()));
        }
        for period in [now - 2, now + 2, 0, u64::MAX] {
            let cursor = seal.seal_in(period, &position());
            assert_eq!(
                seal.open(&cursor, Listing::Resources),
                Err("the cursor has expired: start the listing again")
            );
        }
    }

    #[test]
    fn short_or_missing_secrets_are_refused() {
        let short = CursorSeal::shared("too short", DEFAULT_ROTATION)
            .err()
            .unwrap();
        assert!(short.contains("9 bytes long; give at least 32"), "{short}");
        let empty = CursorSeal::shared("\n \n", DEFAULT_ROTATION).err().unwrap();
        assert!(empty.contains("no cursor secret"), "{empty}");
        let still = CursorSeal::shared(SECRET, Duration::ZERO).err().unwrap();
        assert!(still.contains("rotate"), "{still}");
    }

    #[test]
    fn a_cursor_shows_nothing_of_its_position() {
        let seal = CursorSeal::random(DEFAULT_ROTATION);
        let bytes = URL_SAFE_NO_PAD.decode(seal.seal(&position())).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains("notes") && !text.contains("page-2"),
            "{text}"
        );
        assert_ne!(seal.seal(&position()), seal.seal(&position()));
    }
}
