//! What the operator's console asks of the MCP face besides a client's
//! listing pages ([`ResmuxServer::resources_for`] and
//! [`ResmuxServer::templates_for`]): a read as a client would get it, through
//! the very code that answers the client (its scope's decision, the
//! response cache, the conversion to an MCP result and the audit log, where
//! it is recorded with `"via": "console"`), with the decision and the
//! policies behind it. The client's rate limit is not spent: the operator
//! looked, the client did not ask.

use rmcp::model::{ErrorData, ReadResourceResult};

use super::{ReadRefusal, ResmuxServer, read_result};
use crate::access::Client;
use crate::namespace::Verdict;

/// What the audit log says the console's reads came through.
const VIA_CONSOLE: &str = "console";

impl ResmuxServer {
    /// `uri`, read as `client` would get it (a refused URI reads as one
    /// that does not exist), and audited; with the access decision, unless
    /// the URI does not parse.
    pub async fn read_seen_by(
        &self,
        client: &Client,
        uri: &str,
    ) -> (Option<Verdict>, Result<ReadResourceResult, ErrorData>) {
        let (verdict, read) = self
            .read_decided(&client.without_read_limit(), uri, VIA_CONSOLE)
            .await;
        let result = read.map(read_result).map_err(ReadRefusal::into_error);
        (verdict, result)
    }
}
