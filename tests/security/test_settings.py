"""A bad setting cannot silence the hooks (issue 14, part 4).

`recalld config set` refuses a value of the wrong type or out of range with one line naming
the key, the type and the range. A bad value already in settings.json (written by hand, or by
an older recalld) falls back to its default on read, and the hook's receipt says which keys did
(`detail.settings_fallback`); before, `budget_chars: "abc"`, `deadline_ms: "abc"` or a null made
every hook exit 0 with no output and no receipt anywhere, and `deadline_ms: 0` switched the
deadline off. The hooks here are real `recalld hook` processes.
"""

import json
import os
import time

import pytest

from recalld import memories
from recalld.core import scope, settings
from tests.helpers import payload, run_recalld

MEMORY = "The exporter writes cents as integers because float rounding lost a cent on refunds."
PROMPT = "how does the exporter write cents on refunds"


@pytest.fixture
def seeded(home, conn, project):
    memories.remember(conn, MEMORY, scope.resolve(str(project)), check_similar=False)
    return project


def prompt_hook(project, env=None):
    # a session of its own per run: a session is never told the same memory twice
    return run_recalld(["hook", "prompt-submit"], stdin=payload(
        session_id=f"s-set-{os.urandom(4).hex()}", cwd=str(project), hook_event_name="UserPromptSubmit",
        prompt=PROMPT), env=env)


def all_receipts() -> list:
    """Every receipt, from the store and the fallback file (`recalld receipts` reads both)."""
    p = run_recalld(["receipts", "--json"])
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("key,value,says", [
    ("budget_chars", "abc", 'budget_chars: expected an integer 0..10000, got "abc"'),
    ("budget_chars", "null", "budget_chars: expected an integer 0..10000, got null"),
    ("budget_chars", "20000", "budget_chars: expected an integer 0..10000, got 20000"),
    ("budget_chars", "12.5", "budget_chars: expected an integer 0..10000, got 12.5"),
    ("deadline_ms", "0", "deadline_ms: expected an integer 1..60000, got 0"),
    ("deadline_ms", '"300"', 'deadline_ms: expected an integer 1..60000, got "300"'),
    ("floor", "1.5", "floor: expected a number 0..1, got 1.5"),
    ("receipt_hash", "1", "receipt_hash: expected true or false, got 1"),
    ("judge.threshold", "high", 'judge.threshold: expected a number 0..1, got "high"'),
    # the old query-likelihood threshold (1.3) means nothing to the calibrated judge
    ("judge.threshold", "1.3", "judge.threshold: expected a number 0..1, got 1.3"),
    ("judge", '{"max_pass": -1}', "judge.max_pass: expected an integer 0..10, got -1"),
    ("judge", "5", "judge: expected an object of its settings"),
    ("proposals.review_gate", "yes", 'proposals.review_gate: expected true or false, got "yes"'),
    ("daemon.roots", "/tmp/x", 'daemon.roots: expected a list of strings, got "/tmp/x"'),
    ("models.judge", "7", "models.judge: expected a string or null, got 7"),
])
def test_config_set_refuses_a_bad_value_in_one_line(home, key, value, says):
    p = run_recalld(["config", "set", key, value])
    err = p.stderr.decode()
    assert p.returncode == 1 and err.count("\n") == 1 and says in err and "Traceback" not in err, err
    assert not (home / "settings.json").exists()


@pytest.mark.parametrize("key,value,stored", [
    ("budget_chars", "2500", 2500), ("floor", "0.4", 0.4), ("deadline_ms", "250.0", 250),
    ("models.judge", "null", None), ("daemon.roots", '["/a", "/b"]', ["/a", "/b"]),
    ("judge", '{"threshold": 0.7}', {"threshold": 0.7}), ("proposals.enabled", "false", False),
])
def test_config_set_accepts_a_good_value(home, key, value, stored):
    p = run_recalld(["config", "set", key, value])
    assert p.returncode == 0, p.stderr
    node = json.loads((home / "settings.json").read_text())
    for part in key.split("."):
        node = node[part]
    assert node == stored


BAD_FILES = [
    ({"budget_chars": "abc"}, ["budget_chars"]),
    ({"deadline_ms": "abc"}, ["deadline_ms"]),
    ({"deadline_ms": None, "budget_chars": None, "floor": None}, ["deadline_ms", "budget_chars", "floor"]),
    ({"deadline_ms": 0}, ["deadline_ms"]),
    ({"deadline_ms": -50, "item_cap_chars": 0}, ["deadline_ms", "item_cap_chars"]),
    ({"max_results": True, "floor": "0.1"}, ["max_results", "floor"]),
    ({"judge": 5, "queue": {"expire_steps": "six"}}, ["judge", "queue.expire_steps"]),
    ({"proposals": {"enabled": "no", "show_max": None}}, ["proposals.enabled", "proposals.show_max"]),
]


