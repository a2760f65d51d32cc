//! The limits one plugin runs under: memory, time and answer size.
//!
//! The runtime applies memory and time to every call; the namespace applies the
//! size limits to every answer before it reaches a client.

use std::time::Duration;

use anyhow::{Result, bail};
use serde::Deserialize;

/// The `[limits]` section of a manifest; every field has a default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Linear memory a plugin instance may grow to, in MiB.
    pub memory_mib: u64,
    /// Wall-clock time one call may take, in milliseconds.
    pub timeout_ms: u64,
    /// Total bytes of all contents of one read.
    pub max_read_bytes: u64,
    /// Entries on one page of a listing.
    pub max_page_entries: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mib: 256,
            timeout_ms: 10_000,
            max_read_bytes: 16 * 1024 * 1024,
            max_page_entries: 1_000,
        }
    }
}

impl Limits {
    /// Rejects limits that could never let a call succeed.
    pub fn validate(&self) -> Result<()> {
        if self.memory_mib == 0 || self.timeout_ms == 0 || self.max_page_entries == 0 {
            bail!("limits memory_mib, timeout_ms and max_page_entries must be above zero");
        }
        Ok(())
    }

    pub fn memory_bytes(&self) -> usize {
        usize::try_from(self.memory_mib.saturating_mul(1024 * 1024)).unwrap_or(usize::MAX)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}
