"""`recalld models`: which local model each role (judge, proposer, embedder) uses, set one, pull one."""

import click


def _human(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def register(cli):
    @cli.group(invoke_without_command=True)
    @click.option("--json", "as_json", is_flag=True)
    @click.pass_context
    def models(ctx, as_json):
        """List the model roles with the resolved file, its size and where it came from."""
        if ctx.invoked_subcommand is not None:
            return
        from recalld.model import resolve
        from recalld.core import settings
        from recalld.cli.common import echo_json

        cfg = settings.load()
        choices = [resolve.resolve(role, cfg) for role in resolve.ALL_ROLES]
        manifest = resolve.read_manifest()
        if as_json:
            echo_json({"roles": [c.as_dict() for c in choices],
                       "manifest": [{**e, "present": resolve.manifest_present(e)} for e in manifest],
                       "models_dirs": [str(d) for d in resolve.models_dirs()]})
            return
        for c in choices:
            if c.available:
                click.echo(f"{c.role:9} {c.path}\n{'':9} {_human(c.size)}, source: {c.source}")
            else:
                click.echo(f"{c.role:9} disabled: {c.reason}")
        if manifest:
            click.echo("\nmanifest (recalld models pull NAME):")
            for e in manifest:
                have = resolve.manifest_present(e)
                click.echo(f"  {e['name']:32} {_human(e.get('size')):>9}  {'downloaded' if have else 'not downloaded'}")

    @models.command("use")
    @click.argument("role", type=click.Choice(["judge", "proposer", "all"]))
    @click.argument("path")
    def use(role, path):
        """Use the GGUF at PATH for ROLE ("auto" clears the setting, "off" disables the role)."""
        import os

        from recalld.model import resolve
        from recalld.core import settings
        from recalld.cli.common import Fail

        roles = list(resolve.ROLES) if role == "all" else [role]
        if path.lower() == "auto":
            value = None
        elif path.lower() in resolve.OFF:
            value = "off"
        else:
            problem = resolve.check_gguf(path)
            if problem:
                raise Fail(problem)
            value = os.path.realpath(os.path.expanduser(path))
        over = settings.load_overrides()
        node = over.setdefault("models", {})
        for r in roles:
            node[r] = value
        settings.save(over)
        cfg = settings.load()
        for r in roles:
            c = resolve.resolve(r, cfg)
            shown = f"{c.path} ({c.source})" if c.available else f"disabled: {c.reason}"
            click.echo(f"{r} -> {shown}")

    @models.command("pull")
    @click.argument("name", required=False)
    @click.option("--dir", "dest", type=click.Path(file_okay=False), default=None,
                  help="Download into this directory (default: the models/ directory).")
    @click.option("--force", is_flag=True, help="Replace an existing file whose checksum differs.")
    def pull(name, dest, force):
        """Download a GGUF listed in models/manifest.json and verify its sha256."""
        from recalld.model import pull as model_pull
        from recalld.model.errors import LLMError
        from recalld.cli.common import Fail

        try:
            entry = model_pull.manifest_entry(name)
            click.echo(f"pulling {entry['name']} ({_human(entry.get('size'))})", err=True)
            path = model_pull.pull(entry, dest, force=force)
        except LLMError as e:
            raise Fail(str(e))
        click.echo(f"{path} (sha256 verified)")
