//! Each plugin's share of its engine's instance pool: what its instances
//! may take from the slots every plugin on the engine draws from (component
//! instances and their fiber stacks, linear memories, tables), reserved
//! when the plugin is linked and given back when it is gone.
//!
//! A plugin's instances are at most its `concurrent_calls` busy ones (idle
//! instances are dropped whenever a call finds the pool short), and each
//! holds the memories and tables its component declares, which the engine
//! caps per component (`MAX_MEMORIES`, `MAX_TABLES`,
//! `MAX_CORE_INSTANCES` in `grants::limits`): no instance can make more at run time. So a
//! plugin's share is `concurrent_calls` times its component's needs, and as
//! long as the shares together fit in the pool, no plugin can take a slot
//! another plugin's new instance needs. A plugin whose share does not fit
//! now is refused with [`PoolShareFull`], which names what it needs and what
//! is left: a transient refusal, retried once others give theirs back.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use wasmtime::component::Component;

use crate::grants::limits::{MAX_MEMORIES, MAX_TABLES};

/// Slots of one kind in each of an engine's pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// Component instances, each with its fiber stack.
    pub instances: u32,
    pub memories: u32,
    pub tables: u32,
}

impl Slots {
    fn times(self, calls: u32) -> Self {
        Self {
            instances: self.instances.saturating_mul(calls),
            memories: self.memories.saturating_mul(calls),
            tables: self.tables.saturating_mul(calls),
        }
    }

    fn fits_in(self, other: Self) -> bool {
        self.instances <= other.instances
            && self.memories <= other.memories
            && self.tables <= other.tables
    }

    /// What one instance of `component` takes from the pool.
    pub fn of(component: &Component) -> Self {
        let required = component.resources_required();
        Self {
            instances: 1,
            memories: required.as_ref().map_or(MAX_MEMORIES, |r| r.num_memories),
            tables: required.as_ref().map_or(MAX_TABLES, |r| r.num_tables),
        }
    }
}

impl fmt::Display for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} instances (with their stacks), {} memories, {} tables",
            self.instances, self.memories, self.tables
        )
    }
}

/// The slots of an engine's pool not yet reserved by a plugin.
#[derive(Debug)]
pub struct PoolLedger {
    total: Slots,
    free: Mutex<Slots>,
}

/// A plugin's share is more than the pool has unreserved now.
#[derive(Debug, thiserror::Error)]
#[error(
    "its share of the instance pool ({calls} concurrent_calls × {each} an instance: {needed}) is more than the {free} the pool has unreserved of its {total}"
)]
pub struct PoolShareFull {
    calls: u32,
    each: Slots,
    needed: Slots,
    free: Slots,
    total: Slots,
}

/// A plugin's share can never fit: it asks more than the whole pool.
#[derive(Debug, thiserror::Error)]
#[error(
    "its share of the instance pool ({calls} concurrent_calls × {each} an instance: {needed}) is more than the whole pool's {total}; lower its concurrent_calls"
)]
pub struct PoolShareTooLarge {
    calls: u32,
    each: Slots,
    needed: Slots,
    total: Slots,
}

impl PoolLedger {
    pub fn new(total: Slots) -> Arc<Self> {
        Arc::new(Self {
            total,
            free: Mutex::new(total),
        })
    }

    /// Reserves `calls` instances of `each` for one plugin, until the
    /// returned share is dropped.
    pub fn reserve(self: &Arc<Self>, each: Slots, calls: u32) -> anyhow::Result<PoolShare> {
        let needed = each.times(calls);
        if !needed.fits_in(self.total) {
            return Err(PoolShareTooLarge {
                calls,
                each,
                needed,
                total: self.total,
            }
            .into());
        }
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if !needed.fits_in(*free) {
            return Err(PoolShareFull {
                calls,
                each,
                needed,
                free: *free,
                total: self.total,
            }
            .into());
        }
        free.instances -= needed.instances;
        free.memories -= needed.memories;
        free.tables -= needed.tables;
        Ok(PoolShare {
            ledger: self.clone(),
            reserved: needed,
        })
    }
}

/// One plugin's reserved slots, given back when it is dropped (when the
/// plugin and the last of its calls are gone).
#[derive(Debug)]
pub struct PoolShare {
    ledger: Arc<PoolLedger>,
    reserved: Slots,
}

impl Drop for PoolShare {
    fn drop(&mut self) {
        let mut free = self
            .ledger
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        free.instances += self.reserved.instances;
        free.memories += self.reserved.memories;
        free.tables += self.reserved.tables;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: Slots = Slots {
        instances: 1,
        memories: 1,
        tables: 2,
    };

    #[test]
    fn shares_are_given_back_and_a_full_pool_names_what_is_left() {
        let ledger = PoolLedger::new(ONE.times(10));
        let first = ledger.reserve(ONE, 8).unwrap();
        let refused = ledger.reserve(ONE, 3).unwrap_err();
        assert!(refused.is::<PoolShareFull>());
        assert!(
            refused.to_string().contains(
                "(3 concurrent_calls × 1 instances (with their stacks), 1 memories, 2 tables an instance"
            ),
            "{refused}"
        );
        assert!(
            refused.to_string().contains(
                "the 2 instances (with their stacks), 2 memories, 4 tables the pool has unreserved"
            ),
            "{refused}"
        );
        drop(first);
        let _again = ledger.reserve(ONE, 3).unwrap();
        let never = ledger.reserve(ONE, 11).unwrap_err();
        assert!(never.is::<PoolShareTooLarge>(), "{never}");
    }
}
