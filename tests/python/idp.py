"""A real OpenID provider for the tests: tests/node/idp.mjs (`oidc-provider`
from npm) on an ephemeral loopback port, issuing client-credentials access
tokens with resource indicators to the clients below."""

import base64
import hashlib
import json
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request

from conftest import INITIALIZE, ROOT, logged, post

NODE = ROOT / "tests/node/node_modules/.bin/node"
IDP = ROOT / "tests/node/idp.mjs"
STATIC_TOKEN = "static-token-0123456789"
# How long resmux waits on the issuer for its keys or an answer about a
# token (ISSUER_DEADLINE in host/src/access/oauth/fetch.rs, stated in docs/operators.md).
ISSUER_DEADLINE = 5
CLIENTS = [
    {"client_id": "reader", "client_secret": "readersecret0123", "scope": "mcp:read", "groups": ["finance"]},
    {"client_id": "auditor", "client_secret": "auditorsecret012", "scope": "mcp:read", "groups": ["audit"]},
    {"client_id": "guest", "client_secret": "guestsecret01234", "scope": "mcp:other", "groups": []},
    {"client_id": "resmux", "client_secret": "resmuxsecret0123", "scope": "", "groups": []},
]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Provider:
    """idp.mjs on an ephemeral loopback port, issuing tokens for `resource`:
    JWTs, or opaque ones its introspection endpoint vouches for."""

    def __init__(self, resource, tmp_path, token_format="jwt"):
        config = tmp_path / "idp.json"
        config.write_text(
            json.dumps(
                {
                    "resource": resource,
                    "scopes": ["mcp:read", "mcp:other"],
                    "clients": CLIENTS,
                    "access_token_format": token_format,
                }
            )
        )
        # The resource's port (or each resource's) was only probed free
        # (free_port) and is not held yet: the provider's own ephemeral port
        # may be that one, which resmux would then fail to listen on. It
        # starts again if so.
        while True:
            self.process = subprocess.Popen(
                [str(NODE), str(IDP), str(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            ready = json.loads(self.process.stdout.readline())
            self.issuer, self.admin = ready["issuer"], ready["admin"]
            taken = {urllib.parse.urlsplit(url).port for url in (self.issuer, self.admin)}
            resources = resource if isinstance(resource, list) else [resource]
            if all(urllib.parse.urlsplit(each).port not in taken for each in resources):
                break
            self.stop()

    def post(self, url, data, headers):
        request = urllib.request.Request(url, data=data, method="POST", headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def token(self, client, scope, resource):
        form = {"grant_type": "client_credentials", "resource": resource, "scope": scope}
        secret = next(entry["client_secret"] for entry in CLIENTS if entry["client_id"] == client)
        basic = base64.b64encode(f"{client}:{secret}".encode()).decode()
        answer = self.post(
            f"{self.issuer}/token",
            urllib.parse.urlencode(form).encode(),
            {"Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded"},
        )
        return answer["access_token"]

    def sign(self, claims, header=None):
        body = json.dumps({"claims": claims, "header": header or {}}).encode()
        return self.post(f"{self.admin}/sign", body, {"Content-Type": "application/json"})["token"]

    def rotate(self):
        return self.post(f"{self.admin}/rotate", b"{}", {"Content-Type": "application/json"})["kid"]

    def stop(self):
        self.process.terminate()
        self.process.wait(30)


class Unanswering:
    """An issuer that takes every connection and never answers on it: a raw
    listening socket on an ephemeral loopback port whose connections are held
    open, unread, until `close`."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.issuer = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.held = []
        threading.Thread(target=self.hold, daemon=True).start()

    def hold(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(connection)

    def close(self):
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        for connection in self.held:
            connection.close()


def protected(
    serve, tmp_path, provider, resource, refetch_seconds=1, tokens=False, args=(), plugins=None, auth_extra="", env=None
):
    """A server behind `provider` for `resource`, with `args` added, the
    auth file ending with `auth_extra`, and the static client `ops`
    (schemes: notes) beside the issuer's if `tokens`."""
    auth = tmp_path / "auth.toml"
    auth.write_text(
        "[oauth]\n"
        f'issuer = "{provider.issuer}"\n'
        f'resource = "{resource}"\n'
        'scopes = ["mcp:read"]\n'
        f"jwks_refetch_seconds = {refetch_seconds}\n" + auth_extra
    )
    args = ["--auth", str(auth), *args]
    if tokens:
        tokens_file = tmp_path / "tokens.toml"
        digest = hashlib.sha256(STATIC_TOKEN.encode()).hexdigest()
        tokens_file.write_text(f'[clients.ops]\ntoken_sha256 = "{digest}"\nschemes = ["notes"]\n')
        args += ["--tokens", str(tokens_file)]
    address = urllib.parse.urlsplit(resource).netloc
    options = {} if plugins is None else {"plugins": plugins}
    return serve(args=args, address=address, env=env, **options)


def initialize(url, token=None):
    """POSTs `initialize`, with `token` as the bearer if given: the status,
    the headers and the body."""
    return post(url, INITIALIZE, {} if token is None else {"Authorization": f"Bearer {token}"})


def metadata_url(server):
    return server.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")


def challenge(server, *parts):
    return ", ".join(['Bearer realm="resmux"', *parts, f'resource_metadata="{metadata_url(server)}"', 'scope="mcp:read"'])


def invalid(server, reason):
    """The challenge to a token refused as invalid for `reason`."""
    return challenge(server, 'error="invalid_token"', f'error_description="{reason}"')


def assert_refused(server, token, status, www_authenticate, reason):
    """`initialize` with `token` gets `status` and exactly `www_authenticate`,
    no answer and no session, and resmux logs `reason` (if given)."""
    code, headers, body = initialize(server.url, token)
    assert (code, headers["WWW-Authenticate"]) == (status, www_authenticate)
    assert "jsonrpc" not in body and "mcp-session-id" not in headers
    if reason is not None:
        assert logged(server, f"refused a request: {reason}", 30), "".join(server.log)


def assert_unavailable(server, token, reason, retry_after=1):
    """`initialize` with `token` gets 503 and `Retry-After`, without a
    challenge (the token may yet be good: the issuer could not be asked),
    and resmux logs `reason`."""
    code, headers, body = initialize(server.url, token)
    assert (code, headers["Retry-After"], headers["WWW-Authenticate"]) == (503, str(retry_after), None), body
    assert body == f"the bearer token cannot be checked now: {reason}"
    assert logged(server, f"refused a request: {reason}", 30), "".join(server.log)


def encoded(value):
    """`value` as JSON in base64url without padding: a part of a JWT."""
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def claims(server, **changes):
    """The claims of a valid token, with `changes`; a claim changed to None
    is left out."""
    now = int(time.time())
    base = {
        "iss": server.provider.issuer,
        "aud": server.resource,
        "sub": "reader",
        "client_id": "reader",
        "scope": "mcp:read",
        "iat": now,
        "exp": now + 300,
    }
    return {name: value for name, value in {**base, **changes}.items() if value is not None}
