"""`recalld embed [--backfill]`: how many memories have a vector of the embedder's model, and
embed the rest of an existing store with a progress bar (the daemon embeds new memories itself)."""

import sys
import time

import click


def register(cli):
    @cli.command()
    @click.option("--backfill", is_flag=True, help="Embed every current memory that has no vector of the "
                  "embedder's model yet, with a progress bar on stderr.")
    @click.option("--json", "as_json", is_flag=True)
    def embed(backfill, as_json):
        """Show the embedder and how many current memories have its vectors; --backfill embeds the rest."""
        from recalld.cli.common import Fail, echo_json, open_db
        from recalld.core import settings
        from recalld.model import embed as model_embed
        from recalld.model import resolve, vectors
        from recalld.model.errors import LLMError

        choice = resolve.resolve_embedder(settings.load())
        conn = open_db(reading=not backfill)
        try:
            enc = None
            if choice.available:
                try:
                    enc = model_embed.load(choice)
                except LLMError as e:
                    choice.reason = str(e)
            if backfill and enc is None:
                raise Fail(f"no embedder to backfill with: {choice.reason}")
            done = None
            if backfill:
                todo = vectors.count_pending(conn, enc.model)
                t0 = time.perf_counter()
                with click.progressbar(length=todo, label="embedding", file=sys.stderr,
                                       show_pos=True, show_eta=True) as bar:
                    written, _ = vectors.embed_pending(conn, enc, progress=bar.update)
                secs = time.perf_counter() - t0
                done = {"written": written, "seconds": round(secs, 2),
                        "per_second": round(written / secs, 1) if secs > 0 and written else None}
            c = vectors.counts(conn, enc.model if enc else None)
        finally:
            conn.close()
        info = {**choice.as_dict(), "model": enc.model if enc else None, "dim": enc.dim if enc else None,
                "available": enc is not None, "reason": None if enc else choice.reason}
        if as_json:
            echo_json({"embedder": info, **c, "backfill": done})
            return
        if done is not None:
            rate = f", {done['per_second']}/s" if done["per_second"] else ""
            click.echo(f"embedded {done['written']} memories in {done['seconds']} s{rate}")
        if enc is None:
            click.echo(f"embedder  disabled: {choice.reason}")
        else:
            click.echo(f"embedder  {enc.model} ({enc.dim} dimensions; source: {choice.source})")
            hint = " (the daemon embeds them, or: recalld embed --backfill)" if c["pending"] else ""
            click.echo(f"vectors   {c['embedded']} of {c['current_memories']} current memories; "
                       f"{c['pending']} pending{hint}")
        stale = {m: n for m, n in c["vectors_by_model"].items() if enc is None or m != enc.model}
        for m, n in sorted(stale.items()):
            click.echo(f"          {n} vectors of another model: {m}")
