"""The operator's console (`serve --metrics ADDR`, at /console) in a real
browser: Debian's chromium, driven by its chromedriver through Selenium.
Each test starts its own resmux on a folder made for it, opens the page,
and asserts on what the page shows and does: every plugin with its state,
origin, grants and figures; a plugin quarantined, and one dropped into the
folder, shown without a reload; the namespace as a client of the access
policy sees it; hostile text from a plugin shown as text and never run, and
long text clamped to a few lines with a way to see it whole; and the data
behind a token of its own and out of reach of other sites."""

import hashlib
import json
import shutil
import subprocess
import threading
import time

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import BINARY, PLUGINS, ROOT, get, open_session, post
from idp import free_port

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
# Where the README's screenshot of the page is written.
SCREENSHOT = ROOT / "target/console/console.png"
HOSTILE = '<script>window.pwned = 1; document.title = "pwned"</script><img src=x onerror="window.pwned = 2">'


@pytest.fixture
def browser():
    assert CHROMIUM and CHROMEDRIVER, "the tests need Debian's chromium and chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def plugins(tmp_path):
    """An empty plugin folder."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    return folder


def console_server(serve, plugins, *args, listen="127.0.0.1"):
    """A server on `plugins` whose operator's listener is on a free port of
    `listen`: the server and the listener's loopback address."""
    port = free_port()
    server = serve(plugins=plugins, args=("--metrics", f"{listen}:{port}", "--response-cache-mib", "0", *args))
    return server, f"127.0.0.1:{port}"


def token_in_file(tmp_path, name):
    """A token called `name`, and the file that holds it."""
    token = f"{name}-0123456789abcdef"
    token_file = tmp_path / name
    token_file.write_text(token + "\n")
    return token, token_file


def copy_plugin(plugins, name, manifest=None):
    shutil.copy(PLUGINS / f"{name}.wasm", plugins / f"{name}.wasm")
    if manifest is not None:
        (plugins / f"{name}.toml").write_text(manifest)


def liar(plugins, manifest):
    shutil.copy(ROOT / "target/test-plugins/liar.wasm", plugins / "liar.wasm")
    (plugins / "liar.toml").write_text(manifest)


def cards(browser):
    """Each plugin card's scheme, state and text, read in one go (the page
    redraws the cards at each poll)."""
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#plugins article')]"
        ".map(card => [card.dataset.scheme, card.dataset.state, card.textContent])"
    )
    return {scheme: (state, text) for scheme, state, text in rows}


def state_of(browser, scheme):
    """The state the card of `scheme` shows; empty without a card."""
    return cards(browser).get(scheme, ("",))[0]


def wait_for(browser, what, timeout=20):
    """What `what` returns once it is truthy, asked every 0.1 s; a card or a
    text not drawn yet (IndexError, KeyError) is asked again."""
    waiting = WebDriverWait(browser, timeout, poll_frequency=0.1, ignored_exceptions=(IndexError, KeyError))
    return waiting.until(lambda _: what())


def texts(browser, selector):
    return browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(node => node.textContent)", selector
    )


def clamp_of(browser, selector):
    """The text `selector` names, as drawn, read in one go: its height, its
    whole height, its line height, its card's height, and whether its
    show-all button shows and says it is open."""
    return browser.execute_script(
        "const node = document.querySelector(arguments[0]), toggle = node.nextElementSibling;"
        "return {height: node.clientHeight, whole: node.scrollHeight,"
        " line: parseFloat(getComputedStyle(node).lineHeight),"
        " card: node.closest('article') && node.closest('article').getBoundingClientRect().height,"
        " toggle: toggle.dataset.role === 'show-all' && toggle.getClientRects().length > 0,"
        " expanded: toggle.getAttribute('aria-expanded')}", selector
    )


def click(browser, selector):
    """Clicks what `selector` names, found again if a redraw replaced it
    between the finding and the click."""
    waiting = WebDriverWait(browser, 10, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,))
    waiting.until(lambda _: browser.find_element(By.CSS_SELECTOR, selector).click() or True)


def listed_uris(browser):
    return browser.execute_script(
        "return [...document.querySelectorAll('#resources li[data-uri]')].map(item => item.dataset.uri)"
    )


