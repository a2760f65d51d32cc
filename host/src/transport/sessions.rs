//! Which client opened each legacy HTTP session: a session is bound to the
//! client whose token opened it, and a request on it carrying another
//! client's token is answered as if the session did not exist. Each client
//! may hold at most [`MAX_SESSIONS_PER_CLIENT`] sessions at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

/// Sessions one client may hold open at once.
pub const MAX_SESSIONS_PER_CLIENT: usize = 64;

/// The owner of every session opened with a token.
pub struct SessionOwners {
    owners: Mutex<HashMap<String, Arc<str>>>,
    manager: Arc<LocalSessionManager>,
}

impl SessionOwners {
    pub fn new(manager: Arc<LocalSessionManager>) -> Self {
        Self {
            owners: Mutex::default(),
            manager,
        }
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<str>>> {
        self.owners
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Whether `client` may use session `id`: it opened it, or resmux does
    /// not know the session (the session manager then refuses it).
    pub fn may_use(&self, id: &str, client: &str) -> bool {
        self.owners()
            .get(id)
            .is_none_or(|owner| owner.as_ref() == client)
    }

    /// Binds the session `id` just opened to `client`, or closes it and
    /// returns false when the client already holds its most.
    pub async fn bind(&self, id: &str, client: &Arc<str>) -> bool {
        if self.held_by(client) >= MAX_SESSIONS_PER_CLIENT {
            self.forget_closed().await;
        }
        if self.held_by(client) >= MAX_SESSIONS_PER_CLIENT {
            let _ = self.manager.close_session(&Arc::from(id)).await;
            return false;
        }
        self.owners().insert(id.to_owned(), client.clone());
        true
    }

    /// Forgets a session its client closed.
    pub fn unbind(&self, id: &str) {
        self.owners().remove(id);
    }

    fn held_by(&self, client: &str) -> usize {
        self.owners()
            .values()
            .filter(|owner| owner.as_ref() == client)
            .count()
    }

    /// Forgets sessions the session manager has ended (idle, or closed).
    async fn forget_closed(&self) {
        let ids: Vec<String> = self.owners().keys().cloned().collect();
        for id in ids {
            if !matches!(
                self.manager.has_session(&Arc::from(id.as_str())).await,
                Ok(true)
            ) {
                self.unbind(&id);
            }
        }
    }
}
