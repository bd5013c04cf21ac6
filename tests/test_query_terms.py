"""The hook's text functions without `re` give exactly what the regular expressions they
replaced give: on every code point, on the shared corpora (LoCoMo dev, the Claude Code
transcripts), and on generated strings built from the characters the patterns care about."""

import json
import random
import re
import sys

import pytest

from recalld.core import query_terms
from tests.helpers import SHARED

# The patterns as they were (recalld/core/query_terms.py and recalld/core/search.py before).
TOKEN = re.compile(r"[^\W_]+")
CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
SUBJECT = re.compile(r"(?:\[[^\]\n]{0,60}\]\s*)?([^\W\d][\w .\-/]{0,40}?):\s")
LOCOMO = SHARED / "data" / "locomo" / "locomo-dev.json"


def old_identifier_parts(text):
    out = []
    for tok in TOKEN.findall(text):
        if tok.islower() or tok.isupper() or tok.isdigit():
            continue
        parts = CAMEL.findall(tok)
        if len(parts) > 1:
            out.extend(parts)
    return out


def old_subject(text):
    m = SUBJECT.match(text)
    return m.group(1) if m else None


def same(text):
    assert query_terms.tokens(text) == TOKEN.findall(text), text[:200]
    assert query_terms.identifier_parts(text) == old_identifier_parts(text), text[:200]
    assert query_terms.subject_span(text) == old_subject(text), text[:200]
    for tok in TOKEN.findall(text):
        assert query_terms.camel_parts(tok) == CAMEL.findall(tok), tok


def strings_of(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from strings_of(k)
            yield from strings_of(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from strings_of(v)


def test_every_code_point_is_split_as_the_regex_splits():
    cps = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(cps), 4096):
        chunk = cps[start:start + 4096]
        text = "".join(c + "a" + c + " " for c in chunk)
        same(text)
        same("".join(chunk))
    for c in cps[::61]:  # the classes are per character: every code point went through above
        same(f"{c}x: y")  # as a label's first character
        same(f"Ab{c}cd: y")  # inside a label
        same(f"Ab:{c}y")  # after the colon (\s)


def test_generated_strings_agree():
    r = random.Random(17)
    alphabet = "aZ9_ .-/:[]\n\t\u00e9\u0131\u0660\u2028\u3000İX" + "ABCxyz012"
    for _ in range(20_000):
        n = r.randrange(0, 90)
        same("".join(r.choice(alphabet) for _ in range(n)))
    for _ in range(3_000):  # bracket prefixes of every length around the 60-character limit
        inner = "".join(r.choice("ab ]\n") if r.random() < 0.05 else "x" for _ in range(r.randrange(55, 66)))
        label = "".join(r.choice("ab -/.") for _ in range(r.randrange(0, 44)))
        gap, first, end = r.choice(["", " ", "  "]), r.choice(["L", "_", "1", " "]), r.choice([": ", ":", ":x", ""])
        same(f"[{inner}]{gap}{first}{label}{end}")


def test_the_shared_corpora_agree(shared_transcripts):
    texts = []
    for path in sorted(shared_transcripts.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                texts.extend(strings_of(json.loads(line)))
            except ValueError:
                texts.append(line)
    if LOCOMO.is_file():
        texts.extend(strings_of(json.loads(LOCOMO.read_text(encoding="utf-8"))))
    assert len(texts) > 10_000
    for t in texts:
        same(t)
        for line in t.splitlines()[:50]:  # every line as a memory's first line, for the label
            same(line)


@pytest.mark.parametrize("text,parts", [("OperationalError", ["Operational", "Error"]),
                                        ("HTTPServer2", ["HTTP", "Server", "2"]),
                                        ("getURLsFor", ["get", "UR", "Ls", "For"])])
def test_identifier_parts_examples(text, parts):
    assert query_terms.identifier_parts(text) == parts