def mcp(url, headers, method, params):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    status, _, text = post(url, body, headers)
    assert status == 200, text
    return text


def test_every_plugin_shows_its_state_origin_grants_and_live_figures(serve, browser, plugins, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(PLUGINS / "files-sample/pixel.png", data / "pixel.png")
    (data / "hello.txt").write_text("hello from the files plugin\n")
    # Bigger than the page is sent of a read: a text's beginning, and of
    # binary content only its size.
    (data / "long.txt").write_text("x" * (256 * 1024 - 1) + "é" + "x" * (768 * 1024 - 1))
    (data / "large.png").write_bytes(b"\x89PNG" + bytes(5 * 1024 * 1024 - 4))
    copy_plugin(plugins, "notes")
    copy_plugin(plugins, "files", f'[config]\nroot = "/data"\n[[files]]\nhost = "{data}"\nguest = "/data"\n'
                                  '[limits]\nmemory_mib = 64\n')
    (plugins / "broken.wasm").write_bytes(b"\0asm but not a component")
    server, metrics = console_server(serve, plugins)
    browser.get(f"http://{metrics}/console")

    wait_for(browser, lambda: {scheme: state for scheme, (state, _) in cards(browser).items()} == {
        "notes": "serving", "files": "serving", "broken": "failed"})
    # What a plugin says it is comes once it serves.
    wait_for(browser, lambda: "notes 0.1.0 — " in cards(browser)["notes"][1])
    shown = cards(browser)
    assert "broken.wasm" in shown["broken"][1], shown["broken"]
    assert "cannot load" in shown["broken"][1], shown["broken"]
    notes = shown["notes"][1]
    assert "notes 0.1.0 — A small collection of Markdown notes with tags" in notes, notes
    assert str(plugins / "notes.wasm") in notes and "none (defaults apply)" in notes, notes
    digest = hashlib.sha256((plugins / "notes.wasm").read_bytes()).hexdigest()
    assert digest in notes, notes
    # Its code came from the warm compile cache: Cranelift's, loaded.
    assert "optimized (optimized " in notes and " ms)" in notes, notes
    files = shown["files"][1]
    assert f"directory {data} -> /data (ReadOnly)" in files, files
    assert "memory 64 MiB" in files and "calls at once" in files, files

    # Reads while the page watches show as calls per second and latency.
    url = server.url
    headers = open_session(url)
    stop = threading.Event()

    def keep_reading():
        while not stop.is_set():
            mcp(url, headers, "resources/read", {"uri": "notes://notes/welcome"})
            time.sleep(0.02)

    reader = threading.Thread(target=keep_reading, daemon=True)
    reader.start()
    try:
        figure = "#plugins article[data-scheme='notes'] dd[data-figure='{}']"
        wait_for(browser, lambda: texts(browser, figure.format("calls/s"))[0] not in ("–", "0.0"))
        shown = texts(browser, "#plugins article[data-scheme='notes'] dl.figures")
        assert texts(browser, figure.format("p50"))[0].startswith("≤"), shown
        assert texts(browser, figure.format("peak memory"))[0].endswith("iB")
    finally:
        stop.set()
        reader.join(10)

    # The namespace as the operator sees it; a text and an image read.
    wait_for(browser, lambda: "files://pixel.png" in listed_uris(browser))
    assert "notes://notes/welcome" in listed_uris(browser)
    browser.find_element(By.CSS_SELECTOR, "#resources button[data-uri='notes://notes/welcome']").click()
    wait_for(browser, lambda: texts(browser, "#read-contents pre"))
    assert texts(browser, "#read-contents pre")[0].startswith("# Welcome")
    assert texts(browser, "#read-decision")[0] == "Not guarded: this view may read everything."
    browser.find_element(By.CSS_SELECTOR, "#resources button[data-uri='files://pixel.png']").click()
    wait_for(browser, lambda: browser.execute_script(
        "const image = document.querySelector('#read-contents img'); return image && image.complete && image.naturalWidth"))
    assert browser.execute_script("return document.querySelector('#read-contents img').naturalWidth") == 1

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOT))
    # Bigger than the page is sent: a text's beginning, and a large image's
    # size only.
    browser.find_element(By.CSS_SELECTOR, "#resources button[data-uri='files://long.txt']").click()
    wait_for(browser, lambda: texts(browser, "#read-contents [data-role='left-out']"))
    # Cut where no character is split.
    shown = texts(browser, "#read-contents pre")[0]
    assert shown == "x" * (256 * 1024 - 1), len(shown)
    assert texts(browser, "#read-contents [data-role='left-out']") == [
        "768.0 KiB more not shown here; a client reads it whole."]
    browser.find_element(By.CSS_SELECTOR, "#resources button[data-uri='files://large.png']").click()
    wait_for(browser, lambda: texts(browser, "#read-contents [data-role='binary']"))
    assert texts(browser, "#read-contents [data-role='binary']") == ["Binary content, 5.0 MiB, too large to show here."]
    assert not browser.find_elements(By.CSS_SELECTOR, "#read-contents img")

    # On a phone's width nothing runs off the side.
    browser.set_window_size(390, 844)
    wait_for(browser, lambda: browser.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth"))
    assert server.process.poll() is None


def quarantined_cards(browser):
    """Every card as drawn, if liar's shows it quarantined."""
    shown = cards(browser)
    return shown if shown["liar"][0] == "quarantined" else None


def test_a_quarantined_plugin_shows_within_seconds_while_the_others_serve(serve, browser, plugins):
    copy_plugin(plugins, "notes")
    liar(plugins, '[config]\nlist = "spin"\n[limits]\ncpu_ms = 20\ntimeout_ms = 2000\n')
    server, metrics = console_server(serve, plugins)
    browser.get(f"http://{metrics}/console")
    wait_for(browser, lambda: state_of(browser, "liar") == "serving")

    # A client lists again and again: each walk of liar's listing spins
    # until its CPU limit, and three in a row quarantine it, for longer
    # each time it faults again on coming back.
    url = server.url
    headers = open_session(url)
    stop = threading.Event()

    def keep_listing():
        while not stop.is_set():
            mcp(url, headers, "resources/list", {})
            time.sleep(0.05)

    lister = threading.Thread(target=keep_listing, daemon=True)
    lister.start()
    try:
        started = time.monotonic()
        # One drawing of the cards, read whole: the first quarantines last
        # a second, and the card turns back to serving between them.
        shown = wait_for(browser, lambda: quarantined_cards(browser), timeout=15)
        took = time.monotonic() - started
        assert "Quarantined until" in shown["liar"][1], shown["liar"]
        assert "plugin liar exceeded its CPU time limit of 20 ms in list" in shown["liar"][1], shown["liar"]
        assert shown["notes"][0] == "serving"
        events = texts(browser, "#events li[data-kind='quarantined']")
        assert events and "liar:// quarantined for" in events[0], events
    finally:
        stop.set()
        lister.join(10)
    # The other plugin still answers a read from the page's listing.
    wait_for(browser, lambda: "notes://notes/welcome" in listed_uris(browser))
    browser.find_element(By.CSS_SELECTOR, "#resources button[data-uri='notes://notes/welcome']").click()
    wait_for(browser, lambda: texts(browser, "#read-contents pre"))
    assert texts(browser, "#read-contents pre")[0].startswith("# Welcome")
    print(f"quarantine shown {took:.1f} s after the listing began")


def test_a_plugin_dropped_into_the_folder_appears_without_a_reload(serve, browser, plugins):
    copy_plugin(plugins, "notes")
    _, metrics = console_server(serve, plugins)
    browser.get(f"http://{metrics}/console")
    wait_for(browser, lambda: state_of(browser, "notes") == "serving")
    browser.execute_script("window.stillTheSamePage = true")

    copy_plugin(plugins, "units")
    wait_for(browser, lambda: state_of(browser, "units") == "serving")
    assert browser.execute_script("return window.stillTheSamePage") is True
    assert any("units.wasm serves units://" in text for text in texts(browser, "#events li[data-kind='added']"))
    # The namespace is listed again once the plugin serves.
    wait_for(browser, lambda: any(uri.startswith("units://") for uri in listed_uris(browser)))

    # A torn copy over it is refused, and the card says so while the
    # version before serves; the copy undone, the refusal goes.
    whole = (plugins / "units.wasm").read_bytes()
    (plugins / "units.wasm").write_bytes(whole[:4096])
    refused = "A change was refused; the version before keeps serving: "
    wait_for(browser, lambda: refused in cards(browser)["units"][1])
    assert state_of(browser, "units") == "serving"
    assert any("units.wasm" in text for text in texts(browser, "#events li[data-kind='refused']"))
    (plugins / "units.wasm").write_bytes(whole)
    wait_for(browser, lambda: refused not in cards(browser)["units"][1])
    assert state_of(browser, "units") == "serving"

    (plugins / "units.wasm").unlink()
    wait_for(browser, lambda: "units" not in cards(browser))
    assert any("units.wasm is gone from the folder" in text for text in texts(browser, "#events li[data-kind='removed']"))
    assert browser.execute_script("return window.stillTheSamePage") is True


def policy_check(tokens, principal, uri):
    """`resmux policy check` of reading `uri` as `principal`: its exit code
    and output."""
    checked = subprocess.run(
        [str(BINARY), "policy", "check", "--tokens", str(tokens), "--principal", principal,
         "--action", "read", uri],
        capture_output=True, text=True, timeout=30,
    )
    return checked.returncode, checked.stdout


def test_as_a_client_the_namespace_hides_what_the_policy_forbids(serve, browser, plugins, tmp_path):
    copy_plugin(plugins, "notes")
    copy_plugin(plugins, "units", "")
    tokens = tmp_path / "tokens.toml"
    hashed = lambda token: hashlib.sha256(token.encode()).hexdigest()  # noqa: E731
    tokens.write_text(
        f'[clients.alice]\ntoken_sha256 = "{hashed("a" * 32)}"\nschemes = ["notes", "units"]\n'
        f'[clients.bob]\ntoken_sha256 = "{hashed("b" * 32)}"\nschemes = ["units"]\n'
    )
    # The console reads past the access policy: with clients to protect,
    # its data needs the console token.
    token, token_file = token_in_file(tmp_path, "console-token")
    server, metrics = console_server(serve, plugins, "--tokens", str(tokens), "--audit-log",
                                     str(tmp_path / "audit.log"), "--console-token-file", str(token_file))
    browser.get(f"http://{metrics}/console#token={token}")
    wait_for(browser, lambda: "notes://notes/welcome" in listed_uris(browser))
    # bob reads what the policy forbids him: the audit log's denial shows
    # among the events.
    headers = open_session(server.url, {"Authorization": f"Bearer {'b' * 32}"})
    body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "resources/read",
                       "params": {"uri": "notes://notes/welcome"}}).encode()
    assert "not found" in post(server.url, body, headers)[2]
    wait_for(browser, lambda: "bob deny read notes://notes/welcome via resources/read: not-found, 0 bytes" in
             texts(browser, "#events li[data-kind='denied'] .text"))
    everything = listed_uris(browser)
    assert any(uri.startswith("units://") for uri in everything)

    def view_as(name):
        Select(browser.find_element(By.ID, "as")).select_by_value(name)
        browser.find_element(By.ID, "list").click()
        wait_for(browser, lambda: texts(browser, "#viewer-note")[0] == f"As {name}.")
        wait_for(browser, lambda: listed_uris(browser))
        return listed_uris(browser)

    seen_by_bob = view_as("bob")
    assert not [uri for uri in seen_by_bob if uri.startswith("notes://")], seen_by_bob
    assert seen_by_bob == [uri for uri in everything if uri.startswith("units://")]
    code, said = policy_check(tokens, "bob", "notes://notes/welcome")
    assert code == 1 and said.startswith("DENY read notes://notes/welcome for bob"), said

    # A read as bob of what bob may read names the policy that allowed it,
    # as `resmux policy check` does.
    unit = seen_by_bob[0]
    browser.find_element(By.CSS_SELECTOR, f"#resources button[data-uri='{unit}']").click()
    wait_for(browser, lambda: texts(browser, "#read-decision")[0].startswith("Allowed by "))
    code, said = policy_check(tokens, "bob", unit)
    assert code == 0 and said.startswith(f"ALLOW read {unit} for bob"), said
    policy = said.splitlines()[1].strip().removeprefix("permitted by ").rstrip(":")
    assert texts(browser, "#read-decision")[0] == f"Allowed by {policy}."

    seen_by_alice = view_as("alice")
    assert "notes://notes/welcome" in seen_by_alice
    assert sorted(seen_by_alice) == sorted(everything)


