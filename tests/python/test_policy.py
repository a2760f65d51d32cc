"""The access policy, against a real OpenID provider: a Cedar policy over
the token's groups decides, URI by URI, what each client may list, read,
subscribe to and complete. Listings and templates are filtered entry by
entry; a refused read, subscription or completion gets exactly the answer a
resource that does not exist gets; every decision is audited with the
policies that made it; a public answer in the cache never reaches a client
the policy refuses; and `resmux policy check` explains a decision offline."""

import asyncio
import json
import shutil
import subprocess

import pytest
from mcp.shared.exceptions import MCPError

from conftest import BINARY, PLUGINS, ROOT, all_resource_uris, audit_lines, connect
from idp import claims, protected

POLICY = """
@id("finance reads the guides")
permit(principal in Group::"finance", action, resource in Scheme::"files")
when { resource.path == "guides" || resource.path like "guides/*" };

@id("finance completes file names")
permit(principal in Group::"finance", action == Action::"complete", resource == Resource::"files://{+path}");

@id("nobody sees the operators' guide")
forbid(principal, action, resource in Scheme::"files")
when { resource.path like "guides/operators*" };

@id("finance lists and reads notes")
permit(principal in Group::"finance", action in [Action::"list", Action::"read"], resource in Scheme::"notes");

@id("nobody sees the groceries")
forbid(principal, action, resource == Resource::"notes://notes/groceries");
"""
UNSEEN = "not found: it does not exist, or this client may not see it"


@pytest.fixture
def policed(serve, tmp_path, provider_and_resource):
    provider, resource = provider_and_resource
    policy = tmp_path / "access.cedar"
    policy.write_text(POLICY)
    audit = tmp_path / "audit.jsonl"
    server = protected(
        serve, tmp_path, provider, resource, args=("--access-policy", str(policy), "--audit-log", str(audit))
    )
    server.provider, server.resource, server.audit = provider, resource, audit
    return server


def connect_as(server, client, mode="auto"):
    """An MCP client of `server` with a token the provider issued `client`."""
    return connect(server, server.provider.token(client, "mcp:read", server.resource), mode)


def run(scenario):
    return asyncio.run(asyncio.wait_for(scenario, 60))


def test_listings_hold_only_what_the_clients_groups_may_list(policed):
    async def listing(client):
        async with connect_as(policed, client) as session:
            templates = await session.list_resource_templates()
            return await all_resource_uris(session), [t.uri_template for t in templates.resource_templates]

    reader_uris, reader_templates = run(listing("reader"))
    assert reader_uris == [
        "files://guides/authors.md",
        "notes://notes/welcome",
        "notes://notes/paths",
        "notes://notes/errors",
        "notes://notes/pagination",
    ]
    assert reader_templates == ["notes://notes/{id}", "notes://tags/{tag}"]
    assert run(listing("auditor")) == ([], [])


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
def test_a_refused_uri_is_answered_exactly_like_one_that_does_not_exist(policed, mode):
    async def scenario():
        async with connect_as(policed, "reader", mode) as session:
            allowed = await session.read_resource("files://guides/authors.md")
            errors = {}
            for uri in [
                "files://README.md",  # exists; no policy permits it
                "notes://notes/groceries",  # exists; forbidden
                "files://guides/missing.md",  # permitted; does not exist
                "test://static-text",  # another scheme
                "nosuch://anything",  # no plugin
            ]:
                with pytest.raises(MCPError) as refused:
                    await session.read_resource(uri)
                errors[uri] = (refused.value.code, str(refused.value).replace(uri, "URI"))
            completions = {}
            for template in ["notes://notes/{id}", "nosuch://x/{id}"]:
                with pytest.raises(MCPError) as refused:
                    await session.complete({"type": "ref/resource", "uri": template}, {"name": "id", "value": ""})
                completions[template] = (refused.value.code, str(refused.value).replace(template.split(":")[0], "S"))
            subscriptions = {}
            if mode == "legacy":
                for uri in ["notes://notes/welcome", "nosuch://anything"]:
                    with pytest.raises(MCPError) as refused:
                        await session.subscribe_resource(uri)
                    subscriptions[uri] = (refused.value.code, str(refused.value).replace(uri, "URI"))
            return allowed, errors, completions, subscriptions

    allowed, errors, completions, subscriptions = run(scenario())
    assert allowed.contents[0].text.startswith("# ")
    not_found = {"auto": -32602, "legacy": -32002}[mode]
    assert set(errors.values()) == {(not_found, f"resource URI {UNSEEN}")}, errors
    assert set(completions.values()) == {(-32602, 'invalid argument: no plugin serves scheme "S"')}, completions
    if mode == "legacy":
        assert set(subscriptions.values()) == {(-32002, f"resource URI {UNSEEN}")}, subscriptions


