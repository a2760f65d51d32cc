//! Plugins on their way: the schemes whose plugins are still loading (at
//! start, while their components compile), and those whose plugin failed to
//! load, with the reason. A request in a scheme still loading waits for its
//! plugin, within a bound, rather than failing as if the scheme were
//! unknown; once the plugin is mounted the request goes on, and if it fails
//! to load the request is told why. A failure is remembered until a plugin
//! is mounted under the scheme.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

/// Where the plugin of one expected scheme stands.
#[derive(Debug, Clone)]
enum Arrival {
    Loading,
    Mounted,
    /// It did not load; the reason names the plugin's file.
    Failed(Arc<str>),
}

/// What a wait for a scheme's plugin came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// No plugin was expected under the scheme.
    Unexpected,
    Mounted,
    Failed(Arc<str>),
    /// Still loading when the wait's patience ran out.
    StillLoading,
}

/// The expected schemes, each with a channel that says when its plugin
/// arrived.
#[derive(Default)]
pub struct Arrivals {
    expected: Mutex<HashMap<String, watch::Sender<Arrival>>>,
}

impl Arrivals {
    /// A plugin for `scheme` is loading.
    pub fn expect(&self, scheme: &str) {
        self.lock()
            .insert(scheme.to_owned(), watch::Sender::new(Arrival::Loading));
    }

    /// A plugin was mounted under `scheme`: whoever waits for it goes on,
    /// and an earlier failure is forgotten.
    pub fn mounted(&self, scheme: &str) {
        if let Some(arrival) = self.lock().remove(scheme) {
            arrival.send_replace(Arrival::Mounted);
        }
    }

    /// The plugin expected under `scheme` did not load, for `reason`.
    pub fn failed(&self, scheme: &str, reason: &str) {
        if let Some(arrival) = self.lock().get(scheme) {
            arrival.send_replace(Arrival::Failed(reason.into()));
        }
    }

    /// Whether a plugin for `scheme` is loading now.
    pub fn is_loading(&self, scheme: &str) -> bool {
        self.lock()
            .get(scheme)
            .is_some_and(|arrival| matches!(*arrival.borrow(), Arrival::Loading))
    }

    /// Waits, for at most `patience`, until the plugin expected under
    /// `scheme` is mounted or has failed.
    pub async fn wait(&self, scheme: &str, patience: Duration) -> Waited {
        let Some(mut arrival) = self.lock().get(scheme).map(watch::Sender::subscribe) else {
            return Waited::Unexpected;
        };
        let settled = tokio::time::timeout(
            patience,
            arrival.wait_for(|now| !matches!(now, Arrival::Loading)),
        )
        .await
        .map(|settled| settled.map(|now| Arrival::clone(&now)));
        match settled {
            Ok(Ok(Arrival::Failed(reason))) => Waited::Failed(reason),
            // The sender is dropped only once the plugin is mounted.
            Ok(_) => Waited::Mounted,
            Err(_) => Waited::StillLoading,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, watch::Sender<Arrival>>> {
        self.expected.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATIENCE: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn a_wait_ends_when_the_plugin_is_mounted() {
        let arrivals = Arrivals::default();
        arrivals.expect("slow");
        assert!(arrivals.is_loading("slow"));
        // The wait is under way (its first poll is pending) when the plugin
        // is mounted.
        let mount = async {
            tokio::task::yield_now().await;
            arrivals.mounted("slow");
        };
        let (waited, ()) = tokio::join!(arrivals.wait("slow", PATIENCE), mount);
        assert_eq!(waited, Waited::Mounted);
        assert!(!arrivals.is_loading("slow"));
        assert_eq!(arrivals.wait("slow", PATIENCE).await, Waited::Unexpected);
    }

    #[tokio::test]
    async fn a_failure_reaches_every_wait_until_a_plugin_is_mounted() {
        let arrivals = Arrivals::default();
        arrivals.expect("broken");
        arrivals.failed("broken", "broken.wasm: not a component");
        let failed = Waited::Failed("broken.wasm: not a component".into());
        assert_eq!(arrivals.wait("broken", PATIENCE).await, failed);
        assert!(!arrivals.is_loading("broken"));
        arrivals.mounted("broken");
        assert_eq!(arrivals.wait("broken", PATIENCE).await, Waited::Unexpected);
    }

    #[tokio::test]
    async fn a_wait_gives_up_after_its_patience() {
        let arrivals = Arrivals::default();
        arrivals.expect("stuck");
        assert_eq!(
            arrivals.wait("stuck", Duration::from_millis(20)).await,
            Waited::StillLoading
        );
        assert_eq!(arrivals.wait("other", PATIENCE).await, Waited::Unexpected);
    }
}
