"""The pre-step search: verbatim prompts, identifiers, typos, the coverage floor, validity and
scope. Memories are written through the real store; prompts are worded the way agents and
users type them."""

import json
import random

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from recalld.core import scope, search as search_mod, settings
from recalld import memories
from recalld.core.scope import Scope
from recalld.core.search import analyse, search
from recalld.core.query_terms import identifier_parts, within_edits

FLOOR = settings.DEFAULTS["floor"]

MEMORIES = [
    ("Never run `alembic downgrade` against the shared staging database: it drops the ledger tables.", "constraint"),
    ("Everything under ledgerly/legacy/ is frozen until the audit ends; wrap it instead of editing it.", "constraint"),
    ("sqlite3.OperationalError: database is locked means two workers share one connection; give each its own.", "fact"),
    ("The exporter keeps cents as integers; floats broke the monthly totals.", "decision"),
    ("Run the billing suite with pytest --reuse-db -x, the fixtures take minutes to build.", "procedure"),
    ("Use the --dry-run flag of scripts/rotate_keys.py before rotating production keys.", "procedure"),
    ("The PaymentGatewayClient.refresh() call retries silently when Stripe is down.", "fact"),
    ("Prefer httpx over requests in new code; requests has no timeouts by default.", "preference"),
    ("The nightly export job overlaps with the database backup window at 02:00 UTC.", "fact"),
    ("Docs are built with mkdocs; run make docs and open site/index.html.", "procedure"),
]

# Background so document frequencies look like a real store, not ten lines.
FILLER_WORDS = ("service worker queue handler config module test fixture deploy branch review "
                "cache token session request response schema table column index commit").split()


def _filler(n: int, seed: int = 3) -> list:
    r = random.Random(seed)
    return [" ".join(r.choice(FILLER_WORDS) for _ in range(8)).capitalize() + "." for _ in range(n)]


@pytest.fixture
def sc(project):
    return scope.resolve(str(project))


@pytest.fixture
def ids(conn, sc):
    lines = [json.dumps({"text": t, "kind": k}) for t, k in MEMORIES]
    lines += [json.dumps({"text": t}) for t in _filler(200)]
    res = memories.import_jsonl(conn, lines, sc)
    return {MEMORIES[i][0]: r.memory["id"] for i, r in enumerate(res[: len(MEMORIES)])}


def top(conn, sc, q, **kw):
    hits = search(conn, q, sc, limit=5, **kw)
    return hits[0].text if hits else None


@pytest.mark.parametrize("prompt, expect", [
    ("can I run alembic downgrade on staging?", "alembic downgrade"),
    ("what's the rule for ledgerly/legacy/ ?", "ledgerly/legacy/"),
    ("tests fail with OperationalError again", "OperationalError"),
    ("operational error: database is locked in the worker", "OperationalError"),
    ("why does PaymentGatewayClient keep retrying", "PaymentGatewayClient"),
    ("the payment gateway client hangs", "PaymentGatewayClient"),
    ("add a --dry-run to rotate_keys", "--dry-run"),
    ("pytest --reuse-db", "--reuse-db"),
    ("How do I build the docs with mkdocs?", "mkdocs"),
])
def test_identifiers_paths_flags_and_errors(conn, sc, ids, prompt, expect):
    hits = search(conn, prompt, sc, limit=3)
    assert hits, prompt
    assert expect in hits[0].text
    assert hits[0].score >= FLOOR


@pytest.mark.parametrize("prompt, expect", [
    ("can I run alembic downgarde on staging?", "alembic downgrade"),   # swapped letters
    ("alembc downgrade", "alembic downgrade"),                          # dropped letter
    ("the exproter keeps cents?", "cents as integers"),                 # swap
    ("OperationalErorr in tests", "OperationalError"),                  # two edits, long word
])
def test_typos_are_tolerated(conn, sc, ids, prompt, expect):
    assert expect in (top(conn, sc, prompt) or "")


def test_typo_correction_is_marked_and_bounded(conn, sc, ids):
    terms, _ = analyse(conn, "alembic downgarde")
    fixed = [t for t in terms if t.fuzzy]
    assert [(t.word, t.stem) for t in fixed] == [("downgarde", "downgrad")]
    # a word nothing in the store is close to stays unknown (and counts against coverage)
    terms, _ = analyse(conn, "alembic zyxwvut")
    assert [t.df for t in terms if t.word == "zyxwvut"] == [0]


def test_irregular_verb_forms_match(conn, sc, ids):
    # "broke" in the memory, "break" in the prompt: porter alone cannot join them
    assert "cents as integers" in (top(conn, sc, "what did floats break in the exporter?") or "")


def test_inflected_forms_of_irregular_verbs_match(conn, sc, ids):
    # "drawing" stems to "draw", whose past is "drew": found through the stem, in the MATCH too
    drew = memories.remember(conn, "Caroline drew the zeppelin mural; it stands for freedom.", sc,
                          check_similar=False).memory["id"]
    terms, _ = analyse(conn, "what does Caroline's drawing symbolize")
    drawing = next(t for t in terms if t.word == "drawing")
    assert drawing.stem == "draw" and "drew" in drawing.alts and "drew" in drawing.forms
    assert search_mod._term_expr(drawing) == '("drawing" OR "drew" OR "drawn")'
    hits = search(conn, "the drawing", sc, limit=5)
    assert [h.id for h in hits] == [drew] and hits[0].matched == ["draw"]


