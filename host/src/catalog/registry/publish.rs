//! Publishing a component to a registry, for `resmux push`: the artefact as
//! the Bytecode Alliance tooling lays it out, and optionally a cosign
//! signature where cosign stores it (the `sha256-<hex>.sig` tag, one layer
//! per signature, added to those there), made with a cosign key (`resmux
//! key` makes one) by the `sigstore` crate, so that the round trip from a
//! build to a verified plugin needs nothing but resmux.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use http::HeaderValue;
use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use sha2::{Digest, Sha256};
use sigstore::cosign::SignatureLayer;
use sigstore::cosign::constraint::{Constraint, PrivateKeySigner};
use sigstore::crypto::SigningScheme;
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::registry::OciReference;

use super::artifact::{CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE};
use super::signature::{
    SIGNATURE_ANNOTATION, SIGNATURE_CONFIG_TYPE, SIGNATURE_LAYER_TYPE, absent, signature_tag,
};
use super::{Registries, explained};
use crate::operator_file;

/// The variable that holds the password of a cosign key, as for cosign.
pub const PASSWORD_VARIABLE: &str = "COSIGN_PASSWORD";

/// Pushes the component `bytes` as `reference` and returns the digest of
/// its manifest, worked out from the bytes pushed (never taken from the
/// registry); signs that digest with the cosign key in `key`, if given,
/// beside the signatures stored already, as cosign does.
pub async fn push(
    bytes: Vec<u8>,
    reference: &str,
    key: Option<&Path>,
    registries: &Registries,
) -> Result<String> {
    let signer = key.map(read_signing_key).transpose()?;
    let reference: Reference = reference
        .parse()
        .map_err(|error| anyhow!("{reference:?} is not a registry reference: {error}"))?;
    let config = Config::new(
        component_config(&bytes)?,
        CONFIG_MEDIA_TYPE.to_owned(),
        None,
    );
    let layer = ImageLayer::new(bytes, LAYER_MEDIA_TYPE.to_owned(), None);
    let mut manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
    manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_owned());
    let client = registries.client(&reference)?;
    let auth = registries.auth(reference.resolve_registry()).await?;
    let pushing = |error| explained(error, format!("cannot push {reference}"));
    client
        .auth(&reference, &auth, RegistryOperation::Push)
        .await
        .map_err(pushing)?;
    for (data, digest) in [
        (layer.data.clone(), &manifest.layers[0].digest),
        (config.data.clone(), &manifest.config.digest),
    ] {
        client
            .push_blob(&reference, data, digest)
            .await
            .map_err(pushing)?;
    }
    let body = serde_json::to_vec(&manifest)?;
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
    client
        .push_manifest_raw(
            &reference,
            body,
            HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .map_err(pushing)?;
    if let Some(signer) = signer {
        sign(&client, &auth, &reference, &digest, &signer).await?;
    }
    Ok(digest)
}

/// Signs `digest` with `signer` and stores the signature where cosign
/// stores it, beside the ones stored already.
async fn sign(
    client: &Client,
    auth: &RegistryAuth,
    reference: &Reference,
    digest: &str,
    signer: &PrivateKeySigner,
) -> Result<()> {
    let digested = format!(
        "{}/{}@{digest}",
        reference.resolve_registry(),
        reference.repository()
    );
    let image: OciReference = digested
        .parse()
        .map_err(|error| anyhow!("cannot name {digested} for sigstore: {error}"))?;
    let mut signature = SignatureLayer::new_unsigned(&image, digest)
        .map_err(|error| anyhow!("cannot make a signature payload: {error}"))?;
    let signed = signer
        .add_constraint(&mut signature)
        .map_err(|error| anyhow!("cannot sign {digest}: {error}"))?;
    let Some(encoded) = signature.signature.filter(|_| signed) else {
        bail!("the key did not sign {digest}");
    };
    let tag = Reference::with_tag(
        reference.registry().to_owned(),
        reference.repository().to_owned(),
        signature_tag(digest),
    );
    let signing = |error| explained(error, format!("cannot store the signature at {tag}"));
    let mut manifest = match client
        .pull_manifest_raw(&tag, auth, &[OCI_IMAGE_MEDIA_TYPE])
        .await
    {
        Ok((body, _)) => serde_json::from_slice::<OciImageManifest>(&body).map_err(|error| {
            anyhow!("the signatures stored at {tag} are not a manifest: {error}")
        })?,
        Err(error) if absent(&error) => {
            let config = b"{}".to_vec();
            let descriptor = OciDescriptor {
                media_type: SIGNATURE_CONFIG_TYPE.to_owned(),
                digest: format!("sha256:{}", hex::encode(Sha256::digest(&config))),
                size: config.len() as i64,
                ..Default::default()
            };
            client
                .push_blob(&tag, config, &descriptor.digest)
                .await
                .map_err(signing)?;
            OciImageManifest {
                media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_owned()),
                config: descriptor,
                layers: Vec::new(),
                ..Default::default()
            }
        }
        Err(error) => return Err(signing(error)),
    };
    let payload = signature.raw_data;
    let layer = OciDescriptor {
        media_type: SIGNATURE_LAYER_TYPE.to_owned(),
        digest: format!("sha256:{}", hex::encode(Sha256::digest(&payload))),
        size: payload.len() as i64,
        annotations: Some([(SIGNATURE_ANNOTATION.to_owned(), encoded)].into()),
        ..Default::default()
    };
    client
        .push_blob(&tag, payload, &layer.digest)
        .await
        .map_err(signing)?;
    manifest.layers.push(layer);
    client
        .push_manifest_raw(
            &tag,
            serde_json::to_vec(&manifest)?,
            HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .map_err(signing)?;
    Ok(())
}

