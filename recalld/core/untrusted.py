"""Stored text rendered as data (standard library only: every hook run that injects calls it).

Memories, tells, crystal essences and drafted proposals are written by agents, imported from
chats or shipped in cloned repositories. The hook pastes them into the agent's context inside
one `<recalld>` block, and text there must not be able to pose as the harness: close the block
(`</recalld>`), open a `<system-reminder>`, `<system>`, `<function_calls>` or any other tag,
start a `Human:`/`Assistant:` turn, or open a code fence that swallows what follows.
`as_data` is the one function every renderer passes stored text through:

- Invisible characters are dropped first, so none can hide inside a tag or a marker: format
  characters (zero-width spaces and joiners, bidi controls, word joiners, soft hyphen, BOM),
  variation selectors but U+FE0F (emoji keep their look), fillers, the Unicode tag block that
  smuggles ASCII past a reader, and C0/C1 controls but tab and newline (a terminal escape in
  the git hook's plain-text output). Other line breaks become `\n`, other spaces a space.
- Every tag-shaped `<` becomes `&lt;`: a `<`, or a look-alike that Unicode normalisation turns
  into one (fullwidth, small, `≮`) or that reads as one (`˂`, `ᐸ`, `⟨`, `❮`, `〈`, `‹`), followed by
  a letter of any script, possibly after combining marks and a slash, `!` or `?` with blanks.
  That covers every harness tag, known or not, and homoglyph tag names; `a < b`, `<=`, `<-`,
  `<3` stay as written, `List<int>` becomes `List&lt;int>`. An entity is plainly escaped text,
  where a look-alike bracket would itself be a look-alike tag.
- A line whose first word is a `Human:` or `Assistant:` turn marker (any case, fullwidth
  letters too) is quoted: `> Human:`.
- A code fence (three or more backticks or tildes opening a line, fullwidth too) becomes the
  same number of `ˋ` or `˜`: stored text can neither close a fence nor leave one open past the
  block's end (a balancing fence could be lost to a cut; a neutralised one cannot matter).

No regex: compiling the patterns cost the hook more (about 5 ms a run) than scanning the text
does. Text with none of these (most memories) is returned as is after a few C-level scans.
as_data(as_data(x)) == as_data(x).
"""

_LT = frozenset("<\uff1c\ufe64\u226e\u02c2\u1438\u27e8\u276e\u2329\u2039")
_SLASH = frozenset("/\uff0f\u2044\u2215\\!?\uff01\uff1f")
_BLANK = " \t\u3000"
_BREAKS = ("\r\n", "\r", "\x85", "\u2028", "\u2029")
_CTRL_BYTES = bytes(b for b in range(32) if b not in (9, 10)) + b"\x7f"
# Printable by str.isprintable() yet invisible; everything non-printable but tab and newline
# is dropped as well (format characters, controls, separators other than the space).
_PRINTABLE_INVISIBLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180f\u3164\uffa0"
    + "".join(chr(c) for c in range(0xFE00, 0xFE0F)))
_FENCE = {"`": "\u02cb", "\uff40": "\u02cb", "~": "\u02dc", "\uff5e": "\u02dc"}
_TURNS = ("human", "assistant")
# Spaces other than U+0020 are not printable to str.isprintable(); they stay spaces.
_SPACES = frozenset("\u00a0\u1680\u202f\u205f\u3000" + "".join(chr(c) for c in range(0x2000, 0x200B)))
# Fullwidth ASCII folds to ASCII (what NFKC does) for the turn-marker check only.
_FOLD = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)}
_FOLD.update({0xFE55: ord(":"), 0xFE13: ord(":"), 0x3000: ord(" ")})


# Plain comparisons: a generator over a table of ranges costs ~2 us a character here.
def _is_mark(c: str) -> bool:
    """Combining marks that can sit between `<` and a tag name."""
    return c >= "\u0300" and ("\u0300" <= c <= "\u036f" or "\u1ab0" <= c <= "\u1aff" or "\u20d0" <= c <= "\u20ff"
                              or "\ufe20" <= c <= "\ufe2f")


