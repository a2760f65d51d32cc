//! Who may use the MCP endpoint when the operator names its clients (an
//! access list or an OAuth issuer): each request's bearer token names its
//! client, its connection is counted as that client's, and a legacy
//! session belongs to the client that opened it ([`super::sessions`]).

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::challenge;
use super::connections::Admitted;
use super::http_reads::SESSION_HEADER;
use super::listener::bearer;
use super::sessions::{MAX_SESSIONS_PER_CLIENT, SessionOwners};
use crate::access::{Admission, Client};

/// The clients allowed in, and the sessions each holds.
pub(crate) struct Gate {
    access: Arc<Admission>,
    sessions: SessionOwners,
}

impl Gate {
    pub(super) fn new(access: Arc<Admission>, sessions: SessionOwners) -> Self {
        Self { access, sessions }
    }
}

/// Lets a request in as the client whose bearer token it carries, without
/// the token, or answers with a challenge naming what was wrong
/// ([`challenge`]). Its connection counts as that client's from now: past
/// the client's share, the client's connection that has waited longest is
/// closed to make room, and when all of them are busy with requests the
/// request is answered 429 and its connection closed. A request on a
/// session another client opened is answered 404, as for a session that
/// does not exist.
pub(super) async fn authenticate<Answer>(
    gate: &Gate,
    mut request: Request,
    serve: impl FnOnce(Request) -> Answer,
) -> Response
where
    Answer: Future<Output = Response>,
{
    let presented = bearer(request.headers()).map(str::to_owned);
    let oauth = gate.access.oauth.as_ref();
    let Some(token) = presented else {
        return challenge::refusal(oauth, None);
    };
    let client = match gate.access.admit(&token).await {
        Ok(client) => client,
        Err(refusal) => {
            tracing::warn!("refused a request: {refusal}");
            return challenge::refusal(oauth, Some(&refusal));
        }
    };
    if let Some(admitted) = request.extensions().get::<Arc<Admitted>>()
        && let Err(share) = admitted.attribute(&client.name)
    {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::CONNECTION, "close")],
            format!(
                "client {} holds {share} connections busy with requests, the most one client may hold; finish one first\n",
                client.name
            ),
        )
            .into_response();
    }
    request.headers_mut().remove(header::AUTHORIZATION);
    let session = request
        .headers()
        .get(&SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session
        && !gate.sessions.may_use(id, &client.name)
    {
        tracing::warn!(client = %client.name, "refused a request on a session another client opened");
        return (StatusCode::NOT_FOUND, "session not found").into_response();
    }
    let closing = request.method() == axum::http::Method::DELETE;
    request.extensions_mut().insert(client.clone());
    let response = serve(request).await;
    match session {
        Some(id) if closing && response.status().is_success() => gate.sessions.unbind(&id),
        Some(_) => {}
        None => return bind_new_session(gate, &client, response).await,
    }
    response
}

/// Binds the session a response opened (if it opened one) to `client`, or
/// answers 429 when the client holds its most sessions already.
async fn bind_new_session(gate: &Gate, client: &Client, response: Response) -> Response {
    let Some(id) = response
        .headers()
        .get(&SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
    else {
        return response;
    };
    if gate.sessions.bind(id, &client.name).await {
        return response;
    }
    tracing::warn!(client = %client.name, "refused a session: the client holds {MAX_SESSIONS_PER_CLIENT} already");
    (
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "client {} holds {MAX_SESSIONS_PER_CLIENT} sessions, the most allowed; close one first",
            client.name
        ),
    )
        .into_response()
}
