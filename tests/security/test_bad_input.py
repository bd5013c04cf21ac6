"""Nested fields of the wrong type are ignored, never an `error` receipt (issue 14, part 7).

The agents' payloads carry fields recalld does not need (model, permission_mode, source...),
and the ones it reads may nest anything. A wrong type inside is read as absent: the hook does
its job with what is usable, and writes exactly one receipt.
"""

import json

import pytest

from recalld.core import db, receipts
from recalld.hook import run as hook

BASE = {"session_id": "s-bad", "cwd": "/tmp"}

CASES = [
    ("pre-tool", {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": {"x": 1}}}),
    ("pre-tool", {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": ["bash", 1, None]}}),
    ("pre-tool", {"hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_input": {"edits": "not a list"}}),
    ("pre-tool", {"hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_input": {"edits": [1, None, "x"]}}),
    ("pre-tool", {"hook_event_name": "PreToolUse", "tool_name": "Task", "tool_input": {"prompt": {"a": 1}, "description": 5}}),
    ("pre-tool", {"hook_event_name": "PreToolUse", "tool_name": "apply_patch", "tool_input": {"command": 42}}),
    ("post-tool", {"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"},
                   "tool_response": {"stdout": 5, "stderr": [1]}}),
    ("prompt-submit", {"hook_event_name": "UserPromptSubmit", "prompt": "hi", "agent_id": 5, "agent_type": ["x"]}),
    ("prompt-submit", {"hook_event_name": "UserPromptSubmit", "prompt": "hi", "model": {"x": 1}, "permission_mode": [1]}),
    ("stop", {"hook_event_name": "Stop", "stop_hook_active": "yes", "last_assistant_message": "ok"}),
    ("session-start", {"hook_event_name": "SessionStart", "source": 7}),
    ("commit", {"staged_files": [1, {"a": 2}, "README.md"]}),
]


@pytest.mark.parametrize("event,fields", CASES)
def test_a_nested_field_of_the_wrong_type_is_ignored(home, event, fields):
    out, r = hook.run([event], json.dumps(dict(BASE, **fields)).encode())
    assert r["outcome"] in ("nothing", "injected", "gated"), r
    assert r["error"] is None
    assert len(receipts.read(db.connect())) == 1
