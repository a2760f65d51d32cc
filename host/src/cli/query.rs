//! The namespace from a shell: `resmux list`, `templates`, `read`,
//! `complete` and `changes`, printed for people.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use super::{FolderArgs, namespace};
use resmux::contract::Body;
use resmux::namespace::uri::Uri;
use resmux::namespace::{Listed, NamespaceError, Scope};

pub async fn list(folder: FolderArgs) -> Result<()> {
    let namespace = namespace(&folder).await?;
    print_every_page(
        async |cursor| namespace.list(cursor.as_deref(), &Scope::All).await,
        |resource| {
            let mime = resource.metadata.mime_type.as_deref().unwrap_or("-");
            let size = resource.size.map_or("-".into(), |size| size.to_string());
            format!(
                "{}\t{}\t{mime}\t{size}",
                resource.uri, resource.metadata.name
            )
        },
    )
    .await
}

pub async fn templates(folder: FolderArgs) -> Result<()> {
    let namespace = namespace(&folder).await?;
    print_every_page(
        async |cursor| namespace.templates(cursor.as_deref(), &Scope::All).await,
        |template| {
            let description = template.metadata.description.as_deref().unwrap_or("");
            let name = &template.metadata.name;
            format!("{}\t{name}\t{description}", template.uri_template)
        },
    )
    .await
}

/// Fetches page after page until the last, printing one line per entry.
async fn print_every_page<T>(
    mut page: impl AsyncFnMut(Option<String>) -> Result<Listed<T>, NamespaceError>,
    line: impl Fn(&T) -> String,
) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    let mut cursor = None;
    loop {
        let listed = page(cursor).await?;
        for item in &listed.items {
            writeln!(stdout, "{}", line(item))?;
        }
        cursor = listed.next_cursor;
        if cursor.is_none() {
            return Ok(());
        }
    }
}

pub async fn read(folder: FolderArgs, uri: &str, output: Option<&Path>) -> Result<()> {
    let namespace = namespace(&folder).await?;
    let uri =
        Uri::parse(uri).map_err(|reason| anyhow::anyhow!("invalid URI {uri:?}: it {reason}"))?;
    let read = namespace.read(&uri).await?;
    if let Some(output) = output {
        let mut file = std::fs::File::create(output)
            .with_context(|| format!("cannot create {}", output.display()))?;
        for content in &read.contents {
            match &content.body {
                Body::Text(text) => file.write_all(text.as_bytes())?,
                Body::Blob(bytes) => file.write_all(bytes)?,
            }
        }
        return Ok(());
    }
    let mut stdout = std::io::stdout().lock();
    let several = read.contents.len() > 1;
    for content in read.contents {
        let mime = content.mime_type.as_deref().unwrap_or("unknown type");
        match content.body {
            Body::Text(text) => {
                if several {
                    writeln!(stdout, "--- {} ({mime})", content.uri)?;
                }
                write!(stdout, "{text}")?;
                if !text.ends_with('\n') {
                    writeln!(stdout)?;
                }
            }
            Body::Blob(bytes) => {
                writeln!(
                    stdout,
                    "--- {} ({mime}, {} bytes of binary; use --output FILE to save them)",
                    content.uri,
                    bytes.len()
                )?;
                write_hex_preview(&mut stdout, &bytes)?;
            }
        }
    }
    Ok(())
}

pub async fn complete(
    folder: FolderArgs,
    template: &str,
    argument: &str,
    value: &str,
    context: Vec<(String, String)>,
) -> Result<()> {
    let target = resmux::namespace::check_completion(template, argument)?;
    let namespace = namespace(&folder).await?;
    let completion = namespace.complete(&target, value, context).await?;
    let mut stdout = std::io::stdout().lock();
    for value in &completion.values {
        writeln!(stdout, "{value}")?;
    }
    if completion.has_more {
        let total = completion
            .total
            .map_or("more".into(), |total| format!("{total} in all"));
        eprintln!(
            "({total}: only the first {} are shown)",
            completion.values.len()
        );
    }
    Ok(())
}

pub async fn changes(folder: FolderArgs, scheme: &str, since: Option<String>) -> Result<()> {
    let namespace = namespace(&folder).await?;
    let admitted = namespace.changes(scheme, since).await?;
    for reason in &admitted.refused {
        eprintln!("refused a changed path: {reason}");
    }
    let changes = admitted.value;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "token    {}", changes.token)?;
    let listing = if changes.listing_changed {
        "changed"
    } else {
        "unchanged"
    };
    writeln!(stdout, "listing  {listing}")?;
    for uri in changes.changed_uris {
        writeln!(stdout, "changed  {uri}")?;
    }
    Ok(())
}

/// Prints up to 256 bytes as offset, hex and ASCII columns.
fn write_hex_preview(out: &mut impl Write, bytes: &[u8]) -> Result<()> {
    const PREVIEW: usize = 256;
    for (row, chunk) in bytes[..bytes.len().min(PREVIEW)].chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|byte| format!("{byte:02x}")).collect();
        let ascii: String = chunk
            .iter()
            .map(|&byte| {
                if byte.is_ascii_graphic() || byte == b' ' {
                    byte as char
                } else {
                    '.'
                }
            })
            .collect();
        writeln!(out, "{:08x}  {:<47}  {ascii}", row * 16, hex.join(" "))?;
    }
    if bytes.len() > PREVIEW {
        writeln!(out, "... {} more bytes", bytes.len() - PREVIEW)?;
    }
    Ok(())
}
