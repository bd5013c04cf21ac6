"""Crystals: notes bound to acts (standard library only: the hook reads them on every act).

A crystal is a markdown file in a project's `.recalld/crystals/` or in
`RECALLD_HOME/crystals/`. It opens with a binding block and carries, somewhere below, the one
part that is ever delivered, fenced by two markers:

    crystal:
    on: bash, write                  # acts it fires on
    match: git reset --hard, rm -rf  # plain substrings, case-insensitive
    tell: One line that carries the claim when the essence cannot fit.
    stale_after: 2027-03-25          # after this date it is withheld

    <!-- crystal:essence -->
    ⛔ ...
    <!-- /crystal:essence -->

Everything else in the file is history and rationale for whoever argues about the rule later.
The id is the file name without `.md`; a project crystal shadows a user-wide one of the same id.

Parsing every file on every act would cost the hook milliseconds it does not have, so each
directory's parsed bindings are cached in RECALLD_HOME/cache/ keyed by each file's
(mtime_ns, size); a changed, added or removed file is re-parsed on the next act. Essences are
not cached: only the few crystals an act matches are read.
"""

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from datetime import date

from recalld import paths
from recalld.pack import CLAIM_MARKERS

ACTS = ("bash", "write", "delegate", "prompt", "boot", "commit", "tool-result")
FIELDS = ("on", "match", "tell", "stale_after", "deliver")
BEGIN = "<!-- crystal:essence -->"
END = "<!-- /crystal:essence -->"
CACHE_VERSION = 1
SKIP_NAMES = {"readme.md"}
_FIELD_RE = re.compile(r"^([A-Za-z_][\w-]*)\s*:\s*(.*)$")
_COMMENT_RE = re.compile(r"\s+#.*$")


class ParseError(Exception):
    pass


@dataclass
class Crystal:
    id: str
    path: str
    origin: str  # project | user
    on: tuple
    match: tuple  # as written
    tell: "str | None" = None
    stale_after: "str | None" = None  # YYYY-MM-DD
    essence_chars: int = 0
    claims: int = 0  # marked claim lines in the essence
    unknown: tuple = ()  # binding fields this version does not know (lint reports them)
    essence: "str | None" = None  # filled by parse, not kept in the cache
    keys: tuple = field(default=(), repr=False)  # lowercased match keys

    def __post_init__(self):
        if not self.keys:
            self.keys = tuple(k.lower() for k in self.match)

    @property
    def key(self) -> str:
        return f"c:{self.id}"

    def is_stale(self, today: "date | None" = None) -> bool:
        if not self.stale_after:
            return False
        return (today or date.today()).isoformat() > self.stale_after

    def to_cache(self) -> dict:
        return {"id": self.id, "on": list(self.on), "match": list(self.match), "tell": self.tell,
                "stale_after": self.stale_after, "essence_chars": self.essence_chars,
                "claims": self.claims, "unknown": list(self.unknown)}

    @classmethod
    def from_cache(cls, d: dict, path: str, origin: str) -> "Crystal":
        return cls(id=d["id"], path=path, origin=origin, on=tuple(d["on"]), match=tuple(d["match"]),
                   tell=d.get("tell"), stale_after=d.get("stale_after"),
                   essence_chars=int(d.get("essence_chars") or 0), claims=int(d.get("claims") or 0),
                   unknown=tuple(d.get("unknown") or ()))


@dataclass
class Failure:
    path: str
    origin: str
    reason: str

    @property
    def id(self) -> str:
        return crystal_id(self.path)


@dataclass
class Index:
    crystals: list  # project crystals first, then user-wide ones not shadowed
    failures: list
    shadowed: list  # user-wide crystals hidden by a project crystal of the same id
    cache: str  # hit | refreshed | off

    def get(self, cid: str) -> "Crystal | None":
        cid = cid[2:] if cid.startswith("c:") else cid
        for c in self.crystals:
            if c.id == cid:
                return c
        return None


def crystal_id(path: str) -> str:
    name = os.path.basename(path)
    return name[:-3] if name.lower().endswith(".md") else name


def count_claims(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.lstrip().startswith(CLAIM_MARKERS))


def _list(value: str) -> tuple:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def parse_text(text: str, path: str, origin: str = "project") -> Crystal:
    """Parse one crystal file's text. Raises ParseError with a one-line reason."""
    lines = text.splitlines()
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i == len(lines) or _COMMENT_RE.sub("", lines[i].strip()) != "crystal:":
        raise ParseError("no binding block: the first non-blank line must be `crystal:`")
    fields: dict = {}
    unknown = []
    i += 1
    while i < len(lines):
        line = lines[i].strip()
        m = _FIELD_RE.match(line)
        if not line or not m:
            break
        name = m.group(1).lower()
        value = _COMMENT_RE.sub("", m.group(2)).strip()
        if name in fields:
            raise ParseError(f"`{name}:` appears twice in the binding block")
        fields[name] = value
        if name not in FIELDS:
            unknown.append(name)
        i += 1
    on = tuple(a.lower() for a in _list(fields.get("on", "")))
    if not on:
        raise ParseError(f"`on:` is missing or empty (acts: {', '.join(ACTS)})")
    bad = [a for a in on if a not in ACTS]
    if bad:
        raise ParseError(f"unknown act {bad[0]!r} in `on:` (acts: {', '.join(ACTS)})")
    match = _list(fields.get("match", ""))
    if not match and set(on) - {"boot"}:
        raise ParseError("`match:` is missing or empty (only a crystal bound to boot alone may omit it)")
    deliver = fields.get("deliver", "act").lower()
    if deliver != "act":
        raise ParseError(f"`deliver: {deliver}` is not supported (only `act`)")
    stale = fields.get("stale_after") or None
    if stale:
        try:
            stale = date.fromisoformat(stale).isoformat()
        except ValueError:
            raise ParseError(f"`stale_after: {stale}` is not a date (YYYY-MM-DD)") from None
    n_begin, n_end = text.count(BEGIN), text.count(END)
    if n_begin == 0 or n_end == 0:
        raise ParseError(f"no essence: wrap the delivered text in {BEGIN} ... {END}")
    if n_begin > 1 or n_end > 1:
        raise ParseError("more than one essence block (one knowing per crystal)")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    if end < start:
        raise ParseError(f"{END} comes before {BEGIN}")
    essence = text[start:end].strip("\n").rstrip()
    if not essence.strip():
        raise ParseError("the essence is empty")
    return Crystal(id=crystal_id(path), path=path, origin=origin, on=on, match=match,
                   tell=fields.get("tell") or None, stale_after=stale,
                   essence_chars=len(essence), claims=count_claims(essence),
                   unknown=tuple(unknown), essence=essence)


