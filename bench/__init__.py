"""Benchmarks of fleet against bare baselines: ``python -m bench [--quick] [--out results.json] [--only NAME,...]``."""
