"""Component fixtures: pick an address from the environment, then testcontainers, then the local stack."""
