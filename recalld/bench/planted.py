"""Planted secrets: one value of each secret kind, a transcript copy that carries them, and a
search of a RECALLD_HOME for any of them.

One copy, used by tests/test_proposer.py and the proposer benchmark (recalld.bench.proposer):
it lives in the package, not in tests/, because the benchmark runs from an installed wheel too,
and a test may import the library while the library may not import the tests. The values are
made up; each has the shape of its kind, so a redaction rule that misses the kind misses it.
"""

import json
import sqlite3
from pathlib import Path

PLANTED = {
    "openai": "sk-proj-Pl4ntedOpenAIKey0123456789abcdefXYZ",
    "anthropic": "sk-ant-api03-Pl4ntedAnthropicKey0123456789-abc",
    "github": "ghp_Pl4ntedGitHubT0kenValue0123456789ab",
    "github_pat": "github_pat_11PLANTED0_Pl4ntedFineGrainedT0ken0123456789",
    "aws": "AKIAPLANTED0EXAMPLE7",
    "slack": "xoxb-1111-2222-Pl4ntedSlackT0ken",
    "google": "AIzaSyPl4nted-GoogleKey0123456789abcdefgh",
    "stripe": "sk_live_Pl4ntedStripeKey0123456789",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJwbGFudGVkIjoieWVzIn0.Pl4ntedJwtSignature0123456789",
    "private_key": "MIIEpPl4ntedPrivateKeyBody0123456789",
    "url_password": "Pl4ntedUrlPassw0rd",
    "assignment": "Pl4ntedAssignedPassw0rd",
    "bearer": "Pl4ntedBearerT0ken0123456789",
    "env": "Pl4ntedEnvSecretValue",
}


def secret_text() -> str:
    """Every planted value, each in the context its kind is found in."""
    p = PLANTED
    return (f"Use {p['openai']} and {p['anthropic']} for the clients; push with {p['github']} or "
            f"{p['github_pat']}; AWS {p['aws']}; slack {p['slack']}; maps {p['google']}; billing {p['stripe']}; "
            f"session {p['jwt']}; db postgres://app:{p['url_password']}@db.internal:5432/main; "
            f"password = \"{p['assignment']}\"; curl -H 'Authorization: Bearer {p['bearer']}'\n"
            f"-----BEGIN RSA PRIVATE KEY-----\n{p['private_key']}\n-----END RSA PRIVATE KEY-----\n"
            f"STRIPE_SECRET_KEY={p['env']}\n")


def plant(src: Path, dst: Path) -> None:
    """A copy of a Claude Code transcript with secrets in the user's prompts, the agent's text,
    its thinking and its tool results (the first turned into an error so it reaches the window)."""
    out = []
    errored = False
    for line in Path(src).read_text(encoding="utf-8").splitlines():
        o = json.loads(line)
        m = o.get("message") if isinstance(o.get("message"), dict) else None
        if m is not None:
            c = m.get("content")
            if isinstance(c, str) and not c.startswith("<"):
                m["content"] = c + "\n" + secret_text()
            elif isinstance(c, list):
                for b in c:
                    if b.get("type") == "text":
                        b["text"] = b["text"] + "\n" + secret_text()
                    elif b.get("type") == "thinking":
                        b["thinking"] = b["thinking"] + "\n" + secret_text()
                    elif b.get("type") == "tool_result":
                        b["content"] = secret_text() + "\n" + (b["content"] if isinstance(b["content"], str)
                                                               else json.dumps(b["content"]))
                        if not errored:
                            b["is_error"], errored = True, True
        out.append(json.dumps(o))
    Path(dst).write_text("\n".join(out) + "\n", encoding="utf-8")


def leaks(home: Path, conn=None) -> list:
    """[(where, kind)] for every planted value found: any column of any table of
    home/recalld.db (through `conn` when given), any other file under `home` (logs, fallback
    receipts)."""
    home = Path(home)
    own = conn is None
    if own:
        conn = sqlite3.connect(str(home / "recalld.db"))
    found = []
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for t in tables:
            try:
                rows = conn.execute(f'SELECT * FROM "{t}"').fetchall()
            except sqlite3.Error:
                continue
            for row in rows:
                blob = " ".join(str(v) for v in tuple(row))
                found += [(t, k) for k, v in PLANTED.items() if v in blob]
    finally:
        if own:
            conn.close()
    for f in home.rglob("*"):
        if f.is_file() and not f.name.startswith("recalld.db"):
            text = f.read_bytes().decode("utf-8", "replace")
            found += [(str(f.relative_to(home)), k) for k, v in PLANTED.items() if v in text]
    return found
