"""No planted secret reaches the store (issue 14, part 3).

Each secret kind is planted through every write path: CLI remember (text and tell), CLI
import, the MCP `remember` tool through build()'s wrappers, proposal edit and approve, and the
daemon's tailer storing transcript events. Then every byte under RECALLD_HOME (the database,
its WAL, receipts and any other file) is searched for each planted value, case-insensitively
(the FTS index keeps lower-cased tokens): none may be there. The writer is told the kinds and
counts, never the values, and `--allow-secrets` / `allow_secrets` keeps a value only when asked,
in the memory's change log. The patterns are also checked the other way: ordinary prose and
code come through unchanged.
"""

import asyncio
import json
import os
import random

import pytest
from click.testing import CliRunner

from recalld import memories
from recalld.mcp import tools as mcp
from recalld.capture import policies, decide
from recalld.cli.main import cli
from recalld.core import db, proposal_db, receipts, scope
from recalld.core import redact as R
from recalld.core.redact import redact
from tests.helpers import payload, run_recalld

PEM_BODY = "MIIEowIBAAKCAQEAx3vQ9kPlanted7RsaBodyLineZk2wq8Nf5Tq1hJ0cVbY6"
SSH_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUPlantedOpenSshBody4Qx"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJwbGFudGVkLXVzZXItNDIifQ."
       "Zk3pLantedJwtSignatureQ9x8w7v6u5t4")

