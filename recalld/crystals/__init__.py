"""Crystals: notes bound to acts (standard library only: the hook reads them on every act).

A crystal is a markdown file in a project's `.recalld/crystals/` or in
`RECALLD_HOME/crystals/`. It opens with a binding block and carries, somewhere below, the one
part that is ever delivered, fenced by two markers:

    crystal:
    on: bash, write                  # acts it fires on
    match: git reset --hard, rm -rf  # plain substrings, case-insensitive
    tell: One line that carries the claim when the essence cannot fit.
    stale_after: 2027-03-25          # after this date it is withheld
    deliver: gate                    # gate (default): hold a tool call or commit once; context

    <!-- crystal:essence -->
    ⛔ ...
    <!-- /crystal:essence -->

Everything else in the file is history and rationale for whoever argues about the rule later.
The id is the file name without `.md`; a project crystal shadows a user-wide one of the same id.

Parsing every file on every act would cost the hook milliseconds it does not have, so each
directory's parsed bindings are cached in RECALLD_HOME/cache/ keyed by each file's
(mtime_ns, size); a changed, added or removed file is re-parsed on the next act. Essences are
not cached: only the few crystals an act matches are read, and while such a file still has the
(mtime_ns, size) the act's scan saw, its essence is cut out without parsing it again.

Files are bounded and confined: one over MAX_FILE_BYTES is skipped unread, and a symlinked
file that resolves outside its crystal folder, or a project crystal folder that resolves
outside its repository, is not followed (each is a Failure with its code, counted in the
receipt and explained by lint).

Project crystals come with whatever repository was cloned, so they are delivered only once
the user has trusted that folder (`recalld crystals trust`): the trust log in RECALLD_HOME
records the folder with the sha256 of each crystal file, and a folder whose files no longer
hash the same is untrusted again. The hashes live in the directory's cache next to the
bindings, computed when a file is (re)parsed, so an act on an unchanged folder hashes
nothing. User-wide crystals (RECALLD_HOME/crystals) are the user's own and always trusted.

This package is crystals' one home: this module (files, parsing, matching), cache (the parsed
index per folder), trust (the trust log) and admin (trusting a folder, figures from receipts;
not on the hook's path). The hook's source is recalld.hook.crystal_source, the commands
recalld.cli.crystals.
"""

import os
import stat
import time

from recalld.core import paths
from recalld.crystals import cache as crystal_cache, trust
from recalld.core.packer import CLAIM_MARKERS

ACTS = ("bash", "write", "delegate", "prompt", "boot", "commit", "tool-result")
FIELDS = ("on", "match", "tell", "stale_after", "deliver")
BEGIN = "<!-- crystal:essence -->"
END = "<!-- /crystal:essence -->"
# `deliver:` values. gate: on a tool call or a commit the client runs as soon as the hook
# returns, hold the act once per session with the essence as the reason, so the note arrives
# before the act runs; context: never hold, add the note to the context like any
# item (in Claude Code and Codex that lands after the tool ran). `act`, an older name for
# the act's own channel, is read as gate.
DELIVER = ("gate", "context")
DELIVER_ALIASES = {"act": "gate"}
SKIP_NAMES = {"readme.md"}
# An essence is meant to be a few hundred chars; 64 KiB leaves room for the history around it
# and keeps a planted 100 MB file from being read on every matching act.
MAX_FILE_BYTES = 64 * 1024
_PATTERNS: list = []  # (field, comment), compiled by the first parse: importing re costs a hook more than its matching


def _regexes() -> tuple:
    if not _PATTERNS:
        import re

        _PATTERNS.extend((re.compile(r"^([A-Za-z_][\w-]*)\s*:\s*(.*)$"), re.compile(r"\s+#.*$")))
    return tuple(_PATTERNS)


class ParseError(Exception):
    def __init__(self, reason: str, code: str = "unparseable"):
        super().__init__(reason)
        self.code = code  # unparseable | oversize | symlink


