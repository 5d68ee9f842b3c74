"""Routing state (prefix index, in-flight counts): one protocol, in-memory and Redis implementations."""
