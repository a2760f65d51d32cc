//! What a guarded client is told. A refused URI reads exactly like one that
//! does not exist ([`unseen`], [`hide`]), and so does any failure of a URI
//! spelt otherwise than its policy decided it; a read that answers with
//! several resources keeps only those the client may read
//! ([`readable_part`]); and completion values that name resources the client
//! may not list are left out ([`listable_values`]).

use crate::access::policy::canonical_path;
use crate::contract;
use crate::namespace::uri::{self, Uri};
use crate::namespace::{Action, NamespaceError, Outlook, Read, Scope};

/// What of `read` (of `uri`) `scope` may read: a plugin may answer one read
/// with several resources (a folder's files), and each is decided as if it
/// were read alone. Nothing left reads as nothing there.
pub fn readable_part(scope: &Scope, uri: &Uri, mut read: Read) -> Result<Read, NamespaceError> {
    let scheme = uri.scheme();
    if scope.outlook(Action::Read, scheme) == Outlook::Everything {
        return Ok(read);
    }
    // The read itself was decided already; its own content needs no second
    // decision.
    read.contents.retain(|content| {
        content.uri == uri.as_str()
            || scope
                .decide(Action::Read, scheme, uri::path_of(&content.uri))
                .permitted
    });
    match read.contents.is_empty() {
        true => Err(unseen(uri.as_str())),
        false => Ok(read),
    }
}

/// A template with all but one argument chosen.
pub struct Expansion<'a> {
    pub scheme: &'a str,
    pub path_template: &'a str,
    pub argument: &'a str,
    pub chosen: &'a [(String, String)],
}

impl Expansion<'_> {
    /// The path the template names with `argument` set to `value`: simple
    /// and reserved expressions of known arguments are filled in; any other
    /// expression stays as written.
    fn path_with(&self, value: &str) -> String {
        let mut path = String::new();
        let mut rest = self.path_template;
        while let Some((before, after)) = rest.split_once('{') {
            path.push_str(before);
            let (expression, after) = after.split_once('}').unwrap_or((after, ""));
            let name = expression.strip_prefix('+').unwrap_or(expression);
            let known = (name == self.argument).then_some(value).or_else(|| {
                self.chosen
                    .iter()
                    .find(|(chosen, _)| chosen == name)
                    .map(|(_, value)| value.as_str())
            });
            match known {
                Some(value) => path.push_str(value),
                None => path.push_str(&format!("{{{expression}}}")),
            }
            rest = after;
        }
        path.push_str(rest);
        path
    }
}

/// The values of `completion` that name something `scope` may list: a
/// value is the name of a resource, and a client is not told the names of
/// those it may not see. If any is left out, so is the total.
pub fn listable_values(
    scope: &Scope,
    template: &Expansion<'_>,
    mut completion: contract::Completion,
) -> contract::Completion {
    if scope.outlook(Action::List, template.scheme) == Outlook::Everything {
        return completion;
    }
    let offered = completion.values.len();
    completion.values.retain(|value| {
        scope
            .decide(Action::List, template.scheme, &template.path_with(value))
            .permitted
    });
    if completion.values.len() < offered {
        completion.total = None;
    }
    completion
}

/// What a request learns of a URI it may not use: the same as of one that
/// does not exist.
const UNSEEN: &str = "it does not exist, or this client may not see it";

pub fn unseen(uri: &str) -> NamespaceError {
    NamespaceError::NotFound {
        uri: uri.to_owned(),
        reason: UNSEEN.to_owned(),
    }
}

/// For a guarded client, any not-found answer reads like a refusal, so that
/// a refused URI cannot be told from one that does not exist; and so does
/// every error about a URI `asked` in another spelling than the one its
/// policy decided (escapes, dot or empty segments, a leading or trailing
/// slash). The policy decides the canonical path, but the plugin is asked
/// the spelling the client sent, and may refuse that spelling (a dot
/// segment, say) where it would find nothing: the refusal would tell a path
/// the policy permits from one it forbids.
pub fn hide(scope: &Scope, asked: &Uri, error: NamespaceError) -> NamespaceError {
    if !scope.is_guarded() {
        return error;
    }
    match error {
        NamespaceError::NotFound { uri, .. } => unseen(&uri),
        _ if canonical_path(asked.path()) != asked.path() => unseen(asked.as_str()),
        error => error,
    }
}