def parse_file(path: str, origin: str = "project") -> Crystal:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ParseError(f"unreadable: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError("not UTF-8 text") from None
    return parse_text(text, path, origin)


def essence(c: Crystal) -> "str | None":
    """The crystal's essence, read from its file now (None if it no longer parses)."""
    if c.essence is not None:
        return c.essence
    try:
        return parse_file(c.path, c.origin).essence
    except ParseError:
        return None


# --- where crystals live ------------------------------------------------------------------


def directories(project: "str | None") -> list:
    """[(origin, dir)]: the project's `.recalld/crystals/` (project = scope.resolve_project,
    the git repository root), then RECALLD_HOME/crystals/."""
    out = []
    if project:
        out.append(("project", os.path.join(project, ".recalld", "crystals")))
    out.append(("user", str(paths.crystals_dir())))
    return out


def _cache_path(directory: str) -> str:
    digest = hashlib.sha1(directory.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(str(paths.home()), "cache", f"crystals-{digest}.json")


def _scan(directory: str) -> dict:
    """{file name: (mtime_ns, size)} for the crystal files in `directory`."""
    out = {}
    try:
        with os.scandir(directory) as it:
            for e in it:
                name = e.name
                if name.startswith(".") or not name.lower().endswith(".md") or name.lower() in SKIP_NAMES:
                    continue
                try:
                    if not e.is_file():
                        continue
                    st = e.stat()
                except OSError:
                    continue
                out[name] = (st.st_mtime_ns, st.st_size)
    except OSError:
        pass
    return out


def _read_cache(path: str, directory: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or data.get("dir") != directory:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def _write_cache(path: str, directory: str, files: dict) -> None:
    """Atomic replace; concurrent hooks may race, the last whole file wins and both are right."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"version": CACHE_VERSION, "dir": directory, "files": files}, f,
                      ensure_ascii=False, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError:
        pass  # no cache this time; the next act parses again


def load_dir(directory: str, origin: str, use_cache: bool = True) -> tuple:
    """(crystals, failures, cache state) for one directory."""
    found = _scan(directory)
    cpath = _cache_path(directory)
    cached = _read_cache(cpath, directory) if use_cache and found else {}
    files: dict = {}
    changed = False
    crystals, failures = [], []
    for name in sorted(found):
        sig = list(found[name])
        path = os.path.join(directory, name)
        entry = cached.get(name)
        if not (isinstance(entry, dict) and entry.get("sig") == sig):
            changed = True
            try:
                entry = {"sig": sig, "c": parse_file(path, origin).to_cache()}
            except ParseError as e:
                entry = {"sig": sig, "error": str(e)}
        files[name] = entry
        if entry.get("error") or not isinstance(entry.get("c"), dict):
            failures.append(Failure(path, origin, entry.get("error") or "bad cache entry"))
        else:
            try:
                crystals.append(Crystal.from_cache(entry["c"], path, origin))
            except (KeyError, TypeError, ValueError):
                failures.append(Failure(path, origin, "bad cache entry"))
    if set(cached) - set(found):
        changed = True
    if use_cache and changed and (found or cached):
        _write_cache(cpath, directory, files)
    state = "off" if not use_cache else ("refreshed" if changed else "hit")
    return crystals, failures, state


def load(dirs: list, use_cache: bool = True) -> Index:
    crystals, failures, shadowed, states = [], [], [], []
    seen = set()
    for origin, directory in dirs:
        cs, fs, state = load_dir(directory, origin, use_cache)
        states.append(state)
        failures.extend(fs)
        for c in cs:
            if c.id in seen:
                shadowed.append(c)
            else:
                seen.add(c.id)
                crystals.append(c)
    state = "off" if not use_cache else ("refreshed" if "refreshed" in states else "hit")
    return Index(crystals, failures, shadowed, state)


def load_for(project: "str | None", use_cache: bool = True) -> Index:
    return load(directories(project), use_cache)


# --- matching -----------------------------------------------------------------------------


def match(crystals: list, act: str, text: str) -> list:
    """[(crystal, keys that matched)] for the crystals bound to `act` whose keys occur in
    `text`: plain, case-insensitive substrings; no regex, no word boundaries. `boot` matches
    nothing and fires every crystal bound to it."""
    out = []
    if act == "boot":
        return [(c, []) for c in crystals if "boot" in c.on]
    low = text.lower()
    if not low:
        return out
    for c in crystals:
        if act in c.on:
            hit = [k for k in c.keys if k in low]
            if hit:
                out.append((c, hit))
    return out
