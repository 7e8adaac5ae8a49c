"""What an operator sees of a running process: its logs, request ids and metrics."""
