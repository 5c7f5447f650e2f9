"""The stages between stored raw rows and the commits: consolidation and post-processing (polars)."""