# (kind, text holding the secret, the value that must not be stored). The first 18 are the
# issue's (AWS, GitHub, Anthropic, OpenAI, Slack, PEM, JWT, URL passwords, .env lines); then
# the forms the daemon's redaction used to miss, then other providers it already knew.
PLANTED = [
    ("aws-access-key", "The deploy role uses AKIAQ3PLANTEDZ7K2WQ9 in us-east-1.", "AKIAQ3PLANTEDZ7K2WQ9"),
    ("assignment", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiPlantedAwsSecret",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiPlantedAwsSecret"),
    ("github-token", "CI pushes tags with ghp_PlantedGithubClassicToken0123456789ab.",
     "ghp_PlantedGithubClassicToken0123456789ab"),
    ("github-token", "The release bot reads github_pat_11PLANTED0abcdefghijkl_MNOPQRSTUVWXyz0123456789 from CI.",
     "github_pat_11PLANTED0abcdefghijkl_MNOPQRSTUVWXyz0123456789"),
    ("github-token", "The OAuth app token is gho_PlantedOauthToken16C7e42F292c6912E77.",
     "gho_PlantedOauthToken16C7e42F292c6912E77"),
    ("anthropic-key", "The eval harness calls Claude with sk-ant-api03-PlantedAnthropicKey-Zx9Yw8Vu7Ts6Rq5Po4.",
     "sk-ant-api03-PlantedAnthropicKey-Zx9Yw8Vu7Ts6Rq5Po4"),
    ("openai-key", "Embeddings use the project key sk-proj-PlantedOpenAiProjectKey123def456Ghi789 now.",
     "sk-proj-PlantedOpenAiProjectKey123def456Ghi789"),
    ("openai-key", "The old scripts still hold sk-PlantedLegacyOpenAiKey4fQ9aXb2LmN7pR3sT8vW.",
     "sk-PlantedLegacyOpenAiKey4fQ9aXb2LmN7pR3sT8vW"),
    ("slack-token", "Alerts post as the bot xoxb-2048-1234567890-PlantedSlackBotToken.",
     "xoxb-2048-1234567890-PlantedSlackBotToken"),
    ("slack-token", "The user token xoxp-4096-0987654321-PlantedSlackUserToken reads channels.",
     "xoxp-4096-0987654321-PlantedSlackUserToken"),
    ("slack-webhook", "Deploy notices go to https://hooks.slack.com/services/T0PLANT/B0PLANT/PlantedWebhookPath9x",
     "T0PLANT/B0PLANT/PlantedWebhookPath9x"),
    ("private-key", f"The staging host key:\n-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n"
                    "-----END RSA PRIVATE KEY-----\nkeep it in the vault.", PEM_BODY),
    ("private-key", f"Deploy key:\n-----BEGIN OPENSSH PRIVATE KEY-----\n{SSH_BODY}\n"
                    "-----END OPENSSH PRIVATE KEY-----", SSH_BODY),
    ("jwt", f"A service token that never expires: {JWT} (rotate it).", "Zk3pLantedJwtSignatureQ9x8w7v6u5t4"),
    ("url-password", "The reporting DB is postgres://report:PlantedPgUrlPw81@db.internal:5432/main.",
     "PlantedPgUrlPw81"),
    ("url-password", "Clone with https://oauth2:PlantedGitlabUrlPw77@gitlab.example.com/team/app.git.",
     "PlantedGitlabUrlPw77"),
    ("env-secret", "The .env of the API:\nDATABASE_PASSWORD=PlantedDotEnvPw-3x\nDEBUG=1", "PlantedDotEnvPw-3x"),
    ("env-secret", "Start it with export SESSION_SECRET=PlantedInlineEnvSecret42 first.", "PlantedInlineEnvSecret42"),
    # the forms the daemon missed
    ("cli-secret", "Fetch the report with curl -u deploy:PlantedCurlPw-93xz https://api.example.com/r",
     "PlantedCurlPw-93xz"),
    ("cli-secret", "curl -s --user 'ops:PlantedCurlQuoted Pw' https://api.example.com/health", "PlantedCurlQuoted Pw"),
    ("cli-secret", "Dump it with mysqldump -uroot -pPlantedMysqlPw55 shop > shop.sql", "PlantedMysqlPw55"),
    ("cli-secret", "The box needs sshpass -p PlantedSshpassPw7 ssh admin@10.0.0.5", "PlantedSshpassPw7"),
    ("prose-secret", "For the record, the password is PlantedProse7x! and nobody else knows it.", "PlantedProse7x"),
    ("prose-secret", "The password for the staging db was changed to `Planted Backtick Pw`.", "Planted Backtick Pw"),
    ("assignment", 'The Bash call ran: curl -d "{\\"password\\": \\"PlantedJsonEscapedPw\\"}" https://api/login',
     "PlantedJsonEscapedPw"),
    # shapes the daemon already knew
    ("stripe-key", "Billing uses sk_live_51PlantedStripeLiveKey7dcX in production.", "sk_live_51PlantedStripeLiveKey7dcX"),
    ("google-api-key", "Maps loads with AIzaSyPlantedGoogleApiKey1b2C3d4E5f6G7h8I9.", "AIzaSyPlantedGoogleApiKey1b2C3d4E5f6G7h8I9"),
    ("bearer", "The probe sends Authorization: Bearer PlantedBearerToken0123456789.", "PlantedBearerToken0123456789"),
    ("assignment", 'settings.json holds "api_key": "PlantedJsonApiKey33".', "PlantedJsonApiKey33"),
]

# Ordinary prose and code that must come through exactly as written.
ORDINARY = [
    "The password is stored as a bcrypt hash in the users table.",
    "The password is required for every login; the API key is in 1Password.",
    "The password is too short, the token is 128 bytes long, the secret is to cache the index.",
    "Your password is incorrect: the password for staging is kept in the vault.",
    "The access token is refreshed every hour and the password was rotated last week.",
    # A Codex agent's reasoning (a public session): the state of a password, not one.
    "It logs in even when the password is absent; if the password is present, it is used.",
    "Run mysql -u root -p shop and type the password when asked; mysql -h db -P 3306 -p app.",
    "sort -u names.txt; docker run -u 1000:1000 img; git push -u origin main; python -u run.py",
    "ssh -p 2222 admin@host and scp -P 2222 file host: both use the non-default port.",
    "curl -u \"$API_USER:$API_TOKEN\" https://api.example.com reads the credentials from the environment.",
    "sshpass -e ssh host reads SSHPASS from the environment; redis-cli -h localhost ping.",
    "password = getpass.getpass(\"Password: \")",
    "api_key = os.environ[\"OPENAI_API_KEY\"]",
    "token = tokenizer.encode(text)",
    "secret = settings.SECRET_KEY",
    "password: Optional[str] = None",
    "interface Session { token: string; expires: number }",
    "const csrfToken = document.querySelector(\"meta[name='csrf-token']\")?.getAttribute(\"content\")",
    "TOKENIZERS_PARALLELISM=false GIT_AUTHOR_NAME=bob git commit -m 'wip'",
    "max_tokens = 256 keeps answers short; token_set_ratio is a rapidfuzz scorer.",
    "See https://github.com/xtermjs/xterm.js/issues/1343 and sha 9fa49ff3cce6831b19630f4d71e7227631c9eb9d.",
    '{"command": "pytest -q tests/test_store.py", "description": "run the store tests"}',
]


