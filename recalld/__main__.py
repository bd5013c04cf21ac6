"""`python -m recalld`: the same as the `recalld` command."""

from recalld.entry import main

main()
