"""Getting events to the repository: the sender thread (``sender``), the window of batches in
flight with resends (``delivery``), several repository endpoints (``endpoints``), the ZeroMQ or
in-memory transport (``transport``) and the disk spool (``spool``). Private."""
