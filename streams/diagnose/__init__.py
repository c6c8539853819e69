"""``sickbay diagnose``: the attribution engine in-process over log files, no Kafka, no services."""
