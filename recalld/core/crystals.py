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

import zlib
import marshal
import os
import re
import sys
from datetime import date

from recalld.core import paths
from recalld.core.pack import CLAIM_MARKERS

ACTS = ("bash", "write", "delegate", "prompt", "boot", "commit", "tool-result")
FIELDS = ("on", "match", "tell", "stale_after", "deliver")
BEGIN = "<!-- crystal:essence -->"
END = "<!-- /crystal:essence -->"
CACHE_VERSION = 2
SKIP_NAMES = {"readme.md"}
_FIELD_RE = re.compile(r"^([A-Za-z_][\w-]*)\s*:\s*(.*)$")
_COMMENT_RE = re.compile(r"\s+#.*$")


class ParseError(Exception):
    pass


class Crystal:
    """One parsed crystal. A plain class, not a dataclass: the hook imports this module on
    every act and builds these only for the few crystals an act matches."""

    __slots__ = ("id", "path", "origin", "on", "match", "tell", "stale_after", "essence_chars", "claims",
                 "unknown", "essence", "keys")

    def __init__(self, id: str, path: str, origin: str, on: tuple, match: tuple, tell: "str | None" = None,
                 stale_after: "str | None" = None, essence_chars: int = 0, claims: int = 0, unknown: tuple = (),
                 essence: "str | None" = None, keys: "tuple | None" = None):
        self.id, self.path, self.origin = id, path, origin
        self.on, self.match = tuple(on), tuple(match)  # match: the keys as written
        self.tell, self.stale_after = tell, stale_after  # stale_after: YYYY-MM-DD
        self.essence_chars, self.claims = essence_chars, claims  # claims: marked lines in the essence
        self.unknown = tuple(unknown)  # binding fields this version does not know (lint reports them)
        self.essence = essence  # filled by parse_text; the cache does not keep it
        self.keys = tuple(keys) if keys else tuple(k.lower() for k in self.match)

    def __repr__(self) -> str:
        return f"Crystal({self.id!r}, origin={self.origin!r}, on={self.on!r}, match={self.match!r})"

    @property
    def key(self) -> str:
        return f"c:{self.id}"

    def is_stale(self, today: "date | None" = None) -> bool:
        if not self.stale_after:
            return False
        return (today or date.today()).isoformat() > self.stale_after

    def to_cache(self) -> dict:
        return {"id": self.id, "on": list(self.on), "match": list(self.match), "keys": list(self.keys),
                "tell": self.tell, "stale_after": self.stale_after, "essence_chars": self.essence_chars,
                "claims": self.claims, "unknown": list(self.unknown)}

    @classmethod
    def from_cache(cls, d: dict, path: str, origin: str) -> "Crystal":
        return cls(id=d["id"], path=path, origin=origin, on=d["on"], match=d["match"], tell=d.get("tell"),
                   stale_after=d.get("stale_after"), essence_chars=int(d.get("essence_chars") or 0),
                   claims=int(d.get("claims") or 0), unknown=d.get("unknown") or (), keys=d.get("keys"))


class Failure:
    __slots__ = ("path", "origin", "reason")

    def __init__(self, path: str, origin: str, reason: str):
        self.path, self.origin, self.reason = path, origin, reason

    @property
    def id(self) -> str:
        return crystal_id(self.path)


class Index:
    """The crystals one act can see: project ones first, then user-wide ones not shadowed.

    Holds the cached bindings as plain dicts; Crystal objects are built only for what an act
    matches (`match`) or when a command asks for all of them (`crystals`)."""

    def __init__(self, entries: list, failures: list, shadowed: list, cache: str):
        self.entries = entries  # [(path, origin, cached binding dict)]
        self.failures = failures
        self.shadowed = shadowed  # user-wide crystals hidden by a project crystal of the same id
        self.cache = cache  # hit | refreshed | off
        self._crystals = None

    @property
    def crystals(self) -> list:
        if self._crystals is None:
            self._crystals = [Crystal.from_cache(d, path, origin) for path, origin, d in self.entries]
        return self._crystals

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, cid: str) -> "Crystal | None":
        cid = cid[2:] if cid.startswith("c:") else cid
        for c in self.crystals:
            if c.id == cid:
                return c
        return None

    def match(self, act: str, text: str) -> list:
        """Like match(), on the cached bindings, building objects only for the hits."""
        out = []
        if act == "boot":
            return [(Crystal.from_cache(d, p, o), []) for p, o, d in self.entries if "boot" in d["on"]]
        low = text.lower()
        if not low:
            return out
        for path, origin, d in self.entries:
            if act in d["on"]:
                hit = [k for k in d["keys"] if k in low]
                if hit:
                    out.append((Crystal.from_cache(d, path, origin), hit))
        return out


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
    # crc32 names the cache file; hashlib would cost the hook an import for no security need.
    digest = f"{zlib.crc32(directory.encode('utf-8', 'surrogateescape')):08x}"
    return os.path.join(str(paths.home()), "cache", f"crystals-{digest}.marshal")


