"""Docs are checked against the code: the command reference is generated, and every command
and setting the README and docs name exists."""

import re

import pytest

from tests.helpers import REPO


def test_cli_reference_is_current():
    from recalld.cli import docgen

    with open(docgen.target(), encoding="utf-8") as f:
        committed = f.read()
    assert committed == docgen.render(), "docs/cli.md is stale: run `python3 -m recalld.cli.docgen`"


def _documented_commands():
    text = (REPO / "README.md").read_text() + "".join(p.read_text() for p in (REPO / "docs").glob("*.md")
                                                       if p.name != "cli.md")
    return sorted(set(re.findall(r"`recalld ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)", text)))


@pytest.mark.parametrize("words", _documented_commands())
def test_every_documented_command_exists(words):
    from click import Group

    from recalld.cli.main import cli

    cmd = cli
    parts = words.split()
    name = parts[0]
    assert name in cli.commands, f"`recalld {words}` is documented but does not exist"
    cmd = cli.commands[name]
    if len(parts) > 1 and isinstance(cmd, Group):
        sub = parts[1]
        # the second word may be an argument (e.g. `recalld search sqlite`), only check real groups
        if sub in cmd.commands or not cmd.commands:
            return
        assert sub in cmd.commands, f"`recalld {words}` is documented but `{sub}` is not a subcommand"


def test_architecture_module_list_is_current():
    from recalld.cli import docgen

    with open(docgen.architecture_path(), encoding="utf-8") as f:
        committed = f.read()
    assert committed == docgen.render_architecture(committed), \
        "docs/architecture.md's module list is stale: run `python3 -m recalld.cli.docgen`"


def test_every_module_says_what_it_is():
    from recalld.cli import docgen

    rows = docgen.module_table().splitlines()[2:]
    assert rows and all(not r.endswith("|  |") for r in rows), [r for r in rows if r.endswith("|  |")]


def test_settings_reference_is_current():
    from recalld.cli import docgen

    with open(docgen.settings_target(), encoding="utf-8") as f:
        committed = f.read()
    assert committed == docgen.render_settings(), "docs/settings.md is stale: run `python3 -m recalld.cli.docgen`"


def test_every_setting_is_declared_once_with_a_meaning_and_a_valid_default():
    from recalld.core import settings

    keys = [s.key for s in settings.SETTINGS]
    assert len(keys) == len(set(keys)), "a setting is declared twice"
    assert [s.key for s in settings.SETTINGS if not s.meaning.strip()] == []
    assert [s.key for s in settings.SETTINGS if s.type not in ("int", "number", "bool", "str", "str?", "str-list")] == []
    # each default passes its own declaration, so a default can never be what load() falls back from
    assert [s.key for s in settings.SETTINGS if settings.check(s.key, s.default)[1]] == []
    # a group and a leaf never share a name (the nested DEFAULTS could not hold both)
    assert not {k for k in keys if any(o.startswith(k + ".") for o in keys)}


def test_every_environment_variable_the_code_reads_is_documented():
    from recalld.cli import settings_doc

    pkg = REPO / "recalld"
    read = set()
    for p in pkg.rglob("*.py"):
        if "bench" in p.parts:
            continue  # the benchmarks' own knobs (RECALLD_HOOK_TRACE) are not user settings
        read |= set(re.findall(r"""(?:environ|env)(?:\.get\(|\[)\s*["'](RECALLD_[A-Z_]+)["']""", p.read_text()))
    assert read, "the scan found no environment reads"
    assert sorted(read - set(settings_doc.ENVIRONMENT)) == []


def _anchors(path) -> set:
    """The ids GitHub gives a page's headings: lower-cased, punctuation but `-` and `_` dropped,
    spaces as `-`, a repeated heading suffixed -1, -2..."""
    found, seen, fenced = set(), {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def test_links_between_docs_resolve():
    # Reference pages link to evaluation.md's sections for their figures: a moved or renamed
    # heading must not leave a link that lands at the top of the page.
    pages = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+:", target):
                    continue  # a URL, not a file of the repository
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                if not dest.exists():
                    broken.append(f"{page.relative_to(REPO)}:{n}: no file {target}")
                elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                    broken.append(f"{page.relative_to(REPO)}:{n}: no heading for {target}")
    assert broken == []


def test_the_link_check_finds_a_broken_anchor(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("# Top\n\n## The hook's own cost (`recalld bench hookcost`)\n\n## Top\n")
    assert _anchors(page) == {"top", "the-hooks-own-cost-recalld-bench-hookcost", "top-1"}
