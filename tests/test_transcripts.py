"""transcripts.py against the real Claude Code transcripts in ../shared/data/transcripts/ and a
Codex rollout written from the documented field names (../shared/reference/agent-hooks.md)."""

import json
import shutil

import pytest

from tests.helpers import REPO, TRANSCRIPTS

CAPTURED = REPO / "benchmarks" / "capture"  # real sessions of other projects, committed
from recalld.daemon import transcripts as T

REAL = sorted(TRANSCRIPTS.glob("*.jsonl"))


def raw_records(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_real_transcripts_are_there(shared_transcripts):
    assert len(REAL) >= 5, "the shared transcripts are missing"


# Without ../shared, one stand-in parameter reaches the shared_transcripts fixture, which skips.
@pytest.mark.parametrize("path", REAL or [pytest.param(None, id="no-shared")], ids=lambda p: p.name)
def test_every_content_block_becomes_one_event(path, shared_transcripts):
    """Count the blocks straight from the raw records (field names from the reference) and
    compare with what the parser emits, kind by kind."""
    expected = {"reasoning": 0, "tool_call": 0, "tool_result": 0, "text": 0}
    for o in raw_records(path):
        if o.get("type") not in ("user", "assistant"):
            continue
        content = o["message"]["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for b in blocks:
            if b["type"] == "thinking" and b["thinking"].strip():
                expected["reasoning"] += 1
            elif b["type"] == "tool_use":
                expected["tool_call"] += 1
            elif b["type"] == "tool_result":
                expected["tool_result"] += 1
            elif b["type"] == "text" and b["text"].strip() and o["type"] == "assistant":
                expected["text"] += 1
    got = {k: 0 for k in expected}
    for ev in T.parse_file(path):
        if ev.kind in got and not (ev.kind == "text" and ev.role != "assistant"):
            got[ev.kind] += 1
    assert got == expected


def test_claude_short_session_fields(shared_transcripts):
    evs = list(T.parse_file(TRANSCRIPTS / "spotter-short.jsonl"))
    assert {e.session for e in evs} == {"55604662-cf2a-4331-851a-ec234028f8ca"}
    assert all(e.cwd == "/home/marco/projects/spotter" for e in evs)
    assert all(e.project for e in evs)
    first = evs[0]
    assert (first.role, first.kind, first.text) == ("user", "prompt", "mix phx.server doesnt seem to start")
    # one API message (msg_01MKH1cc...) split over lines: each block stays its own event, in order
    kinds = [e.kind for e in evs[1:5]]
    assert kinds == ["reasoning", "text", "tool_call", "tool_call"]
    bash = evs[3]
    assert bash.tool == "Bash" and bash.tool_input["command"] == "mix phx.server 2>&1 | head -80"
    assert "mix phx.server" in bash.text
    # tool results carry the tool's name (joined by tool_use_id) and the error flag
    results = [e for e in evs if e.kind == "tool_result"]
    assert [(r.tool, r.is_error) for r in results] == [("Bash", True), ("Glob", True)]
    assert all(e.source.endswith("spotter-short.jsonl") and e.line_no > 0 for e in evs)


def test_claude_turn_end_from_stop_hook_summary(shared_transcripts):
    evs = list(T.parse_file(TRANSCRIPTS / "spotter-subagent.jsonl"))
    ends = [e for e in evs if e.kind == "turn_end"]
    assert ends and ends[-1].line_no == 96  # the system stop_hook_summary record
    # a meta (skill expansion) user record is not the user's prompt
    metas = [e for e in evs if e.role == "system" and e.kind == "text"]
    assert metas and metas[0].text.startswith("Create beads")


def test_claude_a_message_typed_while_the_agent_works_is_the_user_speaking_mid_turn(tmp_path):
    # As Claude Code 2.1 writes it (entire's session in benchmarks/capture/, lines 166-171): the
    # queued words are written only in the enqueue record; `remove` is when the turn took them.
    sid = "43c87127-491b-488e-a553-95aa3f0414ac"
    base = {"sessionId": sid, "cwd": "/work/cli", "timestamp": "2026-02-09T08:11:15Z"}
    call = {"type": "tool_use", "id": "t1", "name": "Edit", "input": {"file_path": "a.go"}}
    recs = [
        dict(base, type="user", uuid="u1", message={"role": "user", "content": "version the completion block"}),
        {"type": "queue-operation", "operation": "enqueue", "sessionId": sid, "timestamp": "2026-02-09T08:11:16Z",
         "content": "Hang on, rebase this branch first: there is already a fix for the fish test."},
        dict(base, type="assistant", uuid="a1", message={"role": "assistant", "content": [call]}),
        dict(base, type="user", uuid="u2", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "updated"}]}),
        {"type": "queue-operation", "operation": "remove", "sessionId": sid, "timestamp": "2026-02-09T08:11:26Z"},
        dict(base, type="assistant", uuid="a2", message={"role": "assistant", "content": [
            {"type": "text", "text": "Go ahead and rebase; I will wait."}], "stop_reason": "end_turn"}),
        # typed, then taken back unsent: never reached the model
        {"type": "queue-operation", "operation": "enqueue", "sessionId": sid, "content": "also drop the zsh part"},
        {"type": "queue-operation", "operation": "popAll", "sessionId": sid},
        # a slash command queued runs in the client (the shared spotter transcript, lines 9-10)
        {"type": "queue-operation", "operation": "enqueue", "sessionId": sid, "content": "/mcp"},
        {"type": "queue-operation", "operation": "remove", "sessionId": sid},
    ]
    p = tmp_path / f"{sid}.jsonl"
    p.write_text("".join(json.dumps(o) + "\n" for o in recs))
    evs = list(T.parse_file(p))
    prompts = [e for e in evs if e.kind == "prompt"]
    assert [e.text for e in prompts] == ["version the completion block",
                                         "Hang on, rebase this branch first: there is already a fix for the fish test."]
    assert prompts[1].line_no == 5 and prompts[1].role == "user" and prompts[1].session == sid
    assert [e.kind for e in evs] == ["prompt", "tool_call", "tool_result", "prompt", "text", "turn_end"]
    assert len(T.file_turns(p)) == 1  # said mid-turn: the same turn
    assert not any("zsh" in (e.text or "") or "/mcp" in (e.text or "") for e in evs)