def test_a_description_holding_script_shows_as_text_and_never_runs(serve, browser, plugins):
    copy_plugin(plugins, "notes")
    liar(plugins, f'[config]\nlist = "promises"\ndescribe = {json.dumps(HOSTILE)}\n')
    _, metrics = console_server(serve, plugins)
    browser.get(f"http://{metrics}/console")
    wait_for(browser, lambda: texts(browser, "#plugins article[data-scheme='liar'] [data-role='about']"))
    about = texts(browser, "#plugins article[data-scheme='liar'] [data-role='about']")
    assert about == [f"liar 0.1.0 — Breaks the contract on purpose, for tests {HOSTILE}"], about
    wait_for(browser, lambda: "liar://honest" in listed_uris(browser))
    descriptions = texts(browser, "#resources li[data-uri='liar://honest'] [data-role='description']")
    assert descriptions == [HOSTILE], descriptions
    # Nothing of it became an element, and nothing ran or even tried to.
    assert browser.find_elements(By.CSS_SELECTOR, "#plugins script, #plugins img, #resources script, #resources img") == []
    assert browser.execute_script("return window.pwned") is None
    assert browser.title == "resmux console"
    refused = [entry["message"] for entry in browser.get_log("browser") if "Content Security Policy" in entry["message"]]
    assert refused == [], refused