def test_the_issue_names_eighteen_secrets_and_each_is_planted():
    assert len(PLANTED) >= 18 + 7
    assert len({v for _, _, v in PLANTED}) == len(PLANTED)


@pytest.mark.parametrize("kind,text,value", PLANTED, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(PLANTED)])
def test_each_planted_secret_is_redacted_by_kind(kind, text, value):
    out, counts = redact(text)
    assert value.lower() not in out.lower()
    assert counts.get(kind, 0) >= 1, (counts, out)
    assert f"[REDACTED:{kind}]" in out
    # redacting again changes nothing and finds nothing: placeholders are not secrets
    assert redact(out) == (out, {})


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_prose_and_code_come_through_unchanged(text):
    assert redact(text) == (text, {})


def test_json_escaped_tool_input_stays_json_once_redacted():
    # the tailer redacts json.dumps(tool_input) and loads it back
    tool_input = {"command": 'curl -d \'{"password": "PlantedJsonPw1", "user": "a"}\' -u ops:PlantedCurlPw2 '
                             'https://x && export API_TOKEN=PlantedEnvPw3'}
    out, counts = redact(json.dumps(tool_input))
    back = json.loads(out)
    assert not any(v in back["command"] for v in ("PlantedJsonPw1", "PlantedCurlPw2", "PlantedEnvPw3"))
    assert sum(counts.values()) == 3


def test_fast_paths_redact_exactly_what_the_plain_patterns_do_on_the_new_forms():
    # redact() skips patterns by cues and gates and finds ignore-case ones through a lower-cased
    # copy; with every shortcut off (each pattern's own sub, in order) the output must be the same
    def plain(text):
        counts = {}
        for kind, pattern, repl in R._PATTERNS:
            text, n = pattern.subn(repl or R.PLACEHOLDER.format(kind), text)
            if n:
                counts[kind] = counts.get(kind, 0) + n
        return text, counts

    pieces = [t for _, t, _ in PLANTED] + ORDINARY + [
        "The PASSWORD IS Hunter2x ", "the API key was: 'k-1234' ", "curl -uadmin:pw9 x ", "MYSQL -pX ",
        "pa\u017fsword is abcdefgh ", "\u212aey = 'abcdefgh' ", "the password is [REDACTED:x] ", "café — "]
    rnd = random.Random(14)
    for _ in range(600):
        text = " ".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 4)))
        out, counts = redact(text)
        assert (out, dict(counts)) == plain(text), text


# --- every write path --------------------------------------------------------------------------


def leaks(home) -> dict:
    """{planted value: [files under home holding it]}, searched case-insensitively in raw bytes."""
    found: dict = {}
    for root, _dirs, files in os.walk(home):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                data = f.read().lower()
            for _, _, value in PLANTED:
                if value.lower().encode() in data:
                    found.setdefault(value, []).append(os.path.relpath(path, home))
    return found


def files_under(home) -> set:
    return {os.path.relpath(os.path.join(r, n), home) for r, _d, fs in os.walk(home) for n in fs}


def single_line(text: str) -> bool:
    return "\n" not in text and len(text) < memories.MAX_TELL


