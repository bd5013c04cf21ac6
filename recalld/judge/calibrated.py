"""The calibrated judge score: the probability that a candidate answers the need.

No single signal says "nothing here answers it". The search's coverage is lexical and blind to
paraphrase; the small model's query likelihood (recalld.judge.scoring) orders candidates well
but its scale drifts from need to need; an embedding similarity sees paraphrase but not
negation or a swapped name. Combined, and read relative to the need's other candidates, they
separate "this answers it" from "this shares its words" a little better than any of them
alone (docs/evaluation.md, "The judge", has the measurements, and where none of them works).

So each candidate gets a feature vector (`features`) and a logistic model turns it into
P(answers the need):

    p = 1 / (1 + exp(-(intercept + sum of coef[f] * x[f])))

fitted offline on development data (recalld.bench.fit_judge: the coding-needs set in
recalld/bench/data/coding_needs.json for the base signals; the subject group on it and LoCoMo
dev together, the base score held fixed; docs/judge.md says why), validated
leave-one-group-out (a group is a project or a conversation), and shipped here as constants.
One model per set of available signals: with the language model or without it
(the cheap model only picks which candidates the language model reads), with the embedder or
without it. A probability means the same for every need, so one threshold (settings
judge.threshold) decides.

The subject group (`SUBJECT_FEATURES`) is read from the need's and the memories' text alone:
does the memory speak of the subject the need names? A memory about someone else shares the
need's other words exactly when it is the wrong one to pass (LoCoMo's adversarial questions
name the other speaker). Only a statement with an author ("Name: I ...") has a subject to read;
for a plain note that is not a question the group is 0 (the names a coding note shares with the
need did not separate its answers: docs/evaluation.md, "The judge's features and fits, tried
and not kept").

The set features (`SET_FEATURES`, with the embedder) describe the five candidates together:
when nothing answers, none holds much of the need's own words and no cosine stands out.

A turn of a conversation (`dialogue`: a memory that opens with its author's name, next to
another author's in its thread) is scored by a model of its own, fitted on conversations' turns with the thread features
(`THREAD_FEATURES`: does it answer another's question, is it asked about), its score calibrated
so that a probability of 0.6 means what it means for a note. Scored by the notes' model, a turn
passed at 0.6 was the answer half the time (docs/judge.md, "Conversations").

Standard library only, and no model is run here: recalld.judge.judge computes the signals.
"""

import math
import re

# Per candidate, in the order search() returned them. Every feature is either comparable
# across needs by construction (coverage 0..1, a cosine, a per-token likelihood gain) or
# relative to the need's best candidate, so a need whose every score is high or low does not
# move the probability by itself.
SEARCH_FEATURES = ("cov", "cov_gap", "rank_gap", "first")
# Of the need's candidate set as a whole, the same for each of them: when nothing answers the
# need, no memory holds much of its own words and no memory's cosine stands out from the rest
# (docs/judge.md, "Evidence absent"). `held_max`: the largest share of the need's own words (its
# content words, its names and function words left out) that one candidate holds; `cos_spread`:
# the standard deviation of the candidates' cosines. Both only with the embedder: without it,
# `held_max` cost the coding set an expected memory, held out.
SET_FEATURES = ("held_max", "cos_spread")
LM_FEATURES = ("ql", "ql_gap")
EMBED_FEATURES = ("cos", "cos_gap")
AGREE_FEATURES = ("agree",)
# `other`: the memory is a first- or second-person statement ("Name: I ...", "Name: you ...")
# whose subject is not the person the need names (a name the need shares with some candidate's
# author); `best_other`: `other` of the candidate that holds most of the need's remaining words
# (the need's own words, its names left out), the same for every candidate of a need; `asks`:
# the memory is a question (it asks, it does not answer). The first two are 0 for a plain note,
# and so is the third unless the note ends in a question mark.
SUBJECT_FEATURES = ("other", "best_other", "asks")
# Of a turn of a conversation (`dialogue`):
# how it sits in its thread. `replies`: the turn before it is another author's question;
# `asked`: the turn after it is one; `replies_held`: `replies` times the share of the need's
# own words that question holds. In a conversation the answer is often the turn after the
# question, which shares few of the need's words, while the turn that brought the topic up
# holds them all (docs/judge.md, "Conversations").
THREAD_FEATURES = ("replies", "asked", "replies_held")
# Words that open a note as a label ("Decision: we ..."), never a speaker.
_LABELS = frozenset("""
decision constraint fact procedure preference note notes todo fixme warning error summary update
question answer context reason why fix bug issue status result results plan step tip rule
""".split())

