"""Benchmarks of fleet against bare baselines: ``python -m bench [--quick | --smoke] [--out results.json] [--only NAME,...]``."""
