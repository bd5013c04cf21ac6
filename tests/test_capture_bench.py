"""The capture benchmark's trade-off curve (recalld/bench/capture.py): each setting is a real
run of the proposer, reported for the development projects and held out, and the proposer's
constants are left as they were."""

import json

from recalld.bench import capture
from recalld.capture import proposer
from recalld.core import settings


def _session(path, cwd, said):
    lines, n = [], 0
    for role, text in said:
        n += 1
        content = text if role == "user" else [{"type": "text", "text": text}]
        msg = {"role": role, "content": content}
        if role == "assistant":
            msg["stop_reason"] = "end_turn"
        lines.append(json.dumps({"type": role, "message": msg, "sessionId": path.stem, "cwd": cwd,
                                 "uuid": f"u{n:04d}-0000", "timestamp": "2026-12-02T10:00:00Z"}))
    path.write_text("\n".join(lines) + "\n")


def _repo(path):
    import subprocess

    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


STRONG = "We decided to publish wheels for Python 3.10 to 3.12 only, since 3.9 lacks `match` statements."
WEAK = "The project already has `igniter` as a dependency."


def test_the_curve_reruns_the_proposer_per_setting_and_restores_it(home, project, tmp_path, monkeypatch):
    files, by_file, projects = [], {}, {}
    for name, group in (("spotter-dev.jsonl", "spotter"), ("other-held.jsonl", "other")):
        path = tmp_path / name
        # One repository each: a project's pending proposal would make the other's a duplicate.
        cwd = project if group == "spotter" else _repo(tmp_path / "other")
        _session(path, str(cwd), [("user", "what did we settle for the release?"), ("assistant", STRONG),
                                      ("user", "and the dependencies?"), ("assistant", WEAK)])
        files.append(path)
        projects[name] = group
        by_file[name] = [{"file": name, "line": 2, "statement": STRONG, "strength": 3, "keep": True},
                         {"file": name, "line": 4, "statement": WEAK, "strength": 2, "keep": True}]
    monkeypatch.setattr(capture, "CURVE", ((12, 1.5), (12, 2.5)))
    # Two short turns: the session's budget (one draft until a turn is substantive) is not what this tests.
    monkeypatch.setitem(settings.DEFAULTS["proposals"], "per_20_turns", 0)
    before = proposer.MAX_PER_TURN, proposer.GATE
    rows = capture.trade_off(files, by_file, projects, False)
    assert (proposer.MAX_PER_TURN, proposer.GATE) == before
    loose, tight = rows
    assert (loose["gate"], tight["gate"]) == (1.5, 2.5)
    for side in ("development", "held_out"):
        # The weak one-cue fact clears the floor, not the gate: the tighter setting drafts one of two.
        assert (loose[side]["proposals"], loose[side]["recall"]) == (2, 1.0)
        assert (tight[side]["proposals"], tight[side]["recall"], tight[side]["precision"]) == (1, 0.5, 1.0)


def test_the_figures_are_reported_for_the_development_side_held_out_and_per_source(home, project, tmp_path):
    files, by_file, projects = [], {}, {}
    for name, group in (("spotter-dev.jsonl", "spotter"), ("other-held.jsonl", "other")):
        path = tmp_path / name
        cwd = project if group == "spotter" else _repo(tmp_path / "other")
        _session(path, str(cwd), [("user", "what did we settle for the release?"), ("assistant", STRONG)])
        files.append(path)
        projects[name] = group
        by_file[name] = [{"file": name, "line": 2, "statement": STRONG, "strength": 3, "keep": True}]
    got = capture._variant(files, by_file, projects, False)["figures"]
    for side in ("development", "held_out"):
        assert got[side]["transcripts"] == 1 and got[side]["proposals"] == 1
        assert got[side]["precision"] == 1.0 and got[side]["recall"] == 1.0
        assert got[side]["by_role"] == {"agent": [1, 1]}
    assert set(got["groups"]) == {"spotter", "other"}


def test_each_missed_label_says_where_it_fell_out(home, project, tmp_path):
    """A label worth remembering that no draft says is put at the stage that let it go: the
    agent's plan of the moment is passed over as such, a one-cue fact is drafted and rejected
    under the gate, and a sentence inside a code block is not among the statements read."""
    path = tmp_path / "other-held.jsonl"
    moment = "Let me also check whether the release script pins Python 3.12 before we publish."
    fenced = "```\nWheels are published from the release branch only.\n```"
    _session(path, str(project), [("user", "what did we settle for the release?"),
                                  ("assistant", f"{STRONG}\n\n{moment}\n\n{WEAK}\n\n{fenced}")])
    labels = [{"file": path.name, "line": 2, "statement": s, "strength": n, "keep": True}
              for s, n in ((STRONG, 3), (moment, 2), (WEAK, 2), ("Wheels are published from the release branch only.", 2))]
    got = capture._variant([path], {path.name: labels}, {path.name: "other"}, False)["figures"]
    assert got["held_out"]["strong_labels_by_fate"] == {
        "proposed": 1, "passed over: of_the_moment": 1, "rejected: low_confidence": 1, "not among the statements read": 1}
    assert got["held_out"]["recall_by_strength"] == {"2": [0, 3], "3": [1, 1]}
    assert [m["why"] for m in got["labels_missed"]] == [
        "passed over: of_the_moment", "rejected: low_confidence", "not among the statements read"]


def test_a_candidate_outranked_in_its_chunk_is_placed_there(home, project, tmp_path):
    """A chunk offers its best K_PER_CHUNK candidates (or the pass's slots) to the drafts; a
    label said by one left behind is `outranked`, not 'not among the statements read'."""
    path = tmp_path / "other-held.jsonl"
    topics = ("the parser", "billing", "search", "the exporter", "auth tokens", "image resizing", "webhooks",
              "the scheduler", "audit logs", "rate limits", "feature flags", "email templates")
    said = [f"We decided that {t} must live in `pkg_{n}` because {t} changes on its own cycle." for n, t in enumerate(topics)]
    said[-1] = WEAK  # above the floor on one cue: the chunk's last
    _session(path, str(project), [("user", "what did we settle for the layout?"), ("assistant", "\n\n".join(said))])
    labels = [{"file": path.name, "line": 2, "statement": said[-1], "strength": 2, "keep": True}]
    assert proposer.K_PER_CHUNK < len(said)
    got = capture._variant([path], {path.name: labels}, {path.name: "other"}, False)["figures"]
    assert got["held_out"]["strong_labels_by_fate"] == {"passed over: outranked": 1}