def test_a_long_text_from_a_plugin_is_clamped_and_shown_whole_on_demand(serve, browser, plugins):
    # A manifest key 3,000 characters long: the card's load failure names
    # it, in an error the board cuts to 2,048 bytes, some 40 lines in a card.
    key = "not_a_key_" + "x" * 3000
    liar(plugins, f"{key} = 1\n")
    _, metrics = console_server(serve, plugins)
    browser.get(f"http://{metrics}/console")
    wait_for(browser, lambda: state_of(browser, "liar") == "failed")
    error = "#plugins article[data-scheme='liar'] [data-role='error']"
    toggle = error + " + [data-role='show-all']"
    text = texts(browser, error)[0]
    assert "invalid manifest" in text and key[:1000] in text, text[:200]

    def drawn(selector, expanded):
        """The text as drawn once its button shows and says `expanded`."""
        shown = clamp_of(browser, selector)
        return shown["toggle"] and shown["expanded"] == expanded and shown

    # A few lines of it, and a button that shows it whole; the event that
    # tells of it, two lines.
    shown = wait_for(browser, lambda: drawn(error, "false"))
    assert shown["height"] < 5 * shown["line"] < shown["whole"], shown
    assert shown["card"] < 600, shown
    shown = wait_for(browser, lambda: drawn("#events li[data-kind='refused'] .text", "false"))
    assert shown["height"] < 3 * shown["line"] < shown["whole"], shown

    click(browser, toggle)
    shown = wait_for(browser, lambda: drawn(error, "true"))
    assert shown["height"] > 10 * shown["line"] and shown["whole"] <= shown["height"] + 1, shown
    assert texts(browser, error)[0] == text
    # Still whole once the card is drawn again.
    browser.execute_script("window.drawnBefore = document.querySelector(arguments[0])", error)
    wait_for(browser, lambda: browser.execute_script("return !window.drawnBefore.isConnected"))
    shown = wait_for(browser, lambda: drawn(error, "true"))
    assert shown["height"] > 10 * shown["line"] and shown["whole"] <= shown["height"] + 1, shown

    # A few lines again once asked.
    click(browser, toggle)
    shown = wait_for(browser, lambda: drawn(error, "false"))
    assert shown["height"] < 5 * shown["line"], shown


