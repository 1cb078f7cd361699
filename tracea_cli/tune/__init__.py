"""Tuning: search strategies (`strategies`), replay on recorded landscapes (`replay`), evaluation workers, the driver."""
