"""A tell inside the real client: a paraphrased prompt that shares no word with the memory
that answers it. With the daemon up and the semantic channel on, the prompt-submit hook (served
by the daemon) tells the memory in one line; the scripted model opens it with recalld's MCP
tool `show`, the id read from the request it received; the memory's whole text is in its next
request; the receipts say `told`, then `opened`.
"""

import json
import re

import pytest
from e2e_clients import CLIENTS
from e2e_harness import DaemonRun, Scratch, recalld_executable
from e2e_standins import Text

# The first sentence is what the tell shows; the marker is only in the rest of the text.
MEMORY = ("Money is integer cents (BIGINT) plus an ISO currency code everywhere. Parse user input with "
          "decimal.Decimal and convert at the API boundary; TELL-OPEN-4711.")
MARK = "TELL-OPEN-4711"
PROMPT = "How should I represent a price of 19.99 euros in the request schema?"
FINAL = "Stored as a count of the smallest unit with its code."
TELL_LINE = re.compile(r"\[m(\d+) tell\] Money is integer cents")
# The semantic channel on, with room for a loaded machine (the deadline still bounds it).
SETTINGS = {"semantic_wait_ms": 400, "deadline_ms": 1500}


def _semantic_ready(n):
    """Up when it serves hooks, answers the semantic channel and has embedded the n memories."""
    def ready(st):
        return ((st.get("hooks") or {}).get("listening") and (st.get("query") or {}).get("listening")
                and ((st.get("embedder") or {}).get("embedded") or 0) >= n)
    return ready


def _script(client, opened):
    def open_it(body, stand_in):
        m = TELL_LINE.search(json.dumps(body, ensure_ascii=False))
        if not m:
            return Text("I was told nothing.")
        opened.append(int(m.group(1)))
        return client._mcp_call("show", {"memory_id": int(m.group(1))})
    # wait until the client offers recalld's tools (Codex: load them), then open the tell
    return client.mcp_search("unused")[:-1] + [open_it, Text(FINAL)]


@pytest.fixture(scope="module", params=["claude", "codex", "gemini"])
def told(request, tmp_path_factory):
    client = CLIENTS[request.param]
    client.executable()  # skips when the pinned client is not installed
    recalld_executable()
    sc = Scratch(str(tmp_path_factory.mktemp(f"{client.name}-tells")))
    client.prepare(sc)
    mid = sc.remember(MEMORY, "--kind", "decision")
    sc.install(client.install_as)
    sc.configure(**SETTINGS, models={"judge": "off"}, proposals={"enabled": False})
    opened: list = []
    s = client.stand_in(_script(client, opened))
    try:
        with DaemonRun(sc, _semantic_ready(1), 90, "serving hooks and the semantic channel"), s:
            run = client.run(sc, s, PROMPT)
    finally:
        sc.save("standin.log", s.log_text())
    return client, sc, s, run, mid, opened


def test_a_paraphrased_prompt_is_told_opened_over_mcp_and_its_whole_text_follows(told):
    client, sc, s, run, mid, opened = told
    main = s.main_requests()
    where = f"(logs in {sc.root}: standin.log, client.txt, daemon.out)\n{run.tail(1500)}"
    if run.rc != 0 or not main:
        pytest.fail(f"{client.name} did not complete its run ({len(main)} model requests) " + where)
    assert TELL_LINE.search(main[0].raw), "no tell in the first request " + where
    assert MARK not in main[0].raw, "the whole text was there before it was opened " + where
    assert opened == [mid], opened
    after = [i for i, r in enumerate(main) if any(MARK in o for o in s.tool_outputs(r.body))]
    assert after, "the opened memory's whole text never reached the model " + where

    recs = sc.receipts()
    prompt = [r for r in recs if r.get("source") == "hook" and r["hook"] == "prompt-submit"]
    assert len(prompt) == 1, prompt
    r = prompt[0]
    assert r["detail"].get("recall") == "semantic", r["detail"]  # the dense side found it: no shared word
    assert r["detail"].get("told") == [f"m:{mid}"] and r["delivered_ids"] == [], r
    assert r.get("opened") == [f"m:{mid}"], r  # `recalld receipts` joins the open to the tell
    shows = [x for x in recs if x["hook"] == "show"]
    assert [(x["source"], x["outcome"], x["delivered_ids"]) for x in shows] == [("mcp", "injected", [f"m:{mid}"])]
    assert shows[0]["time"] > r["time"]