def test_the_data_needs_the_console_token_and_stays_out_of_other_sites_reach(serve, browser, plugins, tmp_path):
    copy_plugin(plugins, "notes")
    token, token_file = token_in_file(tmp_path, "console-token")
    scrape_token, scrape_token_file = token_in_file(tmp_path, "metrics-token")
    _, metrics = console_server(serve, plugins, "--console-token-file", str(token_file),
                                "--metrics-token-file", str(scrape_token_file),
                                "--allow-host", "console.example:8080")
    base = f"http://{metrics}"
    bearer = {"Authorization": f"Bearer {token}"}
    scraper = {"Authorization": f"Bearer {scrape_token}"}

    # The page holds no data and is served to anyone, under a strict policy.
    status, headers, page = get(f"{base}/console")
    assert status == 200 and "<script src=\"/console/console.js\" defer></script>" in page
    assert headers["Content-Security-Policy"].startswith("default-src 'none'; script-src 'self'")
    assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff"
    # The data needs the console token; a scraper's token reads no
    # resource, and the console's token opens no scrape.
    assert get(f"{base}/console/api/state")[0] == 401
    assert get(f"{base}/console/api/state", {"Authorization": "Bearer not-the-token"})[0] == 401
    status, headers, body = get(f"{base}/console/api/read?uri=notes://notes/welcome", scraper)
    assert (status, body) == (401, "/console/api/read needs the console token as a bearer token: "
                                   "the bearer token is not the console token\n")
    assert headers["Content-Security-Policy"].startswith("default-src 'none'")
    # One token for both is refused at start.
    refused = subprocess.run([str(BINARY), "serve", "--plugins", str(plugins), "--metrics", "127.0.0.1:0",
                              "--metrics-token-file", str(token_file), "--console-token-file", str(token_file)],
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0 and "the console token is the metrics token" in refused.stderr, refused.stderr
    assert get(f"{base}/metrics", bearer)[0] == 401
    assert get(f"{base}/metrics", scraper)[0] == 200
    status, _, state = get(f"{base}/console/api/state", bearer)
    assert status == 200 and [plugin["scheme"] for plugin in json.loads(state)["plugins"]] == ["notes"]
    # A page of another site that rebinds its name to this address, or
    # asks from its own origin, gets nothing.
    status, _, body = get(f"{base}/console/api/state", {**bearer, "Host": f"rebound.example:{metrics.split(':')[1]}"})
    assert status == 403 and "not \"rebound.example:" in body, body
    # A name the operator allowed (with the MCP port's port) is trusted on
    # the console's port too.
    port = metrics.split(":")[1]
    assert get(f"{base}/console/api/state", {**bearer, "Host": f"console.example:{port}"})[0] == 200
    status, _, body = get(f"{base}/console/api/state", {**bearer, "Sec-Fetch-Site": "cross-site"})
    assert status == 403 and "not served to another origin (cross-site)" in body, body

    # The page asks for the token, and shows everything once given it.
    browser.get(f"{base}/console")
    wait_for(browser, lambda: browser.find_element(By.ID, "token-form").is_displayed())
    assert cards(browser) == {}
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "#token-form button").click()
    wait_for(browser, lambda: state_of(browser, "notes") == "serving")
    # A token put in the fragment of the open page is not taken, only
    # taken out of the address.
    browser.execute_script("location.hash = 'token=planted-by-another-page'")
    wait_for(browser, lambda: browser.current_url == f"{base}/console")
    assert browser.execute_script("return sessionStorage.getItem('resmux-console-token')") == token
    # A link that carries the token in its fragment (never sent to the
    # server) opens the console at once, and leaves no token in the address.
    browser.execute_script("sessionStorage.clear()")
    browser.get("about:blank")
    browser.get(f"{base}/console#token={token}")
    wait_for(browser, lambda: state_of(browser, "notes") == "serving")
    assert browser.current_url == f"{base}/console"


