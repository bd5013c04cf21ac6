"""Codex only: apply_patch writes and `write` crystals (issue 13.4).

Codex sends an apply_patch call to PreToolUse as `tool_name: "apply_patch"` with the whole
patch in `tool_input.command`; a crystal bound to `write` on a string the patch adds must
reach the model, before the patch is applied.
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


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    client = CLIENTS["codex"]
    client.executable()
    recalld_executable()

    def setup(sc):
        sc.crystal("checkout-flag", "write", FLAG, ESSENCE, MARK)

    # The write crystal holds the first apply_patch (issue 13.1); the model reads it and issues
    # the same patch again, which passes.
    return scenario(client, str(tmp_path_factory.mktemp("codex-apply-patch")), "Turn on the new checkout.",
                    lambda c: [Tool("apply_patch", PATCH), Tool("apply_patch", PATCH), Text("Done.")], setup=setup)


def test_apply_patch_write_reaches_a_write_crystal(patched):
    patched.require_run()
    if not os.path.exists(os.path.join(patched.sc.project, "flags.py")):
        pytest.fail("Codex did not apply the scripted patch " + patched.where())
    writes = [r for r in patched.receipts if r["hook"] == "pre-tool" and r["act"] == "write"]
    if not writes:
        pytest.fail("no pre-tool receipt for the apply_patch call " + patched.where())
    assert any("c:checkout-flag" in r["delivered_ids"] for r in writes), writes
    told = [i for i, r in enumerate(patched.main) if MARK in r.raw]
    assert told, patched.where()
    # Held before the patch was applied: the first request that tells it has one tool output,
    # the hold's reason, in place of the patch's result; the patch then ran on the retry.
    outs = patched.tool_outputs()[told[0]]
    assert len(outs) == 1 and MARK in outs[0], outs
    assert any(r["detail"].get("gated") == ["checkout-flag"] for r in writes), writes