@pytest.mark.parametrize("prompt", ["ok thanks, go ahead", "yes please", "can you do that?", "   ", "?!"])
def test_stopword_only_prompt_finds_nothing(conn, sc, ids, prompt):
    assert search(conn, prompt, sc, limit=5) == []


@pytest.mark.parametrize("prompt", [
    "Write a haiku about autumn leaves and the smell of rain",
    "what is the capital of France",
    "Explain the difference between a monad and a functor in Haskell",
])
def test_unrelated_prompt_stays_below_the_floor(conn, sc, ids, prompt):
    assert search(conn, prompt, sc, limit=5, floor=FLOOR) == []


def test_score_is_comparable_coverage(conn, sc, ids):
    full = search(conn, "alembic downgrade staging", sc, limit=1)[0]
    part = search(conn, "alembic downgrade staging kubernetes helm", sc, limit=1)[0]
    assert full.id == part.id
    assert full.score == pytest.approx(1.0)
    assert 0 < part.score < full.score  # the unknown words count against it


def test_superseded_and_retracted_are_never_returned(conn, sc, ids):
    old = ids[MEMORIES[3][0]]
    new = memories.remember(conn, "The exporter keeps cents as Decimal now; integers overflowed.", sc,
                         supersedes=[str(old)], check_similar=False).memory["id"]
    got = [h.id for h in search(conn, "exporter cents integers", sc, limit=20)]
    assert new in got and old not in got
    memories.retract(conn, new, "exporter rewritten", sc)
    got = [h.id for h in search(conn, "exporter cents integers", sc, limit=20)]
    assert new not in got and old not in got


def test_scope_filtering(conn, sc, ids, tmp_path):
    other = Scope(project=str(tmp_path / "elsewhere"), agent="main")
    helper = Scope(project=sc.project, agent="reviewer")
    memories.remember(conn, "Other project: the zeppelin deploy uses blue-green.", other, check_similar=False)
    memories.remember(conn, "Reviewer note: zeppelin checklist lives in the wiki.", helper, scope="agent",
                   check_similar=False)
    shared = memories.remember(conn, "Shared: zeppelin is the release train name.", other, scope="shared",
                            check_similar=False).memory["id"]
    got = search(conn, "zeppelin", sc, limit=10)
    assert [h.id for h in got] == [shared]
    assert {h.text.split(":")[0] for h in search(conn, "zeppelin", helper, limit=10)} == {"Reviewer note", "Shared"}


def test_subject_label_ranks_first(conn, sc):
    memories.import_jsonl(conn, [
        json.dumps({"text": "Maria: I told Caroline the adoption paperwork is done."}),
        json.dumps({"text": "Caroline: I finished the adoption paperwork last week."}),
    ], sc)
    assert top(conn, sc, "When did Caroline finish the adoption paperwork?").startswith("Caroline:")


def test_common_terms_only_still_find_the_memory_holding_them_all(conn, sc, ids, monkeypatch):
    # Every query term commoner than the postings budget: the AND path finds the memory that
    # holds them together instead of scanning whole posting lists.
    monkeypatch.setattr(search_mod, "POSTINGS_BUDGET", 3)
    target = memories.remember(conn, "Service worker queue handler: drain before deploy.", sc,
                            check_similar=False).memory["id"]
    hits = search(conn, "service worker queue", sc, limit=40)
    assert target in [h.id for h in hits]
    assert all(h.score == pytest.approx(1.0) for h in hits)


def test_term_stats_match_the_fts_vocabulary(conn, sc, ids):
    memories.remember(conn, "One more: the OperationalError is back in ledgerly/legacy/.", sc, check_similar=False)
    stats = dict(conn.execute("SELECT term, df FROM term_stats").fetchall())
    vocab = dict(conn.execute("SELECT term, doc FROM memories_vocab").fetchall())
    assert stats == vocab


def test_stop_stems_are_the_stopwords_stemmed(conn):
    from recalld.core.query_terms import STOP_STEMS, STOPWORDS, Stemmer

    assert STOP_STEMS == {s for s in Stemmer(conn).stem_each(sorted(STOPWORDS)) if s}


def test_identifier_parts():
    assert identifier_parts("OperationalError in PaymentGatewayClient.refresh, HTTPServer ok") == [
        "Operational", "Error", "Payment", "Gateway", "Client", "HTTP", "Server"]


def _edits(a: str, b: str) -> int:
    """Reference: optimal string alignment distance, plain dynamic programming."""
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


@hsettings(max_examples=400, deadline=None)
@given(st.text("abcd", max_size=8), st.text("abcd", max_size=8), st.integers(0, 2))
def test_within_edits_agrees_with_the_reference(a, b, k):
    assert within_edits(a, b, k) == (_edits(a, b) <= k)


TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/worker/jobs.py", line 212, in run_batch
    session.flush()
  File "/usr/lib/python3/site-packages/sqlalchemy/orm/session.py", line 4154, in flush
    self._flush(objects)
sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked
[SQL: UPDATE jobs SET state=? WHERE jobs.id = ?]
(Background on this error at: https://sqlalche.me/e/20/e3q8)"""


def test_long_verbatim_prompt_can_clear_the_floor(conn, sc, ids):
    # A pasted traceback covers a small share of itself with any one memory; the share of the
    # memory it mentions is what says they are about the same thing.
    hits = search(conn, TRACEBACK, sc, limit=3, floor=FLOOR)
    assert hits and "database is locked" in hits[0].text


def test_one_shared_word_does_not_make_a_short_memory_match_a_long_prompt(conn, sc, ids):
    memories.remember(conn, "Use httpx.", sc, check_similar=False)
    prompt = ("Please go through the whole onboarding flow, rewrite the welcome email template, make "
              "the signup form validate postcodes, move the avatar upload to the new bucket, and switch "
              "the one remaining webhook call to httpx while you are there.")
    assert not [h for h in search(conn, prompt, sc, limit=10, floor=FLOOR) if h.text == "Use httpx."]


# A conversation shaped as LoCoMo's are (the text is ours): the answer shares no word with the
# question but the speaker's name; the turns before it do.
BAKE_SALE = [
    "Ingrid: Over the weekend I ran a bake sale with the neighbours from my street. We sold pastries.",
    "Tomas: Nice! Which pastries did you sell?",
    "Ingrid: Mostly cinnamon knots and a lemon tart. Everything was gone by noon!",
]
BAKE_SALE_Q = "Which pastries did Ingrid sell at the bake sale with her neighbours?"


def _chat(conn, sc, turns, thread):
    lines = [json.dumps({"text": t, **({"thread": thread} if thread else {})}) for t in turns]
    return [r.memory["id"] for r in memories.import_jsonl(conn, lines, sc)]


INGRID = ["Ingrid: I repaint the garden shed on weekends.", "Ingrid: My brother and I cooked dinner together.",
        "Ingrid: I just started rock climbing, it is great fun."]


def test_a_reply_is_found_through_the_turns_before_it(conn, sc, ids):
    ingrid = _chat(conn, sc, INGRID, None)
    flat = _chat(conn, sc, BAKE_SALE, None)
    order = [h.id for h in search(conn, BAKE_SALE_Q, sc, limit=20)]
    assert order.index(flat[2]) > 2  # without a thread: behind the bake sale turns and other Ingrid turns
    threaded = _chat(conn, sc, BAKE_SALE, "bake-sale")
    hits = search(conn, BAKE_SALE_Q, sc, limit=20)
    by_id = {h.id: h for h in hits}
    order = [h.id for h in hits]
    # with its thread, among the first five, ahead of every other Ingrid turn
    assert order.index(threaded[2]) < 5 and order.index(threaded[2]) < order.index(flat[2])
    assert all(order.index(threaded[2]) < order.index(i) for i in ingrid)
    reply = by_id[threaded[2]]
    assert {"bake", "sale", "neighbour"} <= set(reply.context)
    assert reply.matched == by_id[flat[2]].matched == ["ingrid"]  # of its own words, only the speaker's name
    # the same words count less through context than in the memory itself
    assert reply.score < by_id[threaded[0]].score
    assert by_id[flat[2]].score < reply.score
    assert reply.as_dict()["context"] == reply.context


def test_thread_context_only_from_current_memories_this_scope_may_read(conn, sc, ids):
    first, question, reply = _chat(conn, sc, BAKE_SALE, "bake-sale")

    def context():
        return {h.id: h for h in search(conn, BAKE_SALE_Q, sc, limit=20)}[reply].context

    assert "bake" in context()
    memories.retract(conn, first, "wrong turn", sc)
    assert "bake" not in context() and "pastri" in context()  # the question's turn still counts
    memories.retract(conn, question, "wrong turn", sc)
    assert context() == []
    # another agent's private note in the same thread is not context for this agent
    helper = Scope(project=sc.project, agent="reviewer")
    memories.remember(conn, "Reviewer: the zeppelin bake sale price list", helper, scope="agent", thread="p2",
                   check_similar=False)
    after = memories.remember(conn, "Ingrid: the list is on the fridge", sc, thread="p2", check_similar=False).memory
    hits = {h.id: h for h in search(conn, "zeppelin bake sale price list fridge", sc, limit=20)}
    assert "zeppelin" not in hits[after["id"]].context
    assert "zeppelin" in {h.id: h for h in search(conn, "zeppelin fridge", helper, limit=20)}[after["id"]].context


def test_hits_come_in_the_order_of_their_rank_key(conn, sc, ids):
    _chat(conn, sc, BAKE_SALE, "bake-sale")
    hits = search(conn, BAKE_SALE_Q, sc, limit=20)
    assert len(hits) >= 3
    assert [h.rank for h in hits] == sorted((h.rank for h in hits), reverse=True)
    assert all(h.rank >= h.score for h in hits)  # the bm25 and subject terms only add