/// The config of a component artefact: what the component imports and
/// exports, dated at `SOURCE_DATE_EPOCH` (or the epoch), so that pushing
/// the same component again gives the same digest.
fn component_config(bytes: &[u8]) -> Result<Vec<u8>> {
    let decoded = wit_component::decode(bytes)
        .map_err(|error| anyhow!("it is not a Wasm component: {error:#}"))?;
    let wit_component::DecodedWasm::Component(resolve, world) = decoded else {
        bail!("it is a WIT package, not a component");
    };
    let world = &resolve.worlds[world];
    let exports: Vec<String> = world
        .exports
        .keys()
        .map(|key| resolve.name_world_key(key))
        .collect();
    let imports: Vec<String> = world
        .imports
        .keys()
        .map(|key| resolve.name_world_key(key))
        .collect();
    let seconds = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|text| text.parse::<i64>().ok())
        .unwrap_or(0);
    let created = chrono::DateTime::from_timestamp(seconds, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let config = serde_json::json!({
        "created": created,
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [format!("sha256:{}", hex::encode(Sha256::digest(bytes)))],
        "component": {
            "exports": exports,
            "imports": imports,
            "target": null,
        },
    });
    Ok(serde_json::to_vec(&config)?)
}

/// The cosign key in the file at `path`, opened with [`PASSWORD_VARIABLE`].
fn read_signing_key(path: &Path) -> Result<PrivateKeySigner> {
    let (pem, _) = operator_file::read_bytes(path, operator_file::MOST_BYTES, "key")?;
    let pair = if String::from_utf8_lossy(&pem).contains("ENCRYPTED") {
        let password = std::env::var(PASSWORD_VARIABLE).map_err(|_| {
            anyhow!(
                "key {} is encrypted: set {PASSWORD_VARIABLE} to its password",
                path.display()
            )
        })?;
        SigStoreKeyPair::from_encrypted_pem(&pem, password.as_bytes()).map_err(|error| {
            anyhow!(
                "cannot open key {}: {PASSWORD_VARIABLE} is not its password ({error})",
                path.display()
            )
        })?
    } else {
        SigStoreKeyPair::from_pem(&pem)
            .map_err(|error| anyhow!("{} is not a cosign private key: {error}", path.display()))?
    };
    let signer = pair
        .to_sigstore_signer(&SigningScheme::ECDSA_P256_SHA256_ASN1)
        .map_err(|error| anyhow!("key {} is not an ECDSA P-256 key: {error}", path.display()))?;
    Ok(PrivateKeySigner::new_with_signer(signer))
}

/// Writes a new cosign key pair: `PREFIX.key`, encrypted with
/// [`PASSWORD_VARIABLE`] as cosign encrypts its keys, and `PREFIX.pub`.
/// Refuses to overwrite either.
pub fn generate_key(prefix: &Path) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let password = std::env::var(PASSWORD_VARIABLE).map_err(|_| {
        anyhow!("set {PASSWORD_VARIABLE} to the password the private key is encrypted with")
    })?;
    let (private, public) = (prefix.with_extension("key"), prefix.with_extension("pub"));
    for path in [&private, &public] {
        if path.exists() {
            bail!(
                "{} exists already; resmux does not overwrite keys",
                path.display()
            );
        }
    }
    let pair = SigningScheme::ECDSA_P256_SHA256_ASN1
        .create_signer()
        .and_then(|signer| signer.to_sigstore_keypair())
        .map_err(|error| anyhow!("cannot make a key pair: {error}"))?;
    let encrypted = pair
        .private_key_to_encrypted_pem(password.as_bytes())
        .map_err(|error| anyhow!("cannot encrypt the private key: {error}"))?;
    let public_pem = pair
        .public_key_to_pem()
        .map_err(|error| anyhow!("cannot write the public key: {error}"))?;
    std::io::Write::write_all(
        &mut crate::owner_file::create_at(&private)
            .with_context(|| format!("cannot create {}", private.display()))?,
        encrypted.as_bytes(),
    )?;
    std::fs::write(&public, public_pem)
        .with_context(|| format!("cannot write {}", public.display()))?;
    Ok((private, public))
}
