"""A scraper's life cycle beyond the weekly run: scaffolding, fixture replay, smoke runs, quarantine, live progress."""
