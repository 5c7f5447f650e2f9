"""The dg project's defs folder (``[tool.dg.project] defs_module``): YAML only, one folder per fleet. fleet's own
fleet is ``fleet/defs.yaml``; fleet/defs/definitions.py loads it."""
