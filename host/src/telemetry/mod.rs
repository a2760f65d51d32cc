//! What resmux tells operators about itself: [`metrics`] (one registry every
//! layer records into, served by the transport at `/metrics`), [`figures`]
//! (per-plugin rates and quantiles between two samples of them), [`board`]
//! (each plugin's state, origin and grants, and the recent events, for the
//! console), [`retrying`] (the plugins to be tried again, for `/readyz`), [`traces`] (OTLP export and the client's trace context) and
//! [`logs`] (stderr that never stalls serving). A leaf like
//! [`crate::contract`]: it depends on no other layer, and every layer may
//! record into it.

pub mod board;
pub mod figures;
pub mod logs;
pub mod metrics;
pub mod retrying;
pub mod traces;

pub use board::board;
pub use metrics::metrics;
