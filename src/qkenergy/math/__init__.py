"""The pure mathematics: functions on numpy arrays, free of I/O (and verify, which checks it)."""
