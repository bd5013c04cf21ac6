"""`recalld demo` on a clean install: the real prompt-submit hook injects the matching memory
of the two it wrote, leaves a receipt saying so, and touches nothing outside its scratch
directory (which is gone afterwards unless --keep)."""

import os

from tests.helpers import run_recalld


def _env(tmp_path):
    user_home = tmp_path / "user-recalld"  # where the user's own state would be: must stay absent
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    return user_home, scratch, {"RECALLD_HOME": str(user_home), "HOME": str(tmp_path / "home"),
                                "XDG_DATA_HOME": str(tmp_path / "xdg"), "TMPDIR": str(scratch),
                                "RECALLD_AGENT": "someone-else"}


def test_demo_injects_the_matching_memory_and_cleans_up(tmp_path):
    user_home, scratch, env = _env(tmp_path)
    res = run_recalld(["demo"], env=env, timeout=180)
    out = res.stdout.decode()
    assert res.returncode == 0, res.stderr.decode()
    context = out.split("3. What the model reads")[1].split("4. The receipt")[0]
    assert "[m1 decision] The invoices table lives in Postgres" in context
    assert "billing tests" not in context  # the other memory does not answer the prompt
    receipts = out.split("4. The receipt")[1]
    assert "prompt-submit" in receipts and "injected" in receipts and "m:1" in receipts
    assert not user_home.exists() and not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()
    assert os.listdir(scratch) == []


def test_demo_keep_leaves_the_scratch_home_with_its_store(tmp_path):
    user_home, scratch, env = _env(tmp_path)
    res = run_recalld(["demo", "--keep"], env=env, timeout=180)
    assert res.returncode == 0, res.stderr.decode()
    (kept,) = os.listdir(scratch)
    assert (scratch / kept / "home" / "recalld.db").is_file()
    assert f"Kept {scratch / kept}" in res.stdout.decode() and not user_home.exists()