def test_cli_remember_stores_no_secret_and_says_what_it_redacted(home, project):
    runner = CliRunner()
    for kind, text, value in PLANTED:
        args = ["remember", text, "--cwd", str(project), "--json"]
        if single_line(text):
            args += ["--tell", text]
        res = runner.invoke(cli, args)
        assert res.exit_code == 0, res.output
        assert value not in res.output
        out = json.loads(res.output)
        assert out["redacted"].get(kind, 0) >= (2 if single_line(text) else 1), out["redacted"]
        assert out["secrets_kept"] == {}
        assert value not in out["changed"][0]["text"]
    # the text output names kinds and counts, and the real process does the same
    p = run_recalld(["remember", PLANTED[0][1] + " " + PLANTED[18][1], "--cwd", str(project)])
    assert p.returncode == 0, p.stderr
    said = p.stdout.decode()
    assert "redacted before storing: aws-access-key 1, cli-secret 1" in said
    assert PLANTED[0][2] not in said and PLANTED[18][2] not in said
    # a later hook that recalls these memories injects no secret either (and writes a receipt)
    for _, text, _ in PLANTED[:6]:
        h = run_recalld(["hook", "prompt-submit"], stdin=payload(
            session_id="s-sec", cwd=str(project), hook_event_name="UserPromptSubmit", prompt=text))
        assert h.returncode == 0
        assert not any(v.encode() in h.stdout for _, _, v in PLANTED)
    with db.connect() as c:
        assert c.execute("SELECT count(*) FROM receipts WHERE source = 'hook'").fetchone()[0] == 6
        changes = [r[0] for r in c.execute("SELECT reason FROM memory_changes WHERE action = 'created'")]
    assert len(changes) == len(PLANTED) + 1 and all(r and r.startswith("redacted ") for r in changes)
    assert "recalld.db" in files_under(home) and leaks(home) == {}


def test_cli_import_stores_no_secret(home, project, tmp_path):
    f = tmp_path / "planted.jsonl"
    lines = []
    for i, (_, text, _) in enumerate(PLANTED):
        line = {"text": text, "thread": "secrets", "session": f"import-{i}"}
        if single_line(text):
            line["tell"] = text
        lines.append(json.dumps(line))
    f.write_text("\n".join(lines) + "\n")
    p = run_recalld(["import", str(f), "--cwd", str(project), "--json"])
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert len(out) == len(PLANTED)
    assert all(o["redacted"].get(kind, 0) >= 1 for o, (kind, _, _) in zip(out, PLANTED))
    assert not any(v.encode() in p.stdout for _, _, v in PLANTED)
    text = run_recalld(["import", str(f), "--cwd", str(project)]).stdout.decode()
    assert "redacted before storing: " in text and "aws-access-key 2" in text
    assert leaks(home) == {}


def _call(server, name, args):
    res = asyncio.run(server.call_tool(name, args))
    assert not res.is_error, res.content[0].text
    sc = res.structured_content
    return sc["result"] if sc is not None and set(sc) == {"result"} else (sc or json.loads(res.content[0].text))


def test_mcp_remember_stores_no_secret(home, project):
    server = mcp.build(root=str(project), env={})
    for kind, text, value in PLANTED:
        args = {"text": text}
        if single_line(text):
            args["tell"] = text
        out = _call(server, "remember", args)
        assert out["redacted"].get(kind, 0) >= 1 and out["secrets_kept"] == {}
        assert value not in json.dumps(out)
    assert leaks(home) == {}


def _drafts(conn, project, n):
    sc = scope.resolve(str(project))
    ds = [policies.Draft(kind="fact", text=f"Draft {i}: the exporter writes cents as integers after the refund bug.",
                         why="it cost a reconciliation", confidence=0.9) for i in range(n)]
    return proposal_db.store_pass(conn, receipts.new("proposer", "test"), session="s-prop", source="/t/x.jsonl",
                             from_line=1, to_line=9, boundary_id=None, window_chars=100, drafts=ds,
                             project=sc.project, agent=sc.agent, model="test-model")


