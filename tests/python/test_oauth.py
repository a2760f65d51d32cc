"""resmux as an OAuth 2.1 resource server, against a real OpenID provider:
`oidc-provider` from npm (tests/node/idp.mjs), issuing client-credentials JWT
access tokens with resource indicators. Each refusal is checked for its
status, its exact `WWW-Authenticate` challenge, the reason resmux logs, and
that nothing was served; the official Python client finds its way in from
the 401 alone. An issuer that takes connections and never answers holds
neither the start nor a request past the issuer's deadline, and an issuer
that never answers or answers garbage gets 503 to retry, not a challenge,
until it mends. The issuer's subjects never become metric labels."""

import asyncio
import base64
import hmac
import http.server
import json
import re
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import all_resource_uris, eventually, logged
from idp import (
    ISSUER_DEADLINE,
    STATIC_TOKEN,
    assert_refused,
    assert_unavailable,
    challenge,
    claims,
    encoded,
    free_port,
    initialize,
    invalid,
    metadata_url,
    protected,
)


@pytest.fixture
def guarded(serve, tmp_path, provider_and_resource):
    provider, resource = provider_and_resource
    server = protected(serve, tmp_path, provider, resource, tokens=True)
    server.provider, server.resource = provider, resource
    return server


def test_the_metadata_names_the_issuer_at_both_well_known_locations(guarded):
    expected = {
        "resource": guarded.resource,
        "authorization_servers": [guarded.provider.issuer],
        "scopes_supported": ["mcp:read"],
        "bearer_methods_supported": ["header"],
        "resource_name": "resmux",
    }
    root = guarded.url.replace("/mcp", "/.well-known/oauth-protected-resource")
    for url in (metadata_url(guarded), root):
        with urllib.request.urlopen(url, timeout=30) as response:
            assert json.load(response) == expected


def test_a_token_of_the_issuer_for_this_server_is_let_in(guarded):
    token = guarded.provider.token("reader", "mcp:read", guarded.resource)
    status, headers, body = initialize(guarded.url, token)
    assert status == 200 and headers["mcp-session-id"]
    assert '"serverInfo"' in body


def test_no_token_gets_a_challenge_naming_the_metadata_and_scopes(guarded):
    assert_refused(guarded, None, 401, challenge(guarded), None)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, "the token has expired"),
        ({"aud": "http://127.0.0.1:1/other"}, "the token is for another resource"),
        ({"iss": "http://127.0.0.1:1/another-issuer"}, "the token is from another issuer"),
        ({"nbf": int(time.time()) + 3600}, "the token is not valid yet"),
        ({"exp": None}, "the token has no 'exp' claim"),
        ({"sub": None}, "the token has no 'sub' claim"),
        ({"sub": 42}, "the token's 'sub' claim is not a name"),
    ],
)
def test_a_signed_token_with_a_wrong_claim_is_refused(guarded, change, reason):
    token = guarded.provider.sign(claims(guarded, **change))
    expected = invalid(guarded, reason)
    # The log quotes the claim's name as it is; the challenge cannot.
    assert_refused(guarded, token, 401, expected, re.sub(r"'(\w+)'", r'"\1"', reason))


@pytest.mark.parametrize("others", [[], ["http://127.0.0.1:1/another-issuer"]])
def test_a_signed_token_whose_iss_is_a_list_holding_the_issuer_is_refused(guarded, others):
    # RFC 7519 §4.1.1: `iss` is one string, never a list that holds it.
    token = guarded.provider.sign(claims(guarded, iss=[guarded.provider.issuer, *others]))
    reason = "the token's 'iss' claim is not a single string"
    expected = invalid(guarded, reason)
    assert_refused(guarded, token, 401, expected, reason.replace("'iss'", '"iss"'))


def test_a_token_with_a_bad_signature_is_refused(guarded):
    header, payload, signature = guarded.provider.token("reader", "mcp:read", guarded.resource).split(".")
    forged = json.loads(base64.urlsafe_b64decode(payload + "=="))
    forged["scope"] = "mcp:read mcp:other"
    forged_payload = base64.urlsafe_b64encode(json.dumps(forged).encode()).decode().rstrip("=")
    reason = "the token's signature does not verify"
    expected = invalid(guarded, reason)
    assert_refused(guarded, f"{header}.{forged_payload}.{signature}", 401, expected, reason)


