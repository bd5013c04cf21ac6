"""A store of one memory recalls what it holds (issue 16, part 1).

Term informativeness read from a store of 1, 3 or 10 memories says little about the language:
every term the store holds has its highest document frequency, so a prompt's matched terms
weighed less than its absent ones and the coverage score stayed under the floor. The search
blends the store's document frequencies with a background prior (recalld/core/wordprior.txt,
scripts/gen_wordprior.py); these tests hold it at 1, 3, 10, 100 and 10,000 memories, through
the real write path and the pre-step's decision (whole above the floor, told below it:
recalld/core/tiers.py). A subject must reach the agent, whole or told; an unrelated prompt must
get nothing whole (at most a tell line or two, the cost the tells are fitted to)."""

import json
import random
import sqlite3

import pytest

from recalld import memories
from recalld.core import scope, search as search_mod, settings, tiers
from recalld.core.scope import Scope
from recalld.core.search import analyse, search
from recalld.core.query_terms import STOP_STEMS, Stemmer

FLOOR = settings.DEFAULTS["floor"]
MAX_RESULTS = settings.DEFAULTS["max_results"]

LEDGERLY = ("Ledgerly's invoices are stored in PostgreSQL 16 through psycopg 3; the schema is in "
            "ledgerly/db/schema.sql and alembic runs its migrations.")
LEDGERLY_PROMPT = "Which database holds the invoices in ledgerly?"

# (memory, a prompt that names its subject the way a user or agent would type it)
SUBJECTS = [
    (LEDGERLY, LEDGERLY_PROMPT),
    ("The release workflow publishes to PyPI only from tags and needs the PYPI_API_TOKEN secret, "
     "which expires every 90 days.",
     "the release to pypi failed with an authentication error, which token does it use?"),
    ("Never call redis.flushall() in the cache warmup script: the session store shares that Redis instance.",
     "can I flush redis in the cache warmup script?"),
    ("Design tokens are generated from tokens.json by `npm run tokens`; hand edits to "
     "src/styles/tokens.css are overwritten.",
     "I changed a colour in tokens.css and my change disappeared"),
    ("Timestamps in the events table are UTC without a time zone; convert them with AT TIME ZONE "
     "before grouping by day.",
     "grouping the events table by day gives counts shifted by a few hours"),
    ("The Android build needs JDK 17: Gradle fails with 'Unsupported class file major version 65' on JDK 21.",
     "the android gradle build breaks with class file version 65 on my laptop"),
    ("We chose Celery over RQ for background jobs because we need scheduled retries and chords.",
     "why do we queue background work with celery instead of rq?"),
    ("The search endpoint paginates with opaque cursors; offset pagination timed out past page 200.",
     "the search api times out when I ask for page 300"),
    ("Local dev: start `docker compose up db mailhog` before `make serve`, otherwise signup emails hang.",
     "signup emails never arrive when I run the app locally"),
    ("The uploads S3 bucket has versioning on: deleting an object only adds a delete marker, "
     "the old versions stay billed.",
     "I deleted objects from the uploads bucket but we still pay for them"),
]

UNRELATED = [
    "Write a haiku about autumn leaves and the smell of rain",
    "what is the capital of France",
    "Explain the difference between a monad and a functor in Haskell",
    "how many tablespoons are in a cup of flour?",
    "Summarise the history of jazz in New Orleans",
    "recommend a good science fiction novel for a long flight",
]

# The 100- and 10,000-memory stores: the SUBJECTS plus memories written from these shapes, as
# a team's store fills up over months (several projects, the same libraries again and again).
PROJECTS = ("ledgerly orbit pantry harbor quill atlas beacon cobalt drift ember fjord gazette "
            "heron inkwell juniper kestrel lumen meadow nimbus otter pylon quarry rivet saffron "
            "tundra umber vesper willow yarrow zephyr").split()
LIBS = ("sqlalchemy pydantic fastapi django celery httpx requests pytest alembic boto3 numpy pandas "
        "react webpack vite eslint prettier typescript jest playwright terraform ansible nginx "
        "gunicorn uvicorn redis kafka grpc protobuf sentry").split()
MODULES = ("billing auth exporter scheduler notifier importer reports search payments webhooks "
           "onboarding invoices ledger analytics uploads sessions admin api worker cli mailer "
           "pricing inventory shipping catalog checkout geocoder thumbnails audit permissions").split()
