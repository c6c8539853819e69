"""Decide: turn incident revisions into action intents, observe-first, with safety valves."""
