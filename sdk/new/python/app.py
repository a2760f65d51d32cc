"""{{name}}: a resmux plugin in Python, written with resmux_sdk.

It serves `hello` ("<greeting>, world!") and the template `hello/{who}`
("<greeting>, <who>!"), with the greeting from the manifest's `[config]`.
"""

from typing import Optional
from urllib.parse import unquote

import resmux_sdk
from resmux_sdk import CompletionRequest, Config, NotFound

NAMES = ["ada", "alan", "grace", "linus"]
PAGE_SIZE = 100


class Greeter(resmux_sdk.Plugin):
    @staticmethod
    def about():
        return resmux_sdk.plugin_info("{{name}}", "0.1.0", "Says hello to the world or to whoever is named")

    def __init__(self, config: Config):
        self.greeting = config.text("greeting", "Hello")
        config.finish()

    def list(self, cursor: Optional[str]):
        resources = [resmux_sdk.resource("hello", "hello", mime_type="text/plain")]
        page, next_cursor = resmux_sdk.paginate(resources, cursor, PAGE_SIZE)
        return resmux_sdk.resource_page(page, next_cursor)

    def templates(self, cursor: Optional[str]):
        resmux_sdk.no_cursor(cursor)
        hello_who = resmux_sdk.template("hello/{who}", "greeting", mime_type="text/plain")
        return resmux_sdk.template_page([hello_who])

    def read(self, path: str):
        if path == "hello":
            who = "world"
        else:
            prefix, _, who = path.partition("/")
            if prefix != "hello" or not who or "/" in who:
                raise NotFound(f"{path!r} is neither hello nor hello/<who>")
        text = f"{self.greeting}, {unquote(who)}!"
        return resmux_sdk.read_result(resmux_sdk.text_content(path, "text/plain", text))

    def complete(self, request: CompletionRequest):
        if (request.path_template, request.argument) != ("hello/{who}", "who"):
            return super().complete(request)
        return resmux_sdk.completion(name for name in NAMES if name.startswith(request.value))

    def changes(self, since: Optional[str]):
        return resmux_sdk.change_report("0")  # the greetings never change


Provider = resmux_sdk.export(Greeter)