REASONS = ("it broke the nightly build", "the new release changed its defaults",
           "it leaked connections under load", "its wheels do not build on alpine",
           "the upgrade doubled memory use", "it dropped python 3.9 support",
           "the maintainers deprecated the sync client", "it changed how timeouts are counted")
SHAPES = [
    ("{lib} is pinned below {major}.0 in {proj}: {reason}.", "why is {lib} pinned in {proj}?"),
    ("In {proj}, the {mod} module owns every write to the {table} table; other modules call its service.",
     "who writes the {table} table in {proj}?"),
    ("{proj} {mod} tests need the {fixture} fixture; without it they hit the real {lib} client.",
     "{proj} {mod} tests call the real {lib} client"),
    ("Deploys of {proj} go through the {env} pipeline; the {mod} service restarts last.",
     "in what order does the {env} pipeline restart {proj} services?"),
    ("The {mod} worker in {proj} retries {lib} calls {n} times with jittered backoff before it gives up.",
     "how many times does the {proj} {mod} worker retry {lib}?"),
    ("{proj}: feature flags for {mod} live in config/flags/{mod}.yaml and reload without a restart.",
     "where are the {mod} feature flags in {proj}?"),
    ("Code review rule in {proj}: changes to {mod} need a second reviewer from the {team} team.",
     "who has to review {mod} changes in {proj}?"),
    ("The {mod} job in {proj} runs at {hour}:00 UTC and takes about {n} minutes.",
     "when does the {proj} {mod} job run?"),
]
TABLES = "users accounts orders invoices payments events sessions audit_log refunds customers".split()
FIXTURES = "fake_clock stub_gateway frozen_time mock_s3 temp_db recorded_http".split()
ENVS = "staging canary production preview".split()
TEAMS = "platform payments security data frontend infra".split()
# A second sentence for most memories: the everyday words of a real store ("database",
# "holds", "file", "because") at the rates such notes use them, so that a prompt's words are
# not all either everywhere or nowhere in the store.
CONTEXT = [
    "The main database is shared, so a slow query there holds locks for everyone.",
    "Ask the {team} team before changing it.",
    "It took two incidents to learn this.",
    "See docs/{mod}.md for the details.",
    "The error message says nothing useful, so check the logs first.",
    "The same holds for the {env} environment.",
    "Its logs are on the {mod} dashboard.",
    "{lib} keeps one connection per worker, so the pool size matters.",
    "A test in tests/test_{mod}.py covers it.",
    "Nobody remembers why, but removing it broke {env} last time.",
    "The config file for it is config/{mod}.toml.",
    "Run it locally with make {mod} before pushing.",
    "This was decided in the {team} sync in March.",
    "The old behaviour is still documented in the wiki, which is out of date.",
    "Expect it to take a few minutes on a cold cache.",
    "The database migration for it is still pending review.",
    "If it fails, the job is retried from the queue.",
    "Keep the change small and behind a feature flag.",
    "The numbers come from the {mod} report for last quarter.",
    "It writes a file under /var/lib/{proj}/ that the backup picks up.",
]


def generated(n: int, seed: int = 16) -> list:
    """n distinct (memory, prompt) pairs from SHAPES, most with a CONTEXT sentence."""
    r = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        shape = r.randrange(len(SHAPES))
        slots = {"proj": r.choice(PROJECTS), "lib": r.choice(LIBS), "mod": r.choice(MODULES),
                 "reason": r.choice(REASONS), "major": r.randint(1, 9), "table": r.choice(TABLES),
                 "fixture": r.choice(FIXTURES), "env": r.choice(ENVS), "n": r.randint(2, 40),
                 "team": r.choice(TEAMS), "hour": f"{r.randint(0, 23):02d}"}
        text, prompt = (x.format(**slots) for x in SHAPES[shape])
        if r.random() < 0.7:
            text += " " + r.choice(CONTEXT).format(**slots)
        if text in seen:
            continue
        seen.add(text)
        out.append((text, prompt))
    return out


def delivered(conn, prompt: str, sc) -> tuple:
    """(whole ids, told ids) for `prompt`: recalld.hook.memory_source's decision, semantic off."""
    hits = search(conn, prompt, sc, limit=MAX_RESULTS * 3, floor=0.0)
    whole, told = tiers.choose([tiers.Cand(h.id, h.kind, h.text, h.tell, h.score, None, "lexical") for h in hits],
                               tiers.config(settings.DEFAULTS))
    return [c.id for c in whole], [c.id for c in told]


