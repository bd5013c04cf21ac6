"""recalld.core.jsonio is json for the hook without importing json: the same objects from
loads, the same text from dumps, the same errors, and json itself where _json is missing."""

import json
import math
import subprocess
import sys

import pytest

from recalld.core import jsonio
from tests.helpers import REPO

OPTIONS = [{}, {"ensure_ascii": False}, {"separators": (",", ":")},
           {"separators": (",", ":"), "ensure_ascii": False}, {"sort_keys": True, "ensure_ascii": False}]
SAMPLES = [
    {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                            "additionalContext": "<recalld>\n\u00e9 \u2028 \U0001f600 \"q\" \\ \t</recalld>"}},
    {"decision": "block", "reason": "x\ny"}, [], {}, "", "plain", 0, -1.5, 1e300, 10 ** 30, True, None,
    {"a": [1, 2.0, {"b": [None, False]}], "\ud800": "lone surrogate"},
    {"nan": float("nan"), "inf": float("inf"), "ninf": float("-inf")},
    {3: "int key", 2.5: "float key", None: "null key", True: "bool key"},
]


def outcome(fn, *a, **kw):
    try:
        return fn(*a, **kw)
    except Exception as e:  # the same error, with the same message
        return type(e), str(e)


def test_dumps_writes_what_json_writes():
    for obj in SAMPLES:
        for kw in OPTIONS:
            assert outcome(jsonio.dumps, obj, **kw) == outcome(json.dumps, obj, **kw), (obj, kw)


def test_dumps_default_and_errors_are_jsons():
    obj = {"when": object.__new__(type("T", (), {"__str__": lambda s: "T!"}))}
    assert jsonio.dumps(obj, default=str) == json.dumps(obj, default=str)
    with pytest.raises(TypeError, match="not JSON serializable"):
        jsonio.dumps({"x": {1, 2}})
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        jsonio.dumps(loop)
    # a failed encoding leaves nothing behind that a later one trips on
    assert jsonio.dumps([[1], [2]]) == "[[1], [2]]"


def test_loads_reads_what_json_reads():
    docs = [json.dumps(o, **kw) for o in SAMPLES[:-1] for kw in OPTIONS] + [
        " \n\t{\"a\": 1}\r\n ", "[1, 2, 3]   ", "\"\\ud83d\\ude00\"", "-0", "1E5", "NaN", "-Infinity"]
    for d in docs:
        raw = d.encode("utf-8", "surrogatepass")
        for form in (d, raw, bytearray(raw), d.encode("utf-16", "surrogatepass"),
                     d.encode("utf-32", "surrogatepass"), b"\xef\xbb\xbf" + raw):
            got, want = outcome(jsonio.loads, form), outcome(json.loads, form)
            assert repr(got) == repr(want), form
            if isinstance(want, float) and math.isnan(want):
                assert math.isnan(got)


@pytest.mark.parametrize("doc", ["", " ", "{", "{\"a\": 1} x", "[1,]", "\ufeff{}", "{\"a\" 1}", b"\xff\xfe\xfa",
                                 b"{\"a\": \"\xc3\x28\"}", "\"\x01\"", b"\x00\x00\x00{", "[1] [2]", 5])
def test_loads_fails_as_json_fails(doc):
    with pytest.raises(Exception) as want:
        json.loads(doc)
    with pytest.raises(type(want.value)) as got:
        jsonio.loads(doc)
    assert str(got.value) == str(want.value)


def test_a_fresh_process_fails_as_json_fails():
    """The C scanner takes its error class from an imported json.decoder: a hook has none."""
    code = ("import sys\nfrom recalld.core import jsonio\nassert 'json' not in sys.modules\n"
            "for doc in ('{not json', '[1,]', '', '{\"a\": 1} x'):\n"
            "    try:\n        jsonio.loads(doc)\n    except ValueError as e:\n"
            "        print(type(e).__name__, e)\n")
    res = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r})\n{code}"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    want = []
    for doc in ("{not json", "[1,]", "", "{\"a\": 1} x"):
        try:
            json.loads(doc)
        except ValueError as e:
            want.append(f"{type(e).__name__} {e}")
    assert res.stdout.splitlines() == want


def test_the_shared_transcripts_decode_and_encode_the_same(shared_transcripts):
    lines = [line for p in sorted(shared_transcripts.glob("*.jsonl"))
             for line in p.read_bytes().splitlines() if line.strip()]
    assert len(lines) > 500
    for line in lines:
        obj = json.loads(line)
        assert jsonio.loads(line) == obj
        for kw in OPTIONS:
            assert jsonio.dumps(obj, **kw) == json.dumps(obj, **kw)


def test_without_the_accelerator_it_is_json_itself():
    code = ("import sys; sys.modules['_json'] = None\n"
            "from recalld.core import jsonio\n"
            "assert jsonio._json is None\n"
            "print(jsonio.dumps({'a': [1, 'é']}, ensure_ascii=False), jsonio.loads(b'{\"b\": 2}'))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO), check=True)
    assert res.stdout.strip() == "{\"a\": [1, \"é\"]} {'b': 2}"


def test_importing_it_imports_neither_json_nor_re():
    code = ("import sys\nfrom recalld.core import jsonio\njsonio.loads(jsonio.dumps({'a': [1.5, None]}))\n"
            "print(sorted(m for m in ('json', 're', 'enum') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r})\n{code}"],
                         capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]"
