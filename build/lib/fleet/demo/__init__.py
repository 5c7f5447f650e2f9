"""Demo websites served locally, and the helpers demo scrapers use to find them."""
from fleet.demo.sites import MODES, SITES, DemoSites, clear_modes, read_modes, set_mode, site_url

__all__ = ["DemoSites", "site_url", "set_mode", "clear_modes", "read_modes", "SITES", "MODES"]
