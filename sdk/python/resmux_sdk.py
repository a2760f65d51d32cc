"""resmux_sdk: write a resmux plugin in Python without touching the raw bindings.

Subclass `Plugin`, build it from the operator's `[config]` in `__init__` (the
contract's `init`), and export it from the module componentize-py builds:

    import resmux_sdk
    from resmux_sdk import Config, NotFound, Plugin

    class Hello(Plugin):
        @staticmethod
        def about():
            return resmux_sdk.plugin_info("hello", "0.1.0", "Says hello")

        def __init__(self, config: Config):
            self.greeting = config.text("greeting", "Hello")
            config.finish()

        def list(self, cursor):
            resmux_sdk.no_cursor(cursor)
            return resmux_sdk.resource_page([resmux_sdk.resource("hello", "hello")])

        def read(self, path):
            if path != "hello":
                raise NotFound(f"no {path!r}")
            return resmux_sdk.read_result(resmux_sdk.text_content(path, "text/plain", "Hello!"))

    Provider = resmux_sdk.export(Hello)

Build with `componentize-py -d wit -w resmux:provider/plugin componentize app
-p . -o hello.wasm`, this file beside `app.py` (or in another `-p` folder).
componentize-py imports both while building and keeps only what was imported
then, so this module imports everything it may need up front.
"""

import sys
import traceback
from abc import ABC, abstractmethod
from typing import Callable, Iterable, List, Optional, Sequence, Tuple, TypeVar

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports.types import (
    Annotations,
    Body_Blob,
    Body_Text,
    CacheHint,
    CacheScope,
    ChangeReport,
    Completion,
    CompletionRequest,
    Content,
    Error_Denied,
    Error_Internal,
    Error_InvalidInput,
    Error_NotFound,
    Error_Unavailable,
    Icon,
    IconTheme,
    PluginInfo,
    ReadResult,
    Resource,
    ResourcePage,
    Role,
    Template,
    TemplatePage,
)

__all__ = [
    "Annotations", "CacheHint", "CacheScope", "ChangeReport", "Completion", "CompletionRequest",
    "Config", "Content", "Denied", "Icon", "IconTheme", "Internal", "InvalidInput", "NotFound",
    "Plugin", "PluginError", "PluginInfo", "ReadResult", "Resource", "ResourcePage", "Role",
    "Template", "TemplatePage", "Unavailable", "blob_content", "cache_hint", "change_report",
    "completion", "export", "no_cursor", "page_after", "paginate", "plugin_info", "read_result",
    "resource", "resource_page", "template", "template_page", "text_content",
]

T = TypeVar("T")


# Errors: raise one to answer with that case of the contract's `error`.

class PluginError(Exception):
    """A typed answer of failure; raise one of the subclasses below."""

    case = Error_Internal

    def as_wit(self):
        return type(self).case(str(self))


class NotFound(PluginError):
    """The path names nothing this plugin serves."""

    case = Error_NotFound


class InvalidInput(PluginError):
    """A malformed path, cursor, argument or config value."""

    case = Error_InvalidInput


class Denied(PluginError):
    """The plugin refuses the request on purpose."""

    case = Error_Denied


class Unavailable(PluginError):
    """A dependency is down; retrying later may succeed."""

    case = Error_Unavailable


class Internal(PluginError):
    """A bug or an unexpected state inside the plugin."""


# Constructors: the contract's records with every optional field defaulted.

def plugin_info(name: str, version: str, description: str) -> PluginInfo:
    return PluginInfo(name=name, version=version, description=description)


def resource(path: str, name: str, *, title: Optional[str] = None, description: Optional[str] = None,
             mime_type: Optional[str] = None, size: Optional[int] = None,
             annotations: Optional[Annotations] = None, icons: Sequence[Icon] = (),
             meta: Optional[str] = None) -> Resource:
    return Resource(path=path, name=name, title=title, description=description, mime_type=mime_type,
                    size=size, annotations=annotations, icons=list(icons), meta=meta)


