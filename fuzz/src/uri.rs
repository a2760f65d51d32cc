//! Target `uri`: URIs from clients, paths and templates from plugins, and
//! the canonical form the access policy decides on. A parsed URI reads back
//! as itself and is an RFC 3986 URI; a plugin's path becomes a URI a client
//! can send back; a template admitted is RFC 6570 by another parser and
//! expands to an RFC 3986 URI; a canonical path has no dot or empty segment; and however
//! a path under `drafts/` is spelt, the access policy that forbids that
//! folder refuses it.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::{Arc, LazyLock};

use arbitrary::Unstructured;
use resmux::access::policy::{AccessPolicy, ClientGuard};
use resmux::access::principal::Principal;
use resmux::namespace::uri::{Canonical, Uri, UriTemplate};
use resmux::namespace::{Action, Guard, check_completion};

use crate::arbitrary_answers::text;
use crate::mcp_schema::{rfc3986, rfc6570};

/// A guard whose policy lets everything of `fz` be read but its drafts.
static GUARD: LazyLock<Arc<ClientGuard>> = LazyLock::new(|| {
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    file.write_all(
        br#"permit(principal, action, resource in Scheme::"fz");
forbid(principal, action, resource in Scheme::"fz") when { resource.path like "drafts/*" };
"#,
    )
    .expect("the policy is written");
    let policy = AccessPolicy::build(Some(file.path()), &[], None).expect("the policy loads");
    Arc::new(policy).guard("fuzz", &Principal::of_tokens_file("fuzz", BTreeSet::new()))
});

pub fn run(data: &[u8]) {
    let mut input = Unstructured::new(data);
    let scheme: String = if input.arbitrary().unwrap_or(false) {
        "fz".into()
    } else {
        input.arbitrary().unwrap_or_default()
    };
    let path = text(&mut input);
    let whole: String = input.arbitrary().unwrap_or_default();
    let argument: String = input.arbitrary().unwrap_or_default();

    if let Ok(uri) = Uri::parse(&whole) {
        read_back(&uri);
        decided(&uri);
    }
    if let Ok(uri) = Uri::in_scheme(&scheme, &path) {
        read_back(&uri);
        decided(&uri);
        assert_eq!(uri.path(), path, "a plugin's path is kept as written");
    }
    for template in [
        UriTemplate::parse(&whole),
        UriTemplate::in_scheme(&scheme, &path),
    ]
    .into_iter()
    .flatten()
    {
        assert_eq!(
            UriTemplate::parse(template.as_str()).as_ref(),
            Ok(&template)
        );
        if let Err(why) = rfc6570(template.as_str()) {
            panic!(
                "template {:?} is no template a client can use: {why}",
                template.as_str()
            );
        }
        segments_resolved(&template.canonical());
    }
    // A completion's template and argument, as a client sends them.
    let _ = check_completion(&whole, &argument);
    segments_resolved(&Canonical::of(&scheme, &path));
}

/// A URI a client sent or a plugin listed, read back as a client would.
fn read_back(uri: &Uri) {
    assert_eq!(
        Uri::parse(uri.as_str()).as_ref(),
        Ok(uri),
        "a URI does not read back as itself"
    );
    if let Err(why) = rfc3986(uri.as_str()) {
        panic!("{:?} is not an RFC 3986 URI: {why}", uri.as_str());
    }
    let canonical = uri.canonical();
    assert_eq!(canonical.scheme(), uri.scheme());
    segments_resolved(&canonical);
    assert_eq!(uri.is_canonical(), canonical.path() == uri.path());
}

fn segments_resolved(canonical: &Canonical) {
    let path = canonical.path();
    if !path.is_empty() {
        for segment in path.split('/') {
            assert!(
                !matches!(segment, "" | "." | ".."),
                "the canonical path {path:?} keeps a {segment:?} segment"
            );
        }
    }
}

/// However it is spelt, a path the canonical form puts under `drafts/` is
/// refused, and one it puts elsewhere in `fz` is permitted.
fn decided(uri: &Uri) {
    if uri.scheme() != "fz" {
        return;
    }
    let canonical = uri.canonical();
    let verdict = GUARD.decide(Action::Read, &canonical);
    let in_drafts = canonical.path().starts_with("drafts/");
    assert_eq!(
        verdict.permitted,
        !in_drafts,
        "{:?} (canonical {:?}) was {} by a policy that forbids drafts/*",
        uri.as_str(),
        canonical.as_str(),
        if verdict.permitted {
            "permitted"
        } else {
            "refused"
        }
    );
}
