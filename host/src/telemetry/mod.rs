//! What resmux tells operators about itself: [`metrics`] (one registry every
//! layer records into, served by the transport at `/metrics`), [`traces`]
//! (OTLP export and the client's trace context) and [`logs`] (stderr that
//! never stalls serving). A leaf like [`crate::contract`]: it depends on no
//! other layer, and every layer may record into it.

pub mod logs;
pub mod metrics;
pub mod traces;

pub use metrics::metrics;
