"""What operators watch: Prometheus metrics, health and readiness checks, structured logs and
the scheduler status summary. Reads the store; writes nothing but metric files and log lines."""
