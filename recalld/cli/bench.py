"""`recalld bench`: run the benchmarks of recalld.bench and write a report (see recalld/bench/run.py)."""

import click

from recalld.bench.run import BENCHMARKS


def register(cli):
    @cli.command("bench")
    @click.argument("names", nargs=-1)
    @click.option("--out", type=click.Path(file_okay=False), help="Report directory (default: ./recalld-bench-DATE).")
    @click.option("--quick", is_flag=True, help="Smaller sizes, for a fast check.")
    @click.option("--data", type=click.Path(dir_okay=False), help="Data for benchmarks that take it (LoCoMo JSON).")
    @click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object (no report unless --out).")
    def bench(names, out, quick, data, as_json):
        """Run every benchmark (or the NAMES given) and write report.md, figures.json and plots
        to --out. Each figure sits next to its baseline from the same run. A benchmark whose
        data (the shared data folder beside the checkout, or --data) or model is missing is reported as skipped, with the reason."""
        import json

        from recalld.bench import run as bench_mod
        from recalld.cli.common import Fail

        if data is not None:
            try:
                open(data, "rb").close()
            except OSError as e:
                raise Fail(f"cannot read --data {data}: {e.strerror}")
        progress = None if as_json else (lambda s: click.echo(s, err=True))
        try:
            result = bench_mod.run_all(list(names), quick=quick, data=data, progress=progress)
        except ValueError as e:
            raise Fail(str(e))
        if as_json:
            click.echo(json.dumps(bench_mod.json_view(result), indent=2, default=str))
        wrote = out or not as_json
        if wrote:
            w = bench_mod.write_report(result, out or bench_mod.default_out_dir())
            if not as_json:
                click.echo(f"report: {w['report']}")
                if w["plot_note"]:
                    click.echo(w["plot_note"])
        missing = bench_mod.not_run(result)
        if missing:
            raise Fail(f"no figures from {'; '.join(missing)}" + (" (see the report)" if wrote else ""))

    bench.help = bench.help.replace("(or the NAMES given)", f"(or the NAMES given: {', '.join(BENCHMARKS)})")