def template(path_template: str, name: str, *, title: Optional[str] = None,
             description: Optional[str] = None, mime_type: Optional[str] = None,
             annotations: Optional[Annotations] = None, icons: Sequence[Icon] = (),
             meta: Optional[str] = None) -> Template:
    return Template(path_template=path_template, name=name, title=title, description=description,
                    mime_type=mime_type, annotations=annotations, icons=list(icons), meta=meta)


def text_content(path: str, mime_type: Optional[str], text: str, *, meta: Optional[str] = None) -> Content:
    return Content(path=path, mime_type=mime_type, body=Body_Text(value=text), meta=meta)


def blob_content(path: str, mime_type: Optional[str], data: bytes, *, meta: Optional[str] = None) -> Content:
    return Content(path=path, mime_type=mime_type, body=Body_Blob(value=bytes(data)), meta=meta)


def read_result(*contents: Content, cache: Optional[CacheHint] = None) -> ReadResult:
    """The answer to a read: one content item (or more), fresh for as long as `cache` says."""
    return ReadResult(contents=list(contents), cache=cache)


def resource_page(resources: Iterable[Resource], next_cursor: Optional[str] = None, *,
                  cache: Optional[CacheHint] = None) -> ResourcePage:
    return ResourcePage(resources=list(resources), next_cursor=next_cursor, cache=cache)


def template_page(templates: Iterable[Template], next_cursor: Optional[str] = None, *,
                  cache: Optional[CacheHint] = None) -> TemplatePage:
    return TemplatePage(templates=list(templates), next_cursor=next_cursor, cache=cache)


def cache_hint(ttl_ms: int, scope: CacheScope = CacheScope.PUBLIC) -> CacheHint:
    return CacheHint(ttl_ms=ttl_ms, scope=scope)


def completion(values: Iterable[str], *, total: Optional[int] = None, has_more: bool = False) -> Completion:
    return Completion(values=list(values), total=total, has_more=has_more)


def change_report(token: str, *, listing_changed: bool = False,
                  changed_paths: Iterable[str] = ()) -> ChangeReport:
    return ChangeReport(token=token, listing_changed=listing_changed, changed_paths=list(changed_paths))


# Pagination.

def no_cursor(cursor: Optional[str]) -> None:
    """Refuses a cursor where a listing has only one page."""
    if cursor is not None:
        raise InvalidInput(f"unknown cursor {cursor!r}")


def paginate(items: Sequence[T], cursor: Optional[str], page_size: int) -> Tuple[Sequence[T], Optional[str]]:
    """The page of `items` that `cursor` (an offset this function handed out) points at,
    `page_size` long, and the cursor of the next page."""
    start = 0
    if cursor is not None:
        if not (cursor.isascii() and cursor.isdigit() and int(cursor) <= len(items)):
            raise InvalidInput(f"unknown cursor {cursor!r}")
        start = int(cursor)
    end = min(start + max(page_size, 1), len(items))
    return items[start:end], (str(end) if end < len(items) else None)


def page_after(entries: Iterable[T], key: Callable[[T], str], cursor: Optional[str],
               page_size: int) -> Tuple[List[T], Optional[str]]:
    """The page of `entries` (in ascending order of `key`) after `cursor` (the last key of
    the previous page), `page_size` long, and the cursor of the next page. It takes only
    one entry past the page from `entries`, so a page costs a page's worth of work."""
    page: List[T] = []
    for entry in entries:
        if cursor is not None and key(entry) <= cursor:
            continue
        if len(page) == max(page_size, 1):
            return page, key(page[-1])
        page.append(entry)
    return page, None


# Configuration.

class Config:
    """The operator's `[config]`, taken key by key; `finish()` refuses any key not taken."""

    def __init__(self, pairs: Iterable[Tuple[str, str]]):
        self._values = dict(pairs)

    def text(self, key: str, default: Optional[str] = None) -> Optional[str]:
        return self._values.pop(key, default)

    def integer(self, key: str, default: int) -> int:
        return self._parse(key, default, int, "integer")

    def number(self, key: str, default: float) -> float:
        return self._parse(key, default, float, "number")

    def boolean(self, key: str, default: bool) -> bool:
        return self._parse(key, default, _boolean, "boolean (true or false)")

    def finish(self) -> None:
        for key in sorted(self._values):
            raise InvalidInput(f"unknown config key {key!r}")

    def _parse(self, key: str, default: T, parse: Callable[[str], T], kind: str) -> T:
        if key not in self._values:
            return default
        text = self._values.pop(key)
        try:
            return parse(text)
        except ValueError:
            message = f"config key {key!r} has the value {text!r}, which is not a valid {kind}"
            raise InvalidInput(message) from None


