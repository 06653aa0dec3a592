"""``tracer run``, the program that traces another with no code change: the command line
(``cli``), running the program as Python would (``launch``), the import hook and its patterns
(``autowrap``), the embedded repository (``embedded``), the report at exit (``summary``) and the
bootstrap of Python children (``bootstrap``). The only part of ``tracer`` that imports ``cmr``."""