def test_proposal_edit_and_approve_store_no_secret(home, conn, project):
    ids = _drafts(conn, project, len(PLANTED))
    runner = CliRunner()
    for pid, (kind, text, value) in zip(ids, PLANTED):
        args = ["proposals", "edit", str(pid), "--text", text, "--reason", f"because {text}"[:200], "--json"]
        if single_line(text):
            args += ["--tell", text]
        res = runner.invoke(cli, args)
        assert res.exit_code == 0, res.output
        assert value not in res.output and json.loads(res.output)["redacted"].get(kind, 0) >= 1
        res = runner.invoke(cli, ["proposals", "approve", str(pid), "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        assert value not in res.output and "[REDACTED:" in out["memory"]["text"]
    assert leaks(home) == {}


def test_approving_a_draft_that_holds_a_secret_redacts_the_memory(conn, project):
    # drafts are redacted by the proposer; a draft row written by anything else still cannot
    # carry a secret into a memory: the store's write redacts it and says so
    sc = scope.resolve(str(project))
    pid, = proposal_db.store_pass(conn, receipts.new("proposer", "test"), session="s", source="/t/x.jsonl", from_line=1,
                             to_line=2, boundary_id=None, window_chars=10, drafts=[policies.Draft(
                                 kind="fact", text=PLANTED[2][1], why="", confidence=0.9)],
                             project=sc.project, agent=sc.agent, model="m")
    d = decide.approve(conn, pid)
    assert PLANTED[2][2] not in d.memory["text"] and d.redacted == {"github-token": 1}
    assert d.as_dict()["redacted"] == {"github-token": 1}


def test_the_tailer_stores_no_secret(home, tmp_path):
    from recalld.daemon import tailer

    root = tmp_path / "projects"
    (root / "-tmp-sec").mkdir(parents=True)
    recs = []
    for i, (_, text, _) in enumerate(PLANTED):
        recs.append({"type": "user", "sessionId": "sec-t", "cwd": str(tmp_path), "uuid": f"u-{i}",
                     "timestamp": "2026-11-29T10:00:00Z", "message": {"role": "user", "content": text}})
        # the same text inside a tool call, as a command and inside a JSON body it sends
        recs.append({"type": "assistant", "sessionId": "sec-t", "cwd": str(tmp_path), "uuid": f"a-{i}",
                     "timestamp": "2026-11-29T10:00:01Z", "message": {
                         "id": f"msg-{i}", "role": "assistant", "content": [
                             {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash",
                              "input": {"command": text, "description": f"step {i}"}}]}})
    (root / "-tmp-sec" / "sec-t.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    conn = db.connect()
    tailer.Tailer(conn, [(root, "claude")]).rescan()
    calls = conn.execute("SELECT count(*) FROM transcript_events WHERE session = 'sec-t' AND tool = 'Bash' "
                         "AND tool_input IS NOT NULL").fetchone()[0]
    assert calls == len(PLANTED)
    assert "recalld.db-wal" in files_under(home)  # searched before any checkpoint
    assert leaks(home) == {}


def test_allow_secrets_keeps_them_only_when_asked_and_logs_it(home, project, tmp_path):
    # the same search finds what an explicit override stored: the grep above is not blind
    kind, text, value = PLANTED[0]
    res = CliRunner().invoke(cli, ["remember", text, "--cwd", str(project), "--allow-secrets", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["redacted"] == {} and out["secrets_kept"] == {kind: 1}
    assert out["changed"][0]["text"] == text
    mid = out["id"]
    plain = CliRunner().invoke(cli, ["remember", "Nothing secret here, only the plan.", "--cwd", str(project),
                                     "--allow-secrets"])
    assert "secrets stored as written" not in plain.output
    f = tmp_path / "one.jsonl"
    f.write_text(json.dumps({"text": PLANTED[2][1]}) + "\n")
    p = run_recalld(["import", str(f), "--cwd", str(project), "--allow-secrets"])
    assert p.returncode == 0 and b"secrets stored as written (--allow-secrets, in the change log): github-token 1" in p.stdout
    server = mcp.build(root=str(project), env={})
    made = _call(server, "remember", {"text": PLANTED[5][1], "allow_secrets": True})
    assert made["secrets_kept"] == {"anthropic-key": 1} and made["changed"][0]["text"] == PLANTED[5][1]
    h = CliRunner().invoke(cli, ["history", str(mid), "--cwd", str(project), "--json"])
    assert [c["reason"] for c in json.loads(h.output)[0]["changes"]] == ["allow-secrets: kept aws-access-key 1"]
    found = leaks(home)
    assert set(found) == {PLANTED[0][2], PLANTED[2][2], PLANTED[5][2]}
    assert all(any(p.startswith("recalld.db") for p in paths) for paths in found.values())
