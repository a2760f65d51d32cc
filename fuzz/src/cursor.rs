//! Target `cursor`: cursors as a client may send them. A forged or cut
//! cursor, or one sealed with another key or for the other listing, is
//! refused; a sealed position opens as itself; and an authentic cursor that
//! holds any position at all (as a replica with the same secret could have
//! sealed) walks a real namespace without a panic, within the listing.

use std::sync::LazyLock;

use arbitrary::Unstructured;
use resmux::contract::{Metadata, Page, ResourceEntry, TemplateEntry};
use resmux::namespace::cursor::{CursorSeal, DEFAULT_ROTATION, Listing, Position};
use resmux::namespace::{Namespace, Scope};

use crate::provider::{self, PAGE_SIZE, SCHEME, Scripted};

static SEAL: LazyLock<CursorSeal> =
    LazyLock::new(|| seal("fuzz secret one, long enough to be taken"));
static OTHER_SEAL: LazyLock<CursorSeal> =
    LazyLock::new(|| seal("fuzz secret two, long enough to be taken"));

fn seal(secret: &str) -> CursorSeal {
    CursorSeal::shared(secret, DEFAULT_ROTATION).expect("a valid secret")
}

pub fn run(data: &[u8]) {
    let mut input = Unstructured::new(data);
    match input.int_in_range(0u8..=2).unwrap_or(0) {
        0 => forged(input.take_rest()),
        1 => sealed(&mut input),
        _ => walked(&mut input),
    }
}

fn forged(bytes: &[u8]) {
    let cursor = String::from_utf8_lossy(bytes);
    for listing in [Listing::Resources, Listing::Templates] {
        if let Ok(position) = SEAL.open(&cursor, listing) {
            panic!("a forged cursor {cursor:?} opened as {position:?}");
        }
    }
}

fn position(input: &mut Unstructured) -> Position {
    Position {
        listing: if input.arbitrary().unwrap_or(false) {
            Listing::Templates
        } else {
            Listing::Resources
        },
        scheme: if input.arbitrary().unwrap_or(false) {
            SCHEME.to_owned()
        } else {
            input.arbitrary().unwrap_or_default()
        },
        snapshot: input.arbitrary().unwrap_or_default(),
        offset: input.arbitrary().unwrap_or_default(),
        inner: input.arbitrary().unwrap_or_default(),
        skip: input.arbitrary().unwrap_or_default(),
    }
}

fn sealed(input: &mut Unstructured) {
    let position = position(input);
    let other_listing = match position.listing {
        Listing::Resources => Listing::Templates,
        Listing::Templates => Listing::Resources,
    };
    let cursor = SEAL.seal(&position);
    assert_eq!(SEAL.open(&cursor, position.listing).as_ref(), Ok(&position));
    assert!(
        SEAL.open(&cursor, other_listing).is_err(),
        "a cursor opened for the other listing"
    );
    assert!(
        OTHER_SEAL.open(&cursor, position.listing).is_err(),
        "a cursor opened under another key"
    );
    let cut = input.choose_index(cursor.len()).unwrap_or(0);
    assert!(
        SEAL.open(&cursor[..cut], position.listing).is_err(),
        "a cut cursor opened"
    );
    let mut changed = cursor.into_bytes();
    let at = input.choose_index(changed.len()).unwrap_or(0);
    let replacement = *input
        .choose(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        .unwrap_or(&b'A');
    if changed[at] != replacement {
        changed[at] = replacement;
        let changed = String::from_utf8(changed).expect("base64 is ASCII");
        assert!(
            SEAL.open(&changed, position.listing).is_err(),
            "an altered cursor {changed} opened"
        );
    }
}

fn walked(input: &mut Unstructured) {
    let position = position(input);
    let count = input.int_in_range(0..=3 * PAGE_SIZE).unwrap_or(0);
    let paths: Vec<String> = (0..count).map(|index| format!("r{index}")).collect();
    let page = |index: usize| Metadata {
        name: format!("entry {index}"),
        ..Metadata::default()
    };
    let scripted = Scripted {
        list: Ok(Page {
            items: paths
                .iter()
                .enumerate()
                .map(|(index, path)| ResourceEntry {
                    path: path.clone(),
                    size: None,
                    metadata: page(index),
                })
                .collect(),
            next_cursor: None,
            cache: None,
        }),
        templates: Ok(Page {
            items: paths
                .iter()
                .enumerate()
                .map(|(index, path)| TemplateEntry {
                    path_template: format!("{path}/{{x}}"),
                    metadata: page(index),
                })
                .collect(),
            next_cursor: None,
            cache: None,
        }),
        ..Scripted::default()
    };
    let namespace = provider::mounted(
        Namespace::new(PAGE_SIZE)
            .with_cursor_seal(seal("fuzz secret one, long enough to be taken")),
        scripted,
    );
    let cursor = SEAL.seal(&position);
    provider::runtime().block_on(async {
        if let Ok(listed) = namespace.list(Some(&cursor), &Scope::All).await {
            assert!(listed.items.len() <= PAGE_SIZE);
            for resource in &listed.items {
                assert!(
                    paths.iter().any(|path| resource.uri.path() == path),
                    "a walk from {position:?} listed {:?}, which the plugin never listed",
                    resource.uri
                );
            }
        }
        let _ = namespace.templates(Some(&cursor), &Scope::All).await;
    });
}
