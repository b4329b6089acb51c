"""Public test kit."""
