"""Grafana dashboards for the trainer, built in Python from the metric names in the contract."""