def _scan(directory: str) -> dict:
    """{file name: (mtime_ns, size)} for the crystal files in `directory`."""
    out = {}
    try:
        with os.scandir(directory) as it:
            for e in it:
                name = e.name
                low = name.lower()
                if name[0] == "." or not low.endswith(".md") or low in SKIP_NAMES:
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


# The cache is marshal, not JSON: decoding 300 bindings is several times faster, and the hook
# pays it on every act. It lives under RECALLD_HOME with the store itself; the header pins the
# format, the Python version and the directory, and anything unreadable is simply rebuilt.
_CACHE_TAG = ("recalld-crystals", CACHE_VERSION, tuple(sys.version_info[:2]))


def _read_cache(path: str, directory: str) -> tuple:
    """(sigs {name: (mtime_ns, size)}, data {name: binding dict | error str})."""
    try:
        with open(path, "rb") as f:
            tag, d, sigs, data = marshal.loads(f.read())
    except (OSError, ValueError, EOFError, TypeError):
        return {}, {}
    if tag != _CACHE_TAG or d != directory or not isinstance(sigs, dict) or not isinstance(data, dict):
        return {}, {}
    return sigs, data


def _write_cache(path: str, directory: str, sigs: dict, data: dict) -> None:
    """Atomic replace; concurrent hooks may race, the last whole file wins and both are right."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(marshal.dumps((_CACHE_TAG, directory, sigs, data)))
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass  # no cache this time; the next act parses again


def load_dir(directory: str, origin: str, use_cache: bool = True) -> tuple:
    """([(path, origin, binding dict)], failures, cache state) for one directory."""
    found = _scan(directory)
    cpath = _cache_path(directory)
    sigs, data = _read_cache(cpath, directory) if use_cache and found else ({}, {})
    changed = sigs != found
    if changed:
        fresh, done = {}, {}
        try:
            for name, sig in found.items():
                if sigs.get(name) == sig and name in data:
                    fresh[name] = data[name]
                else:
                    try:
                        fresh[name] = parse_file(directory + os.sep + name, origin).to_cache()
                    except ParseError as e:
                        fresh[name] = str(e)
                done[name] = sig
        finally:
            # Also when the hook's deadline interrupts a big first parse: keep what is done,
            # so the next act continues instead of starting over (and timing out) forever.
            if use_cache and (found or sigs):
                _write_cache(cpath, directory, done, fresh)
        data = fresh
    entries, failures = [], []
    sep = os.sep
    for name in sorted(found):
        c = data.get(name)
        if isinstance(c, dict):
            entries.append((directory + sep + name, origin, c))
        else:
            failures.append(Failure(directory + sep + name, origin, c if isinstance(c, str) else "bad cache entry"))
    state = "off" if not use_cache else ("refreshed" if changed else "hit")
    return entries, failures, state


def load(dirs: list, use_cache: bool = True) -> Index:
    entries, failures, shadowed, states = [], [], [], []
    seen = set()
    for origin, directory in dirs:
        es, fs, state = load_dir(directory, origin, use_cache)
        states.append(state)
        failures.extend(fs)
        for e in es:
            if e[2]["id"] in seen:
                shadowed.append(Crystal.from_cache(e[2], e[0], e[1]))
            else:
                seen.add(e[2]["id"])
                entries.append(e)
    state = "off" if not use_cache else ("refreshed" if "refreshed" in states else "hit")
    return Index(entries, failures, shadowed, state)


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