class Crystal:
    """One parsed crystal. A plain class, not a dataclass: the hook imports this module on
    every act and builds these only for the few crystals an act matches."""

    __slots__ = ("id", "path", "origin", "on", "match", "tell", "stale_after", "essence_chars", "claims",
                 "unknown", "essence", "keys", "deliver", "sig")

    def __init__(self, id: str, path: str, origin: str, on: tuple, match: tuple, tell: "str | None" = None,
                 stale_after: "str | None" = None, essence_chars: int = 0, claims: int = 0, unknown: tuple = (),
                 essence: "str | None" = None, keys: "tuple | None" = None, deliver: str = "gate",
                 sig: "tuple | None" = None):
        self.id, self.path, self.origin = id, path, origin
        self.on, self.match = tuple(on), tuple(match)  # match: the keys as written
        self.tell, self.stale_after = tell, stale_after  # stale_after: YYYY-MM-DD
        self.essence_chars, self.claims = essence_chars, claims  # claims: marked lines in the essence
        self.unknown = tuple(unknown)  # binding fields this version does not know (lint reports them)
        self.essence = essence  # filled by parse_text; the cache does not keep it
        self.keys = tuple(keys) if keys else tuple(k.lower() for k in self.match)
        self.deliver = deliver  # gate | context
        self.sig = sig  # (mtime_ns, size) of the file this act's scan indexed (scan_dir)

    def __repr__(self) -> str:
        return f"Crystal({self.id!r}, origin={self.origin!r}, on={self.on!r}, match={self.match!r})"

    @property
    def key(self) -> str:
        return f"c:{self.id}"

    def is_stale(self, today: "date | None" = None) -> bool:
        if not self.stale_after:
            return False
        return (today.isoformat() if today else time.strftime("%Y-%m-%d")) > self.stale_after  # no datetime

    def to_cache(self) -> dict:
        return {"id": self.id, "on": list(self.on), "match": list(self.match), "keys": list(self.keys),
                "tell": self.tell, "stale_after": self.stale_after, "essence_chars": self.essence_chars,
                "claims": self.claims, "unknown": list(self.unknown), "deliver": self.deliver}

    @classmethod
    def from_cache(cls, d: dict, path: str, origin: str) -> "Crystal":
        return cls(id=d["id"], path=path, origin=origin, on=d["on"], match=d["match"], tell=d.get("tell"),
                   stale_after=d.get("stale_after"), essence_chars=int(d.get("essence_chars") or 0),
                   claims=int(d.get("claims") or 0), unknown=d.get("unknown") or (), keys=d.get("keys"),
                   deliver=d.get("deliver") or "gate", sig=d.get("sig"))


class Failure:
    __slots__ = ("path", "origin", "reason", "code")

    def __init__(self, path: str, origin: str, reason: str, code: str = "unparseable"):
        self.path, self.origin, self.reason = path, origin, reason
        self.code = code  # unparseable | oversize | symlink

    @property
    def id(self) -> str:
        return crystal_id(self.path)


class Index:
    """The crystals one act can see: project ones first, then user-wide ones not shadowed.

    Holds the cached bindings as plain dicts; Crystal objects are built only for what an act
    matches (`match`) or when a command asks for all of them (`crystals`)."""

    def __init__(self, entries: list, failures: list, shadowed: list, cache: str,
                 untrusted: "list | None" = None, trust: "dict | None" = None):
        self.entries = entries  # [(path, origin, cached binding dict)]
        self.failures = failures
        self.shadowed = shadowed  # user-wide crystals hidden by a project crystal of the same id
        self.cache = cache  # hit | refreshed | off
        self.untrusted = untrusted or []  # entries of project folders not trusted: never delivered
        self.trust = trust or {}  # {project crystal folder: trusted | untrusted | changed}
        self._crystals = None

    @property
    def crystals(self) -> list:
        if self._crystals is None:
            self._crystals = [Crystal.from_cache(d, path, origin) for path, origin, d in self.entries]
        return self._crystals

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def untrusted_crystals(self) -> list:
        return [Crystal.from_cache(d, path, origin) for path, origin, d in self.untrusted]

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
    field_re, comment_re = _regexes()
    lines = text.splitlines()
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i == len(lines) or comment_re.sub("", lines[i].strip()) != "crystal:":
        raise ParseError("no binding block: the first non-blank line must be `crystal:`")
    fields: dict = {}
    unknown = []
    i += 1
    while i < len(lines):
        line = lines[i].strip()
        m = field_re.match(line)
        if not line or not m:
            break
        name = m.group(1).lower()
        value = comment_re.sub("", m.group(2)).strip()
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
    deliver = fields.get("deliver", "gate").lower()
    deliver = DELIVER_ALIASES.get(deliver, deliver)
    if deliver not in DELIVER:
        raise ParseError(f"`deliver: {deliver}` is not supported (gate or context)")
    stale = fields.get("stale_after") or None
    if stale:
        from datetime import date  # only when a file is (re)parsed
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
    essence = _essence_of(text)
    if not essence.strip():
        raise ParseError("the essence is empty")
    return Crystal(id=crystal_id(path), path=path, origin=origin, on=on, match=match,
                   tell=fields.get("tell") or None, stale_after=stale,
                   essence_chars=len(essence), claims=count_claims(essence),
                   unknown=tuple(unknown), essence=essence, deliver=deliver)