def _drop(c: str) -> bool:
    if c == "\n" or c == "\t":
        return False
    if not c.isprintable() and c != " ":
        return True
    if c in _PRINTABLE_INVISIBLE:
        return True
    # Tag characters, supplementary variation selectors, shorthand format controls, musical
    # symbol formatting: invisible and printable-classified alike.
    return c > "\uffff" and ("\U000e0000" <= c <= "\U000e0fff" or "\U0001bca0" <= c <= "\U0001bca3"
                             or "\U0001d173" <= c <= "\U0001d17a")


def _tag_at(t: str, i: int) -> bool:
    """Whether the `<` (or look-alike) at i opens something tag-shaped."""
    n, j = len(t), i + 1
    while j < n and _is_mark(t[j]):
        j += 1
    k = j
    while k < n and t[k] in _BLANK:
        k += 1
    if k < n and t[k] in _SLASH:
        k += 1
        while k < n and (t[k] in _BLANK or _is_mark(t[k])):
            k += 1
        j = k
    return j < n and (t[j].isalpha() or t[j] == "_")


def _escape_tags(t: str, brackets) -> str:
    hits = []
    for ch in brackets:
        i = t.find(ch)
        while i >= 0:
            if _tag_at(t, i):
                hits.append(i)
            i = t.find(ch, i + 1)
    if not hits:
        return t
    hits.sort()
    out, last = [], 0
    for i in hits:
        out.append(t[last:i])
        out.append("&lt;")
        last = i + 1
    out.append(t[last:])
    return "".join(out)


_HEADS = frozenset("`~hHaA\uff40\uff5e\uff48\uff28\uff41\uff21")


def _line(line: str) -> str:
    body = line.lstrip(_BLANK)
    if not body or body[0] not in _HEADS:
        return line
    lead = line[:len(line) - len(body)]
    run = body[0]
    if run in _FENCE:
        k = 1
        while k < len(body) and body[k] == run:
            k += 1
        if k >= 3:
            return lead + _FENCE[run] * k + body[k:]
        return line
    head = body[:40]
    head = (head if head.isascii() else head.translate(_FOLD)).lower()
    for word in _TURNS:
        if head.startswith(word) and head[len(word):].lstrip(" \t").startswith(":"):
            return lead + "> " + body
    return line


def _printable(lines: list) -> bool:
    return all((x.replace("\t", " ") if "\t" in x else x).isprintable() for x in lines)


def as_data(text) -> str:
    """`text` as it may appear inside recalld's block: see the module docstring."""
    if not text:
        return "" if text is None else str(text)
    t = text if type(text) is str else str(text)
    if t.isascii():
        if "\r" in t:
            t = t.replace("\r\n", "\n").replace("\r", "\n")
        b = t.encode("ascii")
        kept = b.translate(None, _CTRL_BYTES)
        if len(kept) != len(b):
            t = kept.decode("ascii")
        brackets = ("<",) if "<" in t else ()
        low = kept.lower()
        check_lines = b"```" in kept or b"~~~" in kept or b"human" in low or b"assistant" in low
    else:
        for br in _BREAKS:
            if br in t:
                t = t.replace(br, "\n")
        # Astral characters show as surrogate pairs in UTF-16; only then can a tag-block or
        # supplementary variation selector be there.
        if (not _printable(t.split("\n")) or any(c in t for c in _PRINTABLE_INVISIBLE)
                or len(t.encode("utf-16-le", "surrogatepass")) != 2 * len(t)):
            drop = {ord(c): (" " if c in _SPACES else None) for c in set(t) if _drop(c)}
            if drop:
                t = t.translate(drop)
        brackets = [c for c in _LT if c in t]
        check_lines = True
    if brackets:
        t = _escape_tags(t, brackets)
    if check_lines:
        lines = t.split("\n")
        done = [_line(x) for x in lines]
        if done != lines:
            t = "\n".join(done)
    return t
