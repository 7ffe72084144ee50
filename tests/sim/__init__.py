"""Deterministic simulation of partition replication and failover (see simulation.py)."""