def _essence_of(text: str) -> str:
    """The text between the essence markers of a file that has exactly one pair, in order."""
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n").rstrip()


def _oversize(size: int) -> str:
    return (f"{size} bytes, over the {MAX_FILE_BYTES}-byte cap on a crystal file: skipped unread "
            "(the essence is meant to be short; move the history elsewhere)")


def _outside(path: str, root: str) -> "str | None":
    """The real path of `path` when it resolves outside `root`, else None."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return None if real == top or real.startswith(top.rstrip(os.sep) + os.sep) else real


def read_file(path: str, with_sig: bool = False):
    """A crystal file's bytes: a regular file inside its folder, at most MAX_FILE_BYTES (with
    with_sig, (bytes, (mtime_ns, size))). Non-blocking open: a FIFO swapped in cannot hang the hook."""
    if os.path.islink(path):
        real = _outside(path, os.path.dirname(path))
        if real:
            raise ParseError(f"a symlink to {real}, outside the crystal folder: not followed", "symlink")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ParseError(f"unreadable: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ParseError("not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise ParseError(_oversize(st.st_size), "oversize")
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ParseError(f"unreadable: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_FILE_BYTES:
        raise ParseError(_oversize(len(raw)), "oversize")
    return (raw, (st.st_mtime_ns, st.st_size)) if with_sig else raw


def parse_bytes(raw: bytes, path: str, origin: str = "project") -> Crystal:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError("not UTF-8 text") from None
    return parse_text(text, path, origin)


def parse_file(path: str, origin: str = "project") -> Crystal:
    return parse_bytes(read_file(path), path, origin)


def essence(c: Crystal) -> "str | None":
    """The crystal's essence, read from its file now (None if it no longer parses)."""
    if c.essence is not None:
        return c.essence
    try:
        raw, sig = read_file(c.path, with_sig=True)
        if c.sig is not None and tuple(c.sig) == sig:  # the file as indexed, which parsed: no re, no datetime
            try:
                return _essence_of(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                pass  # not as indexed after all: parse it and say why not
        return parse_bytes(raw, c.path, c.origin).essence
    except ParseError:
        return None


def file_hash(raw: bytes) -> str:
    # Only when a project crystal file is (re)parsed: hashlib costs the hook ~5 ms to import.
    import hashlib

    return hashlib.sha256(raw).hexdigest()


# --- where crystals live ------------------------------------------------------------------


def directories(project: "str | None") -> list:
    """[(origin, dir)]: the project's `.recalld/crystals/` (project = scope.resolve_project,
    the git repository root), then RECALLD_HOME/crystals/."""
    out = []
    if project:
        out.append(("project", os.path.join(project, ".recalld", "crystals")))
    out.append(("user", str(paths.crystals_dir())))
    return out


def _scan(directory: str) -> tuple:
    """({file name: (mtime_ns, size)} for the crystal files in `directory` that may be read,
    {file name: (code, reason)} for those skipped unread: over the size cap, or a symlink
    that resolves outside the directory; whether any entry is a symlink)."""
    out, skipped, linked = {}, {}, False
    try:
        with os.scandir(directory) as it:
            for e in it:
                name = e.name
                low = name.lower()
                if name[0] == "." or not low.endswith(".md") or low in SKIP_NAMES:
                    continue
                try:
                    if e.is_symlink():
                        linked = True
                        real = _outside(e.path, directory)
                        if real:
                            skipped[name] = ("symlink", f"a symlink to {real}, outside the crystal folder: "
                                                        "not followed")
                            continue
                    if not e.is_file():
                        continue
                    st = e.stat()
                except OSError:
                    continue
                if st.st_size > MAX_FILE_BYTES:
                    skipped[name] = ("oversize", _oversize(st.st_size))
                    continue
                out[name] = (st.st_mtime_ns, st.st_size)
    except OSError:
        pass
    return out, skipped, linked


def _folder_escapes(directory: str) -> "str | None":
    """For a project's `.recalld/crystals`: its real path when `.recalld` or `crystals` is a
    symlink leading outside the repository (two lstat calls when neither is a link)."""
    parent = os.path.dirname(directory)
    try:
        if not (stat.S_ISLNK(os.lstat(directory).st_mode) or stat.S_ISLNK(os.lstat(parent).st_mode)):
            return None
    except OSError:
        return None
    return _outside(directory, os.path.dirname(parent))


def _index_file(path: str, origin: str, hashed: bool) -> tuple:
    """(binding dict | error str, sha256 | None) for one file being (re)indexed."""
    try:
        raw = read_file(path)
    except ParseError as e:
        # Hashed as its failure, so the folder can still be trusted as it is, and the file
        # becoming readable is a change.
        return str(e), (f"unread:{e.code}" if hashed else None)
    digest = file_hash(raw) if hashed else None
    try:
        return parse_bytes(raw, path, origin).to_cache(), digest
    except ParseError as e:
        return str(e), digest


# A process that runs many acts (the daemon serving hooks, recalld/daemon/hookserver.py) keeps
# each folder's last result: when the folder's stat is the same as then (every file's mtime and
# size, the same skipped files), so is everything read from it. A hook process runs one act and
# never reads this; it still stats every file, which is what catches an edited crystal.
_LAST: dict = {}  # (directory, origin) -> (found, skipped, (entries, failures, hashes), watch token)
# That process may also know a folder is unchanged without the stats: FOLDER_WATCH, a
# recalld.daemon.folderwatch.FolderWatch (inotify), vouches for a scan by its token.
FOLDER_WATCH = None
# load()'s last Index per folder list, with the _LAST results it was built from (by identity:
# a folder scanned anew, by any thread, is a new object) and the trust log's stat then.
_LAST_INDEX: dict = {}  # (dirs, check_trust) -> (trust log stat, (results...), Index)


def scan_dir(directory: str, origin: str, use_cache: bool = True) -> tuple:
    """([(path, origin, binding dict)], failures, cache state, hashes) for one directory.

    hashes: {file name: sha256} of every file indexed, for a project folder (None for a
    user-wide one). Skipped files (over the cap, outside symlinks) are never read nor hashed."""
    return _scan_dir(directory, origin, use_cache)[:4]


def _scan_dir(directory: str, origin: str, use_cache: bool) -> tuple:
    """scan_dir's answer and, last, the _LAST result it came from or made (None: not kept)."""
    if origin == "project":
        real = _folder_escapes(directory)
        if real:
            return [], [Failure(directory, origin, f"the crystal folder is a symlink to {real}, outside the "
                                "repository: not followed", "symlink")], "off" if not use_cache else "hit", None, None
    w, token = FOLDER_WATCH if use_cache else None, None
    if w is not None:
        last = _LAST.get((directory, origin))
        if last is not None and w.unchanged(directory, last[3]):
            return list(last[2][0]), list(last[2][1]), "hit", last[2][2], last[2]
        token = w.before_scan(directory)  # from here on, any change voids this scan's token
    found, skipped, linked = _scan(directory)
    if linked and token is not None:  # a link's target changes elsewhere: no watch vouches for it
        w.forget(directory)
        token = None
    if use_cache:
        last = _LAST.get((directory, origin))
        if last is not None and last[0] == found and last[1] == skipped:
            _LAST[(directory, origin)] = (found, skipped, last[2], token)
            entries, failures, hashes = last[2]
            return list(entries), list(failures), "hit", hashes, last[2]
    hashed = origin == "project"
    cpath = crystal_cache.path(directory)
    sigs, data, hashes = crystal_cache.read(cpath, directory) if use_cache and found else ({}, {}, {})
    changed = sigs != found
    if changed:
        fresh, done, fresh_hashes = {}, {}, {}
        try:
            for name, sig in found.items():
                if sigs.get(name) == sig and name in data and (name in hashes or not hashed):
                    fresh[name] = data[name]
                    if name in hashes:
                        fresh_hashes[name] = hashes[name]
                else:
                    fresh[name], digest = _index_file(directory + os.sep + name, origin, hashed)
                    if digest:
                        fresh_hashes[name] = digest
                done[name] = sig
        finally:
            # Also when the hook's deadline interrupts a big first parse: keep what is done,
            # so the next act continues instead of starting over (and timing out) forever.
            if use_cache and (found or sigs):
                crystal_cache.write(cpath, directory, done, fresh, fresh_hashes)
        data, hashes = fresh, fresh_hashes
    entries, failures = [], []
    sep = os.sep
    for name in sorted(found):
        c = data.get(name)
        if isinstance(c, dict):
            c["sig"] = found[name]  # this act's stat of the file (Crystal.sig); not written to the cache
            entries.append((directory + sep + name, origin, c))
        else:
            failures.append(Failure(directory + sep + name, origin, c if isinstance(c, str) else "bad cache entry"))
    for name in sorted(skipped):
        code, reason = skipped[name]
        failures.append(Failure(directory + sep + name, origin, reason, code))
    state = "off" if not use_cache else ("refreshed" if changed else "hit")
    ok = hashed and all(n in hashes for n in found)
    hashes = {n: hashes[n] for n in found} if ok else None
    kept = None
    if use_cache:
        kept = (list(entries), list(failures), hashes)
        _LAST[(directory, origin)] = (found, skipped, kept, token)
    return entries, failures, state, hashes, kept


def load_dir(directory: str, origin: str, use_cache: bool = True) -> tuple:
    """([(path, origin, binding dict)], failures, cache state) for one directory."""
    return scan_dir(directory, origin, use_cache)[:3]


def load(dirs: list, use_cache: bool = True, check_trust: bool = True) -> Index:
    """The crystals an act may see. A project folder that is not trusted contributes nothing
    (its crystals go to `untrusted`, and shadow nothing); check_trust=False is for commands
    that inspect files (lint), never for delivery."""
    key = (tuple(dirs), check_trust)
    scanned = [_scan_dir(directory, origin, use_cache) for origin, directory in dirs]
    made_of = tuple(s[4] for s in scanned)
    sig = trust.log_sig() if use_cache else None
    last = _LAST_INDEX.get(key) if use_cache else None
    if (last is not None and last[0] == sig and len(last[1]) == len(made_of)
            and all(a is b and a is not None for a, b in zip(last[1], made_of))):
        last[2].cache = "hit"  # no folder changed since the last act, nor did the trust log: the same Index
        return last[2]
    entries, failures, shadowed, states, untrusted, verdicts = [], [], [], [], [], {}
    seen = set()
    for (origin, directory), (es, fs, state, hashes, _) in zip(dirs, scanned):
        states.append(state)
        failures.extend(fs)
        if origin == "project" and es:
            verdicts[directory] = trust.state(directory, hashes)
            if check_trust and verdicts[directory] != "trusted":
                untrusted.extend(es)
                continue
        for e in es:
            if e[2]["id"] in seen:
                shadowed.append(Crystal.from_cache(e[2], e[0], e[1]))
            else:
                seen.add(e[2]["id"])
                entries.append(e)
    state = "off" if not use_cache else ("refreshed" if "refreshed" in states else "hit")
    index = Index(entries, failures, shadowed, state, untrusted, verdicts)
    if use_cache:
        _LAST_INDEX[key] = (sig, made_of, index)
    return index


def load_for(project: "str | None", use_cache: bool = True, check_trust: bool = True) -> Index:
    return load(directories(project), use_cache, check_trust)


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