def injected(conn, prompt: str, sc) -> list:
    """The ids that reach the agent for `prompt`, whole first, then told."""
    whole, told = delivered(conn, prompt, sc)
    return whole + told


def whole_of(conn, prompt: str, sc) -> list:
    return delivered(conn, prompt, sc)[0]


def _store(conn, sc, texts: list) -> list:
    res = memories.import_jsonl(conn, [json.dumps({"text": t}) for t in texts], sc)
    return [r.memory["id"] for r in res]


@pytest.fixture
def sc(project):
    return scope.resolve(str(project))


def test_ledgerly_one_memory_is_recalled(conn, sc):
    [mid] = _store(conn, sc, [LEDGERLY])
    hits = search(conn, LEDGERLY_PROMPT, sc, limit=3, floor=FLOOR)
    assert [h.id for h in hits] == [mid]
    assert sorted(hits[0].matched) == ["invoic", "ledgerli"]
    assert hits[0].score >= FLOOR + 0.1


def test_ledgerly_without_the_prior_is_the_reported_miss(conn, sc, monkeypatch):
    # The figure, reproduced: with the store's statistics alone the one memory scores
    # 2 * log(1 + 0.5/1.5) / (2 * log(1 + 0.5/1.5) + 2 * log 4) = 0.17 and injects nothing.
    _store(conn, sc, [LEDGERLY])
    monkeypatch.setattr(search_mod, "PRIOR_MEMORIES", 0)
    [hit] = search(conn, LEDGERLY_PROMPT, sc, limit=3)
    assert hit.score == pytest.approx(0.172, abs=0.001)
    assert search(conn, LEDGERLY_PROMPT, sc, limit=3, floor=FLOOR) == []


@pytest.mark.parametrize("size", [1, 3, 10])
def test_small_stores_recall_their_subjects_and_stay_quiet_otherwise(conn, sc, size):
    ids = _store(conn, sc, [t for t, _ in SUBJECTS[:size]])
    for (text, prompt), mid in zip(SUBJECTS[:size], ids):
        got = injected(conn, prompt, sc)
        assert got and got[0] == mid, (size, prompt, got)
    for prompt in UNRELATED:
        assert whole_of(conn, prompt, sc) == [], (size, prompt)


def test_every_subject_alone_in_its_store(home, tmp_path):
    # Each memory as the only one in a fresh store: the first memory a new project gets.
    from recalld.core import db

    for i, (text, prompt) in enumerate(SUBJECTS):
        c = db.connect(tmp_path / f"one-{i}.db")
        sc1 = Scope(project=f"/one/{i}", agent="main")
        [mid] = _store(c, sc1, [text])
        assert injected(c, prompt, sc1) == [mid], (prompt, search(c, prompt, sc1, limit=3))
        for other in UNRELATED + [p for j, (_, p) in enumerate(SUBJECTS) if j != i]:
            got = whole_of(c, other, sc1)
            assert got == [], (text, other, got)
        c.close()


def test_hundred_memories(conn, sc):
    made = generated(90)
    ids = _store(conn, sc, [t for t, _ in SUBJECTS] + [t for t, _ in made])
    answers = {}
    for (text, prompt), mid in zip(SUBJECTS + made, ids):
        answers.setdefault(prompt, set()).add(mid)
    for text, prompt in SUBJECTS:
        got = injected(conn, prompt, sc)
        assert got and got[0] in answers[prompt], (prompt, got)
    missed = [p for _, p in made if not answers[p] & set(injected(conn, p, sc))]
    assert len(missed) <= 2, missed
    for prompt in UNRELATED:
        assert whole_of(conn, prompt, sc) == [], prompt


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """10,000 memories: the SUBJECTS first, then generated ones (one transaction, the real
    write path; the store outlives the tests that read it)."""
    from recalld.core import db

    path = tmp_path_factory.mktemp("big") / "recalld.db"
    c = db.connect(path)
    sc1 = Scope(project="/big/project", agent="main")
    made = generated(10_000 - len(SUBJECTS))
    ids = _store(c, sc1, [t for t, _ in SUBJECTS] + [t for t, _ in made])
    yield c, sc1, ids, made
    c.close()


