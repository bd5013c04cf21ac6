"""CLI subcommand modules. Each defines `register(cli)`; recalld.cli loads them all."""
