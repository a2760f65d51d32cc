//! Host bindings of `wit/provider.wit`, and their conversion into the
//! contract types the rest of the host speaks.

use crate::contract;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "resmux:provider/plugin",
    exports: { default: async },
});

pub use self::exports::resmux::provider::provider::Guest;
use self::resmux::provider::types as wit;

/// The longest error message of a plugin passed on; longer ones are cut.
pub const MAX_ERROR_BYTES: usize = 4096;

impl From<wit::Error> for contract::ProviderError {
    fn from(error: wit::Error) -> Self {
        match error {
            wit::Error::NotFound(message) => Self::NotFound(cut(message)),
            wit::Error::InvalidInput(message) => Self::InvalidInput(cut(message)),
            wit::Error::Denied(message) => Self::Denied(cut(message)),
            wit::Error::Unavailable(message) => Self::Unavailable(cut(message)),
            wit::Error::Internal(message) => Self::Internal(cut(message)),
        }
    }
}

/// Cuts an error message to [`MAX_ERROR_BYTES`] (at a character boundary),
/// saying how much was cut.
fn cut(mut message: String) -> String {
    if message.len() <= MAX_ERROR_BYTES {
        return message;
    }
    let end = message.floor_char_boundary(MAX_ERROR_BYTES);
    let cut = message.len() - end;
    message.truncate(end);
    message.push_str(&format!("... [{cut} more bytes cut by resmux]"));
    message
}

impl From<wit::CacheHint> for contract::CacheHint {
    fn from(hint: wit::CacheHint) -> Self {
        Self {
            ttl_ms: hint.ttl_ms,
            scope: match hint.scope {
                wit::CacheScope::Public => contract::CacheScope::Public,
                wit::CacheScope::Private => contract::CacheScope::Private,
            },
        }
    }
}

impl From<wit::Annotations> for contract::Annotations {
    fn from(annotations: wit::Annotations) -> Self {
        Self {
            audience: annotations
                .audience
                .into_iter()
                .map(|role| match role {
                    wit::Role::User => contract::Role::User,
                    wit::Role::Assistant => contract::Role::Assistant,
                })
                .collect(),
            priority: annotations.priority,
            last_modified: annotations.last_modified,
        }
    }
}

impl From<wit::Icon> for contract::Icon {
    fn from(icon: wit::Icon) -> Self {
        Self {
            src: icon.src,
            mime_type: icon.mime_type,
            sizes: icon.sizes,
            theme: icon.theme.map(|theme| match theme {
                wit::IconTheme::Light => contract::IconTheme::Light,
                wit::IconTheme::Dark => contract::IconTheme::Dark,
            }),
        }
    }
}

fn icons(icons: Vec<wit::Icon>) -> Vec<contract::Icon> {
    icons.into_iter().map(Into::into).collect()
}

impl From<wit::Resource> for contract::ResourceEntry {
    fn from(resource: wit::Resource) -> Self {
        Self {
            path: resource.path,
            size: resource.size,
            metadata: contract::Metadata {
                name: resource.name,
                title: resource.title,
                description: resource.description,
                mime_type: resource.mime_type,
                annotations: resource.annotations.map(Into::into),
                icons: icons(resource.icons),
                meta: resource.meta,
            },
        }
    }
}

impl From<wit::Template> for contract::TemplateEntry {
    fn from(template: wit::Template) -> Self {
        Self {
            path_template: template.path_template,
            metadata: contract::Metadata {
                name: template.name,
                title: template.title,
                description: template.description,
                mime_type: template.mime_type,
                annotations: template.annotations.map(Into::into),
                icons: icons(template.icons),
                meta: template.meta,
            },
        }
    }
}

impl From<wit::ResourcePage> for contract::Page<contract::ResourceEntry> {
    fn from(page: wit::ResourcePage) -> Self {
        Self {
            items: page.resources.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
            cache: page.cache.map(Into::into),
        }
    }
}

impl From<wit::TemplatePage> for contract::Page<contract::TemplateEntry> {
    fn from(page: wit::TemplatePage) -> Self {
        Self {
            items: page.templates.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
            cache: page.cache.map(Into::into),
        }
    }
}

impl From<wit::ReadResult> for contract::ReadResult {
    fn from(result: wit::ReadResult) -> Self {
        Self {
            contents: result
                .contents
                .into_iter()
                .map(|content| contract::Content {
                    path: content.path,
                    mime_type: content.mime_type,
                    body: match content.body {
                        wit::Body::Text(text) => contract::Body::Text(text),
                        wit::Body::Blob(bytes) => contract::Body::Blob(bytes),
                    },
                    meta: content.meta,
                })
                .collect(),
            cache: result.cache.map(Into::into),
        }
    }
}

impl From<contract::CompletionRequest> for wit::CompletionRequest {
    fn from(request: contract::CompletionRequest) -> Self {
        Self {
            path_template: request.path_template,
            argument: request.argument,
            value: request.value,
            context: request.context,
        }
    }
}

impl From<wit::Completion> for contract::Completion {
    fn from(completion: wit::Completion) -> Self {
        Self {
            values: completion.values,
            total: completion.total,
            has_more: completion.has_more,
        }
    }
}

impl From<wit::ChangeReport> for contract::ChangeReport {
    fn from(report: wit::ChangeReport) -> Self {
        Self {
            token: report.token,
            listing_changed: report.listing_changed,
            changed_paths: report.changed_paths,
        }
    }
}

pub use wit::PluginInfo;
