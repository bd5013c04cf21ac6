"""Wiring recalld into the agents' settings, the git hook, and `recalld doctor`."""