def _boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(text)
    return text == "true"


# The plugin and its export.

class Plugin(ABC):
    """A plugin. `about`, `list` and `read` are required; `__init__` takes the `[config]`
    (by default it accepts none). Without templates a plugin lists none; without
    completion or change reports it says so with a typed error."""

    @staticmethod
    @abstractmethod
    def about() -> PluginInfo:
        """Name, version and one line of description; called without `__init__`."""

    def __init__(self, config: Config):
        config.finish()

    @abstractmethod
    def list(self, cursor: Optional[str]) -> ResourcePage:
        """One page of resources; `cursor` is whatever the previous page handed out."""

    def templates(self, cursor: Optional[str]) -> TemplatePage:
        no_cursor(cursor)
        return template_page([])

    @abstractmethod
    def read(self, path: str) -> ReadResult:
        """The contents at `path` (scheme-relative, like `notes/welcome`)."""

    def complete(self, request: CompletionRequest) -> Completion:
        raise InvalidInput(f"{request.path_template!r} has no completion for {request.argument!r}")

    def changes(self, since: Optional[str]) -> ChangeReport:
        raise Unavailable("this plugin reports no changes")


def export(plugin_class: type) -> type:
    """The class componentize-py exports, to be bound to the name `Provider` in the app
    module. `init` builds one `plugin_class` for the instance, kept for its later calls.
    A `PluginError` answers its case; any other exception answers `internal` with its type
    and message (its traceback goes to stderr, which resmux logs) instead of trapping."""
    # componentize-py makes one `Provider` per exported function: the plugin built by
    # `init` is kept here, shared by all of them, rather than on `self`.
    plugin = None

    def running():
        if plugin is None:
            raise Internal("called before init")
        return plugin

    class Provider(exports.Provider):
        def about(self) -> PluginInfo:
            try:
                return _checked("about", PluginInfo, plugin_class.about())
            except BaseException as error:
                traceback.print_exception(error, file=sys.stderr)
                return plugin_info(plugin_class.__name__, "unknown", f"about() failed: {_describe(error)}")

        def init(self, config: List[Tuple[str, str]]) -> None:
            nonlocal plugin
            plugin = _answer("init", plugin_class, lambda: plugin_class(Config(config)))

        def list(self, cursor: Optional[str]) -> ResourcePage:
            return _answer("list", ResourcePage, lambda: running().list(cursor))

        def templates(self, cursor: Optional[str]) -> TemplatePage:
            return _answer("templates", TemplatePage, lambda: running().templates(cursor))

        def read(self, path: str) -> ReadResult:
            return _answer("read", ReadResult, lambda: running().read(path))

        def complete(self, request: CompletionRequest) -> Completion:
            return _answer("complete", Completion, lambda: running().complete(request))

        def changes(self, since: Optional[str]) -> ChangeReport:
            return _answer("changes", ChangeReport, lambda: running().changes(since))

    return Provider


def _answer(function: str, expected: type, call: Callable[[], T]) -> T:
    """Runs `call`, turning whatever it raises into the `Err` componentize-py returns:
    any other exception, or an answer of the wrong type, would trap the instance."""
    try:
        return _checked(function, expected, call())
    except Err:
        raise
    except PluginError as error:
        raise Err(error.as_wit()) from None
    except BaseException as error:
        traceback.print_exception(error, file=sys.stderr)
        raise Err(Error_Internal(_describe(error))) from None


def _checked(function: str, expected: type, answer: T) -> T:
    if not isinstance(answer, expected):
        raise TypeError(f"{function} returned {type(answer).__name__}, not {expected.__name__}")
    return answer


def _describe(error: BaseException) -> str:
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
