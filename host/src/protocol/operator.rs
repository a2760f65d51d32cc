//! What the operator's console asks of the MCP face: a page of the
//! resources or templates a client would list, and a read as that client
//! would get it, through the very code that answers the client (its scope's
//! decisions, the conversion to MCP results, the response cache and the
//! audit log, where the console's reads are recorded `via` `console`). The
//! client's rate limit is not spent: the operator looked, the client did
//! not ask. Results are those of the newest revision, without cache hints.

use rmcp::model::{
    ErrorData, ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult,
};

use super::{ReadRefusal, ResmuxServer, contents, error_data, parse_uri};
use crate::access::Client;
use crate::namespace::{Action, Verdict};

/// What the audit log says the console's reads came through.
const VIA_CONSOLE: &str = "console";

impl ResmuxServer {
    /// One page of resources, as `client` lists them.
    pub async fn resources_seen_by(
        &self,
        client: &Client,
        cursor: Option<&str>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(self.resources_for(client, cursor).await?.0)
    }

    /// One page of templates, as `client` lists them.
    pub async fn templates_seen_by(
        &self,
        client: &Client,
        cursor: Option<&str>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(self.templates_for(client, cursor).await?.0)
    }

    /// `uri`, read as `client` would get it (a refused URI reads as one
    /// that does not exist), and audited.
    pub async fn read_seen_by(
        &self,
        client: &Client,
        uri: &str,
    ) -> Result<ReadResourceResult, ErrorData> {
        let read = self
            .read_admitted(client, uri, VIA_CONSOLE, Ok(()))
            .await
            .map_err(|refusal| match refusal {
                ReadRefusal::Namespace(error) => error_data(error),
                ReadRefusal::RateLimited(reason) | ReadRefusal::Unaudited(reason) => {
                    ErrorData::internal_error(reason, None)
                }
            })?;
        Ok(ReadResourceResult::new(
            read.contents.into_iter().map(contents).collect(),
        ))
    }
}

/// What `client`'s scope decides on reading `uri`, and which policies
/// decided, as `resmux policy check` says it; an error for a URI that does
/// not parse.
pub fn read_decision(client: &Client, uri: &str) -> Result<Verdict, ErrorData> {
    let uri = parse_uri(uri).map_err(error_data)?;
    Ok(client.scope.decide(Action::Read, || uri.canonical()))
}