def test_a_policy_holds_for_every_spelling_of_a_uri_the_plugin_would_serve_alike(policed):
    spellings = [
        "files://guides/%6Fperators.md",
        "files://guides/operators.md/",
        "files://guides//operators.md",
        "files://guides/./operators.md",
        "files://guides/x/../operators.md",
        "files://guides/operators%2Emd",
    ]

    async def scenario():
        async with connect_as(policed, "reader") as session:
            refused = []
            for uri in spellings:
                with pytest.raises(MCPError) as error:
                    await session.read_resource(uri)
                refused.append(str(error.value))
            folder = await session.read_resource("files://guides")
            return refused, [content.uri for content in folder.contents]

    refused, folder = run(scenario())
    assert refused == [f"resource {uri} {UNSEEN}" for uri in spellings]
    decisions = audit_lines(policed.audit, len(spellings))
    assert [(line["decision"], line["policies"]) for line in decisions[: len(spellings)]] == [
        ("deny", ["nobody sees the operators' guide"])
    ] * len(spellings)
    # The folder's read answers with each of its files; the forbidden one is
    # left out as if it were not there.
    assert folder == ["files://guides/authors.md"]


def spellings_of(path):
    """Spellings of `path` (a folder, then a file name) that the policy reads
    as `path` but a plugin is asked as they are: dot segments, plain and
    escaped, empty segments, a leading or trailing slash, escapes."""
    folder, name = path.split("/")
    escaped = f"%{ord(name[0]):02X}{name[1:]}"
    return [
        f"{folder}/./{name}",
        f"{folder}/x/../{name}",
        f"{folder}/%2E/{name}",
        f"{folder}/x/%2E%2E/{name}",
        f"{folder}//{name}",
        f"{folder}/{name}/",
        f"/{folder}/{name}",
        f"{folder}%2F{name}",
        f"{folder}/{escaped}",
    ]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_no_spelling_of_a_path_tells_a_permitted_one_from_a_forbidden_one(policed, mode):
    """The files plugin refuses a dot or empty segment as invalid input where
    it finds nothing for a canonical path: without care, a permitted path
    spelt so would answer invalid input while a forbidden one answers not
    found. Every spelling of a forbidden path, and of a permitted one that
    does not exist, must read exactly like a resource that does not exist; a
    spelling of a permitted file either reads as the file or like that."""
    permitted, missing, forbidden = "guides/authors.md", "guides/missing.md", "guides/operators.md"

    async def scenario():
        async with connect_as(policed, "reader", mode) as session:
            canonical = (await session.read_resource(f"files://{permitted}")).contents[0].text
            answers = {}
            for path in [permitted, missing, forbidden]:
                for spelling in spellings_of(path):
                    uri = f"files://{spelling}"
                    try:
                        answers[uri] = ("text", (await session.read_resource(uri)).contents[0].text)
                    except MCPError as refused:
                        answers[uri] = (refused.code, str(refused).replace(uri, "URI"))
            return canonical, answers

    canonical, answers = run(scenario())
    not_found = {"auto": -32602, "legacy": -32002}[mode]
    unseen = (not_found, f"resource URI {UNSEEN}")
    for path in [missing, forbidden]:
        assert {answers[f"files://{spelling}"] for spelling in spellings_of(path)} == {unseen}, answers
    read_as_the_file = ("text", canonical)
    assert {answers[f"files://{spelling}"] for spelling in spellings_of(permitted)} <= {unseen, read_as_the_file}, answers
    # The plugin refuses this spelling as invalid input; the client hears of
    # it only what a forbidden path would tell.
    assert answers[f"files://guides/./{permitted.split('/')[1]}"] == unseen


def test_completions_name_only_what_the_client_may_list(policed):
    async def scenario():
        async with connect_as(policed, "reader") as session:
            ref = {"type": "ref/resource", "uri": "files://{+path}"}
            top = await session.complete(ref, {"name": "path", "value": ""})
            guides = await session.complete(ref, {"name": "path", "value": "guides/"})
            return top.completion, guides.completion

    top, guides = run(scenario())
    assert (top.values, top.total) == (["guides/"], None)
    assert (guides.values, guides.total) == (["guides/authors.md"], None)


def test_every_decision_is_audited_with_the_policies_that_made_it(policed):
    async def scenario():
        async with connect_as(policed, "reader") as session:
            await session.read_resource("files://guides/authors.md")
            for uri in ["notes://notes/groceries", "files://README.md"]:
                with pytest.raises(MCPError):
                    await session.read_resource(uri)
            with pytest.raises(MCPError):
                await session.complete({"type": "ref/resource", "uri": "notes://notes/{id}"}, {"name": "id", "value": ""})

    run(scenario())
    lines = audit_lines(policed.audit, 4)
    summary = [
        (line["client"], line["subject"], line["client_id"], line["action"], line["uri"], line["decision"], line["policies"], line["outcome"])
        for line in lines
    ]
    assert summary == [
        ("oauth:reader", "reader", "reader", "read", "files://guides/authors.md", "allow", ["finance reads the guides"], "ok"),
        ("oauth:reader", "reader", "reader", "read", "notes://notes/groceries", "deny", ["nobody sees the groceries"], "not-found"),
        ("oauth:reader", "reader", "reader", "read", "files://README.md", "deny", [], "not-found"),
        ("oauth:reader", "reader", "reader", "complete", "notes://notes/{id}", "deny", [], "not-found"),
    ]


