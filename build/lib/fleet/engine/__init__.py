"""How one attempt of a source runs, the one way every command runs it: its process (attempt.py), the warm browser
host that can run it (host.py, leased through pool.py), the sandbox, the hard kill (supervise.py), its evidence and
its outcome. fleet/scraping holds what a scraper's author meets."""