def test_an_unsigned_token_is_refused(guarded):
    token = guarded.provider.sign(claims(guarded), {"alg": "none"})
    assert token.endswith(".")
    reason = "the token's header names no signature algorithm this server accepts"
    expected = invalid(guarded, reason)
    assert_refused(guarded, token, 401, expected, reason)


def test_a_token_signed_with_the_public_key_as_a_shared_secret_is_refused(guarded):
    with urllib.request.urlopen(f"{guarded.provider.issuer}/jwks", timeout=30) as response:
        key = json.load(response)["keys"][0]

    signing_input = f"{encoded({'alg': 'HS256', 'typ': 'at+jwt', 'kid': key['kid']})}.{encoded(claims(guarded))}"
    secret = json.dumps(key).encode()
    signature = base64.urlsafe_b64encode(hmac.new(secret, signing_input.encode(), "sha256").digest()).decode()
    reason = "the token is signed with HS256, which this server does not accept"
    expected = invalid(guarded, reason)
    assert_refused(guarded, f"{signing_input}.{signature.rstrip('=')}", 401, expected, reason)


def test_a_token_without_the_required_scope_gets_403_naming_it(guarded):
    token = guarded.provider.token("guest", "mcp:other", guarded.resource)
    expected = challenge(guarded, 'error="insufficient_scope"')
    assert_refused(guarded, token, 403, expected, "the token lacks the scopes mcp:read")


def test_a_static_token_still_works_beside_oauth(guarded):
    status, headers, _ = initialize(guarded.url, STATIC_TOKEN)
    assert status == 200 and headers["mcp-session-id"]
    reason = "the token is not a JWT"
    assert_refused(guarded, "not-a-known-token-at-all", 401, invalid(guarded, reason), reason)


def test_a_rotated_key_is_fetched_when_a_token_names_it(guarded):
    before = guarded.provider.token("reader", "mcp:read", guarded.resource)
    assert initialize(guarded.url, before)[0] == 200
    new_kid = guarded.provider.rotate()
    after = guarded.provider.token("reader", "mcp:read", guarded.resource)
    assert json.loads(base64.urlsafe_b64decode(after.split(".")[0] + "=="))["kid"] == new_kid
    # The keys are fetched at most once a second (jwks_refetch_seconds = 1):
    # until then the new key is unknown, and said so.
    unknown = invalid(guarded, f"the issuer has no key '{new_kid}'")
    deadline = time.monotonic() + 30
    while (answer := initialize(guarded.url, after))[0] != 200:
        assert (answer[0], answer[1]["WWW-Authenticate"]) == (401, unknown)
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert initialize(guarded.url, before)[0] == 200


def test_a_token_too_long_to_be_one_is_not_decoded(guarded):
    reason = "the token is longer than 16384 bytes"
    expected = invalid(guarded, reason)
    assert_refused(guarded, "e" * 20000, 401, expected, reason)


def test_unknown_keys_are_not_fetched_again_within_the_refetch_interval(serve, tmp_path, provider_and_resource):
    provider, resource = provider_and_resource
    server = protected(serve, tmp_path, provider, resource, refetch_seconds=3600)
    before = provider.token("reader", "mcp:read", resource)
    assert initialize(server.url, before)[0] == 200
    new_kid = provider.rotate()
    after = provider.token("reader", "mcp:read", resource)
    reason = f"the issuer has no key '{new_kid}'"
    expected = invalid(server, reason)
    assert_refused(server, after, 401, expected, f'the issuer has no key "{new_kid}"')
    assert initialize(server.url, before)[0] == 200