def test_claude_the_real_mid_turn_message_is_read_and_a_queued_slash_command_is_not(shared_transcripts):
    real = CAPTURED / "entire-43c87127.jsonl"
    evs = list(T.parse_file(real))
    said = [e for e in evs if e.kind == "prompt" and e.text.startswith("Hangon, i should rebase")]
    assert [e.line_no for e in said] == [170]  # the `remove` record, where the turn took it in
    turn = next(t for t in T.file_turns(real, unfinished=True)
                if any(e.kind == "prompt" and e.line_no == 170 for e in t))
    assert turn[0].kind == "prompt" and turn[0].line_no < 170  # inside the turn its request opened
    spotter = list(T.parse_file(TRANSCRIPTS / "spotter-tool_heavy.jsonl"))
    assert not [e for e in spotter if e.kind == "prompt" and e.line_no in (9, 10)]


def test_claude_bash_success_is_not_an_error(shared_transcripts):
    evs = list(T.parse_file(TRANSCRIPTS / "spotter-subagent.jsonl"))
    bash_results = [e for e in evs if e.kind == "tool_result" and e.tool == "Bash"]
    assert bash_results and not any(e.is_error for e in bash_results)


def test_subagent_file_layout(tmp_path, shared_transcripts):
    """<session>/subagents/agent-<id>.jsonl: its own agent, the parent's session."""
    d = tmp_path / "-path-to-Demo" / "5c0375b4-57a5-4f26-b12d-d022ee4e51b7" / "subagents"
    d.mkdir(parents=True)
    dst = d / "agent-test-hash-123.jsonl"
    shutil.copy(TRANSCRIPTS / "viewer-agent-test-hash-123.jsonl", dst)
    evs = list(T.parse_file(dst))
    assert {e.agent for e in evs} == {"agent-test-hash-123"}
    assert {e.session for e in evs} == {"5c0375b4-57a5-4f26-b12d-d022ee4e51b7"}
    # the record's stop_reason end_turn closes the turn
    assert [e.kind for e in evs] == ["prompt", "text", "turn_end"]