def test_ten_thousand_memories(big):
    c, sc1, ids, made = big
    assert c.execute("SELECT count(*) FROM memories").fetchone()[0] == 10_000
    # Thirty projects' worth of generated notes share these prompts' words ("In ledgerly, the
    # pricing module owns every write to the invoices table. The database migration ..."), so
    # the subject must be injected, not necessarily first.
    for (text, prompt), mid in zip(SUBJECTS, ids):
        assert mid in injected(c, prompt, sc1), (prompt, search(c, prompt, sc1, limit=5))
    for prompt in UNRELATED:
        assert whole_of(c, prompt, sc1) == [], prompt


def test_ten_thousand_generated_subjects(big):
    # A generated prompt names its memory's slots ("when does the orbit sessions job run?");
    # at 10,000 the same slots recur in a few memories, and any of them answers it.
    c, sc1, ids, made = big
    answers = {}
    for (text, prompt), mid in zip(made, ids[len(SUBJECTS):]):
        answers.setdefault(prompt, set()).add(mid)
    missed = [p for _, p in made[:200] if not answers[p] & set(injected(c, p, sc1))]
    assert len(missed) <= 10, missed


def test_the_store_takes_over_as_it_grows(big):
    # "invoic" is rare English, and the generated store mentions invoices in hundreds of
    # memories: at 10,000 the weight is the store's (within 5%), in a store of one the prior's.
    c, sc1, ids, made = big
    [t], n = analyse(c, "invoices")
    assert n == 10_000 and t.df > 100
    assert t.idf == pytest.approx(search_mod.idf(n, t.df), rel=0.05)
    alone = search_mod.term_idf(1, 1, t.stem)
    assert alone > 3 * search_mod.idf(1, 1)
    assert alone == pytest.approx(search_mod.idf(1 + search_mod.PRIOR_MEMORIES,
                                                 1 + search_mod.PRIOR_MEMORIES * search_mod.prior_of(t.stem)))


def test_prior_table_loads_and_its_keys_are_the_index_stems():
    table = search_mod.prior_table()
    assert len(table) > 10_000
    assert all(0 < p <= 1 for p in table.values())
    stemmer = Stemmer(sqlite3.connect(":memory:"))
    words = ["database", "databases", "holds", "invoices", "running", "configuration", "timeout",
             "the", "function", "returns", "self", "import", "error", "string"]
    for w, s in zip(words, stemmer.stem_each(words)):
        assert s in table, (w, s)
    # common words are commoner than rare ones, in code as in English
    assert table["the"] > table["databas"] > table.get("ledgerli", 0.0)
    assert table["self"] > table["invoic"]
    assert STOP_STEMS & set(table)
    # the search bisects the text: every stem is found there with its probability (so the
    # file is sorted as Python compares strings), and an absent one weighs 0
    assert all(search_mod.prior_of(s) == p for s, p in table.items())
    assert search_mod.prior_of("ledgerli") == 0.0 and search_mod.prior_of("") == 0.0


@pytest.mark.parametrize("text, stem, expect", [
    ("a 10\nb 20\n", "b", 0.01), ("a 10\nb 20", "b", 0.01), ("a 10\nc 20\n", "b", 0.0),
    ("", "a", 0.0), ("a 10\nb x\n", "b", 0.0), ("b 0\n", "b", 1.0),
])
def test_prior_lookup_edges(text, stem, expect):
    # no trailing newline, an absent stem between two, an empty table, a damaged code
    assert search_mod.prior_of(stem, text) == pytest.approx(expect)


def test_missing_prior_table_falls_back_to_the_store(conn, sc, monkeypatch, tmp_path):
    _store(conn, sc, [LEDGERLY])
    monkeypatch.setattr(search_mod, "PRIOR_PATH", str(tmp_path / "absent.txt"))
    monkeypatch.setattr(search_mod, "_PRIOR", None)
    [hit] = search(conn, LEDGERLY_PROMPT, sc, limit=3)
    assert hit.score == pytest.approx(0.172, abs=0.001)


def test_the_daemons_word_table_dict_weighs_every_stem_as_the_bisected_table(monkeypatch):
    """keep_prior_table (the daemon serving hooks) must change the lookups' speed, not a weight."""
    stems = list(search_mod.prior_table())[::97] + ["ledgerli", "zzzz"]
    before = [search_mod.term_idf(1000, 3, s, ("run", "ran")) for s in stems]
    monkeypatch.setattr(search_mod, "_PRIOR_MAP", None)
    search_mod.keep_prior_table()
    assert search_mod._PRIOR_MAP is not None
    assert [search_mod.term_idf(1000, 3, s, ("run", "ran")) for s in stems] == before
