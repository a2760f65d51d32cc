//! {{name}}: a resmux plugin. It serves `{{name}}://hello` and the template
//! `{{name}}://hello/{who}`, completes `who`, and reports no changes.
//! Replace what it serves; keep every function.

use resmux_sdk::{
    ChangeReport, Completion, CompletionRequest, Config, Content, Error, Plugin, PluginInfo,
    ReadResult, Resource, ResourcePage, Template, TemplatePage,
};

/// Names `who` completes to.
const NAMES: &[&str] = &["ada", "alan", "grace", "linus"];

struct Hello {
    greeting: String,
}

impl Plugin for Hello {
    fn about() -> PluginInfo {
        PluginInfo::new("{{name}}", env!("CARGO_PKG_VERSION"), "Greets whoever asks")
    }

    fn init(mut config: Config) -> Result<Self, Error> {
        let greeting = config.text("greeting").unwrap_or_else(|| "Hello".into());
        config.finish()?;
        Ok(Hello { greeting })
    }

    fn list(&self, cursor: Option<String>) -> Result<ResourcePage, Error> {
        let resources = [Resource {
            mime_type: Some("text/plain".into()),
            ..Resource::new("hello", "hello")
        }];
        let (page, next_cursor) = resmux_sdk::paginate(&resources, cursor, 100)?;
        Ok(ResourcePage {
            next_cursor,
            ..ResourcePage::last(page.to_vec())
        })
    }

    fn templates(&self, cursor: Option<String>) -> Result<TemplatePage, Error> {
        resmux_sdk::no_cursor(cursor)?;
        Ok(TemplatePage::last(vec![Template {
            mime_type: Some("text/plain".into()),
            description: Some("A greeting for someone".into()),
            ..Template::new("hello/{who}", "greeting")
        }]))
    }

    fn read(&self, path: String) -> Result<ReadResult, Error> {
        let who = match path.as_str() {
            "hello" => "world",
            _ => path
                .strip_prefix("hello/")
                .filter(|who| !who.is_empty() && !who.contains('/'))
                .ok_or_else(|| Error::NotFound(format!("{{name}} serves no {path:?}")))?,
        };
        let text = format!("{}, {who}!", self.greeting);
        Ok(ReadResult::one(Content::text(path, "text/plain", text)))
    }

    fn complete(&self, request: CompletionRequest) -> Result<Completion, Error> {
        if (request.path_template.as_str(), request.argument.as_str()) != ("hello/{who}", "who") {
            return Err(Error::InvalidInput(format!(
                "{:?} has no completion for {:?}",
                request.path_template, request.argument
            )));
        }
        let values: Vec<String> = NAMES
            .iter()
            .filter(|name| name.starts_with(&request.value))
            .map(|name| name.to_string())
            .collect();
        Ok(Completion {
            total: Some(values.len() as u32),
            values,
            has_more: false,
        })
    }

    fn changes(&self, _since: Option<String>) -> Result<ChangeReport, Error> {
        // What this plugin serves never changes.
        Ok(ChangeReport {
            token: "0".into(),
            listing_changed: false,
            changed_paths: Vec::new(),
        })
    }
}

resmux_sdk::export!(Hello);
