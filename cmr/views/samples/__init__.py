"""Stack samples placed among the measured calls of their threads (timeline, placement) and
merged into a tree (merge) or a big sequence's profile (bigsamples)."""
