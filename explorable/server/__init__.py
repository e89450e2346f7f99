"""A public server's boundaries: what a browser may change, compute budgets, health, bounded logs, memory."""
