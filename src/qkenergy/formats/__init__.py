"""File formats: column tables, table files (csv / parquet / json), provenance, atomic transactions."""