# Fitted by `python3 -m recalld.bench.fit_judge` (the run, its data and its cross-validated
# figures are in docs/evaluation.md, "The judge"); never edited by hand. Keys: which signals were available, and
# "dialogue/..." for a turn of a conversation (`dialogue`): fitted on LoCoMo's turns with the
# thread features, its score mapped (`calibration`: a + b * the logit) so that its probability
# is that of the need's most probable turn being the answer.
MODELS: dict = {
    "cheap": {
        "intercept": -3.9076,
        "coef": {
            "cov": 10.7841,
            "cov_gap": 8.3243,
            "rank_gap": 10.4959,
            "first": 0.409,
            "agree": 0.409,
            "other": -4.099,
            "best_other": -5.1804,
            "asks": -5.5585
        }
    },
    "lm": {
        "intercept": -2.9457,
        "coef": {
            "cov": 9.2137,
            "cov_gap": 8.1821,
            "rank_gap": 9.5961,
            "first": 0.2034,
            "ql": 0.3531,
            "ql_gap": 2.4589,
            "agree": -0.0544,
            "other": -4.2966,
            "best_other": -4.4945,
            "asks": -5.9306
        }
    },
    "cheap+embed": {
        "intercept": -5.4972,
        "coef": {
            "cov": 2.9773,
            "cov_gap": 7.6548,
            "rank_gap": 9.1457,
            "first": 0.972,
            "cos": 6.8114,
            "cos_gap": 5.402,
            "held_max": 2.5172,
            "cos_spread": 1.3721,
            "agree": -0.3355,
            "other": -2.3523,
            "best_other": -2.2047,
            "asks": -2.911
        }
    },
    "lm+embed": {
        "intercept": -4.4181,
        "coef": {
            "cov": 3.0502,
            "cov_gap": 10.1656,
            "rank_gap": 10.074,
            "first": 1.1713,
            "ql": -0.1574,
            "ql_gap": 1.8748,
            "cos": 6.7027,
            "cos_gap": 6.6643,
            "held_max": 2.96,
            "cos_spread": 2.3452,
            "agree": -1.7953,
            "other": -3.4454,
            "best_other": -2.4193,
            "asks": -3.4871
        }
    },
    "dialogue/cheap": {
        "intercept": -3.8821,
        "coef": {
            "cov": 2.3504,
            "cov_gap": -1.0073,
            "rank_gap": 2.6917,
            "first": 0.6129,
            "agree": 0.6129,
            "other": -0.6591,
            "best_other": -1.356,
            "asks": -0.3786,
            "replies": 0.3371,
            "asked": 0.2889,
            "replies_held": 1.7341
        },
        "calibration": [
            0.2474,
            1.0727
        ]
    },
    "dialogue/lm": {
        "intercept": -4.2207,
        "coef": {
            "cov": 1.917,
            "cov_gap": -4.003,
            "rank_gap": 3.516,
            "first": 0.1364,
            "ql": 0.5013,
            "ql_gap": -0.6752,
            "agree": 0.9667,
            "other": -1.3845,
            "best_other": -1.0669,
            "asks": -0.0279,
            "replies": 0.2302,
            "asked": 0.1695,
            "replies_held": 1.3607
        },
        "calibration": [
            0.2973,
            0.9679
        ]
    },
    "dialogue/cheap+embed": {
        "intercept": -3.5126,
        "coef": {
            "cov": 2.5392,
            "cov_gap": -0.7961,
            "rank_gap": 2.03,
            "first": 0.9199,
            "cos": -0.7149,
            "cos_gap": 3.3439,
            "held_max": -0.1481,
            "cos_spread": 2.0871,
            "agree": 0.3405,
            "other": -0.8622,
            "best_other": -0.8965,
            "asks": -0.4589,
            "replies": 0.3586,
            "asked": 0.2483,
            "replies_held": 1.6876
        },
        "calibration": [
            0.2001,
            1.0082
        ]
    },
    "dialogue/lm+embed": {
        "intercept": -3.3959,
        "coef": {
            "cov": 2.3008,
            "cov_gap": -3.1326,
            "rank_gap": 2.8669,
            "first": 0.4405,
            "ql": 0.4341,
            "ql_gap": -0.6116,
            "cos": -1.7594,
            "cos_gap": 2.8554,
            "held_max": 0.0067,
            "cos_spread": 1.7798,
            "agree": 0.6435,
            "other": -1.5057,
            "best_other": -0.8111,
            "asks": -0.0779,
            "replies": 0.2231,
            "asked": 0.1682,
            "replies_held": 1.3718
        },
        "calibration": [
            0.2992,
            1.1597
        ]
    }
}

