"""Voice platforms: one folder each. Nothing in core/ or memory/ imports from here."""
