"""`dataset`: CSV files of a granted directory, browsable row by row.

The Python example. Each `NAME.csv` under the configured root is a resource
`datasets/NAME` (the table as CSV), and two templates reach into it:
`datasets/{name}/rows/{row}` (one row, as JSON) and
`datasets/{name}/where/{column}/{value}` (the rows whose column has that
value, as JSON). Completion offers dataset names, row numbers, column names
and the values a column holds.
"""

import csv
import io
import json
import os
from typing import List, Optional, Tuple

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports.types import (
    Body_Text,
    CacheHint,
    CacheScope,
    ChangeReport,
    Completion,
    CompletionRequest,
    Content,
    Error_InvalidInput,
    Error_NotFound,
    PluginInfo,
    ReadResult,
    Resource,
    ResourcePage,
    Template,
    TemplatePage,
)

ROOT = "/data"
MAX_COMPLETIONS = 100


def fail(error):
    raise Err(error)


def dataset_names() -> List[str]:
    try:
        files = os.listdir(ROOT)
    except OSError as error:
        fail(Error_NotFound(f"cannot list {ROOT}: {error}"))
    return sorted(name[:-4] for name in files if name.endswith(".csv"))


def load(name: str) -> Tuple[List[str], List[dict]]:
    if name not in dataset_names():
        fail(Error_NotFound(f"there is no dataset {name!r}"))
    with open(f"{ROOT}/{name}.csv", newline="", encoding="utf-8") as file:
        reader = csv.DictReader(file)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def table_text(name: str) -> str:
    with open(f"{ROOT}/{name}.csv", encoding="utf-8") as file:
        return file.read()


def template(path_template: str, name: str, description: str) -> Template:
    return Template(
        path_template=path_template,
        name=name,
        title=None,
        description=description,
        mime_type="application/json",
        annotations=None,
        icons=[],
        meta=None,
    )


class Provider(exports.Provider):
    def about(self) -> PluginInfo:
        return PluginInfo(name="dataset", version="0.1.0", description="CSV datasets, row by row (Python)")

    def init(self, config: List[Tuple[str, str]]) -> None:
        global ROOT
        for key, value in config:
            if key == "root":
                ROOT = value.rstrip("/") or "/"
            else:
                fail(Error_InvalidInput(f"unknown config key {key!r}"))

    def list(self, cursor: Optional[str]) -> ResourcePage:
        if cursor is not None:
            fail(Error_InvalidInput(f"unknown cursor {cursor!r}"))
        resources = []
        for name in dataset_names():
            columns, rows = load(name)
            resources.append(
                Resource(
                    path=f"datasets/{name}",
                    name=name,
                    title=f"{name}.csv",
                    description=f"{len(rows)} rows; columns: {', '.join(columns)}",
                    mime_type="text/csv",
                    size=len(table_text(name).encode()),
                    annotations=None,
                    icons=[],
                    meta=None,
                )
            )
        return ResourcePage(resources=resources, next_cursor=None, cache=None)

    def templates(self, cursor: Optional[str]) -> TemplatePage:
        if cursor is not None:
            fail(Error_InvalidInput(f"unknown cursor {cursor!r}"))
        return TemplatePage(
            templates=[
                template("datasets/{name}/rows/{row}", "row", "One row of a dataset, numbered from 1, as JSON"),
                template(
                    "datasets/{name}/where/{column}/{value}",
                    "where",
                    "The rows of a dataset whose column has a value, as JSON",
                ),
            ],
            next_cursor=None,
            cache=CacheHint(ttl_ms=60_000, scope=CacheScope.PUBLIC),
        )

    def read(self, path: str) -> ReadResult:
        parts = path.split("/")
        if len(parts) < 2 or parts[0] != "datasets":
            fail(Error_NotFound(f"{path!r} is not under datasets/"))
        name = parts[1]
        if len(parts) == 2:
            load(name)
            return answer(path, "text/csv", table_text(name))
        columns, rows = load(name)
        if len(parts) == 4 and parts[2] == "rows":
            if not parts[3].isdigit() or not 1 <= int(parts[3]) <= len(rows):
                fail(Error_NotFound(f"{name} has rows 1 to {len(rows)}, not {parts[3]!r}"))
            return answer(path, "application/json", json.dumps(rows[int(parts[3]) - 1]))
        if len(parts) == 5 and parts[2] == "where":
            column, value = parts[3], parts[4]
            if column not in columns:
                fail(Error_NotFound(f"{name} has no column {column!r}"))
            matching = [row for row in rows if row[column] == value]
            return answer(path, "application/json", json.dumps(matching))
        fail(Error_NotFound(f"{path!r} matches no template of this plugin"))

    def complete(self, request: CompletionRequest) -> Completion:
        chosen = dict(request.context)
        if request.argument == "name":
            candidates = dataset_names()
        else:
            name = chosen.get("name")
            if name is None:
                fail(Error_InvalidInput("complete `name` first"))
            columns, rows = load(name)
            if request.argument == "row":
                candidates = [str(number) for number in range(1, len(rows) + 1)]
            elif request.argument == "column":
                candidates = columns
            elif request.argument == "value" and chosen.get("column") in columns:
                candidates = sorted({row[chosen["column"]] for row in rows})
            else:
                fail(Error_InvalidInput(f"cannot complete {request.argument!r} here"))
        values = [value for value in candidates if value.startswith(request.value)]
        return Completion(
            values=values[:MAX_COMPLETIONS], total=len(values), has_more=len(values) > MAX_COMPLETIONS
        )

    def changes(self, since: Optional[str]) -> ChangeReport:
        stamps = []
        for name in dataset_names():
            status = os.stat(f"{ROOT}/{name}.csv")
            stamps.append(f"{name}:{status.st_mtime_ns}")
        token = "|".join(stamps)
        if since is None:
            return ChangeReport(token=token, listing_changed=False, changed_paths=[])
        before = dict(stamp.rsplit(":", 1) for stamp in since.split("|") if stamp)
        now = dict(stamp.rsplit(":", 1) for stamp in stamps)
        changed = [f"datasets/{name}" for name, stamp in now.items() if before.get(name) != stamp]
        return ChangeReport(token=token, listing_changed=set(before) != set(now), changed_paths=changed)


def answer(path: str, mime_type: str, text: str) -> ReadResult:
    return ReadResult(
        contents=[Content(path=path, mime_type=mime_type, body=Body_Text(value=text), meta=None)],
        cache=None,
    )