def test_sidechain_records_are_kept_apart_from_main(shared_transcripts):
    evs = list(T.parse_file(TRANSCRIPTS / "viewer-5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"))
    raw = raw_records(TRANSCRIPTS / "viewer-5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl")
    side_lines = {i + 1 for i, o in enumerate(raw) if o.get("isSidechain")}
    assert side_lines
    for e in evs:
        assert (e.agent != "main") == (e.line_no in side_lines)


def test_a_new_prompt_closes_an_open_turn(shared_transcripts):
    evs = list(T.parse_file(TRANSCRIPTS / "spotter-tool_heavy.jsonl"))
    for i, e in enumerate(evs):
        if e.kind == "prompt" and i > 0 and evs[i - 1].kind not in ("turn_end",) and \
                any(x.kind != "turn_end" for x in evs[:i]):
            pytest.fail(f"prompt at line {e.line_no} did not close the turn before it")


def test_malformed_lines_are_skipped_and_counted(tmp_path, shared_transcripts):
    src = (TRANSCRIPTS / "spotter-short.jsonl").read_bytes().splitlines(keepends=True)
    bad = [b'{"type": "user", "message": \n', b"not json at all\n", b"[1, 2, 3]\n",
           b'{"type": "assistant", "message": "a string, not an object"}\n']
    mixed = src[:5] + bad + src[5:]
    p = tmp_path / "s.jsonl"
    p.write_bytes(b"".join(mixed))
    st = T.new_state(p)
    evs = []
    for line in mixed:
        evs.extend(T.parse_line(line, st) or [])
    assert st.malformed == 4
    assert st.line_no == len(mixed)
    clean = list(T.parse_file(TRANSCRIPTS / "spotter-short.jsonl"))
    assert [(e.kind, e.text) for e in evs] == [(e.kind, e.text) for e in clean]


def test_partial_last_line_is_not_an_event(tmp_path, shared_transcripts):
    lines = (TRANSCRIPTS / "spotter-short.jsonl").read_bytes().splitlines(keepends=True)
    p = tmp_path / "s.jsonl"
    p.write_bytes(b"".join(lines[:4]) + lines[4][:40])
    assert [e.line_no for e in T.parse_file(p)] == [4]


# --- Codex ----------------------------------------------------------------------------------

SESSION = "0199a213-81c0-7800-8aa1-bbab2a035a53"