# The language model reads only this many candidates, the cheap model's best (each costs one
# decode of the memory and the need); docs/evaluation.md, "The judge's latency".
LM_TOP = 2


def kind(lm: bool, embed: bool, dialogue: bool = False) -> str:
    """The model's key for a set of available signals (and for a turn of a conversation)."""
    return ("dialogue/" if dialogue else "") + ("lm" if lm else "cheap") + ("+embed" if embed else "")


def feature_names(lm: bool, embed: bool, dialogue: bool = False) -> tuple:
    return (SEARCH_FEATURES + (LM_FEATURES if lm else ()) + (EMBED_FEATURES + SET_FEATURES if embed else ())
            + AGREE_FEATURES + SUBJECT_FEATURES + (THREAD_FEATURES if dialogue else ()))


def _speaker(text: "str | None") -> str:
    """The author a memory opens with, unless it is a label ("Decision: ...") or there is none."""
    who = author(text or "")[0]
    return who if who and who.split()[0].lower() not in _LABELS else ""


def dialogue(c: dict) -> bool:
    """The candidate is a turn of a conversation: it opens with its author's name, and a memory
    next to it in its thread (judge.neighbours) opens with another's. (Every LoCoMo candidate
    is one; a thread of notes by one hand is not.)"""
    me = _speaker(c.get("text"))
    return bool(me) and any((w := _speaker(t)) and w != me for t in (c.get("prev_text"), c.get("next_text")))


def detail_names(embed: bool) -> tuple:
    """The features read from the texts and the candidate set as a whole, which a receipt shows
    beside the signals (the other features are the signals relative to the best candidate)."""
    return (SET_FEATURES if embed else ()) + SUBJECT_FEATURES


def base_feature_names(lm: bool, embed: bool, dialogue: bool = False) -> tuple:
    """The features of the first stage of the fit (recalld.bench.fit_judge, docs/judge.md)."""
    return tuple(f for f in feature_names(lm, embed, dialogue) if f not in SUBJECT_FEATURES + THREAD_FEATURES)


# --------------------------------------------------------------------------- the subject

# Words a sentence capitalises for grammar (or a chat for greeting), never a named subject.
_FUNCTION = frozenset("""
i i'm i've i'll i'd what when where who whom whose which why how is are was were do does did can could
would should will shall has have had the a an and or but if in on at of for to from by with let let's my
we our it its this that these those there here yes no ok okay also then so not after before during since
until while as about into over under hey hi hello thanks thank wow oh yeah yep sure great nice cool
awesome congrats sorry please maybe just now
""".split())
_STOP = _FUNCTION | frozenset("""
be been being doing having me you your he him his she her they them their than too very may might must
any all some each other such only own same get got gets like one up down out off again once
""".split())
_DATE = re.compile(r"^\s*\[[^\]]{0,60}\]\s*")  # "[7:31 pm on 21 January, 2022] "
# "Caroline: ..." / "Build Bot: ...": up to three capitalised words and a colon open the text.
_AUTHOR = re.compile(r"^((?:[A-Z][\w'.-]*)(?: [A-Z][\w'.-]*){0,2}):\s")
_TOKEN = re.compile(r"`[^`]{1,80}`|--?[A-Za-z][\w-]*|[A-Za-z_]\w*(?:[./:-]\w+)*|\d[\w.]*")
_FIRST = re.compile(r"\b(?:i|i'm|i've|i'll|i'd|me|my|mine|myself|we|we're|we've|our|ours|us)\b", re.I)
_SECOND = re.compile(r"\b(?:you|your|you're|yours|you've|you'll|you'd|yourself)\b", re.I)


