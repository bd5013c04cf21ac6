"""Tests that reproduce the breaks of issue 14 (a package, so that a module here may share its
name with one in tests/, e.g. test_scope.py, without pytest's import clash)."""
