//! What a guarded client is told. A refused URI reads exactly like one that
//! does not exist ([`unseen`], [`hide`]), and so does any failure of a URI
//! spelt otherwise than its policy decided it; a read that answers with
//! several resources keeps only those the client may read
//! ([`readable_part`]); and completion values that name resources the client
//! may not list are left out ([`listable_values`]).

use crate::contract;
use crate::namespace::uri::{Canonical, Uri, UriTemplate};
use crate::namespace::{Action, NamespaceError, Outlook, Read, Scope};

/// What of `read` (of `uri`) `scope` may read: a plugin may answer one read
/// with several resources (a folder's files), and each is decided as if it
/// were read alone. Nothing left reads as nothing there.
pub fn readable_part(scope: &Scope, uri: &Uri, mut read: Read) -> Result<Read, NamespaceError> {
    if scope.outlook(Action::Read, uri.scheme()) == Outlook::Everything {
        return Ok(read);
    }
    // The read itself was decided already; its own content needs no second
    // decision.
    read.contents.retain(|content| {
        content.uri == *uri
            || scope
                .decide(Action::Read, || content.uri.canonical())
                .permitted
    });
    match read.contents.is_empty() {
        true => Err(unseen(uri.as_str())),
        false => Ok(read),
    }
}

/// A template with all but one argument chosen.
pub struct Expansion<'a> {
    pub template: &'a UriTemplate,
    pub argument: &'a str,
    pub chosen: &'a [(String, String)],
}

impl Expansion<'_> {
    /// What the template names with `argument` set to `value`, as access
    /// decisions see it: simple and reserved expressions of known arguments
    /// are filled in; any other expression stays as written.
    fn canonical_with(&self, value: &str) -> Canonical {
        let mut path = String::new();
        let mut rest = self.template.path();
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
        Canonical::of(self.template.scheme(), &path)
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
    if scope.outlook(Action::List, template.template.scheme()) == Outlook::Everything {
        return completion;
    }
    let offered = completion.values.len();
    completion.values.retain(|value| {
        scope
            .decide(Action::List, || template.canonical_with(value))
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
        _ if !asked.is_canonical() => unseen(asked.as_str()),
        error => error,
    }
}
