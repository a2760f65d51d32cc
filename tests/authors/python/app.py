"""The error-path plugin for the Python scaffold: a drop-in `app.py` that serves
`hello` like the scaffold, but whose `boom` raises an exception nobody catches.
The SDK must answer it as an `internal` error naming the exception, not trap.
"""

from typing import Optional

import resmux_sdk
from resmux_sdk import Config, NotFound


class Exploding(resmux_sdk.Plugin):
    @staticmethod
    def about():
        return resmux_sdk.plugin_info("hello", "0.1.0", "Says hello; reading boom raises")

    def __init__(self, config: Config):
        self.greeting = config.text("greeting", "Hello")
        config.finish()

    def list(self, cursor: Optional[str]):
        resources = [resmux_sdk.resource("hello", "hello", mime_type="text/plain")]
        page, next_cursor = resmux_sdk.paginate(resources, cursor, 100)
        return resmux_sdk.resource_page(page, next_cursor)

    def read(self, path: str):
        if path == "boom":
            raise ValueError("the boom resource exploded")
        if path != "hello":
            raise NotFound(f"{path!r} is not hello")
        return resmux_sdk.read_result(resmux_sdk.text_content(path, "text/plain", f"{self.greeting}, world!"))


Provider = resmux_sdk.export(Exploding)