def _norm(tok: str) -> str:
    return re.sub(r"'s$", "", tok.strip("`")).lower()


def _is_name(tok: str, first_in_sentence: bool) -> bool:
    """A token that names a subject: code-like (a path, a dotted or snake_case identifier, a
    flag, CamelCase, letters with digits, backticks) or capitalised where grammar does not
    capitalise it."""
    if tok.startswith("`") or (tok.startswith("-") and len(tok) > 2):
        return True
    if re.search(r"[_./:]|[a-z][A-Z]", tok) or (re.search(r"\d", tok) and re.search(r"[A-Za-z]", tok)):
        return True
    if tok.lower() in _FUNCTION or len(tok) < 2:
        return False
    return tok.isupper() or (tok[:1].isupper() and not first_in_sentence)


def names(text: str) -> list:
    """The subjects a need names, normalised, in order: "Caroline's" -> "caroline"."""
    out = []
    for sent in re.split(r"(?<=[.!?])\s+|\n+", _DATE.sub("", text)):
        for i, m in enumerate(_TOKEN.finditer(sent)):
            tok = re.sub(r"'s$", "", m.group(0))
            if _is_name(tok, i == 0) and _norm(tok) not in out:
                out.append(_norm(tok))
    return out


def _words(text: str) -> set:
    return {_norm(t) for t in _TOKEN.findall(text)}


def _stem(w: str) -> str:
    for suf in ("ing", "ed", "es", "s", "ly"):
        if len(w) > len(suf) + 3 and w.endswith(suf):
            return w[:-len(suf)][:6]
    return w[:6]


def _content(text: str, named: set) -> set:
    """The text's own words, stemmed crudely, its names and function words left out."""
    return {_stem(n) for n in (_norm(t) for t in re.findall(r"[A-Za-z][A-Za-z']+", text))
            if len(n) > 2 and n not in _STOP and n not in named}


def author(text: str) -> tuple:
    """(the author a memory text opens with, or "", the text after it)."""
    body = _DATE.sub("", text)
    m = _AUTHOR.match(body)
    return (m.group(1), body[m.end():]) if m else ("", body)


def subject(people: list, need_names: list, need_words: set, text: str) -> tuple:
    """(other, asks, share of the need's own words held) for one memory text. A statement with
    an author ("Name: ...") in the first person is about its author, in the second person about
    whoever it addresses (not its author); `other` is the share of `people` (the need's names
    that author a candidate) that are not that subject. A memory without an author or a person,
    or a need that names none of the authors, has no such subject."""
    who, body = author(text)
    asks = 1.0 if body.rstrip().endswith("?") else 0.0
    held = len(need_words & _content(body, set(need_names))) / len(need_words) if need_words else 0.0
    first, second = len(_FIRST.findall(body)), len(_SECOND.findall(body))
    if not who or not people or not (first or second):
        return 0.0, asks, held
    about_author = first >= second
    mine = _words(who)
    other = sum((n in mine) != about_author for n in people) / len(people)
    return other, asks, held


def subject_features(cands: list, need: str) -> list:
    """{other, best_other, asks} per candidate (SUBJECT_FEATURES)."""
    return [{k: x[k] for k in SUBJECT_FEATURES} for x in _text_features(cands, need)]


def _asks_other(question: "str | None", text: str) -> "str | None":
    """The body of `question` if it is a question by another author than `text`'s, else None."""
    if not question:
        return None
    who, body = author(question)
    mine = author(text)[0]
    return body if who and mine and who != mine and body.rstrip().endswith("?") else None


