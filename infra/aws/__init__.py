"""AWS component resources of the lakestack program: one component per module."""