def liar_for_finance(serve, tmp_path, provider_and_resource):
    """A server of the liar plugin alone (its answers carry cache hints),
    which group `finance` may use and nobody else."""
    provider, resource = provider_and_resource
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(ROOT / "target/test-plugins/liar.wasm", plugins / "liar.wasm")
    policy = tmp_path / "access.cedar"
    policy.write_text('permit(principal in Group::"finance", action, resource in Scheme::"liar");\n')
    server = protected(serve, tmp_path, provider, resource, args=("--access-policy", str(policy)), plugins=plugins)
    server.provider, server.resource = provider, resource
    return server


def test_a_cached_public_answer_never_reaches_a_client_the_policy_refuses(serve, tmp_path, provider_and_resource):
    server = liar_for_finance(serve, tmp_path, provider_and_resource)

    async def reads(client):
        async with connect_as(server, client) as session:
            return [(await session.read_resource("liar://random/public")).contents[0].text for _ in range(2)]

    async def refusals(client):
        async with connect_as(server, client) as session:
            refused = []
            for _ in range(2):
                with pytest.raises(MCPError) as error:
                    await session.read_resource("liar://random/public")
                refused.append(str(error.value))
            return refused

    first, second = run(reads("reader"))
    assert first == second, "the public answer was not cached"
    assert run(refusals("auditor")) == [f"resource liar://random/public {UNSEEN}"] * 2


def test_a_cached_page_never_reaches_the_same_subject_with_other_groups(serve, tmp_path, provider_and_resource):
    server = liar_for_finance(serve, tmp_path, provider_and_resource)

    async def first_page(groups):
        # The same subject, `reader`, with other groups.
        async with connect(server, server.provider.sign(claims(server, groups=groups))) as session:
            return [item.uri for item in (await session.list_resources()).resources]

    # The liar's first page is public for a minute: the first listing keeps it.
    assert run(first_page(["finance"]))[:1] == ["liar://honest"]
    assert run(first_page([])) == []


def ops_tokens(tmp_path, schemes):
    """A tokens file naming one client, `ops`, with `schemes`."""
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[clients.ops]\ntoken_sha256 = "{"ab" * 32}"\nschemes = {json.dumps(schemes)}\n')
    return tokens


def policy_check(tmp_path, *args):
    policy = tmp_path / "access.cedar"
    policy.write_text(POLICY)
    tokens = ops_tokens(tmp_path, ["notes"])
    return subprocess.run(
        [str(BINARY), "policy", "check", "--access-policy", str(policy), "--tokens", str(tokens), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_policy_check_explains_a_decision_offline(tmp_path):
    allowed = policy_check(tmp_path, "--principal", "ops", "--action", "read", "notes://notes/welcome")
    assert (allowed.returncode, allowed.stdout) == (
        0,
        "ALLOW read notes://notes/welcome for ops\n"
        "  permitted by tokens-file: ops may use notes:\n"
        '    permit(principal == Client::"ops", action, resource in Scheme::"notes");\n',
    )
    forbidden = policy_check(tmp_path, "--principal", "ops", "--action", "read", "notes://notes/groceries")
    assert forbidden.returncode == 1
    assert forbidden.stdout.splitlines()[:2] == [
        "DENY read notes://notes/groceries for ops",
        "  forbidden by nobody sees the groceries:",
    ]
    assert forbidden.stderr == "resmux: ops may not read notes://notes/groceries\n"
    unknown = policy_check(tmp_path, "--principal", "mallory", "--action", "read", "notes://notes/welcome")
    assert unknown.returncode == 1
    assert 'no client "mallory" in the tokens file' in unknown.stderr


def test_a_policy_that_does_not_fit_the_schema_stops_the_server_naming_it(tmp_path):
    policy = tmp_path / "access.cedar"
    policy.write_text('permit(principal, action, resource)\nwhen { resource.pth like "x*" };\n')
    tokens = ops_tokens(tmp_path, [])
    started = subprocess.run(
        [str(BINARY), "serve", "--plugins", str(PLUGINS), "--http", "127.0.0.1:0",
         "--tokens", str(tokens), "--access-policy", str(policy)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert started.returncode == 1
    assert started.stdout == ""
    assert f"access policy {policy} does not fit resmux's entities" in started.stderr
    assert "attribute `pth` on entity type `Resource` not found (line 2); did you mean `path`?" in started.stderr
