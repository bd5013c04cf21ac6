"""Codex only: apply_patch writes and `write` crystals (issue 13.4).

Codex sends an apply_patch call to PreToolUse as `tool_name: "apply_patch"` with the whole
patch in `tool_input.command`; a crystal bound to `write` on a string the patch adds must
reach the model.
"""

import os

import pytest
from e2e_clients import CLIENTS
from e2e_harness import recalld_executable, scenario
from e2e_standins import Text, Tool

FLAG = "FEATURE_FLAG_NEW_CHECKOUT"
MARK = "CRYSTAL-AP-51C2"
ESSENCE = f"⛔ {MARK}: {FLAG} must stay off in main until the payment review signs off."
PATCH = ("*** Begin Patch\n*** Add File: flags.py\n"
         f"+{FLAG} = True\n"
         "*** End Patch\n")
APPLY_PATCH = ("Codex apply_patch (issue 13.4): the patch comes in tool_input.command, which the payload "
               "reader does not read, so a write crystal never matches")


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    client = CLIENTS["codex"]
    client.executable()
    recalld_executable()

    def setup(sc):
        sc.crystal("checkout-flag", "write", FLAG, ESSENCE, MARK)

    return scenario(client, str(tmp_path_factory.mktemp("codex-apply-patch")), "Turn on the new checkout.",
                    lambda c: [Tool("apply_patch", PATCH), Text("Done.")], setup=setup)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=APPLY_PATCH)
def test_apply_patch_write_reaches_a_write_crystal(patched):
    patched.require_run()
    if not os.path.exists(os.path.join(patched.sc.project, "flags.py")):
        pytest.fail("Codex did not apply the scripted patch " + patched.where())
    writes = [r for r in patched.receipts if r["hook"] == "pre-tool" and r["act"] == "write"]
    if not writes:
        pytest.fail("no pre-tool receipt for the apply_patch call " + patched.where())
    assert any("c:checkout-flag" in r["delivered_ids"] for r in writes), writes
    assert any(MARK in r.raw for r in patched.main), patched.where()
