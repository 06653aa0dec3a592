"""OpenTelemetry out: measured calls as OTLP spans (``spans``), their OTLP/JSON rendering
(``render``) and forwarding to a collector over OTLP/HTTP (``forward``)."""