def test_a_listing_longer_than_one_answer_comes_in_parts(serve, browser, plugins):
    liar(plugins, '[config]\nlist = "pages/1200/100"\n')
    _, metrics = console_server(serve, plugins)
    browser.get(f"http://{metrics}/console")
    # An answer stops at 500 entries or 64 pages of the namespace (of 2
    # entries each, as these tests serve them), with a way on.
    wait_for(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "#resources li.more button"))
    first = listed_uris(browser)
    assert first == [f"liar://p{index:04}" for index in range(128)], first
    assert texts(browser, "#resource-count")[0] == "128+"
    while browser.find_elements(By.CSS_SELECTOR, "#resources li.more button"):
        shown = len(listed_uris(browser))
        browser.find_element(By.CSS_SELECTOR, "#resources li.more button").click()
        wait_for(browser, lambda: len(listed_uris(browser)) > shown)
    assert listed_uris(browser) == [f"liar://p{index:04}" for index in range(1200)]
    assert texts(browser, "#resource-count")[0] == "1200"


def test_without_a_token_the_data_is_served_only_where_it_exposes_nothing_more(serve, browser, plugins, tmp_path):
    copy_plugin(plugins, "notes")
    # A listener any host may reach: the page says why it shows nothing.
    server, metrics = console_server(serve, plugins, listen="0.0.0.0")
    status, _, body = get(f"http://{metrics}/console/api/state")
    assert status == 403 and "which is not a loopback address, it needs --console-token-file" in body, body
    assert get(f"http://{metrics}/console/api/read?uri=notes://notes/welcome")[0] == 403
    assert any("the console shows no data" in line for line in server.log), server.log
    assert get(f"http://{metrics}/metrics")[0] == 200
    browser.get(f"http://{metrics}/console")
    wait_for(browser, lambda: "needs --console-token-file" in texts(browser, "#status")[0])
    assert cards(browser) == {}

    # A loopback listener of a server with clients to protect.
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[clients.bob]\ntoken_sha256 = "{hashlib.sha256(b"b" * 32).hexdigest()}"\nschemes = ["notes"]\n')
    _, metrics = console_server(serve, plugins, "--tokens", str(tokens))
    status, _, body = get(f"http://{metrics}/console/api/resources?as=bob")
    assert status == 403 and "on a server with --tokens or --auth it needs --console-token-file" in body, body

    # No console at all.
    _, metrics = console_server(serve, plugins, "--no-console")
    assert get(f"http://{metrics}/console")[0] == 404
    assert get(f"http://{metrics}/console/api/state")[0] == 404
    assert get(f"http://{metrics}/metrics")[0] == 200


