"""Actuators: adapters that carry action intents out on a scheduler and report the results."""
