"""Opaque access tokens, checked by RFC 7662 introspection at a real
OpenID provider (tests/node/idp.mjs issuing opaque client-credentials
tokens): resmux finds the endpoint in the issuer's metadata, asks as a
client of the issuer, and holds the answer to the same rules as a JWT's
claims (active, issuer, audience, scopes). Active answers are kept: a token
already vouched for still works while the provider is down; a new one does
not. An issuer that never answers holds a request no longer than the
issuer's deadline."""

import asyncio
import time

import pytest

from conftest import audit_lines, connect
from idp import (
    ISSUER_DEADLINE,
    NODE,
    Provider,
    assert_refused,
    assert_unavailable,
    challenge,
    free_port,
    initialize,
    invalid,
    protected,
)

INTROSPECTION = (
    "[oauth.introspection]\n"
    'client_id = "resmux"\n'
    'client_secret = { from_env = "RESMUX_TEST_INTROSPECTION_SECRET" }\n'
)


@pytest.fixture
def opaque(serve, tmp_path):
    assert NODE.exists(), "run npm ci in tests/node first"
    resource = f"http://127.0.0.1:{free_port()}/mcp"
    other = f"http://127.0.0.1:{free_port()}/mcp"
    provider = Provider([resource, other], tmp_path, token_format="opaque")
    audit = tmp_path / "audit.jsonl"
    server = protected(
        serve,
        tmp_path,
        provider,
        resource,
        args=("--audit-log", str(audit)),
        auth_extra=INTROSPECTION,
        env={"RESMUX_TEST_INTROSPECTION_SECRET": "resmuxsecret0123"},
    )
    server.provider, server.resource, server.other, server.audit = provider, resource, other, audit
    yield server
    provider.stop()


def test_an_opaque_token_the_issuer_vouches_for_is_let_in_as_its_client(opaque):
    token = opaque.provider.token("reader", "mcp:read", opaque.resource)
    assert token.count(".") == 0, "the provider issued a JWT"

    async def scenario():
        async with connect(opaque, token) as client:
            return await client.read_resource("notes://notes/welcome")

    note = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert note.contents[0].text.startswith("# Welcome")
    line = audit_lines(opaque.audit, 1)[0]
    assert (line["client"], line["subject"], line["client_id"], line["decision"]) == (
        "oauth:reader",
        "reader",
        "reader",
        "allow",
    )


@pytest.mark.parametrize(
    "token, reason",
    [
        ("made-up-opaque-token-0123456789abcdef", "the issuer says the token is not active"),
        (None, "the token is for another resource"),
    ],
)
def test_an_opaque_token_the_issuer_does_not_vouch_for_this_server_is_refused(opaque, token, reason):
    if token is None:
        token = opaque.provider.token("reader", "mcp:read", opaque.other)
    assert_refused(opaque, token, 401, invalid(opaque, reason), reason)


def test_an_opaque_token_without_the_required_scope_gets_403(opaque):
    token = opaque.provider.token("guest", "mcp:other", opaque.resource)
    expected = challenge(opaque, 'error="insufficient_scope"')
    assert_refused(opaque, token, 403, expected, "the token lacks the scopes mcp:read")


def test_an_answer_is_kept_so_a_vouched_token_outlives_an_outage_and_a_new_one_does_not(opaque):
    known = opaque.provider.token("reader", "mcp:read", opaque.resource)
    fresh = opaque.provider.token("auditor", "mcp:read", opaque.resource)
    assert initialize(opaque.url, known)[0] == 200
    opaque.provider.stop()
    assert initialize(opaque.url, known)[0] == 200
    reason = "the issuer could not be asked about the token"
    assert_unavailable(opaque, fresh, reason)


def test_an_issuer_that_never_answers_is_given_up_on_at_the_deadline(serve, tmp_path, unanswering):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    resource = f"http://127.0.0.1:{free_port()}/mcp"
    server = protected(
        serve,
        tmp_path,
        unanswering,
        resource,
        plugins=plugins,
        auth_extra=INTROSPECTION,
        env={"RESMUX_TEST_INTROSPECTION_SECRET": "resmuxsecret0123"},
    )
    reason = f"the issuer did not answer within {ISSUER_DEADLINE} s"
    asked = time.monotonic()
    assert_unavailable(server, "made-up-opaque-token-0123456789abcdef", reason)
    waited = time.monotonic() - asked
    assert waited < ISSUER_DEADLINE + 5, f"refused {waited:.1f} s after asking"