def test_as_an_oauth_subject_the_groups_decide(serve, browser, tmp_path, provider_and_resource):
    from idp import protected

    provider, resource = provider_and_resource
    policy = tmp_path / "access.cedar"
    policy.write_text(
        '@id("finance reads notes")\n'
        'permit(principal in Group::"finance", action in [Action::"list", Action::"read"], resource in Scheme::"notes");\n'
    )
    token, token_file = token_in_file(tmp_path, "console-token")
    metrics = f"127.0.0.1:{free_port()}"
    protected(serve, tmp_path, provider, resource,
              args=("--access-policy", str(policy), "--metrics", metrics, "--console-token-file", str(token_file)))
    browser.get(f"http://{metrics}/console#token={token}")
    wait_for(browser, lambda: "notes://notes/welcome" in listed_uris(browser))
    assert any(uri.startswith("files://") for uri in listed_uris(browser))

    def view_as(subject, groups):
        Select(browser.find_element(By.ID, "as")).select_by_value("oauth:")
        for field, value in (("subject", subject), ("groups", groups)):
            browser.find_element(By.ID, field).clear()
            browser.find_element(By.ID, field).send_keys(value)
        browser.find_element(By.ID, "list").click()
        note = f"As oauth:{subject}" + (f" in {groups}" if groups else "") + "."
        wait_for(browser, lambda: texts(browser, "#viewer-note")[0] == note)
        wait_for(browser, lambda: texts(browser, "#resources li"))
        return listed_uris(browser)

    seen = view_as("carol", "finance")
    assert seen and all(uri.startswith("notes://") for uri in seen), seen
    browser.find_element(By.CSS_SELECTOR, "#resources button[data-uri='notes://notes/welcome']").click()
    wait_for(browser, lambda: texts(browser, "#read-decision")[0] == "Allowed by finance reads notes.")
    assert texts(browser, "#read-contents pre")[0].startswith("# Welcome")

    assert view_as("carol", "") == []
    assert texts(browser, "#resources li") == ["Nothing listed."]