def _text_features(cands: list, need: str) -> list:
    """SUBJECT_FEATURES, THREAD_FEATURES and `held_max` per candidate: what the texts alone say."""
    need_names = names(need or "")
    need_words = _content(_DATE.sub("", need or ""), set(need_names))
    texts = [c.get("text") or "" for c in cands]
    # A label that opens a note ("Decision: we ...") is not a person: only a name the need
    # shares with some candidate's author makes a subject to agree with.
    authors = set().union(*(_words(author(t)[0]) for t in texts)) if texts else set()
    people = [n for n in need_names if n in authors]
    per = [subject(people, need_names, need_words, t) for t in texts]
    # The candidate holding most of the need's own words; ties: the better embedding, then search order.
    best = max(range(len(cands)), key=lambda i: (per[i][2], cands[i].get("cos") or 0.0, -i)) if cands else 0
    held_max = max((h for _, _, h in per), default=0.0)
    out = []
    for c, t, (o, a, _) in zip(cands, texts, per):
        x = {"other": o, "best_other": per[best][0], "asks": a, "held_max": held_max,
             "replies": 0.0, "asked": 0.0, "replies_held": 0.0}
        q = _asks_other(c.get("prev_text"), t)
        if q is not None:
            x["replies"] = 1.0
            if need_words:
                x["replies_held"] = len(need_words & _content(q, set(need_names))) / len(need_words)
        x["asked"] = 1.0 if _asks_other(c.get("next_text"), t) is not None else 0.0
        out.append(x)
    return out


def _spread(xs: list) -> float:
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))


def features(cands: list, lm: bool, embed: bool, need: str = "") -> list:
    """One {feature: value} per candidate. `cands`: dicts in search order with `score` (the
    search's coverage), `rank` (its ordering key), `text`, and, when available, `ql` (the mean
    token gain) and `cos` (the embedding cosine); `need` for the text features. With `lm`, only
    candidates whose `ql` is not None are described (the others were not read by the model and
    cannot pass)."""
    if not cands:
        return []
    subj = _text_features(cands, need)
    top_score = max(c["score"] for c in cands)
    top_rank = max(c["rank"] for c in cands)
    scored = [c for c in cands if c.get("ql") is not None] if lm else list(cands)
    top_ql = max((c["ql"] for c in scored), default=0.0) if lm else 0.0
    top_cos = max(c["cos"] for c in cands) if embed else 0.0
    best_ql = max(scored, key=lambda c: c["ql"]) if lm and scored else None
    best_cos = max(cands, key=lambda c: c["cos"]) if embed else None
    cos_spread = _spread([c["cos"] for c in cands]) if embed else 0.0
    out = []
    for i, c in enumerate(cands):
        if lm and c.get("ql") is None:
            out.append(None)
            continue
        x = {"cov": c["score"], "cov_gap": c["score"] - top_score, "rank_gap": c["rank"] - top_rank,
             "first": 1.0 if i == 0 else 0.0}
        votes = [i == 0]
        if lm:
            x.update(ql=c["ql"], ql_gap=c["ql"] - top_ql)
            votes.append(c is best_ql)
        if embed:
            x.update(cos=c["cos"], cos_gap=c["cos"] - top_cos, held_max=subj[i]["held_max"], cos_spread=cos_spread)
            votes.append(c is best_cos)
        # Agreement: the share of the signals that put this candidate first.
        x["agree"] = sum(votes) / len(votes)
        x.update({f: subj[i][f] for f in SUBJECT_FEATURES + THREAD_FEATURES})
        out.append(x)
    return out


def probability(x: dict, model: dict) -> float:
    z = model["intercept"] + sum(w * x[f] for f, w in model["coef"].items())
    cal = model.get("calibration")
    if cal:
        z = cal[0] + cal[1] * z
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def probabilities(cands: list, lm: bool, embed: bool, models: "dict | None" = None, need: str = "") -> list:
    """P(answers the need) per candidate (None for one the language model did not read). A turn
    of a conversation is scored by the dialogue model when there is one."""
    m = MODELS if models is None else models
    model, turn = m[kind(lm, embed)], m.get(kind(lm, embed, True))
    return [None if x is None else probability(x, turn if turn is not None and dialogue(c) else model)
            for c, x in zip(cands, features(cands, lm, embed, need))]


def lm_picks(cands: list, embed: bool, top: int = LM_TOP, models: "dict | None" = None, need: str = "") -> list:
    """Indexes (into `cands`, search order) of the candidates the language model should read:
    the `top` best by the cheap model (search signals, and the embedding when there is one)."""
    if top >= len(cands):
        return list(range(len(cands)))
    ps = probabilities(cands, False, embed, models, need)
    order = sorted(range(len(cands)), key=lambda i: (-ps[i], i))
    return sorted(order[:max(0, top)])
