"""JSON for the hot path without `import json` (standard library only).

`import json` pulls in `re`, and `re` pulls in `enum`, `functools` and `collections`: 7-18 ms
of every hook process, on every prompt, for a parser that is written in C anyway. This module
drives the same C accelerator (`_json`) that `json` itself uses, with the arguments `json`
passes it, so `loads` returns what `json.loads` returns and `dumps` writes the very bytes
`json.dumps` writes (tests/test_hook_jsonio.py checks both on every payload shape the hook
sees). Whatever the fast path cannot take (a UTF-16 or BOM-prefixed document, invalid JSON,
extra data) goes to `json` itself, which then gives its own answer or its own error; so does
everything when `_json` is missing or its signature has changed (another Python).

The slow path (CLI, daemon, MCP) keeps `import json`; this is for modules the hook imports.
"""

try:
    import _json

    _scanner_type = _json.make_scanner
    _c_encoder = _json.make_encoder
    _ascii_str = _json.encode_basestring_ascii
    _plain_str = _json.encode_basestring
except (ImportError, AttributeError):  # a Python without the accelerator: plain json
    _json = None


def _raise_type_error(o):
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


class _Context:
    """What json.decoder.JSONDecoder() hands the C scanner, with its defaults."""

    def __init__(self):
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int
        nan, inf = float("nan"), float("inf")
        self.parse_constant = {"-Infinity": -inf, "Infinity": inf, "NaN": nan}.__getitem__
        self.memo = {}


_WS = " \t\n\r"  # json.decoder.WHITESPACE
_scan = None


def _fallback_loads(s):
    import json

    return json.loads(s)


def loads(s):
    """json.loads(s) for str, bytes or bytearray."""
    global _scan
    if _json is None:
        return _fallback_loads(s)
    if isinstance(s, (bytes, bytearray)):
        # json.detect_encoding: anything but plain UTF-8 (a BOM, a NUL in the first bytes of
        # UTF-16/32) goes the slow way, which decodes it as json does
        if not s or s[0] in (0, 0xEF, 0xFE, 0xFF) or (len(s) > 1 and not s[1]):
            return _fallback_loads(s)
        try:
            text = s.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return _fallback_loads(s)  # raises the same error json.loads would
    elif isinstance(s, str):
        text = s
        if text.startswith("\ufeff"):
            return _fallback_loads(s)
    else:
        return _fallback_loads(s)
    if _scan is None:
        try:
            _scan = _scanner_type(_Context())
        except TypeError:
            return _fallback_loads(s)
    n = len(text)
    start = n - len(text.lstrip(_WS))
    try:
        obj, end = _scan(text, start)
    except Exception:
        # Invalid JSON: json's own JSONDecodeError, message and position. (The scanner builds
        # that error from json.decoder only when it is already imported; before, it fails
        # with a SystemError.)
        return _fallback_loads(s)
    if end != n and text[end:].strip(_WS):
        return _fallback_loads(s)  # "Extra data"
    return obj


def _encoder(ensure_ascii: bool, item_sep: str, key_sep: str, default, sort_keys: bool):
    # json.encoder.JSONEncoder.iterencode(_one_shot=True) with check_circular, allow_nan,
    # skipkeys=False and indent=None: the arguments json.dumps gives the C encoder. A new one
    # per call, as json does: an encoding that fails leaves its ids in the markers dict.
    return _c_encoder({}, default or _raise_type_error, _ascii_str if ensure_ascii else _plain_str,
                      None, key_sep, item_sep, sort_keys, False, True)


def dumps(obj, *, ensure_ascii: bool = True, separators: "tuple | None" = None, default=None,
          sort_keys: bool = False) -> str:
    """json.dumps(obj, ...) for these options (no indent: callers that indent use json)."""
    item_sep, key_sep = separators or (", ", ": ")
    if _json is not None:
        if isinstance(obj, str):
            return _ascii_str(obj) if ensure_ascii else _plain_str(obj)
        try:
            enc = _encoder(ensure_ascii, item_sep, key_sep, default, sort_keys)
        except TypeError:
            enc = None  # another signature: json itself below
        if enc is not None:
            return "".join(enc(obj, 0))
    import json

    return json.dumps(obj, ensure_ascii=ensure_ascii, separators=(item_sep, key_sep), default=default,
                      sort_keys=sort_keys)