def codex_rollout(cwd: str) -> list:
    """A rollout in the documented shape: {"timestamp", "type", "payload"} lines."""
    ts = "2026-11-29T10:00:0{}.000Z"
    return [
        {"timestamp": ts.format(0), "type": "session_meta",
         "payload": {"id": SESSION, "timestamp": ts.format(0), "cwd": cwd, "originator": "codex_cli_rs",
                     "cli_version": "0.46.0", "instructions": None}},
        {"timestamp": ts.format(1), "type": "response_item",
         "payload": {"type": "message", "role": "user",
                     "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>" + cwd + "</cwd>\n</environment_context>"}]}},
        {"timestamp": ts.format(1), "type": "turn_context",
         "payload": {"cwd": cwd, "approval_policy": "on-request", "model": "gpt-5-codex"}},
        {"timestamp": ts.format(2), "type": "response_item",
         "payload": {"type": "message", "role": "user",
                     "content": [{"type": "input_text", "text": "why does the migration test fail?"}]}},
        {"timestamp": ts.format(2), "type": "event_msg",
         "payload": {"type": "user_message", "message": "why does the migration test fail?", "images": []}},
        {"timestamp": ts.format(3), "type": "response_item",
         "payload": {"type": "reasoning", "summary": [{"type": "summary_text", "text": "**Investigating the failing migration test**\n\nI need to figure out why test_migrations fails."}],
                     "content": None, "encrypted_content": "gAAAAB..."}},
        {"timestamp": ts.format(4), "type": "response_item",
         "payload": {"type": "function_call", "name": "shell",
                     "arguments": json.dumps({"command": ["bash", "-lc", "pytest -q tests/test_migrations.py"], "workdir": cwd}),
                     "call_id": "call_abc"}},
        {"timestamp": ts.format(5), "type": "response_item",
         "payload": {"type": "function_call_output", "call_id": "call_abc",
                     "output": json.dumps({"output": "E   sqlite3.OperationalError: no such table: tail_offsets\n1 failed",
                                           "metadata": {"exit_code": 1, "duration_seconds": 0.8}})}},
        {"timestamp": ts.format(6), "type": "response_item",
         "payload": {"type": "custom_tool_call", "status": "completed", "call_id": "call_def", "name": "apply_patch",
                     "input": "*** Begin Patch\n*** Update File: recalld/migrations.py\n@@\n-x\n+y\n*** End Patch"}},
        {"timestamp": ts.format(7), "type": "response_item",
         "payload": {"type": "custom_tool_call_output", "call_id": "call_def",
                     "output": json.dumps({"output": "Success. Updated the following files:\nM recalld/migrations.py\n",
                                           "metadata": {"exit_code": 0}})}},
        {"timestamp": ts.format(8), "type": "response_item",
         "payload": {"type": "message", "role": "assistant",
                     "content": [{"type": "output_text", "text": "The table was missing from migration 2; fixed."}]}},
        {"timestamp": ts.format(8), "type": "event_msg",
         "payload": {"type": "agent_message", "message": "The table was missing from migration 2; fixed."}},
        {"timestamp": ts.format(9), "type": "event_msg",
         "payload": {"type": "task_complete", "last_agent_message": "The table was missing from migration 2; fixed."}},
    ]


def write_rollout(tmp_path, cwd, compress=False):
    d = tmp_path / "sessions" / "2026" / "11" / "29"
    d.mkdir(parents=True)
    name = f"rollout-2026-11-29T10-00-00-{SESSION}.jsonl"
    data = "".join(json.dumps(o) + "\n" for o in codex_rollout(cwd)).encode()
    if compress:
        import zstandard

        p = d / (name + ".zst")
        p.write_bytes(zstandard.ZstdCompressor().compress(data))
    else:
        p = d / name
        p.write_bytes(data)
    return p


def check_codex_events(evs, cwd):
    assert [(e.role, e.kind) for e in evs] == [
        ("user", "prompt"), ("assistant", "reasoning"), ("assistant", "tool_call"), ("tool", "tool_result"),
        ("assistant", "tool_call"), ("tool", "tool_result"), ("assistant", "text"), ("system", "turn_end")]
    assert {e.session for e in evs} == {SESSION}
    assert {e.cwd for e in evs} == {cwd}
    assert evs[0].text == "why does the migration test fail?"
    assert "figure out why test_migrations fails" in evs[1].text
    shell = evs[2]
    assert shell.tool == "shell" and "pytest -q tests/test_migrations.py" in shell.text
    assert (evs[3].tool, evs[3].is_error) == ("shell", True)
    assert "no such table" in evs[3].text
    assert evs[4].tool == "apply_patch" and "recalld/migrations.py" in evs[4].text
    assert (evs[5].tool, evs[5].is_error) == ("apply_patch", False)


def test_codex_rollout(tmp_path, project):
    p = write_rollout(tmp_path, str(project))
    evs = list(T.parse_file(p))
    check_codex_events(evs, str(project))
    assert {e.project for e in evs} == {str(project)}


def test_codex_rollout_zst(tmp_path, project):
    pytest.importorskip("zstandard")
    p = write_rollout(tmp_path, str(project), compress=True)
    check_codex_events(list(T.parse_file(p)), str(project))


