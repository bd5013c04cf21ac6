"""Policies: every secret shape is redacted, ordinary text is left alone, and each screening
rule rejects what it should (and only that), counted by reason."""

import pytest

from recalld.capture import policies
from recalld.capture.policies import Draft, redact, screen

# (kind, text with the secret, the secret value that must disappear)
SECRETS = [
    ("openai-key", "export key sk-proj-Abc123def456Ghi789jkl012Mno345pqr678 for the client", "sk-proj-Abc123def456Ghi789jkl012Mno345pqr678"),
    ("openai-key", "old style sk-4fQ9aXb2LmN7pR3sT8vW1yZ5cD6eF0gH2jK4 key", "sk-4fQ9aXb2LmN7pR3sT8vW1yZ5cD6eF0gH2jK4"),
    ("anthropic-key", "ANTHROPIC key is sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf-AbCdEf", "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf-AbCdEf"),
    ("github-token", "push with ghp_R4nd0mT0k3nV4lu3F0rT3st1ngPurp0s3s1", "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngPurp0s3s1"),
    ("github-token", "oauth gho_16C7e42F292c6912E7710c838347Ae178B4a", "gho_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("github-token", "fine-grained github_pat_11ABCDEFG0abcdefghijkl_MNOPQRSTUVWXyz0123456789", "github_pat_11ABCDEFG0abcdefghijkl_MNOPQRSTUVWXyz0123456789"),
    ("aws-access-key", "aws id AKIAIOSFODNN7EXAMPLE in the config", "AKIAIOSFODNN7EXAMPLE"),
    ("slack-token", "bot token xoxb-2048-1234567890-AbCdEfGhIjKlMnOp", "xoxb-2048-1234567890-AbCdEfGhIjKlMnOp"),
    ("google-api-key", "maps key AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW", "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"),
    ("stripe-key", "billing uses sk_live_51HqLyjWDarjtT1zdp7dcXYZ", "sk_live_51HqLyjWDarjtT1zdp7dcXYZ"),
    ("jwt", "session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
     "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("private-key", "key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n-----END OPENSSH PRIVATE KEY-----\ndone",
     "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU"),
    ("private-key", "truncated -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAtruncatedhere", "MIIEowIBAAKCAQEAtruncatedhere"),
    ("url-password", "DATABASE at postgres://app:Sup3rS3cretPw@db.internal:5432/main", "Sup3rS3cretPw"),
    ("bearer", "curl -H 'Authorization: Bearer abc123def456ghi789jkl' https://api", "abc123def456ghi789jkl"),
    ("bearer", "header was bearer ZmFrZS1iZWFyZXItdG9rZW4tdmFsdWU=", "ZmFrZS1iZWFyZXItdG9rZW4tdmFsdWU"),
    ("assignment", "settings: password = 'correct horse battery'", "correct horse battery"),
    ("assignment", 'config {"api_key": "zq8wx7cv6bn5"}', "zq8wx7cv6bn5"),
    ("assignment", "client_secret: Q9w8E7r6T5y4", "Q9w8E7r6T5y4"),
    ("env-secret", "OPENAI_API_KEY=plainvalue123\nDEBUG=1", "plainvalue123"),
    ("env-secret", "export DB_PASSWORD=\"two words here\"", "two words here"),
    ("cli-secret", "mysql --password=hunter22x -u root", "hunter22x"),
    ("env-secret", "then set STRIPE_SECRET_KEY=inlinevalue99 in the shell", "inlinevalue99"),
]


@pytest.mark.parametrize("kind,text,secret", SECRETS)
def test_each_secret_kind_is_redacted(kind, text, secret):
    out, counts = redact(text)
    assert secret not in out
    assert sum(counts.values()) >= 1
    assert "[REDACTED:" in out


def test_redaction_keeps_ordinary_text():
    plain = ("max_tokens = 256 keeps answers short; tokenize='porter' stems words; token_set_ratio is a "
             "rapidfuzz scorer. See https://github.com/xtermjs/xterm.js/issues/1343 and git sha "
             "9fa49ff3cce6831b19630f4d71e7227631c9eb9d. The password policy lives in docs/auth.md.")
    out, counts = redact(plain)
    assert out == plain and not counts


def test_redaction_is_idempotent_and_counts_once():
    once, c1 = redact("token: abcd1234efgh and sk-ant-api03-aaaaaaaaaaaaaaaaaaaa")
    twice, c2 = redact(once)
    assert once == twice and not c2 and sum(c1.values()) == 2


@pytest.mark.parametrize("text", [
    "I updated the config loader to read settings.json.", "Now let's run the test suite again.",
    "Done.", "I'll fix the failing import next.", "Let me check the logs first.",
    "We just added the retry to the fetcher.", "The user asked for a dark mode toggle.",
    "Successfully updated the README with the new commands.",
])
def test_narration_is_recognised(text):
    assert policies.is_narration(text)


@pytest.mark.parametrize("text", [
    "The hook must open SQLite with a busy timeout because concurrent hooks otherwise fail with locked errors.",
    "We chose WAL mode so hooks can read while the daemon writes.",
    "xterm.js captures wheel events, so the page cannot scroll while the pointer is over the terminal.",
])
def test_knowledge_is_not_narration(text):
    assert not policies.is_narration(text)


WINDOW = ("USER: scrolling in xterm.js does not work inside the page\n"
          "AGENT: xterm.js captures wheel events, so the page cannot scroll while the pointer is over the "
          "terminal; the fix is attachCustomWheelEventHandler returning false when the buffer is at the top.\n"
          "ERROR from Bash: mix phx.server failed: port 4000 already in use")
GOOD = ("xterm.js captures wheel events, so the page cannot scroll while the pointer is over the terminal; "
        "attachCustomWheelEventHandler fixes it.")


def d(text, kind="constraint", conf=0.9):
    return {"kind": kind, "text": text, "why": "it matters later", "confidence": conf}


def test_screen_keeps_a_grounded_draft():
    s = screen([d(GOOD)], window=WINDOW)
    assert [x.text for x in s.kept] == [GOOD] and not s.rejected


@pytest.mark.parametrize("draft,reason", [
    (d("Port 4000 busy."), "too_short"),
    (d("xterm.js captures wheel events " * 40), "too_long"),
    (d("xterm.js wheel events page scroll " * 4 + "terminal buffer top handler."), "repetitive"),
    (d("I updated the xterm.js wheel handler so the page scrolls again over the terminal."), "narration"),
    (d(GOOD, conf=0.2), "low_confidence"),
    (d("xterm.js captures 87% of wheel events, so the page cannot scroll over the terminal."), "ungrounded"),
    (d("The billing service retries webhooks with exponential backoff and jitter on failures."), "ungrounded"),
    (d("scrolling in xterm.js does not work inside the page at all"), "echoes_request"),
    (d(GOOD, kind="opinion"), "malformed"),
    ({"kind": "fact"}, "malformed"),
])
def test_screen_rejects_with_one_reason(draft, reason):
    s = screen([draft], window=WINDOW, requests=["scrolling in xterm.js does not work inside the page"])
    assert not s.kept
    assert s.by_reason == {reason: 1}


def test_duplicates_of_memories_pending_and_each_other():
    mem = "xterm.js captures wheel events so the page cannot scroll when the pointer is over the terminal."
    s = screen([d(GOOD)], memories=[mem], window=WINDOW)
    assert s.by_reason == {"duplicate_memory": 1}
    s = screen([d(GOOD)], pending=[GOOD.upper()], window=WINDOW)
    assert s.by_reason == {"duplicate_proposal": 1}
    s = screen([d(GOOD), d(GOOD.replace("fixes it", "fixes it."))], window=WINDOW)
    assert len(s.kept) == 1 and s.by_reason == {"duplicate_proposal": 1}
    # A short draft is not a duplicate of every longer memory that contains its words.
    assert policies.similarity("xterm.js captures wheel events", mem) < 88


def test_over_limit_and_counts_by_reason():
    other = ("mix phx.server failed because port 4000 was already in use by another server on the "
             "machine.")
    s = screen([d(GOOD), d(other), d("Done."), d("I'll fix it now and then run the tests again, ok.")],
               window=WINDOW, cfg={"max_drafts": 1})
    assert [x.text for x in s.kept] == [GOOD]
    assert s.by_reason == {"over_limit": 1, "too_short": 1, "narration": 1}


def test_drafts_are_redacted_and_confidence_clamped():
    raw = d("The deploy key AKIAIOSFODNN7EXAMPLE lives in the CI settings and rotates monthly with the vault.",
            conf=1.7)
    draft = policies.coerce(raw)
    assert "AKIAIOSFODNN7EXAMPLE" not in draft.text and draft.redactions == {"aws-access-key": 1}
    assert draft.confidence == 1.0
    s = screen([draft], window=draft.text)
    assert s.redactions == {"aws-access-key": 1}


def test_a_draft_that_is_only_a_secret_is_too_short():
    s = screen([d("OPENAI_API_KEY=sk-proj-Abc123def456Ghi789jkl012Mno345pqr678")], window="")
    assert s.by_reason == {"too_short": 1}


def test_fast_paths_redact_exactly_what_the_plain_patterns_do():
    # redact() finds ignore-case patterns through lower-cased copies and skips patterns whose
    # cues are absent; with every shortcut off (each pattern's own sub) the output must match.
    import random

    from recalld.core import redact as R

    def plain(text):
        counts = {}
        for kind, pattern, repl in R._PATTERNS:
            repl = repl or R.PLACEHOLDER.format(kind)
            text, n = pattern.subn(repl, text)
            if n:
                counts[kind] = counts.get(kind, 0) + n
        return text, counts

    secrets = ['password = "hunter2hunter2"', "API_KEY=abcd1234efgh", "Authorization: Bearer abcdefghijklmnop123",
               'Token: "ghx1234567"', "--password s3cr3tpass", 'PassWord: "Xx12345"', 'Api-Key = "ZZZZ9999"',
               "BEARER ABCDEFGHIJKLMNOPQRS", 'client_secret=>  "qwertyuiop"', "postgres://u:pw12@h/db",
               "ghp_" + "a1" * 12, "sk-ant-api03-" + "x" * 20]
    # non-ASCII around them, including the four letters (?i) matches to ASCII (re docs)
    fillers = ["café déjà vu — ", "plain words here ", "\u212aey = 'abcdefgh' ", "pa\u017fsword: 'abcdefgh' ",
               "\u0130STANBUL token: zzzzzz ", "日本語のテキスト ", "token: [redacted:x]abcdef ",
               "Bearer [REDACTED:bearer]abcdefghijklmnop "]
    rnd = random.Random(7)
    for _ in range(400):
        text = "".join(rnd.choice(secrets + fillers) for _ in range(rnd.randint(1, 6)))
        out, counts = redact(text)
        assert (out, dict(counts)) == plain(text), text
