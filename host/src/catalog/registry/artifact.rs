//! What a component looks like in a registry, as the Bytecode Alliance
//! tooling (`wkg`, `oci-wasm`) publishes it: an OCI image manifest whose
//! config has the media type [`CONFIG_MEDIA_TYPE`] and whose one layer is
//! the component, [`LAYER_MEDIA_TYPE`]. Reading one: resolving a reference
//! to its manifest, refusing anything else, and downloading the component
//! by digest within its size limit.

use anyhow::{anyhow, bail};
use futures::StreamExt;
use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};

use super::manifest_read;
use super::{Pulling, Registries, sorted, sorted_manifest};

/// The media type of a component artefact's config.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";

/// The media type of its one layer, the component.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

/// Every manifest type asked for: registries such as Distribution 2.8
/// answer 404 to a request that does not accept the type stored, so lists
/// are asked for too, and then refused by name.
const ACCEPTED: [&str; 4] = [
    OCI_IMAGE_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];

/// The most memory reserved for a download before its bytes arrive.
const RESERVED: u64 = 8 * 1024 * 1024;

/// A reference resolved to one component artefact.
#[derive(Debug)]
pub struct Found {
    pub manifest_digest: String,
    pub layer: OciDescriptor,
}

impl Found {
    /// The component's SHA-256 in hex, from its layer's digest.
    pub fn component_sha256(&self) -> anyhow::Result<String> {
        sha256_hex(&self.layer.digest)
    }
}

/// The hex of a `sha256:…` digest.
fn sha256_hex(digest: &str) -> anyhow::Result<String> {
    digest
        .strip_prefix("sha256:")
        .filter(|hex| hex.len() == 64 && hex.bytes().all(|byte| byte.is_ascii_hexdigit()))
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| anyhow!("its component layer has digest {digest:?}, not a sha256 one"))
}

/// Resolves `reference` to its manifest and checks that it is one
/// component of at most `max_bytes`. A reference with a tag and a digest
/// must have the tag still name that digest.
pub async fn resolve(
    client: &Client,
    auth: &RegistryAuth,
    reference: &Reference,
    registries: &Registries,
    max_bytes: u64,
) -> Result<Found, Pulling> {
    if let (Some(tag), Some(pinned)) = (reference.tag(), reference.digest()) {
        let tagged = Reference::with_tag(
            reference.registry().to_owned(),
            reference.repository().to_owned(),
            tag.to_owned(),
        );
        let now = client
            .fetch_manifest_digest(&tagged, auth)
            .await
            .map_err(|error| sorted(error, format!("cannot look up tag {tag}")))?;
        if now != pinned {
            return Err(Pulling::Refused(anyhow!(
                "tag {tag} now names {now}, not the pinned {pinned}"
            )));
        }
    }
    let (body, manifest_digest) =
        manifest_read::pull_manifest(client, auth, reference, &ACCEPTED, registries)
            .await
            .map_err(|error| sorted_manifest(error, "cannot read its manifest".into()))?;
    let layer = component_layer(&body, max_bytes)?;
    Ok(Found {
        manifest_digest,
        layer,
    })
}

/// The one component layer of the manifest `body`, which must be an OCI
/// image manifest of a component artefact no larger than `max_bytes`.
fn component_layer(body: &[u8], max_bytes: u64) -> anyhow::Result<OciDescriptor> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Typed {
        media_type: Option<String>,
    }
    let typed: Typed = serde_json::from_slice(body)
        .map_err(|error| anyhow!("its manifest is not JSON: {error}"))?;
    match typed.media_type.as_deref() {
        Some(OCI_IMAGE_MEDIA_TYPE) => {}
        Some(list @ (OCI_IMAGE_INDEX_MEDIA_TYPE | IMAGE_MANIFEST_LIST_MEDIA_TYPE)) => bail!(
            "it is a manifest list ({list}), not a component: name the component's own manifest \
             by its digest"
        ),
        Some(other) => bail!(
            "its manifest has media type {other}, not {OCI_IMAGE_MEDIA_TYPE}: it is not a \
             component artefact"
        ),
        None => bail!(
            "its manifest names no media type; a component artefact's is {OCI_IMAGE_MEDIA_TYPE}"
        ),
    }
    let manifest: OciImageManifest = serde_json::from_slice(body)
        .map_err(|error| anyhow!("its manifest is not an OCI image manifest: {error}"))?;
    if manifest.config.media_type != CONFIG_MEDIA_TYPE {
        bail!(
            "its config has media type {}, not {CONFIG_MEDIA_TYPE}: it is not a Wasm component \
             artefact",
            manifest.config.media_type
        );
    }
    let [layer] = manifest.layers.as_slice() else {
        bail!(
            "it has {} layers; a component artefact has exactly one",
            manifest.layers.len()
        );
    };
    if layer.media_type != LAYER_MEDIA_TYPE {
        bail!(
            "its layer has media type {}, not {LAYER_MEDIA_TYPE}: it is not a component",
            layer.media_type
        );
    }
    let size = u64::try_from(layer.size)
        .map_err(|_| anyhow!("its layer claims a negative size, {}", layer.size))?;
    if size > max_bytes {
        bail!(
            "its component is {size} bytes, more than the {max_bytes} bytes [pull] \
             max_component_mib allows"
        );
    }
    sha256_hex(&layer.digest)?;
    Ok(layer.clone())
}

