//! Read rate limits that replicas share through Redis (`serve --redis`):
//! each tokens-file client's `reads_per_minute` holds for all replicas
//! together, not for each. One Lua script takes a read atomically in the
//! store (GCRA, the algorithm governor uses for the limit of one replica,
//! with the same burst: a minute's reads, in µs), on Redis's clock, so
//! replicas' clocks need not agree. Redis 5 or later (scripts replicated by
//! their effects, so they may read the clock).
//!
//! The store is a convenience, never a dependency: when it cannot answer
//! within [`STORE_PATIENCE`], each replica holds the client to its own
//! limit (so the replicas together admit about their number times it, on
//! top of what the store had admitted), says
//! so once in the log and in `resmux_rate_limit_store_errors`, asks the
//! store again after [`RETRY_AFTER`], and says so once it answers again.

use std::num::NonZeroU32;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// How long a read waits for the store before its replica decides alone.
const STORE_PATIENCE: Duration = Duration::from_millis(250);

/// How long replicas decide alone after the store failed to answer.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// GCRA: KEYS[1] holds the theoretical arrival time of the client's next
/// read, in µs on Redis's clock (below 2^53, so exact in Lua's doubles).
/// ARGV[1] is the µs one read costs, ARGV[2] the µs of reads a client may
/// run ahead (the burst). Returns 0 when the read is taken, else the ms to
/// wait.
const TAKE_A_READ: &str = r"
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000000 + tonumber(now[2])
local cost, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local due = math.max(tonumber(redis.call('GET', KEYS[1]) or now), now) + cost
if due - now > burst then
    return math.max(math.ceil((due - now - burst) / 1000), 1)
end
redis.call('SET', KEYS[1], string.format('%.0f', due), 'PX', math.ceil((due - now) / 1000))
return 0
";

/// The store every replica takes reads from.
pub struct SharedLimits {
    connection: ConnectionManager,
    script: redis::Script,
    /// Where the store is, for the log (without a password).
    address: String,
    /// Set while the store fails: it is not asked again until then.
    retry_at: Mutex<Option<Instant>>,
}

impl SharedLimits {
    /// The store at `url` (`redis://[:PASSWORD@]HOST:PORT/DB`); nothing is
    /// sent until the first read.
    pub fn open(url: &str) -> Result<Self> {
        let client =
            redis::Client::open(url).context("--redis takes redis://[:PASSWORD@]HOST:PORT/DB")?;
        let address = client.get_connection_info().addr().to_string();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(STORE_PATIENCE))
            .set_response_timeout(Some(STORE_PATIENCE))
            .set_number_of_retries(1);
        let connection = ConnectionManager::new_lazy_with_config(client, config)
            .with_context(|| format!("cannot use Redis at {address}"))?;
        Ok(Self {
            connection,
            script: redis::Script::new(TAKE_A_READ),
            address,
            retry_at: Mutex::new(None),
        })
    }

    /// Takes one of `client`'s `per_minute` reads: `Some(None)` when it is
    /// taken, `Some(Some(wait))` when the client must wait, `None` when the
    /// store cannot say.
    pub async fn take(&self, client: &str, per_minute: NonZeroU32) -> Option<Option<Duration>> {
        let failing = *self.lock();
        if failing.is_some_and(|retry_at| Instant::now() < retry_at) {
            return None;
        }
        let cost_us = (60_000_000 / u64::from(per_minute.get())).max(1);
        let burst_us = cost_us * u64::from(per_minute.get());
        let mut connection = self.connection.clone();
        let mut invocation = self.script.key(format!("resmux:reads:{client}"));
        invocation.arg(cost_us).arg(burst_us);
        let answer: Result<u64, String> =
            tokio::time::timeout(STORE_PATIENCE, invocation.invoke_async(&mut connection))
                .await
                .map_err(|_| format!("no answer within {} ms", STORE_PATIENCE.as_millis()))
                .and_then(|answered| answered.map_err(|error| error.to_string()));
        match answer {
            Ok(wait_ms) => {
                if failing.is_some() {
                    self.answered_again();
                }
                Some((wait_ms > 0).then(|| Duration::from_millis(wait_ms)))
            }
            Err(error) => {
                self.failed(&error);
                None
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Instant>> {
        self.retry_at.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn answered_again(&self) {
        if self.lock().take().is_some() {
            tracing::info!(
                redis = %self.address,
                "rate limits are shared by the replicas again"
            );
        }
    }

    fn failed(&self, error: &str) {
        crate::telemetry::metrics().rate_limit_store_errors.inc();
        let mut retry_at = self.lock();
        if retry_at.is_none() {
            tracing::warn!(
                redis = %self.address,
                %error,
                "the rate limit store does not answer: each replica holds clients to their \
                 whole limit on its own until it does"
            );
        }
        *retry_at = Some(Instant::now() + RETRY_AFTER);
    }
}
