"""The ``placement`` group: where embedding tables and their optimizer state live."""
