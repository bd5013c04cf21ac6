"""Need timing: how long a need waits before its pass (recalld.daemon.needs)."""

from recalld.agents.base import Event
from recalld.daemon import needs


def ev(kind, text="", role="assistant", **kw):
    return Event("s1", "/p", "/p", "main", role, kind, text, **kw)


def detector():
    return needs.NeedDetector({"daemon": {"debounce_s": 0.5, "max_wait_s": 6.0, "min_pass_interval_s": 0}})


def test_a_need_raised_by_intent_waits_the_debounce():
    d = detector()
    d.observe([ev("text", "Let me check why the migration fails on the invoices table.")], now=100.0)
    assert d.next_due() == 100.5
    assert d.take_due(now=100.4) == [] and len(d.take_due(now=100.5)) == 1


def test_after_a_tool_result_the_wait_is_short():
    d = detector()
    d.observe([ev("tool_result", "Traceback (most recent call last):\nValueError: bad row", role="user",
                  tool="Bash", is_error=True)], now=100.0)
    assert d.next_due() == 100.0 + needs.RESULT_DEBOUNCE_S
    # a newer event restarts the wait, by its own kind: the agent's text waits the full debounce
    d.observe([ev("text", "I need to figure out why the row is rejected by the parser.")], now=100.1)
    assert d.next_due() == 100.6


def test_the_result_wait_never_exceeds_the_configured_debounce():
    d = needs.NeedDetector({"daemon": {"debounce_s": 0.0, "min_pass_interval_s": 0}})
    d.observe([ev("tool_result", "Error: failed", role="user", tool="Bash", is_error=True)], now=5.0)
    assert d.next_due() == 5.0
