"""The store and everything the hook needs from it. Standard library only."""
