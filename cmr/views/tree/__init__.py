"""The call tree of one sequence: rebuilt from the stored records (calltree, records), its
shape read from columns (shape), a big one built only as far as a line budget shows it (bigtree,
budget), and views over it (processors, hops)."""
