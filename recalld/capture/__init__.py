"""Capture: the proposer, its policies, and proposals' state machine."""