def test_codex_legacy_bare_items(tmp_path):
    """Older rollouts: a first line with the session id, then bare response items."""
    lines = [{"id": SESSION, "timestamp": "2025-05-01T10:00:00Z", "instructions": ""},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]},
             {"type": "function_call", "name": "shell", "arguments": '{"command": ["ls"]}', "call_id": "c1"},
             {"type": "function_call_output", "call_id": "c1", "output": "bash: ls: command not found\nExit code: 127"}]
    p = tmp_path / f"rollout-2025-05-01T10-00-00-{SESSION}.jsonl"
    p.write_text("".join(json.dumps(o) + "\n" for o in lines))
    evs = list(T.parse_file(p))
    assert [e.kind for e in evs] == ["prompt", "tool_call", "tool_result"]
    assert evs[2].is_error and evs[2].tool == "shell"
    assert {e.session for e in evs} == {SESSION}


def test_a_codex_prompt_with_an_image_is_one_prompt(tmp_path):
    # As Codex writes a prompt with a pasted screenshot (session-bridge's session in
    # benchmarks/capture/, lines 582-583): the response item wraps the image in tag parts the
    # event_msg does not repeat.
    said = "[Image #1] Messages should be aligned in the middle of the avatar and time"
    lines = [{"timestamp": "2026-04-08T12:38:12Z", "type": "session_meta", "payload": {"id": SESSION, "cwd": "/p"}},
             {"timestamp": "2026-04-08T12:38:13Z", "type": "response_item",
              "payload": {"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": "<image name=[Image #1]>"},
                                      {"type": "input_text", "text": "</image>"},
                                      {"type": "input_text", "text": said}]}},
             {"timestamp": "2026-04-08T12:38:13Z", "type": "event_msg",
              "payload": {"type": "user_message", "message": said, "images": []}},
             {"timestamp": "2026-04-08T12:38:39Z", "type": "response_item",
              "payload": {"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": "Centered the row against the avatar."}]}},
             {"timestamp": "2026-04-08T12:38:40Z", "type": "event_msg", "payload": {"type": "task_complete"}}]
    p = tmp_path / f"rollout-2026-04-08T12-38-12-{SESSION}.jsonl"
    p.write_text("".join(json.dumps(o) + "\n" for o in lines))
    evs = list(T.parse_file(p))
    assert [(e.kind, e.text) for e in evs if e.kind in ("prompt", "turn_end")] == [("prompt", said), ("turn_end", "")]
    assert len(T.file_turns(str(p), unfinished=True)) == 1


def test_the_committed_codex_session_reads_its_image_prompt_once():
    path = next(CAPTURED.glob("sessionbridge-*.jsonl"))
    prompts = [e for e in T.parse_file(str(path)) if e.kind == "prompt" and e.line_no in (582, 583)]
    assert len(prompts) == 1 and prompts[0].text.startswith("[Image #1] Messate/text should be aligned")


def test_a_command_failing_under_codexs_sandbox_is_an_error_with_its_own_output(tmp_path):
    # As Codex 0.5x writes it (openprintkit's session in benchmarks/capture/, line 113).
    out = ("failed in sandbox LinuxSeccomp with execution error: sandbox denied exec error, exit code: 2, "
           "stdout: \n==== ERRORS ====\nImportError while importing test module 'tests/test_bundle.py'.\n"
           "E   ModuleNotFoundError: No module named 'opk', stderr: ")
    lines = [{"id": SESSION, "timestamp": "2025-05-01T10:00:00Z", "instructions": ""},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run the tests"}]},
             {"type": "function_call", "name": "shell", "arguments": '{"command": ["pytest", "-q"]}', "call_id": "c1"},
             {"type": "function_call_output", "call_id": "c1", "output": out},
             {"type": "function_call", "name": "shell", "arguments": '{"command": ["ls"]}', "call_id": "c2"},
             {"type": "function_call_output", "call_id": "c2",
              "output": "failed in sandbox LinuxSeccomp with execution error: exit code: 0, stdout: a.py, stderr: "}]
    p = tmp_path / f"rollout-2025-05-01T10-00-00-{SESSION}.jsonl"
    p.write_text("".join(json.dumps(o) + "\n" for o in lines))
    failed, ok = [e for e in T.parse_file(p) if e.kind == "tool_result"]
    assert failed.is_error and failed.text.startswith("\n==== ERRORS") and "No module named 'opk'" in failed.text
    assert "sandbox" not in failed.text
    assert not ok.is_error and ok.text.startswith("a.py")