def test_an_issuer_that_never_answers_holds_neither_the_start_nor_a_request_past_the_deadline(
    serve, tmp_path, unanswering
):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    resource = f"http://127.0.0.1:{free_port()}/mcp"
    started = time.monotonic()
    server = protected(serve, tmp_path, unanswering, resource, plugins=plugins)
    with urllib.request.urlopen(server.url.replace("/mcp", "/healthz"), timeout=30) as response:
        assert response.read() == b"live\n"
    # Waiting on the issuer at start would take its whole deadline.
    listening_after = time.monotonic() - started
    assert listening_after < ISSUER_DEADLINE - 1, f"listened {listening_after:.1f} s after start"

    server.provider, server.resource = unanswering, resource
    header = {"alg": "RS256", "typ": "at+jwt", "kid": "never-published"}
    token = f"{encoded(header)}.{encoded(claims(server))}.{encoded('no signature')}"
    reason = f"the issuer did not answer within {ISSUER_DEADLINE} s"
    asked = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda _: assert_unavailable(server, token, reason), range(2)))
    waited = time.monotonic() - asked
    assert waited < ISSUER_DEADLINE + 5, f"refused {waited:.1f} s after asking"
    assert logged(server, f"cannot fetch the issuer's keys (tried again when a token needs them): {reason}")
    # One fetch, shared by start and both requests, gave up on the first
    # metadata URL at the deadline instead of going on to the second.
    assert len(unanswering.held) == 1


def test_every_subject_of_the_issuer_is_one_metrics_series_named_oauth(serve, tmp_path, provider_and_resource):
    provider, resource = provider_and_resource
    metrics = f"127.0.0.1:{free_port()}"
    server = protected(serve, tmp_path, provider, resource, tokens=True, args=("--metrics", metrics))
    server.provider, server.resource = provider, resource
    for number in range(200):
        token = provider.sign(claims(server, sub=f"user{number}@corp.example"))
        assert initialize(server.url, token)[0] == 200
    assert initialize(server.url, STATIC_TOKEN)[0] == 200

    expected = [
        'resmux_client_requests_total{client="oauth",mcp_method_name="initialize"} 200',
        'resmux_client_requests_total{client="ops",mcp_method_name="initialize"} 1',
    ]

    def client_series():
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=30) as response:
            exposition = response.read().decode()
        return sorted(line for line in exposition.splitlines() if line.startswith("resmux_client_requests_total{")), exposition

    series, exposition = eventually(client_series, 30, every=0.1, until=lambda scraped: scraped[0] == expected)
    assert series == expected, exposition
    assert "corp.example" not in exposition and "user1" not in exposition


class MemoryStorage:
    """Where the Python SDK keeps its token, for one test."""

    def __init__(self):
        self.tokens = self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client):
        self.client = client


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_python_sdk_finds_the_issuer_from_the_401_and_gets_in(guarded, mode):
    async def scenario():
        auth = ClientCredentialsOAuthProvider(
            server_url=guarded.url,
            storage=MemoryStorage(),
            client_id="reader",
            client_secret="readersecret0123",
            issuer=guarded.provider.issuer,
        )
        http = create_mcp_http_client(auth=auth)
        async with Client(streamable_http_client(guarded.url, http_client=http), mode=mode, cache=None) as client:
            uris = await all_resource_uris(client)
            note = await client.read_resource("notes://notes/welcome")
        return uris, note, auth

    uris, note, auth = asyncio.run(scenario())
    assert "notes://notes/welcome" in uris
    assert "Welcome" in note.contents[0].text
    assert auth.context.current_tokens.scope == "mcp:read"


class GarbledKeys:
    """The issuer's key set behind a switch: garbage (`{"keys": 7}`) until
    `mend`, then the issuer's own, fetched from it; on a loopback port."""

    def __init__(self, provider):
        discovery = f"{provider.issuer}/.well-known/openid-configuration"
        with urllib.request.urlopen(discovery, timeout=30) as response:
            self.real = json.load(response)["jwks_uri"]
        self.garbled = True
        keys = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if keys.garbled:
                    body = b'{"keys": 7}'
                else:
                    with urllib.request.urlopen(keys.real, timeout=30) as response:
                        body = response.read()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def mend(self):
        self.garbled = False

    def close(self):
        self.server.shutdown()


def test_an_issuer_answering_garbage_gets_503_until_it_mends(serve, tmp_path, provider_and_resource):
    provider, resource = provider_and_resource
    keys = GarbledKeys(provider)
    try:
        server = protected(serve, tmp_path, provider, resource, auth_extra=f'jwks_uri = "{keys.url}"\n')
        token = provider.token("reader", "mcp:read", resource)
        assert_unavailable(server, token, "the issuer's keys cannot be fetched")
        keys.mend()
        # Asked again once the refetch interval (1 s) has passed.
        assert eventually(lambda: initialize(server.url, token)[0] == 200, 30, every=0.2), "".join(server.log)
    finally:
        keys.close()
