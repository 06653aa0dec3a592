"""Renderers: one module per output format, each a pure function of a (viewed) tree. Import
the module of the format (``from cmr.views.render import tables``): this package imports none of
them, so a command loads only the renderer it prints with."""
