"""`dataset`: CSV files of a granted directory, browsable row by row.

The Python example, written with the SDK (`sdk/python/resmux_sdk.py`). Each
`NAME.csv` under the configured root is a resource `datasets/NAME` (the table
as CSV), and two templates reach into it: `datasets/{name}/rows/{row}` (one
row, as JSON) and `datasets/{name}/where/{column}/{value}` (the rows whose
column has that value, as JSON). Completion offers dataset names, row numbers,
column names and the values a column holds.
"""

import csv
import json
import os
from typing import List, Optional, Tuple

import resmux_sdk
from resmux_sdk import CompletionRequest, Config, InvalidInput, NotFound

MAX_COMPLETIONS = 100


class Dataset(resmux_sdk.Plugin):
    @staticmethod
    def about():
        return resmux_sdk.plugin_info("dataset", "0.1.0", "CSV datasets, row by row (Python)")

    def __init__(self, config: Config):
        self.root = config.text("root", "/data").rstrip("/") or "/"
        config.finish()

    def list(self, cursor: Optional[str]):
        resmux_sdk.no_cursor(cursor)
        resources = []
        for name in self.dataset_names():
            columns, rows = self.load(name)
            resources.append(
                resmux_sdk.resource(
                    f"datasets/{name}",
                    name,
                    title=f"{name}.csv",
                    description=f"{len(rows)} rows; columns: {', '.join(columns)}",
                    mime_type="text/csv",
                    size=len(self.table_text(name).encode()),
                )
            )
        return resmux_sdk.resource_page(resources)

    def templates(self, cursor: Optional[str]):
        resmux_sdk.no_cursor(cursor)
        return resmux_sdk.template_page(
            [
                json_template("datasets/{name}/rows/{row}", "row", "One row of a dataset, numbered from 1, as JSON"),
                json_template(
                    "datasets/{name}/where/{column}/{value}",
                    "where",
                    "The rows of a dataset whose column has a value, as JSON",
                ),
            ],
            cache=resmux_sdk.cache_hint(60_000),
        )

    def read(self, path: str):
        parts = path.split("/")
        if len(parts) < 2 or parts[0] != "datasets":
            raise NotFound(f"{path!r} is not under datasets/")
        name = parts[1]
        if len(parts) == 2:
            self.load(name)
            return answer(path, "text/csv", self.table_text(name))
        columns, rows = self.load(name)
        if len(parts) == 4 and parts[2] == "rows":
            if not parts[3].isdigit() or not 1 <= int(parts[3]) <= len(rows):
                raise NotFound(f"{name} has rows 1 to {len(rows)}, not {parts[3]!r}")
            return answer(path, "application/json", json.dumps(rows[int(parts[3]) - 1]))
        if len(parts) == 5 and parts[2] == "where":
            column, value = parts[3], parts[4]
            if column not in columns:
                raise NotFound(f"{name} has no column {column!r}")
            matching = [row for row in rows if row[column] == value]
            return answer(path, "application/json", json.dumps(matching))
        raise NotFound(f"{path!r} matches no template of this plugin")

    def complete(self, request: CompletionRequest):
        chosen = dict(request.context)
        if request.argument == "name":
            candidates = self.dataset_names()
        else:
            name = chosen.get("name")
            if name is None:
                raise InvalidInput("complete `name` first")
            columns, rows = self.load(name)
            if request.argument == "row":
                candidates = [str(number) for number in range(1, len(rows) + 1)]
            elif request.argument == "column":
                candidates = columns
            elif request.argument == "value" and chosen.get("column") in columns:
                candidates = sorted({row[chosen["column"]] for row in rows})
            else:
                raise InvalidInput(f"cannot complete {request.argument!r} here")
        values = [value for value in candidates if value.startswith(request.value)]
        return resmux_sdk.completion(
            values[:MAX_COMPLETIONS], total=len(values), has_more=len(values) > MAX_COMPLETIONS
        )

    def changes(self, since: Optional[str]):
        stamps = []
        for name in self.dataset_names():
            status = os.stat(f"{self.root}/{name}.csv")
            stamps.append(f"{name}:{status.st_mtime_ns}")
        token = "|".join(stamps)
        if since is None:
            return resmux_sdk.change_report(token)
        before = dict(stamp.rsplit(":", 1) for stamp in since.split("|") if stamp)
        now = dict(stamp.rsplit(":", 1) for stamp in stamps)
        changed = [f"datasets/{name}" for name, stamp in now.items() if before.get(name) != stamp]
        return resmux_sdk.change_report(token, listing_changed=set(before) != set(now), changed_paths=changed)

    def dataset_names(self) -> List[str]:
        try:
            files = os.listdir(self.root)
        except OSError as error:
            raise NotFound(f"cannot list {self.root}: {error}") from None
        return sorted(name[:-4] for name in files if name.endswith(".csv"))

    def load(self, name: str) -> Tuple[List[str], List[dict]]:
        if name not in self.dataset_names():
            raise NotFound(f"there is no dataset {name!r}")
        with open(f"{self.root}/{name}.csv", newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file)
            rows = list(reader)
            return list(reader.fieldnames or []), rows

    def table_text(self, name: str) -> str:
        with open(f"{self.root}/{name}.csv", encoding="utf-8") as file:
            return file.read()


def json_template(path_template: str, name: str, description: str):
    return resmux_sdk.template(path_template, name, description=description, mime_type="application/json")


def answer(path: str, mime_type: str, text: str):
    return resmux_sdk.read_result(resmux_sdk.text_content(path, mime_type, text))


Provider = resmux_sdk.export(Dataset)
