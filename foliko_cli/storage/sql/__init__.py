"""The SQL layer SQLite and PostgreSQL share, hand-written (no ORM: start-up time).

``schema`` holds the tables, written once; ``dialect`` what truly differs
between the engines (placeholders, types, table names, the row lock, bulk
insert of messages, where the schema version is kept, the search index);
``migrations`` the one runner of each engine's ordered steps; ``writes`` the
statements that write and list sessions; ``rows`` the mapping of a stored
row back to a record. The backends (``sqlite.py``, ``postgres.py``) keep
connections, transactions, locks, error translation and their own features.
"""
