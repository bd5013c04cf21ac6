"""Generate recalld/core/wordprior.txt, the search's background prior: for each porter stem,
how likely a memory-sized piece of text (MEMORY_TOKENS tokens) is to contain it, in general
English or in Python code, whichever is commoner.

A store of one, three or ten memories says little about which words are informative (every
term it holds has its highest document frequency), so recalld.core.search blends the store's
document frequencies with this table (docs/evaluation.md, "A small store"). Run it from a
checkout; it needs `msgpack` and the `wordfreq` package's data file, neither of which recalld
needs at run time:

    python3 -m pip download --no-deps wordfreq==3.1.1 -d /tmp/wf && unzip -q /tmp/wf/*.whl -d /tmp/wf
    python3 -m pip install msgpack
    python3 scripts/gen_wordprior.py --wordfreq /tmp/wf/wordfreq/data/large_en.msgpack.gz

Sources and licences:
- English: wordfreq 3.1.1 (Robyn Speer; https://github.com/rspeer/wordfreq), its `large_en`
  list: word frequencies blended from Wikipedia, subtitles (OpenSubtitles 2018, SUBTLEX),
  news, books (Google Books Ngrams), web text (the Leeds Internet Corpus, ParaCrawl), Reddit
  and Twitter, frozen in 2021. The code is Apache-2.0; the data is CC BY-SA 4.0, and so is the
  table derived from it (the table's header says so and names the source). wordfreq's
  `cBpack` format: after a header, list i holds the words of frequency 10^(-i/100) per token.
- Code: the Python standard library's own source on the machine that runs this (`*.py` under
  sysconfig's stdlib path, less tests, site-packages and the encodings/ tables; PSF licence), cut into
  MEMORY_TOKENS-token pieces; a stem's code probability is the share of pieces holding it.

Keys are the stems SQLite's porter tokenizer gives (recalld.core.query_terms.Stemmer, the same
stemmer the index uses), so the search looks its query stems up directly. A stem's English
frequency is the sum over the words sharing it ("invoice", "invoices", "invoiced"), turned into
a per-memory probability as 1 - exp(-MEMORY_TOKENS * f). Only stems at least MIN_PROB likely
are kept; below that the prior moves a term's weight by under 1% (at search.PRIOR_MEMORIES = 300)
and the search treats an absent stem as probability 0.

Output: '#' comment lines, then `STEM CODE` lines sorted by stem, where a stem's probability is
10 ** (-CODE / 10) (steps of a tenth of a decade, 26%). The hook reads the text and bisects it
for the few stems of a prompt: no dict of 20,000 entries is built on every prompt.
"""

import argparse
import gzip
import math
import os
import re
import sqlite3
import sys
import sysconfig
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from recalld.core.query_terms import Stemmer, identifier_parts, tokens  # noqa: E402