/// Downloads `layer` of `reference` (a digest reference) by its bare
/// digest (never from the other URLs a descriptor may name), stopping at
/// its declared size, which is at most `max_bytes`, and checks its bytes
/// against the digest.
pub async fn download(
    client: &Client,
    reference: &Reference,
    layer: &OciDescriptor,
    max_bytes: u64,
) -> Result<Vec<u8>, Pulling> {
    let declared = u64::try_from(layer.size).unwrap_or(u64::MAX).min(max_bytes);
    let mut stream = client
        .pull_blob_stream(reference, layer.digest.as_str())
        .await
        .map_err(|error| {
            sorted(
                error,
                format!("cannot download its component {}", layer.digest),
            )
        })?;
    // Grown as bytes come, beyond what is reserved: a size the registry
    // declares is no reason to allocate it.
    let mut bytes = Vec::with_capacity(usize::try_from(declared.min(RESERVED)).unwrap_or(0));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| {
            let other_bytes = error.to_string().contains("igest");
            if other_bytes {
                // oci-client names the registry's own header digest twice
                // here: say what the bytes served hash to.
                Pulling::Refused(anyhow!(
                    "the registry served other bytes for {} (they hash to sha256:{})",
                    layer.digest,
                    hex::encode(Sha256::digest(&bytes))
                ))
            } else {
                Pulling::Unreachable(anyhow!(
                    "downloading its component {}: {error}",
                    layer.digest
                ))
            }
        })?;
        if bytes.len() as u64 + chunk.len() as u64 > declared {
            return Err(Pulling::Refused(anyhow!(
                "the registry served more than the {declared} bytes its manifest declares for {}",
                layer.digest
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    let served = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
    if served != layer.digest {
        return Err(Pulling::Refused(anyhow!(
            "the registry served other bytes for {} (they hash to {served})",
            layer.digest
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(config: &str, layers: &[(&str, i64)]) -> Vec<u8> {
        let layers: Vec<serde_json::Value> = layers
            .iter()
            .map(|(media_type, size)| {
                serde_json::json!({
                    "mediaType": media_type,
                    "digest": format!("sha256:{}", "a".repeat(64)),
                    "size": size,
                })
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_IMAGE_MEDIA_TYPE,
            "config": {"mediaType": config, "digest": format!("sha256:{}", "b".repeat(64)), "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    fn refusal(body: &[u8]) -> String {
        format!("{:#}", component_layer(body, 1000).unwrap_err())
    }

    #[test]
    fn one_component_layer_within_its_size_passes() {
        let body = manifest(CONFIG_MEDIA_TYPE, &[(LAYER_MEDIA_TYPE, 1000)]);
        assert_eq!(component_layer(&body, 1000).unwrap().size, 1000);
    }

    #[test]
    fn anything_else_is_refused_by_name() {
        let image = manifest(
            "application/vnd.oci.image.config.v1+json",
            &[(LAYER_MEDIA_TYPE, 1)],
        );
        assert!(refusal(&image).contains("not a Wasm component artefact"));
        let two = manifest(
            CONFIG_MEDIA_TYPE,
            &[(LAYER_MEDIA_TYPE, 1), (LAYER_MEDIA_TYPE, 1)],
        );
        assert!(refusal(&two).contains("2 layers"));
        let tar = manifest(
            CONFIG_MEDIA_TYPE,
            &[("application/vnd.oci.image.layer.v1.tar", 1)],
        );
        assert!(refusal(&tar).contains("not a component"));
        let big = manifest(CONFIG_MEDIA_TYPE, &[(LAYER_MEDIA_TYPE, 1001)]);
        assert!(refusal(&big).contains("max_component_mib"));
        let negative = manifest(CONFIG_MEDIA_TYPE, &[(LAYER_MEDIA_TYPE, -1)]);
        assert!(refusal(&negative).contains("negative"));
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_IMAGE_INDEX_MEDIA_TYPE, "manifests": []
        }))
        .unwrap();
        assert!(refusal(&index).contains("manifest list"));
    }
}