def test_a_command_denied_by_codexs_macos_sandbox_is_an_error_with_its_own_output(tmp_path):
    # As Codex writes a seatbelt denial: Rust's debug print of the output (coda's session in
    # benchmarks/capture/, line 442).
    err = "fatal: cannot lock ref 'refs/heads/001-notes': Unable to create '.git/refs/heads/001-notes.lock': " \
          "Operation not permitted\\n"
    out = ("failed in sandbox MacosSeatbelt with execution error: Denied { output: ExecToolCallOutput { exit_code: 128, "
           "stdout: StreamOutput { text: \"\", truncated_after_lines: None }, stderr: StreamOutput { text: \""
           + err + "\", truncated_after_lines: None }, aggregated_output: StreamOutput { text: \"" + err +
           "\", truncated_after_lines: None }, duration: 276.007292ms, timed_out: false } }")
    lines = [{"id": SESSION, "timestamp": "2025-05-01T10:00:00Z", "instructions": ""},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "start the feature"}]},
             {"type": "function_call", "name": "shell", "arguments": '{"command": ["git", "checkout", "-b", "001-notes"]}',
              "call_id": "c1"},
             {"type": "function_call_output", "call_id": "c1", "output": out}]
    p = tmp_path / f"rollout-2025-05-01T10-00-00-{SESSION}.jsonl"
    p.write_text("".join(json.dumps(o) + "\n" for o in lines))
    failed = [e for e in T.parse_file(p) if e.kind == "tool_result"][0]
    assert failed.is_error
    assert failed.text == "fatal: cannot lock ref 'refs/heads/001-notes': Unable to create " \
                          "'.git/refs/heads/001-notes.lock': Operation not permitted\n"
    # the real record
    real = [e for e in T.parse_file(CAPTURED / "coda-0199b26c.jsonl") if e.line_no == 442]
    assert [e.is_error for e in real] == [True]
    assert real[0].text.startswith("fatal: cannot lock ref 'refs/heads/001-build-a-lightweight'")
    assert "StreamOutput" not in real[0].text


def test_a_bom_is_read_and_invalid_utf8_is_counted_malformed(tmp_path, shared_transcripts):
    lines = (TRANSCRIPTS / "spotter-short.jsonl").read_bytes().splitlines()
    line = next(ln for ln in lines if T.parse_line(ln, T.new_state(tmp_path / "s.jsonl")))
    st = T.new_state(tmp_path / "s.jsonl")
    plain = T.parse_line(line, st)
    assert plain
    with_bom = T.parse_line(b"\xef\xbb\xbf" + line, T.new_state(tmp_path / "s.jsonl"))
    assert [e.as_dict() for e in with_bom] == [e.as_dict() for e in plain]
    assert T.parse_line(b'{"type": "user", "message": {"content": "caf\xe9"}}', st) is None
    assert st.malformed == 1 and st.line_no == 2


def test_file_turns_splits_at_turn_ends_and_keeps_an_unfinished_last_turn_only_when_asked(tmp_path):
    from recalld.daemon import transcripts

    rec = lambda kind, text, uid: json.dumps({
        "type": kind, "uuid": uid, "sessionId": "s", "cwd": "/p", "timestamp": "2026-12-01T00:00:00Z",
        "message": {"role": kind, "content": text}})
    end = json.dumps({"type": "system", "subtype": "turn_duration", "uuid": "e1", "sessionId": "s",
                      "timestamp": "2026-12-01T00:00:01Z", "durationMs": 5})
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join([rec("user", "first question", "u1"), end, rec("user", "second, unanswered", "u2")]) + "\n")
    finished = transcripts.file_turns(str(path))
    every = transcripts.file_turns(str(path), unfinished=True)
    assert len(finished) == 1 and len(every) == 2
    assert all(ev.kind != "turn_end" for turn in every for ev in turn)
    assert "second, unanswered" in " ".join(ev.text for ev in every[1])