@pytest.mark.parametrize("values,keys", BAD_FILES)
def test_a_bad_value_in_settings_json_falls_back_and_the_receipt_says_so(seeded, home, values, keys):
    (home / "settings.json").write_text(json.dumps(values))
    p = prompt_hook(seeded)
    assert p.returncode == 0 and p.stderr == b""
    # the hook still does its job with the defaults: the memory is delivered
    ctx = json.loads(p.stdout)["hookSpecificOutput"]["additionalContext"]
    assert MEMORY in ctx
    recs = all_receipts()
    assert len(recs) == 1 and recs[0]["outcome"] == "injected"
    assert recs[0]["detail"]["settings_fallback"] == keys


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", "null", '"budget_chars"'])
def test_an_unreadable_settings_file_falls_back_whole(seeded, home, content):
    (home / "settings.json").write_text(content)
    p = prompt_hook(seeded)
    assert p.returncode == 0 and MEMORY in p.stdout.decode()
    recs = all_receipts()
    assert len(recs) == 1 and recs[0]["detail"]["settings_fallback"] == ["settings.json"]


def test_a_bad_deadline_in_the_environment_falls_back(seeded):
    for bad in ("0", "-1", "abc"):
        p = prompt_hook(seeded, env={"RECALLD_DEADLINE_MS": bad})
        assert p.returncode == 0 and MEMORY in p.stdout.decode()
    recs = all_receipts()
    assert len(recs) == 3 and all(r["detail"]["settings_fallback"] == ["RECALLD_DEADLINE_MS"] for r in recs)


def test_deadline_zero_keeps_the_default_deadline(home):
    home.mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps({"deadline_ms": 0, "budget_chars": 900}))
    got: list = []
    cfg = settings.load(got)
    assert cfg["deadline_ms"] == settings.DEFAULTS["deadline_ms"] and cfg["budget_chars"] == 900
    assert got == ["deadline_ms"]


def test_good_settings_leave_no_fallback_mark(seeded, home):
    (home / "settings.json").write_text(json.dumps({"budget_chars": 3000, "judge": {"threshold": 0.55},
                                                    "models": {"judge": None}, "daemon": {"roots": ["/x"]}}))
    p = prompt_hook(seeded)
    assert p.returncode == 0 and MEMORY in p.stdout.decode()
    recs = all_receipts()
    assert len(recs) == 1 and "settings_fallback" not in recs[0]["detail"]


def test_config_show_names_what_fell_back_on_stderr(home):
    home.mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps({"budget_chars": "abc", "floor": 0.2}))
    p = run_recalld(["config", "show"])
    assert p.returncode == 0
    shown = json.loads(p.stdout)
    assert shown["budget_chars"] == settings.DEFAULTS["budget_chars"] and shown["floor"] == 0.2
    assert p.stderr.decode() == "recalld: budget_chars in settings.json is not valid; using the default\n"


def test_every_default_passes_its_own_rule():
    def leaves(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from leaves(v, prefix + k + ".")
            else:
                yield prefix + k, v

    for key, value in leaves(settings.DEFAULTS):
        assert settings.check(key, value) == (value, None), key
    assert set(settings.RULES) <= {k for k, _ in leaves(settings.DEFAULTS)}


def test_reading_every_setting_stays_cheap(home):
    # the hook reads settings on every run: checking only what settings.json holds keeps a
    # file that overrides every key well under a millisecond
    home.mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps(settings.DEFAULTS))
    runs = []
    for _ in range(200):
        t0 = time.perf_counter()
        settings.load([])
        runs.append(time.perf_counter() - t0)
    assert sorted(runs)[100] < 0.001


@pytest.mark.parametrize("flag", ["0", "-5", "abc", "999999"])
def test_a_bad_deadline_flag_keeps_the_deadline_and_says_so(seeded, flag):
    # `--deadline-ms 0` once turned the deadline off, like the setting did
    p = run_recalld(["hook", "prompt-submit", "--deadline-ms", flag], stdin=payload(
        session_id=f"s-flag-{os.urandom(4).hex()}", cwd=str(seeded), hook_event_name="UserPromptSubmit",
        prompt=PROMPT))
    assert p.returncode == 0 and MEMORY in p.stdout.decode()
    recs = all_receipts()
    assert len(recs) == 1 and recs[0]["detail"]["settings_fallback"] == ["--deadline-ms"]
