"""The API's JSON parser: DRF's, with the body's nesting bounded before it is parsed.

Python's json recurses once per level: a body nested some thousands deep raised RecursionError
(a 500, on any POST, before the permission check). A number past Python's 4,300-digit limit
raises ValueError, which DRF's parser already answers with 400; both are a ParseError here.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json

# Far deeper than any request body of this API (a training config is three levels), and far
# from the interpreter's recursion limit, so what is parsed can also be validated and stored.
MAX_DEPTH = 32

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)  # brackets inside strings do not nest
_BRACKET = re.compile(r"[\[\]{}]")


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON `text` nests arrays and objects more than `limit` deep (a linear scan)."""
    depth = 0
    for bracket in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if bracket.group() in "[{" else -1
        if depth > limit:
            return True
    return False


class BoundedJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        encoding = get_encoding(parser_context or {})
        try:
            text = codecs.getreader(encoding)(stream).read()
            if too_deep(text):
                raise ParseError(f"JSON parse error - nested more than {MAX_DEPTH} levels deep.")
            parse_constant = json.strict_constant if self.strict else None
            return json.loads(text, parse_constant=parse_constant)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise ParseError(f"JSON parse error - {exc}") from None
