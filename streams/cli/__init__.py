"""The ``sickbay`` command line: wiring only; the work lives in the stages and connectors."""
