"""The redaction gates are string code standing in for regexes (recalld/core/redact.py): each
must say exactly what its regex says, at every position of texts built from the characters the
regexes care about, and the stop hook's common texts must not import `re` at all."""

import random
import re
import subprocess
import sys

from recalld.core import redact as R

REGEX = {
    R._assignment_tail: r"[a-z0-9_]*(?:\\{0,3}[\"'])?\s*(?:[:=]|=>)",
    R._env_tail: r"[a-z0-9_]*\s*=",
    R._prose_tail: r"\s+(?:(?:is|was|has|got)[\s:]|for\s)",
    R._upper_env_tail: r"[A-Z0-9_]*\s*=",
    R._url_password_tail: r"[^\s:/@\"'<>]+:[^\s@/\"'<>]+@",
}
# the characters the regexes name, their neighbours, and whitespace beyond ASCII
ALPHABET = list("aAzZ09_-=:>@/\\\"'<>. \t\n") + ["is", "was", "has", "got", "for", "\u00a0", "\u2028",
                                                  "\u3000", "\u0131", "é", "x", "K"]


def test_each_gate_says_what_its_regex_says_everywhere():
    rnd = random.Random(17)
    for tail, source in REGEX.items():
        rx = re.compile(source)
        for _ in range(4000):
            s = "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, 12)))
            for i in range(len(s) + 1):
                assert tail(s, i) == bool(rx.match(s, i)), (tail.__name__, s, i)


def test_gated_patterns_compile_lazily_and_all_are_there():
    kinds = [k for k, _p, _r in R._PATTERNS]
    assert kinds == [k for k, _s, _r in R._SOURCES] and len(kinds) == 22
    assert R._PATTERNS[0][1].flags & re.S  # the private key's body spans lines
    assert [k for k, p, _r in R._PATTERNS if p.flags & re.I] == [R._SOURCES[i][0] for i in sorted(R._FINDER_SOURCES)]


def test_ordinary_stop_texts_never_import_re():
    code = ("import sys; from recalld.core import redact\n"
            "for t in ('Done: the tests pass and the flag is documented.',\n"
            "          'The token budget is fine; see https://example.com/docs for the key points.',\n"
            "          'PASSING now', 'no secrets here', ''):\n"
            "    assert redact.redact_counts(t) == (t, {}), t\n"
            "print(sorted(m for m in ('re', 'collections', 'enum') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         cwd=__file__.rsplit("/tests/", 1)[0])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_redact_counts_matches_redact():
    for t in ('password = "hunter2hunter2"', "API_KEY=abcd1234efgh x postgres://u:pw12@h/db", "plain"):
        text, counts = R.redact(t)
        assert R.redact_counts(t) == (text, dict(counts))
