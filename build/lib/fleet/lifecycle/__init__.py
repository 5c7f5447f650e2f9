"""A scraper's life cycle around the weekly run: scaffolding and fixtures, offline replay, smoke runs of a change,
quarantine, carry-forward, the daily canary, and `fleet run`'s live progress."""
