"""What the batch tasks share, below the operators and the sensors (neither imports the other)."""
