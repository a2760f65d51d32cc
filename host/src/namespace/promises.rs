//! What a plugin's listing promised about each resource (its size and MIME
//! type), kept for as long as the listing's cache hint says it stays true. A
//! read that contradicts a promise still in force is a lie and is refused;
//! once the hint runs out, the resource may have changed and anything goes.
//! A listing with no cache hint promises nothing beyond the moment.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Promises kept per plugin at most; more are not recorded until old ones
/// expire, so a huge listing cannot make the host hoard memory.
const MAX_PROMISES: usize = 10_000;

#[derive(Debug)]
struct Promise {
    size: Option<u64>,
    mime_type: Option<String>,
    until: Instant,
}

/// The promises of one plugin, by URI.
#[derive(Debug, Default)]
pub struct Promises {
    by_uri: Mutex<HashMap<String, Promise>>,
}

impl Promises {
    /// Records what a listing said of `uri`, in force for `ttl`.
    pub fn record(&self, uri: &str, size: Option<u64>, mime_type: Option<&str>, ttl: Duration) {
        if ttl.is_zero() || (size.is_none() && mime_type.is_none()) {
            return;
        }
        let now = Instant::now();
        let mut by_uri = self.lock();
        if by_uri.len() >= MAX_PROMISES && !by_uri.contains_key(uri) {
            by_uri.retain(|_, promise| promise.until > now);
            if by_uri.len() >= MAX_PROMISES {
                return;
            }
        }
        by_uri.insert(
            uri.to_owned(),
            Promise {
                size,
                mime_type: mime_type.map(str::to_owned),
                until: now + ttl,
            },
        );
    }

    /// Checks a read content of `uri` against the promise in force, if any.
    pub fn check(&self, uri: &str, bytes: u64, mime_type: Option<&str>) -> Result<(), String> {
        let mut by_uri = self.lock();
        let Some(promise) = by_uri.get(uri) else {
            return Ok(());
        };
        if promise.until <= Instant::now() {
            by_uri.remove(uri);
            return Ok(());
        }
        if let Some(size) = promise.size
            && size != bytes
        {
            return Err(format!(
                "its listing said {uri} has {size} bytes, but the read returned {bytes}"
            ));
        }
        if let (Some(listed), Some(read)) = (&promise.mime_type, mime_type)
            && essence(listed) != essence(read)
        {
            return Err(format!(
                "its listing said {uri} is {listed}, but the read returned {read}"
            ));
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Promise>> {
        self.by_uri
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// `type/subtype` in lowercase, without parameters.
fn essence(mime_type: &str) -> String {
    mime_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_promise_binds_and_an_expired_one_does_not() {
        let promises = Promises::default();
        promises.record(
            "a://x",
            Some(5),
            Some("text/plain"),
            Duration::from_secs(60),
        );
        promises.record("a://y", Some(5), None, Duration::ZERO);
        promises.record("a://z", Some(5), None, Duration::from_millis(1));
        assert!(
            promises
                .check("a://x", 5, Some("Text/Plain; charset=utf-8"))
                .is_ok()
        );
        assert!(
            promises
                .check("a://x", 6, None)
                .unwrap_err()
                .contains("5 bytes")
        );
        assert!(promises.check("a://x", 5, Some("image/png")).is_err());
        assert!(promises.check("a://y", 9, None).is_ok());
        std::thread::sleep(Duration::from_millis(5));
        assert!(promises.check("a://z", 9, None).is_ok());
        assert!(promises.check("a://unlisted", 9, None).is_ok());
    }
}
