"""Quality: per-source and per-week asset checks, and the alerts they raise."""