# A memory is one to three sentences: LoCoMo's dev turns average 24 tokens (32 with the
# date and speaker prefix), tests/test_small_store.py's hand-written memories 18.
MEMORY_TOKENS = 30
MIN_PROB = 5e-5
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "recalld", "core", "wordprior.txt")
# Tests, third-party packages, and encodings/ (character tables: "LATIN CAPITAL LETTER" in
# every other line would make those words look as common as "self").
SKIP_DIRS = frozenset(("test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "encodings"))
_STEM_OK = re.compile(r"[a-z0-9]+")


def english(path: str) -> dict:
    """{lower-case word: frequency per token} from a wordfreq cBpack file."""
    import msgpack

    with gzip.open(path, "rb") as f:
        data = msgpack.load(f, raw=False)
    header = data[0]
    if not isinstance(header, dict) or header.get("format") != "cB" or header.get("version") != 1:
        raise SystemExit(f"{path}: not a wordfreq cBpack file")
    out = {}
    for i, words in enumerate(data[1:]):
        f = 10 ** (-i / 100)
        # Words ten times rarer than MIN_PROB are left out: their stem would need ten such
        # forms to reach it.
        if 1 - math.exp(-MEMORY_TOKENS * f) < MIN_PROB / 10:
            break
        for w in words:
            toks = tokens(w)
            # One token as FTS5 splits it ("don't" is two); wordfreq writes every digit of a
            # multi-digit number as 0, so those say nothing about a real "16" or "2024".
            if len(toks) != 1 or toks[0] != w or (len(w) > 1 and any(c.isdigit() for c in w)):
                continue
            out[w.lower()] = out.get(w.lower(), 0.0) + f
    return out


def _code_files(root: str):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(".py"):
                with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                    # The index holds a memory's tokens and its identifiers' pieces (recalld.core.query_terms.aux_text).
                    text = f.read()
                    yield [t.lower() for t in tokens(text)] + [t.lower() for t in identifier_parts(text)]


def code_pieces(root: str) -> "tuple[Counter, int]":
    """({stem: pieces holding it}, number of pieces) over the stdlib's source. Two passes: the
    vocabulary is stemmed once, then each piece counts each stem once."""
    vocab = set()
    for toks in _code_files(root):
        vocab.update(toks)
    stem = stem_all(sorted(vocab))
    held, pieces = Counter(), 0
    for toks in _code_files(root):
        for i in range(0, len(toks), MEMORY_TOKENS):
            held.update({stem[t] for t in toks[i:i + MEMORY_TOKENS] if stem.get(t)})
            pieces += 1
    return held, pieces


def stem_all(words: list) -> dict:
    stemmer = Stemmer(sqlite3.connect(":memory:"))
    out = {}
    for i in range(0, len(words), 5000):
        chunk = words[i:i + 5000]
        out.update(zip(chunk, stemmer.stem_each(chunk)))
    return out


def build(wordfreq_path: str, stdlib: str) -> "tuple[dict, dict]":
    """({stem: probability}, facts for the header)."""
    freq = english(wordfreq_path)
    code, pieces = code_pieces(stdlib)
    stems = stem_all(sorted(freq))
    en = Counter()
    for w, f in freq.items():
        if stems.get(w):
            en[stems[w]] += f
    prior = {}
    for s in set(en) | set(code):
        if not _STEM_OK.fullmatch(s):
            continue
        p = max(1 - math.exp(-MEMORY_TOKENS * en[s]), code[s] / pieces)
        if p >= MIN_PROB:
            prior[s] = p
    facts = {"english words": len(freq), "code pieces": pieces, "stems": len(prior),
             "python": sys.version.split()[0], "stdlib": stdlib}
    return prior, facts


def write(prior: dict, facts: dict, out: str) -> None:
    lines = [
        "# recalld word prior, generated by scripts/gen_wordprior.py; do not edit.",
        "# STEM CODE, sorted by stem: P(a %d-token memory holds the stem) = 10 ** (-CODE / 10)." % MEMORY_TOKENS,
        "# English: wordfreq 3.1.1 large_en (Robyn Speer, https://github.com/rspeer/wordfreq), data CC BY-SA 4.0;",
        "# this table is derived from it and is licensed CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/).",
        "# Code: the Python %s standard library's source (PSF licence), %d pieces." % (facts["python"], facts["code pieces"]),
        "# %d stems with probability >= %g." % (facts["stems"], MIN_PROB),
    ]
    # Sorted by code point (what Python's < compares), so the search bisects the text.
    for s in sorted(prior):
        lines.append(f"{s} {max(0, round(-10 * math.log10(prior[s])))}")
    with open(out, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wordfreq", required=True, help="wordfreq's data/large_en.msgpack.gz")
    ap.add_argument("--stdlib", default=sysconfig.get_paths()["stdlib"], help="Python standard library source")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args(argv)
    prior, facts = build(a.wordfreq, a.stdlib)
    write(prior, facts, a.out)
    print(f"{a.out}: {facts['stems']} stems, {os.path.getsize(a.out)} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
