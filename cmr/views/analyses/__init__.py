"""What the commands compute over trees: the critical path, a diff, profiles, ``cmr top``,
the service map, and the timelines' lanes."""
