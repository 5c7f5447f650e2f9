# FAULT: this module contains a DELIBERATE Python syntax error (the missing closing bracket below),
# to show how fleet reports a scraper module that cannot be imported. Do not "fix" it.
import polars as pl

from fleet import Scraper


class SyntaxBroken(Scraper):
    """FAULT: never loads."""

    name = "syntax_error"
    schema = {"value": pl.Utf8
    key = ("value",)

    async def scrape(self, page, ctx):
        yield {"value": "x"}
