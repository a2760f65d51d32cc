//! Reading a registry's manifests within a bound. oci-client reads a
//! manifest's body whole, so a registry (compromised, or impersonated over
//! plain HTTP) serving an endless one would take the host's memory for as
//! long as a pull may last. resmux asks for manifests itself, with the
//! credentials oci-client negotiated: a declared length past
//! [`MOST_MANIFEST_BYTES`] is refused before a byte of the body is read, a
//! body is read in chunks up to it, and an error's body up to
//! [`MOST_ERROR_BYTES`].

use std::time::Duration;

use anyhow::anyhow;
use oci_client::errors::OciDistributionError as Oci;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use sha2::{Digest, Sha256};

use super::Registries;

/// The largest manifest resmux reads: the size the OCI distribution spec
/// asks registries to accept at least. A component's manifest is well
/// under a kilobyte, a signature manifest a few.
pub const MOST_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;

/// The most of an error's body kept to explain it.
const MOST_ERROR_BYTES: usize = 64 * 1024;

/// Why a manifest was not read.
#[derive(Debug)]
pub enum ManifestError {
    /// The registry refused it, has none, or could not be asked.
    Registry(Oci),
    /// It served one to refuse: too large, or not the pinned digest.
    Refused(anyhow::Error),
}

impl From<Oci> for ManifestError {
    fn from(error: Oci) -> Self {
        Self::Registry(error)
    }
}

/// The manifest `reference` names, of one of the `accepted` media types,
/// and its digest.
pub async fn pull_manifest(
    client: &Client,
    auth: &RegistryAuth,
    reference: &Reference,
    accepted: &[&str],
    registries: &Registries,
) -> Result<(Vec<u8>, String), ManifestError> {
    let token = client
        .auth(reference, auth, RegistryOperation::Pull)
        .await?;
    let registry = reference.resolve_registry();
    let scheme = if registries
        .plain_http_for(registry)
        .iter()
        .any(|plain| plain == registry)
    {
        "http"
    } else {
        "https"
    };
    let name = reference.digest().or(reference.tag()).unwrap_or("latest");
    let url = format!(
        "{scheme}://{registry}/v2/{}/manifests/{name}",
        reference.repository()
    );
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(30))
        .user_agent(concat!("resmux/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(Oci::RequestError)?;
    let mut request = http
        .get(&url)
        .header(reqwest::header::ACCEPT, accepted.join(", "));
    request = match (token, auth) {
        (Some(token), _) => request.bearer_auth(token),
        (None, RegistryAuth::Basic(user, password)) => request.basic_auth(user, Some(password)),
        _ => request,
    };
    let mut response = request.send().await.map_err(Oci::RequestError)?;
    let status = response.status();
    if !status.is_success() {
        let message = error_text(&mut response).await;
        return Err(match status.as_u16() {
            404 => Oci::ImageManifestNotFoundError(message),
            code => Oci::ServerError { code, url, message },
        }
        .into());
    }
    let too_large = |url: &str| {
        ManifestError::Refused(anyhow!(
            "the registry's manifest at {url} is larger than {} MiB, the most resmux reads",
            MOST_MANIFEST_BYTES >> 20
        ))
    };
    if response
        .content_length()
        .is_some_and(|length| length > MOST_MANIFEST_BYTES)
    {
        return Err(too_large(&url));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Oci::RequestError)? {
        if (body.len() + chunk.len()) as u64 > MOST_MANIFEST_BYTES {
            return Err(too_large(&url));
        }
        body.extend_from_slice(&chunk);
    }
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
    if let Some(pinned) = reference.digest()
        && !pinned.eq_ignore_ascii_case(&digest)
    {
        return Err(ManifestError::Refused(anyhow!(
            "the registry served a manifest that is not the pinned {pinned}: its bytes hash to {digest}"
        )));
    }
    Ok((body, digest))
}

/// What the registry says of an error, up to [`MOST_ERROR_BYTES`] of it.
async fn error_text(response: &mut reqwest::Response) -> String {
    let mut kept = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = MOST_ERROR_BYTES - kept.len();
        kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if kept.len() == MOST_ERROR_BYTES {
            break;
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}
