"""`recalld judge NEED`: the daemon's search-and-judge pass, once, in the foreground.

It prints every candidate with its search score, its signals (query likelihood, embedding
cosine) and the probability that it answers the need (the judge score), with the verdict, so a
user can see where the threshold cuts and move it (`recalld config set judge.threshold P`).
"""

import click


def register(cli):
    @cli.command()
    @click.argument("need")
    @click.option("--cwd", type=click.Path(file_okay=False), help="Resolve the project from here (default: current directory).")
    @click.option("--threshold", type=float, default=None,
                  help="Override settings judge.threshold (a probability) for this run.")
    @click.option("--candidates", "max_candidates", type=click.IntRange(1, 50), default=None,
                  help="Override settings judge.max_candidates for this run.")
    @click.option("--max-pass", type=click.IntRange(0, 50), default=None,
                  help="Override settings judge.max_pass (how many may pass) for this run.")
    @click.option("--no-embedder", is_flag=True, help="Judge without the embedding signal.")
    @click.option("--json", "as_json", is_flag=True)
    def judge(need, cwd, threshold, max_candidates, max_pass, no_embedder, as_json):
        """Search for NEED and let the local judge model decide which memories answer it."""
        from recalld.core import settings
        from recalld.cli.common import Fail, echo_json, open_db, resolve_scope
        from recalld.judge.judge import judge_need

        if not need.strip():
            raise Fail("the need is empty")
        cfg = settings.load()
        if threshold is not None:
            cfg["judge"]["threshold"] = threshold
        if max_candidates is not None:
            cfg["judge"]["max_candidates"] = max_candidates
        if max_pass is not None:
            cfg["judge"]["max_pass"] = max_pass
        conn = open_db()
        res = _judged(conn, need, resolve_scope(cwd), cfg, no_embedder)
        if as_json:
            echo_json(res.as_dict())
            return
        if res.available:
            load = f", loaded in {res.load_ms:.0f} ms" if res.load_ms is not None else ""
            click.echo(f"judge: {res.model} ({res.method}{load}), threshold {res.threshold:g}, "
                       f"at most {cfg['judge'].get('max_pass', 1)} passes, model time {res.model_ms:.0f} ms")
            if res.candidates:
                emb = f", embedder {res.embedder}" if res.embedder else f" (no embedding: {res.embed_error})"
                click.echo(f"signals: {', '.join(res.signals)}{emb}")
        else:
            click.echo(f"judge unavailable: {res.error}")
        if not res.candidates:
            click.echo("no candidates: the search found no memory for this need")
        for v in res.candidates:
            p = "-" if v.judge_score is None else f"{v.judge_score:.3f}"
            ql = v.detail.get("ql")
            cos = v.detail.get("cos")
            verdict = ("pass" if v.passed else "unjudged" if v.judge_score is None
                       else "outranked" if v.judge_score >= res.threshold else "fail")
            text = " ".join(v.text.split())
            if v.detail.get("turn"):  # scored by the dialogue model (docs/judge.md, "Conversations")
                verdict += "*"
            click.echo(f"m{v.memory_id:<6} search {v.search_score:.2f}  ql {'-' if ql is None else f'{ql:+.2f}':>5}  "
                       f"cos {'-' if cos is None else f'{cos:.2f}':>4}  p {p:>5}  {verdict:9} "
                       f"{text[:90]}{'...' if len(text) > 90 else ''}")
        if any(v.detail.get("turn") for v in res.candidates):
            click.echo("*: a turn of a conversation, scored by the dialogue model")
        if res.available and res.error:
            click.echo(f"error: {res.error}")
        if res.passed:
            click.echo("passed: " + ", ".join(f"m{v.memory_id}" for v in res.passed))
        else:
            click.echo("passed: nothing" + ("" if res.available else " (no judge)"))


def _judged(conn, need, sc, cfg, no_embedder: bool):
    """judge_need with the model in a worker process, as the daemon runs it: a model that
    crashes (SIGILL on a CPU whose AMX the kernel withholds) ends in a one-line failure with
    the fix, not in this command dying of the signal."""
    from recalld.cli.common import Fail
    from recalld.daemon.models import Models
    from recalld.judge.judge import judge_need
    from recalld.model import runtime
    from recalld.model.errors import ModelFailed

    models = Models(cfg)
    runtime.use_provider(models)
    try:
        return judge_need(conn, need, sc, cfg, encoder=False if no_embedder else None)
    except ModelFailed as e:
        fix = e.detail.get("fix")
        raise Fail(f"{e}{': ' + fix if fix else ''}") from None
    finally:
        models.shutdown()
        runtime.use_provider(None)
