"""The operator surface: a REST API (FastAPI, OpenAPI published) and the web console it serves."""
